"""The whole-fit ledger: the pure data model, and the live timing on real tiny Lightning fits."""

from __future__ import annotations

import json

import pytest

from lightning_bottleneck.analysis.ledger import FitLedger, HookTime, merge_ranks
from lightning_bottleneck.categories import FitPart


def _ledger(fit_s: float = 10.0, **parts: float) -> FitLedger:
    return FitLedger(
        fit_s=fit_s,
        parts={FitPart(k): v for k, v in parts.items()},
        train_steps=100,
        epochs=2,
        validation_runs=4,
        validation_batches=40,
        validation_loader_wait_s=2.0,
        validation_compute_s=1.0,
        checkpoint_saves=5,
        log_calls=20,
        hooks={"Slow.on_train_batch_end": HookTime(0.5, 100)},
    )


def test_unaccounted_is_what_the_timed_parts_leave_and_every_part_is_present() -> None:
    ledger = _ledger(training_steps=5.0, validation=3.0, checkpointing=1.0)
    assert list(ledger.parts) == list(FitPart)
    assert ledger.parts[FitPart.UNACCOUNTED] == pytest.approx(1.0)
    assert ledger.share(FitPart.VALIDATION) == pytest.approx(0.3)
    assert ledger.per_validation_s() == pytest.approx(0.75)
    assert ledger.per_save_s() == pytest.approx(0.2)
    assert ledger.largest_outside_part() is FitPart.VALIDATION
    assert sum(ledger.parts.values()) == pytest.approx(ledger.fit_s)
    over = _ledger(fit_s=1.0, training_steps=2.0)
    assert over.parts[FitPart.UNACCOUNTED] == 0.0


def test_to_dict_round_trips_through_json() -> None:
    ledger = _ledger(training_steps=5.0, validation=3.0, logging=0.5)
    d = json.loads(json.dumps(ledger.to_dict()))
    assert d["shares"]["validation"] == pytest.approx(0.3)
    d["cause"] = "validation"  # what the report adds; from_dict ignores it
    d["parts"]["a_part_from_a_newer_version"] = 1.0
    back = FitLedger.from_dict(d)
    assert back == ledger


def test_merge_ranks_takes_the_slowest_rank_per_part() -> None:
    a = _ledger(fit_s=10.0, training_steps=6.0, validation=2.0)
    b = _ledger(fit_s=11.0, training_steps=5.0, validation=4.0)
    b.hooks["Slow.on_train_batch_end"] = HookTime(0.9, 100)
    merged = merge_ranks([a, b])
    assert merged.fit_s == 11.0
    assert merged.parts[FitPart.TRAINING_STEPS] == 6.0
    assert merged.parts[FitPart.VALIDATION] == 4.0
    assert merged.hooks["Slow.on_train_batch_end"].seconds == pytest.approx(0.9)
    assert merge_ranks([a]) is a
    with pytest.raises(ValueError):
        merge_ranks([])


# ---------------------------------------------------------------------------------------------------------
# The live ledger on real tiny fits (CPU, a few seconds each), with one outside-the-step cost injected.

import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from lightning_bottleneck import BottleneckCallback  # noqa: E402

from conftest import quiet_trainer  # noqa: E402

#: Unaccounted time must stay under this share of the fit (the issue's acceptance bound).
UNACCOUNTED_MAX = 0.03


class Slept:
    """Seconds actually slept by an injection (perf_counter around each sleep, lateness included)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def sleep(self, s: float) -> None:
        t = time.perf_counter()
        time.sleep(s)
        self.seconds += time.perf_counter() - t
        self.calls += 1


class Data(Dataset):
    def __init__(self, n: int, sleep_s: float = 0.0, slept: Slept | None = None) -> None:
        self.n, self.sleep_s, self.slept = n, sleep_s, slept
        self.x = torch.randn(n, 16)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.sleep_s and self.slept is not None:
            self.slept.sleep(self.sleep_s)
        return self.x[i], self.x[i, :1]


class Tiny(pl.LightningModule):
    #: Each training step sleeps this long: a step of a few ms, as any real model's. On 1 ms steps Lightning's own
    #: loop code between the timed parts is 2% of the fit on a quiet machine and 3-8% with one core kept busy
    #: (measured on these fits), against the ledger's 3% bound: the bound is for fits, not for 0.2 s toys.
    STEP_SLEEP_S = 0.003

    def __init__(self, buffer_mb: int = 0, logs_per_step: int = 1) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(16, 1)
        self.logs_per_step = logs_per_step
        if buffer_mb:
            self.register_buffer("big", torch.zeros(buffer_mb << 18))  # float32: 4 bytes

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        time.sleep(self.STEP_SLEEP_S)
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        for i in range(self.logs_per_step):
            self.log(f"loss{i}", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _callback() -> BottleneckCallback:
    return BottleneckCallback(
        wait=1, warmup=1, active=2, verbose=False, probe_loader=False, trial_budget_s=0, loader_budget_s=0
    )


def _fit(
    tmp_path: Path,
    model: pl.LightningModule | None = None,
    train: Dataset | None = None,
    val: Dataset | None = None,
    callbacks: list | None = None,
    unaccounted_max: float = UNACCOUNTED_MAX,
    **trainer_kwargs: Any,
) -> tuple[pl.Trainer, BottleneckCallback, FitLedger]:
    torch.manual_seed(0)
    cb = _callback()
    trainer = quiet_trainer(tmp_path, [*(callbacks or []), cb], **trainer_kwargs)
    val_loader = DataLoader(val, batch_size=4) if val is not None else None
    trainer.fit(model or Tiny(), DataLoader(train or Data(160), batch_size=8), val_loader)
    assert cb.report is not None
    d = cb.report.metrics["ledger"]
    ledger = FitLedger.from_dict(d)
    assert sum(ledger.parts.values()) == pytest.approx(ledger.fit_s, rel=1e-6)
    assert ledger.share(FitPart.UNACCOUNTED) < unaccounted_max, d
    return trainer, cb, ledger


def _assert_lightning_restored(trainer: pl.Trainer, user_profiler: Any) -> None:
    """Everything the ledger set for the fit is gone: the user's profiler, no instance attributes left."""
    assert trainer.profiler is user_profiler
    assert "run" not in vars(trainer.fit_loop)
    assert "run" not in vars(trainer.fit_loop.epoch_loop.val_loop)
    assert "_save_loggers_on_train_batch_end" not in vars(trainer.fit_loop.epoch_loop)
    assert not {"log_metrics", "update_train_step_metrics"} & set(vars(trainer._logger_connector))
    assert "log" not in vars(trainer.lightning_module)


def test_a_slow_val_loader_is_validation_time_split_into_loader_wait(tmp_path: Path) -> None:
    slept = Slept()
    trainer, _, ledger = _fit(
        tmp_path,
        val=Data(16, sleep_s=0.02, slept=slept),
        max_epochs=2,
        val_check_interval=10,  # 2 validations per epoch of 20 batches
    )
    assert ledger.validation_runs == 4 and ledger.validation_batches == 16
    assert ledger.train_steps == 40 and ledger.epochs == 2
    wait = ledger.validation_loader_wait_s
    assert slept.seconds * 0.97 <= wait <= slept.seconds * 1.3 + 0.05
    assert ledger.parts[FitPart.VALIDATION] == pytest.approx(wait + ledger.validation_compute_s)
    assert ledger.share(FitPart.VALIDATION) == pytest.approx(slept.seconds / ledger.fit_s, abs=0.12)
    assert ledger.largest_outside_part() is FitPart.VALIDATION
    assert ledger.parts[FitPart.SANITY_CHECK] == 0.0 and ledger.sanity_batches == 0
    _assert_lightning_restored(trainer, trainer.profiler)


def test_many_cheap_val_batches_count_as_validation_compute(tmp_path: Path) -> None:
    # 1 200 batches of ~0.2 ms against 20 training steps of ~4.5 ms: with 400 the two parts were about equal
    # (0.081 s against 0.082 s in one CI run), so the last assertion was a coin toss
    _, _, ledger = _fit(tmp_path, val=Data(1200), max_epochs=1, val_check_interval=5)
    assert ledger.validation_runs == 4 and ledger.validation_batches == 1200
    assert ledger.validation_compute_s > ledger.validation_loader_wait_s
    assert ledger.parts[FitPart.VALIDATION] > ledger.parts[FitPart.TRAINING_STEPS]


def test_a_slow_sanity_check_is_its_own_part(tmp_path: Path) -> None:
    slept = Slept()
    _, _, ledger = _fit(
        tmp_path,
        val=Data(40, sleep_s=0.01, slept=slept),
        max_epochs=1,
        num_sanity_val_steps=5,
        check_val_every_n_epoch=10,  # no validation in this one-epoch fit: every val fetch is the sanity check
    )
    assert ledger.validation_runs == 0 and ledger.sanity_batches == 5
    assert slept.calls == 20  # 5 batches of 4
    assert slept.seconds * 0.97 <= ledger.parts[FitPart.SANITY_CHECK] <= slept.seconds * 1.3 + 0.1


class TimedCheckpoint(pl.callbacks.ModelCheckpoint):
    """ModelCheckpoint measuring its own saves (an independent clock for the ledger's checkpointing)."""

    seconds = 0.0
    each: list[float] = []

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        t = time.perf_counter()
        super()._save_checkpoint(trainer, filepath)
        TimedCheckpoint.each.append(time.perf_counter() - t)
        TimedCheckpoint.seconds += TimedCheckpoint.each[-1]


def test_heavy_checkpoint_saves_are_checkpointing_with_seconds_per_save(tmp_path: Path) -> None:
    TimedCheckpoint.seconds, TimedCheckpoint.each = 0.0, []
    ckpt = TimedCheckpoint(dirpath=str(tmp_path / "ckpt"), every_n_train_steps=5, save_top_k=-1)
    _, _, ledger = _fit(
        tmp_path,
        model=Tiny(buffer_mb=24),
        callbacks=[ckpt],
        enable_checkpointing=True,
        max_steps=20,
    )
    assert ledger.checkpoint_saves == 4
    seconds = ledger.parts[FitPart.CHECKPOINTING]
    assert seconds >= TimedCheckpoint.seconds * 0.97
    assert seconds <= TimedCheckpoint.seconds + 0.05 * ledger.fit_s + 0.05
    # a save's seconds are the saves' own (the part also holds ModelCheckpoint's per-step hooks, which saving
    # less often leaves): on a busy machine the part came to more a save than the slowest save took
    assert 0 < ledger.save_s <= seconds and ledger.per_save_s() == pytest.approx(ledger.save_s / 4)
    # each save's wall time bounds the spread: the fastest and slowest save, as the checkpoint timed them
    # (within a scheduler slice, 10 ms, of that clock: with one core kept busy by another process, a save the
    # checkpoint timed at 86 ms came out at 82 ms in the ledger, whose clock starts inside the checkpoint's)
    assert min(TimedCheckpoint.each) - 0.01 <= ledger.save_min_s <= min(TimedCheckpoint.each) + 0.01
    assert max(TimedCheckpoint.each) - 0.01 <= ledger.save_max_s <= max(TimedCheckpoint.each) + 0.01
    assert ledger.save_min_s <= ledger.per_save_s() <= ledger.save_max_s
    again = FitLedger.from_dict(ledger.to_dict())
    assert (again.save_min_s, again.save_max_s) == (ledger.save_min_s, ledger.save_max_s)
    assert not any(name.startswith("TimedCheckpoint") for name in ledger.hooks)  # not "another callback"


class SlowLogger(pl.loggers.CSVLogger):
    """A logger whose writes are slow (a remote tracking server, a slow disk); the callback's own
    ``bottleneck/*`` scalars are not slowed (they are the diagnosis' time, not the user's logging)."""

    slept = Slept()

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if not any(k.startswith("bottleneck/") for k in metrics):
            SlowLogger.slept.sleep(0.005)
        super().log_metrics(metrics, step)


def test_a_slow_logger_every_step_is_logging(tmp_path: Path) -> None:
    SlowLogger.slept = Slept()
    _, _, ledger = _fit(
        tmp_path, logger=SlowLogger(str(tmp_path), name="csv"), log_every_n_steps=1, max_steps=30
    )
    slept = SlowLogger.slept
    assert slept.calls >= 30
    assert ledger.log_calls >= 30
    assert ledger.parts[FitPart.LOGGING] >= slept.seconds * 0.97
    # the rest of LOGGING is Lightning's own logging work (self.log, the CSV writes): real, not injected
    assert ledger.largest_outside_part() is FitPart.LOGGING
    assert ledger.self_log_calls == 30


def test_a_model_logging_many_metrics_every_step_is_logging(tmp_path: Path) -> None:
    # 60 self.log calls a step: about 6x this model's forward, backward and optimizer step on the 2-core VM (25 gave
    # 2.4x, and once under CI's load the steps read 3.4x their usual time and came out ahead)
    _, _, ledger = _fit(tmp_path, model=Tiny(logs_per_step=60), max_steps=20)
    assert ledger.self_log_calls == 60 * 20
    assert 0 < ledger.self_log_s <= ledger.parts[FitPart.LOGGING]
    # the self.log calls cost more than this model's forward, backward and optimizer step
    assert ledger.parts[FitPart.LOGGING] > ledger.parts[FitPart.TRAINING_STEPS]


class Sleepy(pl.Callback):
    slept = Slept()

    def on_train_batch_end(self, *args: Any) -> None:
        Sleepy.slept.sleep(0.01)


def test_a_user_callback_is_named_by_class_and_hook_with_self_time(tmp_path: Path) -> None:
    Sleepy.slept = Slept()
    _, _, ledger = _fit(tmp_path, callbacks=[Sleepy()], max_steps=20)
    hook = ledger.hooks["Sleepy.on_train_batch_end"]
    assert hook.calls == 20
    assert Sleepy.slept.seconds * 0.97 <= hook.seconds <= Sleepy.slept.seconds * 1.3 + 0.05
    assert ledger.parts[FitPart.CALLBACKS] >= hook.seconds
    # the sleep is outside the training steps: a step of this model is well under 10 ms
    assert ledger.parts[FitPart.TRAINING_STEPS] < ledger.parts[FitPart.CALLBACKS]


def test_the_ledger_is_shown_where_people_look(tmp_path: Path) -> None:
    """Terminal line, HTML card, scalars; ``analyze`` on the run folder shows it, on a bare trace says why not."""
    from lightning_bottleneck.live.verdict_outputs import verdict_scalars
    from lightning_bottleneck.offline import analyze_paths
    from lightning_bottleneck.output.html import render_html
    from lightning_bottleneck.output.text import NO_LEDGER, render_text

    Sleepy.slept = Slept()
    _, cb, ledger = _fit(tmp_path, callbacks=[Sleepy()], max_steps=20)
    assert cb.report is not None
    text = render_text(cb.report, full=True)
    line = next(x.strip() for x in text.splitlines() if x.strip().startswith("fit "))
    assert "callbacks" in line and "(most: Sleepy.on_train_batch_end)" in line
    assert text.index(line) < text.index("breakdown:")  # before the in-step breakdown
    assert "The whole fit" in render_html(cb.report)
    scalars = verdict_scalars(cb.report)
    assert scalars["bottleneck/fit_share/callbacks"] == pytest.approx(ledger.share(FitPart.CALLBACKS))

    offline = analyze_paths([tmp_path])
    assert FitLedger.from_dict(offline.metrics["ledger"]) == ledger
    assert line in render_text(offline)
    bare = analyze_paths(cb.report.trace_files)
    assert "ledger" not in bare.metrics
    assert NO_LEDGER in render_text(bare)


@pytest.mark.parametrize("name", ["simple", "advanced"])
def test_the_users_profiler_keeps_working_and_keeps_its_output(tmp_path: Path, name: str) -> None:
    from lightning.pytorch.profilers import AdvancedProfiler, SimpleProfiler

    kind = SimpleProfiler if name == "simple" else AdvancedProfiler
    profiler = kind(dirpath=str(tmp_path), filename="perf")
    # The user's profiler runs on every action and slows Lightning's own loop code between two steps (what
    # the ledger leaves unaccounted): on this toy's ~20 ms of fit per step that is up to ~3% of the fit on a
    # loaded machine (0.3-0.5 ms a step), so the bound here is twice the usual one.
    trainer, _, ledger = _fit(
        tmp_path,
        val=Data(8),
        profiler=profiler,
        max_steps=30,
        val_check_interval=10,
        unaccounted_max=2 * UNACCOUNTED_MAX,
    )
    _assert_lightning_restored(trainer, profiler)
    assert ledger.train_steps == 30 and ledger.validation_runs == 3
    out = next(tmp_path.glob("*perf*.txt")).read_text()
    assert "run_training_batch" in out
    assert "[_TrainingEpochLoop].train_dataloader_next" in out
    assert "[Callback]BottleneckCallback.on_train_batch_end" in out
    if name == "simple":
        assert len(profiler.recorded_durations["run_training_batch"]) == 30


class Boom(Tiny):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == 6:
            raise RuntimeError("boom")
        return super().training_step(batch, batch_idx)


def test_an_exception_puts_lightning_back_and_still_reports_the_ledger(tmp_path: Path) -> None:
    cb = _callback()
    trainer = quiet_trainer(tmp_path, [cb], max_steps=20, profiler="simple")
    user = trainer.profiler
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Boom(), DataLoader(Data(160), batch_size=8))
    _assert_lightning_restored(trainer, user)
    assert cb.report is not None
    assert cb.report.metrics["ledger"]["train_steps"] == 6


def test_a_rest_of_fit_verdict_names_its_part_in_the_headline() -> None:
    from lightning_bottleneck.analysis.ledger import ledger_metrics
    from lightning_bottleneck.categories import Category, FindingKind, Severity
    from lightning_bottleneck.output.text import headline
    from lightning_bottleneck.report import Finding, Report, ledger_cause

    ledger = _ledger(fit_s=10.0, training_steps=3.0, validation=6.0)
    report = Report(
        primary=Category.REST_OF_FIT,
        confidence=0.8,
        steps_observed=100,
        steps_profiled=5,
        step_time_ms=None,
        breakdown={},
    )
    assert ledger_cause(report, ledger) == "validation"  # no finding: the largest part outside the step
    report.findings.append(
        Finding(FindingKind.REST_OF_FIT, Severity.HIGH, "checkpoints", {"part": "checkpointing"})
    )
    assert ledger_cause(report, ledger) == "checkpointing"  # the finding's part wins
    report.findings.clear()
    report.metrics["ledger"] = ledger_metrics(ledger, [], ledger_cause(report, ledger))
    assert headline(report) == "rest-of-fit-bound: validation takes 60% of fit (confidence 80%)"


class FrozenProfilerTrainer(pl.Trainer):
    """A Trainer whose ``profiler`` cannot be replaced once set (as a future Lightning might have it)."""

    @property
    def profiler(self) -> Any:
        return self.__dict__["_frozen_profiler"]

    @profiler.setter
    def profiler(self, value: Any) -> None:
        if "_frozen_profiler" in self.__dict__:
            raise AttributeError("profiler is read-only")
        self.__dict__["_frozen_profiler"] = value


def test_a_trainer_that_refuses_the_ledger_gets_one_warning_and_the_rest_of_the_analysis(
    tmp_path: Path,
) -> None:
    cb = _callback()
    trainer = FrozenProfilerTrainer(
        accelerator="cpu",
        default_root_dir=str(tmp_path),
        callbacks=[cb],
        max_steps=8,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    with pytest.warns(UserWarning, match="no fit ledger for this run"):
        trainer.fit(Tiny(), DataLoader(Data(160), batch_size=8))
    assert cb.report is not None and cb.report.steps_observed == 8
    assert "ledger" not in cb.report.metrics
    assert "run" not in vars(trainer.fit_loop)


class _ManyOps(Tiny):
    """Hundreds of tiny ops per step: torch.profiler records each, so the profiled steps are much slower."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        out = self.layer(x)
        for _ in range(1000):
            out = out * 1.0001 + 0.0001
        return torch.nn.functional.mse_loss(out, y)


def test_the_profiled_steps_extra_time_is_the_diagnosis_not_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19: the fit a speed-up is predicted for is the fit without the callback; the profiled steps' extra
    time (torch.profiler recording every op) is this package's cost, booked to DIAGNOSIS."""
    from lightning_bottleneck.live.ledger import LiveLedger

    # the arithmetic: 4 profiled steps took 0.4 s, 36 others 0.36 s -> 0.36 s extra
    step, log = FitPart.TRAINING_STEPS, FitPart.LOGGING
    ledger = LiveLedger.__new__(LiveLedger)
    ledger._window_marks = [({step: 0.1, log: 0.0}, 10), ({step: 0.5, log: 0.0}, 14)]
    assert ledger._window_extra_s({step: 0.86}, 50)[step] == pytest.approx(0.4 - 4 * 0.01)
    assert ledger._window_extra_s({step: 0.45}, 12) == {}  # 8 steps outside the span: no reference yet
    ledger._window_marks = ledger._window_marks[:1]  # the window has not closed
    assert ledger._window_extra_s({step: 0.86}, 50) == {}
    # the span runs on to the mid-run verdict (the trace analysed beside the steps), per part: 24 steps took
    # 0.6 s of training and 0.24 s of logging where 26 steps outside took 0.26 s and 0.13 s
    ledger._window_marks = [
        ({step: 0.1, log: 0.05}, 10),
        ({step: 0.5, log: 0.1}, 14),
        ({step: 0.7, log: 0.29}, 34),
    ]
    # (each stretch on its own: the window's 4 steps 0.4 s, then 20 steps 0.2 s, no extra, against 0.01 s a step)
    extra = ledger._window_extra_s({step: 0.86, log: 0.37}, 50)
    assert extra[step] == pytest.approx(0.4 - 4 * 0.01) and extra[log] == pytest.approx(0.24 - 24 * 0.005)

    # a real fit: the window's recorded steps (3 of 100: warmup 1, active 2) are slower than the others
    # (torch.profiler records ~2000 ops each); that extra is booked to DIAGNOSIS and named in the report. The
    # steps after the window share the CPUs with the trace's analysis (a child process): on 40 steps with one
    # core kept busy that raised the outside mean enough to hide the extra; on 100 it is diluted 2.5x
    marked: list[int] = []  # the training steps at each mark (a spy: the marks are the ledger's own)
    mark = LiveLedger.mark_window

    def spy(self: LiveLedger) -> None:
        mark(self)
        marked.append(self._window_marks[-1][1])

    monkeypatch.setattr(LiveLedger, "mark_window", spy)
    _, cb, fit_ledger = _fit(tmp_path, model=_ManyOps(), max_steps=100, limit_val_batches=0)
    # the span: the window's start and end, then the first batch end after the mid-run picture is drawn
    assert len(marked) == 3 and marked[0] < marked[1] <= marked[2] < 100, marked
    live = cb.report.metrics["ledger"]
    extra = fit_ledger.profiled_extra_s
    assert extra > 0 and live["profiled_extra_s"] == extra, live
    assert fit_ledger.parts[FitPart.DIAGNOSIS] >= extra, live


def test_a_validation_run_counts_the_logging_it_triggers(tmp_path: Path) -> None:
    """Issue 19: validating less often also saves the logger writes each validation triggers (its epoch-end
    metrics), which the ledger books to LOGGING as self time: ``validation_wall_s`` holds the runs' whole wall
    time, and the val_check_interval advice counts it (val_many_batches predicted 1.40x for 2.00x applied)."""
    from lightning_bottleneck.evidence import Evidence
    from lightning_bottleneck.rules.fit import validation_levers

    SlowLogger.slept = Slept()
    _, _, ledger = _fit(
        tmp_path,
        train=Data(640),
        val=Data(16),
        logger=SlowLogger(str(tmp_path), name="csv"),
        log_every_n_steps=1000,  # no training-step writes: every logger write comes from a validation run
        # 80 steps, a 0.8 s fit: a 40-step fit's 0.4 s put one 10-16 ms preemption (one core kept busy) over
        # the 3% unaccounted bound
        max_steps=80,
        val_check_interval=5,
    )
    assert ledger.validation_runs >= 15
    slept = SlowLogger.slept.seconds
    assert slept > 0 and ledger.parts[FitPart.LOGGING] >= slept * 0.97
    assert ledger.validation_wall_s >= ledger.parts[FitPart.VALIDATION] + slept * 0.9, ledger.to_dict()
    levers = [lv for lv in validation_levers(ledger, Evidence()) if "val_check_interval" in lv.settings]
    assert levers, ledger.to_dict()
    per = levers[0].evidence["per_validation_s"]
    assert per == pytest.approx(ledger.validation_typical_s, rel=1e-3)
    assert (
        per
        >= ledger.parts[FitPart.VALIDATION] / ledger.validation_runs + slept / ledger.validation_runs * 0.5
    )


class _SlowFirstValidation(pl.Callback):
    """A one-off cost inside the first validation run only (a lazily built metric, a first file open)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.done = False

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.done and not trainer.sanity_checking:
            self.done = True
            time.sleep(self.seconds)


def test_validating_less_often_does_not_count_the_first_runs_one_off_cost_as_saved(tmp_path: Path) -> None:
    """The runs left after the advice still pay a first run's one-off cost: the saving per avoided run is the
    median run's wall time, not the mean (which a 0.5 s first run would double here)."""
    from lightning_bottleneck.evidence import Evidence
    from lightning_bottleneck.rules.fit import validation_levers

    # each validation loads its 16 samples at 2 ms each: a material share of the fit (else no lever at all: a
    # bare 16-sample validation of this model takes ~3 ms, under FIT_PART_TARGET_SHARE of a 0.6 s fit)
    _, _, ledger = _fit(
        tmp_path,
        train=Data(320),
        val=Data(16, sleep_s=0.002, slept=Slept()),
        callbacks=[_SlowFirstValidation(0.5)],
        max_steps=40,
        val_check_interval=5,
    )
    runs = ledger.validation_runs
    assert runs >= 7 and ledger.validation_wall_s >= 0.5
    mean = ledger.validation_wall_s / runs
    assert ledger.validation_typical_s < mean - 0.5 / runs * 0.8, ledger.to_dict()
    lever = next(lv for lv in validation_levers(ledger, Evidence()) if "val_check_interval" in lv.settings)
    assert lever.evidence["per_validation_s"] == pytest.approx(ledger.validation_typical_s, rel=1e-3)
    avoided = lever.evidence["validations"] - lever.evidence["validations_after"]
    assert lever.saved_s == pytest.approx(avoided * ledger.validation_typical_s, rel=1e-3)
