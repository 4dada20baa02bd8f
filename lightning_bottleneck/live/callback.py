"""``BottleneckCallback``: profile a window of training steps, classify the bottleneck, advise, report.

The callback keeps the hooks and the options and delegates: the profiling window to
:mod:`~lightning_bottleneck.live.profiler_window`, step timing to :mod:`~lightning_bottleneck.live.timing`, sync
tracking to :mod:`~lightning_bottleneck.live.sync_hooks`, the rank merge to :mod:`~lightning_bottleneck.live.distributed`,
the option checks to :mod:`~lightning_bottleneck.live.options`, the verdict (evidence, the same
Trainer-free :func:`~lightning_bottleneck.diagnose.diagnose` the offline ``lightning-bottleneck analyze``
command runs, mid-run vs end of fit) to :mod:`~lightning_bottleneck.live.verdict_cycle`, and the output to
:mod:`~lightning_bottleneck.live.publishing`.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from lightning_bottleneck.analysis.step_phases import StepPhases
from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.evidence import RunConfig, TimingStats
from lightning_bottleneck.live.distributed import RankGather, merge_rank_summaries
from lightning_bottleneck.live.ledger import LiveLedger
from lightning_bottleneck.live.options import (
    check_bool,
    check_int,
    check_path,
    check_seconds,
    check_timeout,
)
from lightning_bottleneck.live.profiler_window import ProfilerWindow, WindowOptions, stands_down, worker_name
from lightning_bottleneck.live.publishing import exit_note, publish
from lightning_bottleneck.live.timing import StepTimer
from lightning_bottleneck.live.verdict_cycle import (
    against_midrun,
    is_oom,
    memory_sampler,
    midrun_note,
    outside_steps,
    picture_changed,
    take_verdict,
    unfinished_window_note,
)
from lightning_bottleneck.live.verdict_outputs import publish_picture, publish_scalars
from lightning_bottleneck.live.window_analysis import WindowAnalysis, analyse_trace_file
from lightning_bottleneck.measure.contention import CpuSnapshot, take_snapshot
from lightning_bottleneck.measure.memory_trend import MemorySampler
from lightning_bottleneck.measure.stage import Measured, MeasureOptions, measure, window_check
from lightning_bottleneck.output.report import Report
from lightning_bottleneck.vocabulary import (
    NAMESPACE,
    PHASE_BACKWARD,
    PHASE_TRAINING_STEP,
    PHASE_VALIDATION,
)

F = TypeVar("F", bound=Callable[..., Any])

REPORT_FILENAME = "bottleneck_report.json"
TRACE_SUBDIR = "bottleneck"  # a run in torch-tb-profiler's run list: <log_dir>/bottleneck
#: Under DDP the mid-run verdict is taken this many training steps after the window closed, joining the
#: analysis thread there, so that every rank runs the measurement stage at the same step (a 15-step
#: window's trace reads in well under a second: 10 steps leave it time on any but the fastest loops).
#: A single process takes it at the first batch end after the thread finished, at the latest here too.
MIDRUN_DELAY_STEPS = 10
#: Seconds the end of fit / teardown waits for a still-running analysis thread before giving up on it.
JOIN_TIMEOUT_S = 120.0
_NEVER = 2**62


def _guarded(fn: F) -> F:
    """An internal error becomes one warning and disables the callback; training goes on."""

    @functools.wraps(fn)
    def wrapper(self: BottleneckCallback, *args: Any, **kwargs: Any) -> Any:
        if self._disabled:
            return None
        try:
            return fn(self, *args, **kwargs)
        except Exception as err:
            self._disable(f"{fn.__name__}: {type(err).__name__}: {err}")
            return None

    return wrapper  # type: ignore[return-value]


class BottleneckCallback(Callback):
    r"""Find what limits training speed and say which settings to change.

    A ``torch.profiler`` window of ``wait`` + ``warmup`` + ``active`` training steps (after ``skip_first``)
    is driven by the batch hooks; every recorded ``ProfilerStep`` covers one whole training step including
    the fetch of its batch. Outside the window the callback only reads ``time.perf_counter`` twice per step.
    At the end of ``fit`` (also when fit dies of an exception) it prints a verdict on global rank zero, writes
    a JSON report, and puts the verdict, evidence and advice in TensorBoard's Text tab next to the traces
    in the PyTorch Profiler tab.

    Args:
        wait: training steps to skip before warming up the profiler (lets caches and workers settle).
        warmup: steps the profiler runs but discards (its own start-up cost).
        active: steps recorded and analysed.
        repeat: number of wait/warmup/active cycles (each writes a trace file).
        skip_first: steps to ignore before the first cycle, e.g. for a long ``torch.compile`` warm-up.
        record_shapes: record input shapes of ops (costs ~10-30% more overhead inside the window and a
            larger trace).
        profile_memory: record tensor allocations (costs noticeably inside the window; feeds the Memory view).
        with_stack: record Python stacks (the most expensive option: can double step time in the window and
            makes traces several times larger).
        track_syncs: time host-device synchronisations (``.item()``, ``.cpu()``, ``print(tensor)``, ...) and
            name the user's line (about a microsecond per such call; nothing for other code).
        log_every_n_steps: how often to log ``bottleneck/*`` scalars; ``None`` follows the Trainer's
            ``log_every_n_steps``; ``0`` turns scalars off.
        output_dir: where traces go; default ``<log_dir>/bottleneck`` (a run in TensorBoard's profiler tab).
        report_path: the JSON report; default ``<log_dir>/bottleneck_report.json``.
        verbose: print the summary at the end of fit (global rank zero).
        gather_timeout: seconds global rank zero waits for the other ranks' summaries at the end of fit
            (multi-process strategies); ranks that miss it are listed as missing in the report.
        baseline: a previous run's ``bottleneck_report.json``. After one change, the new report says whether
            it helped (median step time before vs after, beyond run-to-run noise) so the change can be
            kept or reverted; the comparison lands in ``metrics["comparison"]`` and the notes.
        probe_loader: after the window, time the train DataLoader at a ladder of worker counts (outside the
            training loop) when data wait or epoch-start stalls matter, so the input advice is measured.
        loader_budget_s: seconds the loader probe may take; 0 turns it off; ``None`` (automatic): 3 s, but at
            most 2% of the projected fit, so a short run is not slowed by its own diagnosis.
        trial_budget_s: seconds of trial steps on the live model (bf16/fp16 autocast, matmul precision,
            ``channels_last``, ``torch.compile``) when compute or overhead matter; 0 turns them off; ``None``:
            5 s, at most 2% of the projected fit.
        compile_budget_s: seconds ``torch.compile`` may take in the trials; 0 skips it; ``None``: 60 s, at most
            2% of the projected fit.

    Example::

        from lightning.pytorch import Trainer
        from lightning_bottleneck import BottleneckCallback

        trainer = Trainer(max_epochs=1, callbacks=[BottleneckCallback()])
        trainer.fit(model, datamodule)
        print(trainer.callbacks[-1].report.primary)  # e.g. Category.INPUT
    """

    def __init__(
        self,
        wait: int = 5,
        warmup: int = 5,
        active: int = 5,
        repeat: int = 1,
        skip_first: int = 0,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        track_syncs: bool = True,
        log_every_n_steps: int | None = None,
        output_dir: str | None = None,
        report_path: str | None = None,
        verbose: bool = True,
        gather_timeout: float = 120.0,
        baseline: str | None = None,
        probe_loader: bool = True,
        loader_budget_s: float | None = None,
        trial_budget_s: float | None = None,
        compile_budget_s: float | None = None,
    ) -> None:
        super().__init__()
        self.wait = check_int("wait", wait, 0)
        self.warmup = check_int("warmup", warmup, 0)
        self.active = check_int("active", active, 1)
        self.repeat = check_int("repeat", repeat, 1)
        self.skip_first = check_int("skip_first", skip_first, 0)
        self.record_shapes = check_bool("record_shapes", record_shapes)
        self.profile_memory = check_bool("profile_memory", profile_memory)
        self.with_stack = check_bool("with_stack", with_stack)
        self.track_syncs = check_bool("track_syncs", track_syncs)
        if log_every_n_steps is not None:
            check_int("log_every_n_steps", log_every_n_steps, 0)
        self.log_every_n_steps = log_every_n_steps
        self.output_dir = check_path("output_dir", output_dir)
        self.report_path = check_path("report_path", report_path)
        self.baseline = check_path("baseline", baseline)
        self.verbose = check_bool("verbose", verbose)
        self.gather_timeout = check_timeout("gather_timeout", gather_timeout)
        self.probe_loader = check_bool("probe_loader", probe_loader)
        self.loader_budget_s = check_seconds(
            "loader_budget_s", loader_budget_s, "0 turns the loader probe off", auto=True
        )
        self.trial_budget_s = check_seconds(
            "trial_budget_s", trial_budget_s, "0 turns the trials off", auto=True
        )
        self.compile_budget_s = check_seconds(
            "compile_budget_s",
            compile_budget_s,
            "on top of trial_budget_s; 0 skips the torch.compile trial",
            auto=True,
        )
        self.report: Report | None = None
        self.midrun_report: Report | None = None
        self._reset()

    # ------------------------------------------------------------------ state
    def _reset(self) -> None:
        self._disabled = False
        self._finalized = False
        self._active_fit = False
        self._timer = StepTimer()
        self._window = ProfilerWindow(
            WindowOptions(
                skip_first=self.skip_first,
                wait=self.wait,
                warmup=self.warmup,
                active=self.active,
                repeat=self.repeat,
                record_shapes=self.record_shapes,
                profile_memory=self.profile_memory,
                with_stack=self.with_stack,
            )
        )
        # Hot-path aliases, so that hooks outside the window cost one attribute test each: the window's
        # label stack (the same list object) and whether the profiler runs.
        self._labels = self._window.labels
        self._profiling = False
        self._trace_dir: Path | None = None
        self._report_file: Path | None = None
        self._config: RunConfig | None = None
        self._env: dict[str, Any] = {}
        self._oom: str | None = None
        self._notes: list[str] = []
        self._tracker: Any = None
        self._scalar_every = 0
        self._rank = 0
        self._world_size = 1
        self._gather = RankGather(self.gather_timeout)
        self._ledger: LiveLedger | None = None  # the whole fit by part (live/ledger.py), from setup on
        # after the window: the analysis thread, the step at which the verdict is taken, what it needs
        self._analysis: WindowAnalysis | None = None
        self._measure_at = _NEVER
        self._next_work = _NEVER  # one comparison per batch end: memory sample or mid-run verdict due
        self._batch: Any = None  # the last profiled step's batch (for the trials), released after them
        self._batch_idx = 0
        self._cpu_start: CpuSnapshot | None = None
        self._cpu_end: CpuSnapshot | None = None
        self._window_ring: tuple[int, int] | None = None  # step_ms ring positions of the window's steps
        self._summary: TraceSummary | None = None
        self._phases: StepPhases | None = None
        self._measured: Measured | None = None
        self._memory: MemorySampler | None = None
        self._picture: threading.Thread | None = None
        self.midrun_report = None

    @property
    def schedule_length(self) -> int:
        """Training steps until the last profiled step of the last cycle."""
        return self._window.options.length

    def _disable(self, why: str) -> None:
        rank_zero_warn(
            f"BottleneckCallback disabled itself after an internal error ({why}); training goes on."
        )
        self._disabled = True
        self._release()

    # ------------------------------------------------------------------ setup / teardown
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        from lightning.pytorch.profilers import PyTorchProfiler

        if isinstance(getattr(trainer, "profiler", None), PyTorchProfiler):
            raise MisconfigurationException(
                "BottleneckCallback drives torch.profiler itself, but Trainer(profiler=...) already uses "
                "PyTorchProfiler and torch.profiler cannot run twice. Remove `profiler=` from the Trainer "
                "(the callback's traces open in TensorBoard's PyTorch Profiler tab), or remove the callback."
            )
        self._reset()
        if stands_down(self, trainer):  # another BottleneckCallback, or the user's own profiler session
            self._disabled = True
            return
        self._setup_paths(trainer)

    @_guarded
    def _setup_paths(self, trainer: pl.Trainer) -> None:
        log_dir = Path(trainer.log_dir or trainer.default_root_dir)  # collective under DDP: all ranks call it
        self._rank = trainer.global_rank
        self._trace_dir = Path(self.output_dir) if self.output_dir else log_dir / TRACE_SUBDIR
        self._report_file = Path(self.report_path) if self.report_path else log_dir / REPORT_FILENAME
        self._active_fit = True
        self._ledger = LiveLedger.install(trainer, trainer.lightning_module, self)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        try:
            self._finish_fit(trainer, pl_module)
        finally:
            self._release()
            self._gather.teardown()
            self._active_fit = False

    @_guarded
    def _finish_fit(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._active_fit and not self._finalized:
            self._finalize(trainer, pl_module)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if not self._active_fit:
            return
        try:
            if is_oom(exception):
                self._oom = f"{type(exception).__name__}: {exception}"
            else:
                self._notes.append(exit_note(exception))
            if not self._finalized and not self._disabled:
                self._finalize(trainer, pl_module, gather=False)
        except Exception as err:
            rank_zero_warn(f"BottleneckCallback could not write its report after the error: {err}")
        finally:
            self._release()

    def _release(self) -> None:
        """Undo everything, never raising: labels and profiler (a partial window is discarded), patches,
        the analysis thread (joined), the kept batch."""
        self._profiling = False
        self._next_work = _NEVER
        self._batch = None
        analysis = self._analysis
        if analysis is not None:
            with contextlib.suppress(Exception):
                analysis.join(JOIN_TIMEOUT_S)
        with contextlib.suppress(Exception):
            self._join_picture()
        self._window.release()
        ledger, self._ledger = self._ledger, None
        if ledger is not None:
            ledger.uninstall()
        tracker, self._tracker = self._tracker, None
        if tracker is not None:
            tracker.uninstall()

    # ------------------------------------------------------------------ training hooks
    @_guarded
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._active_fit:
            return
        if stands_down(self, trainer, duplicates=False):  # a profiler started since setup
            self._active_fit, self._disabled = False, True
            return
        from lightning_bottleneck.live.run_inspection import environment, run_config

        self._config = run_config(trainer, pl_module)
        self._env = environment(trainer, self._config)
        every = (
            getattr(trainer, "log_every_n_steps", 50)
            if self.log_every_n_steps is None
            else self.log_every_n_steps
        )
        self._scalar_every = every if trainer.loggers else 0
        self._world_size = trainer.world_size
        self._memory = memory_sampler(trainer)
        self._next_work = self._memory.next_step if self._memory is not None else _NEVER
        if self.track_syncs:
            from lightning_bottleneck.live.sync_hooks import SyncTracker

            self._tracker = SyncTracker(device_type=self._config.accelerator)
            self._tracker.install()
        self._gather.setup()  # collective (every rank runs on_train_start): the gather's gloo group
        assert self._trace_dir is not None
        cuda = trainer.strategy.root_device.type == "cuda" and torch.cuda.is_available()
        self._window.start(self._trace_dir, worker_name(self._rank), cuda)
        self._profiling = True

    @_guarded
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._timer.epoch_start()

    @_guarded
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._timer.batch_start()
        if self._labels:  # the data_wait label opened at the previous batch end
            self._window.close_all()
        if self._profiling:
            self._window.open(PHASE_TRAINING_STEP)

    @_guarded
    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor
    ) -> None:
        if self._labels:
            self._window.close_all()
        if self._profiling:
            self._window.open(PHASE_BACKWARD)

    @_guarded
    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._labels:
            self._window.close_all()

    @_guarded
    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if self._profiling:
            self._window.open_optimizer_step()

    @_guarded
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._timer.batch_end()
        if self._labels:
            self._window.close_all()
        if self._tracker is not None:
            self._tracker.step()
        if self._profiling:
            self._batch, self._batch_idx = batch, batch_idx  # a reference, released after the trials
            if self._window.advance():
                self._profiling = False
                self._finish_window(trainer, pl_module)
            elif self._cpu_start is None and self._window.recording():
                self._window_started()
        if self._timer.steps >= self._next_work:
            self._due(trainer, pl_module)
        if self._scalar_every and self._timer.steps % self._scalar_every == 0:
            self._log_scalars(trainer)

    def _window_started(self) -> None:
        """The profiler records from the next step on (warm-up): the busy-machine snapshot, the ring mark."""
        self._cpu_start = take_snapshot(threads=torch.get_num_threads())
        self._window_ring = (self._timer.step_ms.n, self._timer.step_ms.n)

    def _finish_window(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The profiling window just closed and its traces are written; training goes on.

        Its trace is read in a background thread; the verdict is taken at a later batch end
        (:meth:`_due`) and published mid-run.
        """
        self._cpu_end = take_snapshot(threads=torch.get_num_threads())
        if self._window_ring is not None:
            self._window_ring = (self._window_ring[0], self._timer.step_ms.n)
        if not self._window.trace_files:
            return
        self._analysis = WindowAnalysis.start(self._window.trace_files[-1], self._rank)
        self._measure_at = self._timer.steps + MIDRUN_DELAY_STEPS
        # a single process looks at the thread at every batch end; DDP ranks all wait for the fixed step
        self._schedule(self._timer.steps + 1 if self._world_size == 1 else self._measure_at)

    def _schedule(self, at: int) -> None:
        mem = self._memory.next_step if self._memory is not None else _NEVER
        self._next_work = min(at, mem)

    def _due(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A memory sample or the mid-run verdict is due (rare: every few steps at most)."""
        steps = self._timer.steps
        if self._memory is not None and steps >= self._memory.next_step:
            self._memory.sample(steps)
        pending = self._analysis is not None and self._measured is None
        if pending and (steps >= self._measure_at or (self._world_size == 1 and self._analysis.done)):  # type: ignore[union-attr]
            self._midrun_verdict(trainer, pl_module)
            pending = False
        if pending:
            self._schedule(steps + 1 if self._world_size == 1 else self._measure_at)
        else:
            self._schedule(_NEVER)

    def _midrun_verdict(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Take the window's analysis, run the measurement stage, diagnose, publish (global rank zero).

        The time this takes is not training: the gap until the next batch is left out of the step timing
        (as a validation run is) and the sync tracker does not count the trials' syncs."""
        self._timer.pause()
        if self._tracker is not None:
            self._tracker.pause()
        try:
            self._collect_analysis()
            self._run_measurements(trainer, pl_module)
        finally:
            if self._tracker is not None:
                self._tracker.resume()
        report = self._verdict(
            trainer, [self._summary] if self._summary else [], [], list(self._window.trace_files)
        )
        report.notes.append(midrun_note(self._timer.steps, trainer.global_step))
        self.midrun_report = report
        if trainer.is_global_zero:
            self._publish(trainer, report)

    def _collect_analysis(self) -> None:
        analysis = self._analysis
        if analysis is None or self._summary is not None:
            return
        try:
            self._summary, self._phases = analysis.result(JOIN_TIMEOUT_S)
        except Exception as err:
            self._notes.append(f"the window's trace could not be analysed: {type(err).__name__}: {err}")

    def _run_measurements(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._measured is not None:
            return
        config = self._config or RunConfig()
        try:
            self._measured = measure(
                trainer,
                pl_module,
                MeasureOptions(
                    self.probe_loader, self.loader_budget_s, self.trial_budget_s, self.compile_budget_s
                ),
                summary=self._summary,
                timing=self._timing(),
                outside_ms=self._outside_steps(),
                batch=self._batch,
                batch_idx=self._batch_idx,
                cpu_start=self._cpu_start,
                cpu_end=self._cpu_end,
                batch_size=config.batch_size,
                num_workers=config.num_workers,
                persistent_workers=config.persistent_workers,
                agree=self._gather.agree if self._world_size > 1 else None,
                ledger=self._ledger.snapshot() if self._ledger is not None else None,
            )
        finally:
            self._batch = None
        self._notes += self._measured.notes

    def _outside_steps(self) -> list[float]:
        """Always-on step times outside the profiled window (its steps cut out of the ring by position)."""
        ring = self._timer.step_ms
        return outside_steps(ring.values(), max(0, ring.n - ring.capacity), self._window_ring)

    def _log_scalars(self, trainer: pl.Trainer) -> None:
        median_ms, wait_share = self._timer.rolling(max(1, self._scalar_every))
        if median_ms <= 0:
            return
        metrics = {NAMESPACE + "step_time_ms": median_ms, NAMESPACE + "data_wait_share": wait_share}
        bs = self._config.batch_size if self._config else None
        if bs:
            metrics[NAMESPACE + "samples_per_sec"] = bs * 1000.0 / median_ms
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)

    # ------------------------------------------------------------------ validation never counts
    @_guarded
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not self._active_fit:
            return
        self._timer.pause()
        if self._tracker is not None:
            self._tracker.pause()
        if self._labels:
            self._window.close_all()
        if self._profiling:
            self._window.open(PHASE_VALIDATION)

    @_guarded
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not self._active_fit:
            return
        if self._labels:
            self._window.close_all()
        self._timer.resume()
        if self._tracker is not None:
            self._tracker.resume()

    # ------------------------------------------------------------------ the end
    @_guarded
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._active_fit and not self._finalized:
            self._finalize(trainer, pl_module)

    def _finalize(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gather: bool = True) -> None:
        """Close the window, finish its analysis (and, on a normal end, the measurement stage if the run
        ended before the mid-run verdict), diagnose with the whole run's timing (every rank), publish
        (global rank zero) with what changed since the mid-run verdict."""
        self._finalized = True
        self._profiling = False
        self._next_work = _NEVER
        window = self._window
        if window.labels:
            window.close_all()
        if window.prof is not None:
            if not window.done:
                self._notes.append(unfinished_window_note(self._timer.steps, window.options))
            window.stop(save=True)  # saves a partial active window, if any
            if self._cpu_start is not None and self._cpu_end is None:
                self._cpu_end = take_snapshot(threads=torch.get_num_threads())
        self._notes += window.notes  # a trace that could not be written (a full disk)
        sites = []
        if self._tracker is not None:
            sites = self._tracker.sites()
            self._tracker.uninstall()
            self._tracker = None
        self._collect_analysis()
        if self._summary is None and self._analysis is None and window.trace_files:
            self._summary, self._phases = analyse_trace_file(window.trace_files[-1], self._rank)
        if gather:  # a normal end: every rank gets here, so every rank runs the same plan
            self._run_measurements(trainer, pl_module)
        if self._measured is not None and self._summary is not None:  # against the whole run now
            self._measured.window_check = window_check(
                self._summary, self._outside_steps(), self._measured.contention
            )
        self._batch = None
        own = self._summary
        summaries = [own] if own is not None else []
        trace_files = list(window.trace_files)
        if gather:
            ledger = self._ledger.snapshot() if self._ledger is not None else None
            merged = merge_rank_summaries(self._gather, self._rank, own, window.trace_files, ledger)
            summaries = merged.summaries
            trace_files += merged.trace_files
            self._notes += merged.notes
        self.report = self._verdict(
            trainer, summaries, sites, trace_files, merged.ledgers if gather else None
        )
        against_midrun(self.midrun_report, self.report)
        if trainer.is_global_zero:
            self._publish(trainer, self.report)

    def _timing(self) -> TimingStats:
        config = self._config
        return self._timer.stats(float(config.batch_size) if config and config.batch_size else None)

    def _verdict(
        self,
        trainer: pl.Trainer,
        summaries: list[TraceSummary],
        sites: list[Any],
        trace_files: list[str],
        ledgers: list[Any] | None = None,
    ) -> Report:
        if ledgers is None and self._ledger is not None:
            ledgers = [self._ledger.snapshot()]
        return take_verdict(
            trainer,
            summaries=summaries,
            sites=sites,
            trace_files=trace_files,
            timing=self._timing(),
            measured=self._measured,
            memory=self._memory,
            oom=self._oom,
            config=self._config,
            environment=self._env,
            notes=self._notes,
            ledgers=ledgers,
        )

    def _publish(self, trainer: pl.Trainer, report: Report) -> None:
        written = publish(
            trainer,
            report,
            report_file=self._report_file,
            trace_dir=self._trace_dir,
            baseline=self.baseline,
            verbose=self.verbose,
            explicit_path=self.report_path is not None,
            owner=self,
        )
        publish_scalars(trainer, report)
        self._join_picture()
        # the image again at the end of fit only when the verdict or the first advice changed (~0.2 s)
        changed = picture_changed(self.midrun_report, report)
        self._picture = publish_picture(
            trainer, report, self._phases, written or self._report_file, image=changed
        )

    def _join_picture(self) -> None:
        picture, self._picture = self._picture, None
        if picture is not None:
            picture.join(JOIN_TIMEOUT_S)

    # ------------------------------------------------------------------ checkpointing / spawning
    def __getstate__(self) -> dict[str, Any]:
        """Only the options travel (``ddp_spawn`` pickles callbacks); run state starts fresh in setup."""
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        state["report"] = self.report
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()
