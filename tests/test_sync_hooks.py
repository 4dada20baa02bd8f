"""Sync hooks: each host-device sync in the training step is found, timed and named by its line.

Real tiny Lightning models trained on the CPU. Expected lines are found from ``# SYNC:<tag>`` markers in
this file, never hard-coded.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_bottleneck.advice.sync import sync_site_recommendations
from lightning_bottleneck.categories import Severity
from lightning_bottleneck.evidence import SyncSite
from lightning_bottleneck.live.sync_hooks import SyncTracker
from lightning_bottleneck.rules.sync_sites import CPU_NOTE, sync_share, sync_site_findings

HERE = os.path.realpath(__file__)
N_ITEMS = 3
STEPS = 4

_MISSING = object()
# Every attribute the tracker may patch: (owner, name).
PATCHED: list[tuple[Any, str]] = [
    (torch.Tensor, n)
    for n in (
        "item",
        "tolist",
        "cpu",
        "numpy",
        "to",
        "copy_",
        "__bool__",
        "__int__",
        "__float__",
        "__format__",
        "__repr__",
    )
] + [
    (torch.cuda, "synchronize"),
    (torch.cuda.Stream, "synchronize"),
    (torch.cuda.Event, "synchronize"),
    (pl.LightningModule, "log"),
]
if hasattr(torch, "accelerator") and hasattr(torch.accelerator, "synchronize"):
    PATCHED.append((torch.accelerator, "synchronize"))


def line_of(tag: str) -> int:
    """The line number of the ``# SYNC:<tag>`` marker in this file."""
    marker = f"# SYNC:{tag}"
    for i, text in enumerate(Path(HERE).read_text().splitlines(), start=1):
        if text.rstrip().endswith(marker):
            return i
    raise AssertionError(f"marker {marker} not found")


def loc(tag: str) -> str:
    return f"{os.path.relpath(HERE, os.path.realpath(os.getcwd()))}:{line_of(tag)}"


def originals() -> list[tuple[Any, Any]]:
    """For each patchable attribute: (own attribute or _MISSING, resolved attribute)."""
    return [(vars(owner).get(name, _MISSING), getattr(owner, name)) for owner, name in PATCHED]


def assert_restored(saved: list[tuple[Any, Any]]) -> None:
    for (owner, name), (own, resolved) in zip(PATCHED, saved):
        assert vars(owner).get(name, _MISSING) is own, f"{owner.__name__}.{name} is still patched"
        assert getattr(owner, name) is resolved, f"{owner.__name__}.{name} differs from the original"


@pytest.fixture
def saved() -> Iterator[list[tuple[Any, Any]]]:
    before = originals()
    yield before
    assert_restored(before)


# --- models
class TrackerCallback(pl.Callback):
    """Drives a SyncTracker the way BottleneckCallback does."""

    def __init__(self) -> None:
        self.tracker = SyncTracker("cpu")
        self.installed_during_step = False

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.tracker.install()

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.installed_during_step = self.installed_during_step or self.tracker.installed
        self.tracker.step()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.tracker.pause()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.tracker.resume()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.sites = self.tracker.sites()
        self.tracker.uninstall()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self.tracker.uninstall()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.tracker.uninstall()


class SyncModule(pl.LightningModule):
    """Calls ``.item()`` N_ITEMS times, ``.tolist()`` once, ``print(f"{loss}")`` once and logs to the bar."""

    def __init__(self, fail_at: int | None = None, error: type[BaseException] = RuntimeError) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.fail_at = fail_at
        self.error = error

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.fail_at is not None and batch_idx == self.fail_at:
            raise self.error("boom")
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        for _ in range(N_ITEMS):
            loss.item()  # SYNC:item
        self.layer.weight.tolist()  # SYNC:tolist
        print(f"{loss}")  # SYNC:print
        self.log("loss", loss, prog_bar=True)  # SYNC:log
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        torch.nn.functional.mse_loss(self.layer(x), y).item()  # SYNC:val

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def loader(n: int = 64) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g)), batch_size=8
    )


def trainer(callbacks: list[pl.Callback], max_steps: int = STEPS, **kwargs: Any) -> pl.Trainer:
    opts: dict[str, Any] = dict(
        accelerator="cpu",
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    opts.update(kwargs)
    return pl.Trainer(callbacks=callbacks, **opts)


def by_location(sites: list[SyncSite]) -> dict[str, SyncSite]:
    return {s.location: s for s in sites}


# --- proof
def test_each_sync_line_is_named_with_its_calls_per_step(saved: list[tuple[Any, Any]]) -> None:
    cb = TrackerCallback()
    trainer([cb], val_check_interval=2, limit_val_batches=2, num_sanity_val_steps=1).fit(
        SyncModule(), loader(), loader(16)
    )
    assert cb.installed_during_step
    sites = by_location(cb.sites)
    assert set(sites) == {loc("item"), loc("tolist"), loc("print"), loc("log")}, sites

    item, tolist, fmt, log = sites[loc("item")], sites[loc("tolist")], sites[loc("print")], sites[loc("log")]
    assert item.steps == STEPS
    assert (item.via, item.calls, item.calls_per_step) == ("Tensor.item", N_ITEMS * STEPS, N_ITEMS)
    assert (tolist.via, tolist.calls_per_step) == ("Tensor.tolist", 1)
    # __format__ calls item() inside: counted once, as the f-string.
    assert (fmt.via, fmt.calls_per_step, fmt.extra["vias"]) == (
        "Tensor.__format__",
        1,
        {"Tensor.__format__": STEPS},
    )
    assert not item.lightning_log and not fmt.lightning_log
    # Lightning reads the prog_bar value after the batch: attributed to the user's self.log line.
    assert log.lightning_log and log.via == "Tensor.item" and log.calls_per_step == 1
    assert log.extra["metric"] == "loss" and log.extra["avoid"] == "prog_bar=False"
    assert all(s.total_ms >= 0 for s in sites.values())
    assert loc("val") not in sites  # validation is paused


def test_restored_after_normal_fit(saved: list[tuple[Any, Any]]) -> None:
    cb = TrackerCallback()
    trainer([cb], max_steps=2).fit(SyncModule(), loader())
    assert not cb.tracker.installed
    assert_restored(saved)


def test_restored_after_exception_in_training_step(saved: list[tuple[Any, Any]]) -> None:
    cb = TrackerCallback()
    with pytest.raises(RuntimeError, match="boom"):
        trainer([cb]).fit(SyncModule(fail_at=2), loader())
    assert cb.installed_during_step and not cb.tracker.installed
    assert_restored(saved)


def test_restored_after_keyboard_interrupt(saved: list[tuple[Any, Any]]) -> None:
    # Lightning catches KeyboardInterrupt, calls on_exception, ignores further SIGINTs and exits(1).
    cb = TrackerCallback()
    previous = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit):
            trainer([cb]).fit(SyncModule(fail_at=1, error=KeyboardInterrupt), loader())
    finally:
        signal.signal(signal.SIGINT, previous)
    assert cb.installed_during_step and not cb.tracker.installed
    assert_restored(saved)


class LogVariantsModule(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log_dict({"double": loss * 2}, prog_bar=True)  # SYNC:log_dict
        self.log("to_logger", loss + 1)  # SYNC:logger
        self.log("quiet", loss)  # no prog_bar, no logger here: never read back
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_log_dict_and_logger_syncs_name_the_log_line(saved: list[tuple[Any, Any]], tmp_path: Path) -> None:
    from lightning.pytorch.loggers import CSVLogger

    cb = TrackerCallback()
    trainer([cb], logger=CSVLogger(str(tmp_path)), log_every_n_steps=1).fit(LogVariantsModule(), loader())
    sites = by_location(cb.sites)
    bar, logged = sites[loc("log_dict")], sites[loc("logger")]
    assert bar.lightning_log and bar.extra["metric"] == "double" and bar.extra["avoid"] == "prog_bar=False"
    assert logged.lightning_log and logged.extra["metric"] == "to_logger"
    assert logged.extra["lightning_paths"] == {"logger": STEPS} and logged.extra["avoid"] == "on_step=False"
    assert logged.calls_per_step == 1


# --- unit
def test_install_uninstall_idempotent_and_context_manager(saved: list[tuple[Any, Any]]) -> None:
    tracker = SyncTracker()
    tracker.install()
    patched = torch.Tensor.item
    tracker.install()
    assert torch.Tensor.item is patched and tracker.installed
    tracker.uninstall()
    tracker.uninstall()
    assert_restored(saved)
    with SyncTracker() as t2:
        assert t2.installed and torch.Tensor.item is not saved[0][1]
    assert_restored(saved)


def test_a_second_tracker_does_not_stack_patches(saved: list[tuple[Any, Any]]) -> None:
    first, second = SyncTracker(), SyncTracker()
    first.install()
    with pytest.warns(UserWarning, match="Another SyncTracker"):
        second.install()
    assert first.installed and not second.installed
    first.uninstall()
    second.uninstall()
    assert_restored(saved)


def test_restored_when_the_body_raises(saved: list[tuple[Any, Any]]) -> None:
    with pytest.raises(ValueError), SyncTracker():
        raise ValueError("x")


def test_direct_calls_nesting_pause_and_copies(saved: list[tuple[Any, Any]]) -> None:
    x = torch.ones(3)
    s = x.sum()
    with SyncTracker() as t:
        s.item()  # SYNC:u_item
        f"{s:.2f}"  # SYNC:u_format
        repr(x)  # SYNC:u_repr
        x.cpu().numpy()  # SYNC:u_cpu_numpy
        x.to("cpu")  # SYNC:u_to
        x.to(torch.float64)  # a dtype cast is not a sync
        x.to("cpu", non_blocking=True)  # a non-blocking copy does not block
        x + 1
        t.pause()
        s.item()
        t.resume()
        bool(s > 0)  # SYNC:u_bool
        t.step()
    sites = by_location(t.sites())
    assert {k: (v.via, v.calls) for k, v in sites.items()} == {
        loc("u_item"): ("Tensor.item", 1),
        loc("u_format"): ("Tensor.__format__", 1),
        loc("u_repr"): ("Tensor.__repr__", 1),
        loc("u_cpu_numpy"): ("Tensor.cpu", 1),
        loc("u_to"): ("Tensor.to", 1),
        loc("u_bool"): ("Tensor.__bool__", 1),
    }
    assert all(v.steps == 1 for v in sites.values())


def test_cuda_run_ignores_cpu_tensors_and_never_initialises_cuda(saved: list[tuple[Any, Any]]) -> None:
    was_initialized = torch.cuda.is_initialized()
    with SyncTracker("cuda") as t:
        torch.ones(2).sum().item()
        torch.ones(2).cpu()
    assert t.sites() == []
    assert torch.cuda.is_initialized() == was_initialized


def test_syncs_inside_library_code_name_the_user_line(saved: list[tuple[Any, Any]]) -> None:
    import functools

    import numpy as np

    x = torch.ones(3)
    with SyncTracker() as t:
        torch.testing.assert_close(x, x.clone())  # SYNC:lib
        np.asarray(x)  # SYNC:numpy
        functools.reduce(lambda a, b: a + b.item(), [x.sum()], 0.0)  # SYNC:stdlib
    sites = by_location(t.sites())
    assert set(sites) == {loc("lib"), loc("numpy"), loc("stdlib")}
    assert sites[loc("numpy")].via == "Tensor.numpy" and sites[loc("stdlib")].via == "Tensor.item"


# --- rules / advice
def _site(location: str, via: str, calls: int, total_ms: float, steps: int = 10, **kw: Any) -> SyncSite:
    return SyncSite(location, via, calls=calls, total_ms=total_ms, steps=steps, **kw)


def test_rules_on_cpu_are_low_unless_material() -> None:
    cheap = _site("train.py:10", "Tensor.item", 30, 0.3)
    costly = _site("train.py:20", "Tensor.tolist", 10, 50.0)  # 5 ms per 10 ms step: 50%
    findings = sync_site_findings([cheap, costly], step_time_ms=10.0, device="cpu")
    assert [f.location for f in findings] == ["train.py:20", "train.py:10"]
    assert all(f.kind == "sync" for f in findings)
    assert findings[0].severity == Severity.HIGH and CPU_NOTE not in findings[0].summary
    assert findings[1].severity == Severity.LOW and CPU_NOTE in findings[1].summary
    ev = findings[1].evidence
    assert (
        ev["calls_per_step"] == 3
        and ev["share_of_step"] == pytest.approx(0.003)
        and ev["via"] == "Tensor.item"
    )
    assert sync_share([cheap, costly], 10.0, 10) == pytest.approx(50.3 / 100)
    assert sync_share([], 10.0, 10) == 0.0 and sync_share([cheap], None, 10) == 0.0


def test_rules_on_gpu_grade_by_share() -> None:
    high = _site("a.py:1", "Tensor.item", 10, 30.0)  # 3 ms of a 10 ms step
    medium = _site("a.py:2", "Tensor.item", 10, 6.0)
    low = _site("a.py:3", "Tensor.item", 10, 0.1)
    findings = sync_site_findings([low, medium, high], step_time_ms=10.0, device="cuda")
    assert [(f.location, f.severity) for f in findings] == [
        ("a.py:1", Severity.HIGH),
        ("a.py:2", Severity.MEDIUM),
        ("a.py:3", Severity.LOW),
    ]
    assert all(CPU_NOTE not in f.summary for f in findings)
    unknown = sync_site_findings([low], step_time_ms=None, device="cuda")
    assert unknown[0].severity == Severity.MEDIUM and unknown[0].evidence["share_of_step"] is None


def test_advice_per_site() -> None:
    log = _site(
        "m.py:5",
        "Tensor.item",
        10,
        2.0,
        lightning_log=True,
        extra={"metric": "loss", "avoid": "prog_bar=False", "alternatives": ["on_step=False"]},
    )
    sites = [
        _site("m.py:1", "Tensor.item", 10, 9.0),
        _site("m.py:2", "Tensor.__format__", 10, 8.0),
        _site("m.py:3", "Tensor.cpu", 10, 7.0),
        _site("m.py:4", "torch.cuda.synchronize", 10, 6.0),
        log,
        _site("m.py:6", "Tensor.__bool__", 10, 1.0),
    ]
    recs = sync_site_recommendations(sites)
    assert [r.kind for r in recs] == ["sync"] * 6
    assert [r.detail.split(":")[0] + ":" + r.detail.split(":")[1][:1] for r in recs] == [
        f"m.py:{i}" for i in range(1, 7)
    ]
    assert recs[0].settings == {"log_every_n_steps": 50} and ".item()" in recs[0].snippet
    assert "self.log" in recs[1].snippet
    assert (
        recs[2].settings == {"non_blocking": True, "pin_memory": True}
        and "non_blocking=True" in recs[2].snippet
    )
    assert "synchronize" in recs[3].title and "Event" in recs[3].snippet
    assert recs[4].settings == {"prog_bar": False} and 'self.log("loss"' in recs[4].snippet
    assert "torch.where" in recs[5].snippet
    assert all(r.snippet for r in recs)


# --- end to end
def _bottleneck_callback(tmp_path: Path) -> Any:
    mod = pytest.importorskip("lightning_bottleneck.live.callback")
    return mod.BottleneckCallback(
        wait=0,
        warmup=0,
        active=2,
        verbose=False,
        output_dir=str(tmp_path / "traces"),
        report_path=str(tmp_path / "report.json"),
    )


def test_bottleneck_callback_reports_each_sync_site(saved: list[tuple[Any, Any]], tmp_path: Path) -> None:
    cb = _bottleneck_callback(tmp_path)
    trainer([cb], max_steps=6).fit(SyncModule(), loader())
    assert_restored(saved)
    report = cb.report
    assert report is not None
    syncs = {f.location: f for f in report.findings if f.kind == "sync" and f.location}
    assert {loc("item"), loc("tolist"), loc("print"), loc("log")} <= set(syncs)
    assert syncs[loc("item")].evidence["calls_per_step"] == N_ITEMS
    assert syncs[loc("log")].evidence["lightning_log"] is True
    recs = [r for r in report.recommendations if r.kind == "sync"]
    for where in (loc("item"), loc("tolist"), loc("print"), loc("log")):
        assert any(r.detail.startswith(where) for r in recs), where


def test_bottleneck_callback_restores_after_exception(saved: list[tuple[Any, Any]], tmp_path: Path) -> None:
    cb = _bottleneck_callback(tmp_path)
    with pytest.raises(RuntimeError, match="boom"):
        trainer([cb]).fit(SyncModule(fail_at=2), loader())
    assert_restored(saved)


# --- GPU (the model and its sizing live in examples/gpu_sync_item.py, shared with the example)
def _fit_gpu(tmp_path: Path, read_loss: bool) -> Any:
    from gpu_sync_item import fit

    return fit(str(tmp_path), read_loss)


def _example_loc(tag: str) -> str:
    import gpu_sync_item

    path = os.path.realpath(gpu_sync_item.__file__)
    lines = Path(path).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if f"SYNC:{tag}" in text)
    return f"{os.path.relpath(path, os.path.realpath(os.getcwd()))}:{line}"


@pytest.mark.gpu
def test_gpu_item_every_step_is_a_sync_verdict(saved: list[tuple[Any, Any]], tmp_path: Path) -> None:
    from lightning_bottleneck.categories import Category

    with_read = _fit_gpu(tmp_path / "item", read_loss=True)
    assert_restored(saved)
    without = _fit_gpu(tmp_path / "none", read_loss=False)
    assert with_read is not None and without is not None
    assert with_read.primary == Category.SYNC, with_read.to_json()
    assert without.primary != Category.SYNC, without.to_json()
    assert with_read.breakdown["sync"] > without.breakdown["sync"] + 0.05
    site = next(f for f in with_read.findings if f.kind == "sync" and f.location == _example_loc("gpu_item"))
    assert site.severity in (Severity.HIGH, Severity.MEDIUM)
    assert site.evidence["calls_per_step"] == pytest.approx(1.0)
    check = with_read.metrics["sync_cross_check"]
    assert check["trace_local_scalar_dense_per_step"] >= 1.0 and check["trace_sync_api_calls_per_step"] >= 1.0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
