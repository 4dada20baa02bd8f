"""Shared test set-up: quiet, single-threaded, deterministic CPU runs."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PL_DISABLE_FORK", "1")
warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*GPU available but not used.*")

SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


@pytest.fixture
def precision_lever_on_any_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A precision lever to trial on every CPU: without native bf16 (AVX2 only) the trials leave bf16 out, so
    a test that needs a trial without paying for ``torch.compile`` would have nothing to try there. bf16 is
    emulated on such a CPU (slow, measured slower and never advised), which is enough to exercise the path."""
    from lightning_bottleneck.measure import trial_levers

    monkeypatch.setattr(trial_levers, "cpu_has_bf16", lambda: True)


@pytest.fixture
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/traces is absent")
    return SHARED_TRACES


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch missing
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
if str(EXAMPLES) not in sys.path:  # the scenarios module is shared by examples/ and the tests
    sys.path.insert(0, str(EXAMPLES))


def quiet_trainer(root: Path, callbacks: list, **overrides: object):
    """A CPU Trainer with no logger, progress bar, model summary or checkpoints (options override)."""
    import lightning.pytorch as pl

    options: dict = {
        "accelerator": "cpu",
        "devices": 1,
        "default_root_dir": str(root),
        "callbacks": callbacks,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "enable_checkpointing": False,
        "logger": False,
        "num_sanity_val_steps": 0,
    }
    options.update(overrides)
    return pl.Trainer(**options)


#: The callback as verdict tests run it: a short window; the measurement stage (loader probe, trials) has its
#: own tests in test_live.py, so it is off here to keep verdict tests fast (callback_kwargs turn it on).
FAST_CALLBACK: dict = {
    "wait": 2,
    "warmup": 2,
    "active": 4,
    "verbose": False,
    "probe_loader": False,
    "trial_budget_s": 0,
}


def fit_scenario(
    name: str,
    root: Path,
    max_steps: int = 14,
    callback_kwargs: dict | None = None,
    callbacks_before: list | None = None,
    **trainer_kwargs: object,
):
    """Train one of ``examples/scenarios.py``'s models with the callback (after ``callbacks_before``);
    return (trainer, callback)."""
    import torch

    from lightning_bottleneck import BottleneckCallback

    from scenarios import scenario

    torch.manual_seed(0)
    model, train, val = scenario(name)
    callback = BottleneckCallback(**{**FAST_CALLBACK, **(callback_kwargs or {})})
    options: dict = {"max_steps": max_steps}
    if val is None:
        options["limit_val_batches"] = 0
    options.update(trainer_kwargs)
    trainer = quiet_trainer(root, [*(callbacks_before or []), callback], **options)
    trainer.fit(model, train, val)
    return trainer, callback


@pytest.fixture
def busy_core() -> Iterator[None]:
    """Another process keeps one core busy for a real fit (verdict tests must hold on a shared machine)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def one_intra_op_thread() -> Iterator[None]:
    """The fit runs torch on one intra-op thread (restored after). Beside ``busy_core`` on 2 cores, two intra-op
    threads wait at every op for the one that shares a core with the spinner: a tiny step's body flipped between
    8 ms and 63 ms (whole scheduler slices) from one stretch of steps to the next, and a test that asserts a measured
    point met a run with nothing steady to measure."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
