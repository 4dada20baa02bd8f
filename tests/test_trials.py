"""Trial steps on the live model: they measure, and they leave training bit-for-bit untouched."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn

from lightning_bottleneck.measure import trial_levers, trial_state, trials
from lightning_bottleneck.measure.trials import TrialReport, TrialResult, run_trials

from conftest import quiet_trainer
from scenarios import in_memory


class Net(pl.LightningModule):
    """BatchNorm (buffers), Dropout (RNG), Adam (optimizer state), a torchmetrics state and self.log."""

    def __init__(self) -> None:
        super().__init__()
        import torchmetrics

        self.net = nn.Sequential(
            nn.Linear(32, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 1)
        )
        self.frozen = nn.Linear(4, 4)  # no grad ever: its None grad must stay None
        self.mean_loss = torchmetrics.MeanMetric()
        self.training_steps = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.training_steps += 1
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.mean_loss(loss)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        self.log("mean_loss", self.mean_loss, on_step=False, on_epoch=True)
        self.log_dict({"noise": torch.rand(()).item()})
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.net.parameters(), lr=1e-2)


class TrialAt(pl.Callback):
    """Runs the trials at ``on_train_batch_end`` of step ``k`` (the real callback wiring comes later)."""

    def __init__(self, k: int, **kwargs: Any) -> None:
        self.k, self.kwargs = k, kwargs
        self.report: TrialReport | None = None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:  # fmt: skip
        if trainer.global_step == self.k:
            self.report = run_trials(
                pl_module, batch, batch_idx=batch_idx, precision=trainer.precision, **self.kwargs
            )


@contextlib.contextmanager
def _deterministic() -> Iterator[None]:
    prev = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev)


def _fit(root: Path, callbacks: list[pl.Callback]) -> tuple[pl.Trainer, Net, str, torch.Tensor]:
    pl.seed_everything(0, workers=True)
    model = Net()
    loader = torch.utils.data.DataLoader(in_memory(256, 32), batch_size=16, shuffle=True)
    logger = CSVLogger(str(root), name="run", version=0)
    trainer = quiet_trainer(
        root, callbacks, max_steps=8, logger=logger, log_every_n_steps=1, limit_val_batches=0
    )
    with _deterministic():
        trainer.fit(model, loader)
    csv = (root / "run" / "version_0" / "metrics.csv").read_text()
    return trainer, model, csv, torch.get_rng_state()


def test_fit_with_trials_is_bitwise_identical_to_fit_without(
    tmp_path: Path, precision_lever_on_any_cpu: None
) -> None:
    plain_trainer, plain, plain_csv, plain_rng = _fit(tmp_path / "plain", [])
    probe = TrialAt(3, budget_s=1.0, compile_budget_s=120.0)
    tried_trainer, tried, tried_csv, tried_rng = _fit(tmp_path / "tried", [probe])

    report = probe.report
    assert report is not None and report.skipped is None, report
    print(report)  # shown with -s: which levers ran inside the fit
    measured = [r for r in report.results if r.measured_speedup is not None]
    assert measured, (
        report
    )  # something was really measured (bf16/matmul precision/compile, as the CPU allows)
    assert tried.training_steps > plain.training_steps  # the trials did run training_step

    for (name, a), (_, b) in zip(plain.state_dict().items(), tried.state_dict().items()):
        assert torch.equal(a, b), name  # parameters and buffers (BatchNorm statistics), bit for bit
    for p, q in zip(plain.parameters(), tried.parameters()):
        assert (p.grad is None) == (q.grad is None)
        assert p.grad is None or torch.equal(p.grad, q.grad)
    opt_a = plain_trainer.optimizers[0].state_dict()
    opt_b = tried_trainer.optimizers[0].state_dict()
    assert opt_a["param_groups"] == opt_b["param_groups"]
    for key, state in opt_a["state"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(opt_b["state"][key][name])), (
                key,
                name,
            )
    assert plain_csv == tried_csv  # every logged metric, every step (incl. the torchmetrics epoch mean)
    assert plain_trainer.logged_metrics.keys() == tried_trainer.logged_metrics.keys()
    for k, v in plain_trainer.callback_metrics.items():
        assert torch.equal(v, tried_trainer.callback_metrics[k]), k
    assert torch.equal(plain_rng, tried_rng)
    assert type(tried).log is Net.log and "log" not in vars(tried) and "log_dict" not in vars(tried)
    assert not hasattr(tried, "_orig_mod") and type(tried) is Net  # not left compiled


def test_trials_restore_every_piece_of_state() -> None:
    torch.manual_seed(0)
    model = Net()
    model.frozen.eval()  # a mixed train/eval tree must come back as it was
    x, y = torch.randn(16, 32), torch.randn(16, 1)
    loss = model.training_step((x, y), 0)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    grad_copies = {n: None if g is None else g.clone() for n, g in grads.items()}
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    metric = model.mean_loss.mean_value.clone(), model.mean_loss.weight.clone()
    random.seed(1)
    np.random.seed(1)
    rng = random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state()
    settings = (
        torch.get_float32_matmul_precision(),
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.allow_tf32,
    )
    modes = {n: m.training for n, m in model.named_modules()}

    report = run_trials(model, (x, y), budget_s=0.5, compile_budget_s=0)

    assert report.skipped is None, report
    for n, p in model.named_parameters():
        assert p.grad is grads[n]  # the very same tensor (None stays None)
        assert grads[n] is None or torch.equal(p.grad, grad_copies[n])
    for n, b in model.named_buffers():
        assert torch.equal(b, buffers[n]), n
    assert torch.equal(model.mean_loss.mean_value, metric[0]) and torch.equal(
        model.mean_loss.weight, metric[1]
    )
    assert random.getstate() == rng[0] and (np.random.get_state()[1] == rng[1]).all()
    assert torch.equal(torch.get_rng_state(), rng[2])
    assert (
        torch.get_float32_matmul_precision(),
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.allow_tf32,
    ) == settings
    assert {n: m.training for n, m in model.named_modules()} == modes
    assert torch.is_grad_enabled()


def test_manual_optimization_is_skipped_with_a_note() -> None:
    model = Net()
    model.automatic_optimization = False
    report = run_trials(model, (torch.randn(8, 32), torch.randn(8, 1)), budget_s=1.0)
    assert report.results == [] and report.skipped is not None and "manual optimization" in report.skipped
    assert model.training_steps == 0
    assert "manual optimization" in str(report)


def test_budget_zero_turns_trials_off_and_bad_budget_fails_early() -> None:
    model = Net()
    assert (
        run_trials(model, (torch.randn(8, 32), torch.randn(8, 1)), budget_s=0).skipped
        == "turned off (budget_s=0)"
    )
    assert model.training_steps == 0
    with pytest.raises(ValueError, match="budget_s"):
        run_trials(model, None, budget_s=-1)


def test_budget_is_respected() -> None:
    model = Net()
    batch = (torch.randn(64, 32), torch.randn(64, 1))
    budget = 0.6
    t0 = time.perf_counter()
    report = run_trials(model, batch, budget_s=budget, compile_budget_s=0)
    wall = time.perf_counter() - t0
    # a step here takes ~1 ms: the overrun is at most one timed pair (MIN_SAMPLE_S x 2) plus warm-ups
    assert wall < budget + 0.3, (wall, report)
    assert report.elapsed_s <= wall


def test_compile_over_its_budget_is_not_run() -> None:
    model = Net()
    report = run_trials(
        model, (torch.randn(8, 32), torch.randn(8, 1)), budget_s=1.0, compile_budget_s=1.0, levers=["compile"]
    )
    (result,) = report.results
    assert result.measured_speedup is None and result.compile_s is None
    assert "over compile_budget_s=1" in result.note


class Sleepy(Net):
    """``training_step`` sleeps ``delay`` seconds: a lever's context sets it (a slower or faster path)."""

    delay = 0.0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(self.delay)
        return super().training_step(batch, batch_idx)


@contextlib.contextmanager
def _delay(model: Sleepy, seconds: float) -> Iterator[None]:
    model.delay = seconds
    try:
        yield
    finally:
        model.delay = 0.0


def _judge(base_sleep: float, lever_sleep: float) -> TrialResult:
    model = Sleepy()
    batch = (torch.randn(16, 32), torch.randn(16, 1))
    runner = trials._StepRunner(model, batch, 0, torch.device("cpu"))
    lever = trial_levers.Lever("test-lever", {"x": 1}, lambda: _delay(model, lever_sleep))
    with trial_state.preserved_module(model):
        return trials._measure(
            runner, lever, runner.step_fn(), lambda: _delay(model, base_sleep), batch, inner=1, t_step=0.005,
            share=0.5, compile_budget_s=0.0, noise_band=trials.NOISE_BAND,
        )  # fmt: skip


def test_a_lever_slower_than_the_noise_band_is_not_recommended() -> None:
    slower = _judge(base_sleep=0.0, lever_sleep=0.01)
    assert slower.measured_speedup is not None and slower.measured_speedup < 0.9
    assert not slower.recommended and slower.note == "slower"
    assert "not recommended" in str(slower) and slower.to_dict()["recommended"] is False
    faster = _judge(base_sleep=0.01, lever_sleep=0.0)
    assert faster.recommended and faster.measured_speedup is not None and faster.measured_speedup > 1.5
    assert faster.repetitions >= trials.MIN_REPETITIONS and faster.spread is not None


def test_channels_last_is_tried_on_conv_nets_with_image_batches() -> None:
    class ConvNet(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.conv(batch).square().mean()

    model = ConvNet()
    report = run_trials(
        model, torch.randn(4, 3, 16, 16), budget_s=2.0, compile_budget_s=0, levers=["channels_last"]
    )
    (result,) = report.results
    assert result.name == "channels_last" and result.settings == {"channels_last": True}
    assert result.measured_speedup is not None and "convert the model too" in result.note
    assert model.conv.weight.is_contiguous()  # the model itself was never converted


@pytest.mark.gpu
def test_trials_on_cuda_try_autocast_and_tf32() -> None:
    model = Net().cuda()
    batch = (torch.randn(256, 32, device="cuda"), torch.randn(256, 1, device="cuda"))
    before = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32)
    report = run_trials(model, batch, budget_s=2.0, compile_budget_s=0)
    names = {r.name for r in report.results}
    expected = "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    assert expected in names, report
    if torch.cuda.get_device_capability()[0] >= 8:
        assert "float32_matmul_precision=high" in names, report
    assert all(r.measured_speedup is not None for r in report.results), report
    assert (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32) == before
    print(report)


def test_a_win_measured_on_a_busy_machine_is_kept_unconfirmed(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning_bottleneck.evidence import contention

    busy = contention.Contention(
        True, 1.0, 0.5, 1.5, 2.0, 0.5, 200.0, 0.0, 3.0, "other processes used 1.50 ..."
    )
    monkeypatch.setattr(
        trials, "assess", lambda start, end: busy
    )  # the verdict; spinners are tested elsewhere
    model = Sleepy()
    monkeypatch.setattr(trials, "baseline_context", lambda precision, device: lambda: _delay(model, 0.02))
    monkeypatch.setattr(
        trials, "levers_for", lambda *a: ([trial_levers.Lever("fast", {"x": 1}, contextlib.nullcontext)], [])
    )
    report = run_trials(model, (torch.randn(16, 32), torch.randn(16, 1)), budget_s=1.0)
    (result,) = report.results
    assert result.measured_speedup is not None and result.measured_speedup > 1.2
    assert not result.recommended and result.unconfirmed and "busy machine" in result.note
    assert report.best is None
    assert report.contention is not None and report.contention["busy"] is True
    assert any("busy machine" in n for n in report.notes)


def test_the_bigger_batch_is_timed_only_when_asked() -> None:
    """The measurement stage asks for the batch repeated only on an overhead step (where its advice is given): on a
    compute-bound step its share of the budget goes to the levers that can be advised (bf16, the matmul precision)."""
    model = Net()
    batch = (torch.randn(8, 32), torch.randn(8, 1))
    asked = run_trials(model, batch, budget_s=0.5, compile_budget_s=0)
    assert "batch_size=16" in {r.name for r in asked.results}, asked
    left = run_trials(model, batch, budget_s=0.5, compile_budget_s=0, bigger_batch=False)
    assert all("batch_size" not in r.settings for r in left.results), left
