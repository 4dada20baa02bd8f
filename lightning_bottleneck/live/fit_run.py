"""One fit's run state and the work the callback's hooks delegate to.

:class:`FitRun` is created at ``setup`` and dropped at ``teardown``: the always-on step timer, the profiling
window, the sync tracker, the off-thread analysis of the window's trace, the measurement stage, the mid-run and
end-of-fit verdicts and their publication. The callback keeps the hooks and the options; everything that has
state lives here, so that a new fit (or a ``ddp_spawn`` worker) starts from nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from lightning_bottleneck.analysis.ledger import FitLedger, merge_ranks
from lightning_bottleneck.analysis.step_phases import StepPhases
from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.autotune_record import AutotuneRecord
from lightning_bottleneck.diagnose import diagnose
from lightning_bottleneck.evidence import Evidence, RunConfig, TimingStats
from lightning_bottleneck.evidence.contention import CpuSnapshot
from lightning_bottleneck.live.distributed import RankGather, merge_rank_summaries
from lightning_bottleneck.live.ledger import LiveLedger
from lightning_bottleneck.live.offload import ChildWorker, waits_for_child
from lightning_bottleneck.live.phase_hooks import set_phase_hooks
from lightning_bottleneck.live.profiler_window import ProfilerWindow, worker_name
from lightning_bottleneck.live.publishing import exit_note, has_tensorboard_logger, publish
from lightning_bottleneck.live.run_inspection import memory_stats
from lightning_bottleneck.live.run_options import RunOptions
from lightning_bottleneck.live.step_feed import SCALARS_MIN_GAP_S, after_step, back_to_hooks, go_hookless
from lightning_bottleneck.live.timing import StepTimer
from lightning_bottleneck.live.verdict_cycle import (
    against_midrun,
    is_oom,
    memory_sampler,
    midrun_note,
    outside_steps,
    picture_changed,
    unfinished_window_note,
)
from lightning_bottleneck.live.verdict_outputs import publish_picture, publish_scalars, text_to_child
from lightning_bottleneck.live.window_analysis import WindowAnalysis, analyse_trace_file
from lightning_bottleneck.measure.contention import take_snapshot
from lightning_bottleneck.measure.memory_trend import MemorySampler
from lightning_bottleneck.measure.stage import measure, window_check
from lightning_bottleneck.report import Report

REPORT_FILENAME = "bottleneck_report.json"
TRACE_SUBDIR = "bottleneck"  # a run in torch-tb-profiler's run list: <log_dir>/bottleneck
#: Under DDP the mid-run verdict is taken this many training steps after the window closed, joining the
#: analysis thread there, so that every rank runs the measurement stage at the same step (a 15-step
#: window's trace reads in well under a second: 10 steps leave it time on any but the fastest loops).
#: A single process never waits: it takes the verdict at the first batch end after the analysis finished
#: (the child is warm by then, ~50 ms; a child that fails or hangs is replaced by the in-process analysis
#: within CHILD_TIMEOUT_S, so the verdict always comes), and the training thread never blocks on it.
MIDRUN_DELAY_STEPS = 10
#: Seconds the end of fit / teardown waits for a still-running analysis thread before giving up on it.
JOIN_TIMEOUT_S = 120.0
NEVER = 2**62


class FitRun:
    """The state of one fit and the work behind the callback's hooks (see the module docstring)."""

    def __init__(self, options: RunOptions, owner: Any = None) -> None:
        self.options = options
        self.owner = owner  # the callback: it may replace the reports it wrote itself, in any fit
        self.phase_hooks_on = True  # the owner's phase-label hooks are in Lightning's hook calls
        self.finalized = False
        self.timer = StepTimer()
        self.window = ProfilerWindow(options.window)
        # Hot-path aliases, so that hooks outside the window cost one attribute test each: the window's
        # label stack (the same list object) and whether the profiler runs.
        self.labels = self.window.labels
        self.profiling = False
        self.trace_dir: Path | None = None
        self.report_file: Path | None = None
        self.config: RunConfig | None = None
        self.env: dict[str, Any] = {}
        self.oom: str | None = None
        self.notes: list[str] = []
        self.tracker: Any = None
        self.scalar_every = 0
        self.scalar_gap_s, self.scalar_next_t = 0.0, 0.0  # the scalars' time floor (live/step_feed.py)
        self.rank = 0
        self.world_size = 1
        self.gather = RankGather(options.gather_timeout)
        # after the window: the analysis thread, the step at which the verdict is taken, what it needs
        self.analysis: WindowAnalysis | None = None
        self.measure_at = NEVER
        self.next_work = NEVER  # one comparison per batch end: memory sample or mid-run verdict due
        self.batch: Any = None  # the last profiled step's batch (for the trials), released after them
        self.batch_idx = 0
        self.cpu_start: CpuSnapshot | None = None
        self.cpu_end: CpuSnapshot | None = None
        self.window_ring: tuple[int, int] | None = None  # step_ms ring positions of the window's steps
        self.summary: TraceSummary | None = None
        self.phases: StepPhases | None = None
        self.measured: Evidence | None = None  # what the measurement stage found (once it ran)
        self.memory: MemorySampler | None = None
        self.picture: threading.Thread | None = None
        self.span_open = False  # steps beside this package's work (analysis, picture) until the picture is in
        self.ledger: LiveLedger | None = None  # the whole fit by part (live/ledger.py), from setup on
        self.worker: ChildWorker | None = None  # the torch-free child: trace analysis, picture
        self.midrun_report: Report | None = None
        self.report: Report | None = None
        self.autotune: Any = None  # live/autotune.py's Autotuner, with autotune=True only
        self.trainer: Any = None  # from train start, for the ledger-fed step ends (live/step_feed.py)
        self.pl_module: Any = None
        if options.autotune:
            from lightning_bottleneck.live.autotune import Autotuner

            self.autotune = Autotuner(verbose=options.verbose is not False)

    # ------------------------------------------------------------------ start and end
    def setup(self, trainer: pl.Trainer) -> None:
        """Where the traces and the report go; the whole-fit ledger from here on."""
        log_dir = Path(trainer.log_dir or trainer.default_root_dir)  # collective under DDP: all ranks call it
        self.rank = trainer.global_rank
        self.trace_dir = Path(self.options.output_dir) if self.options.output_dir else log_dir / TRACE_SUBDIR
        self.report_file = (
            Path(self.options.report_path) if self.options.report_path else log_dir / REPORT_FILENAME
        )
        self.ledger = LiveLedger.install(trainer, trainer.lightning_module, self.owner)
        # The torch-free child starts now (the training thread: the parent-death signal follows it), warm when the
        # window closes. A CPU step on every core waits for it here, before the loader's workers and the steps, in
        # the ledger's DIAGNOSIS (as setup's time it read as the fit's: worker_restart predicted 9.00x for 34.68x).
        self.worker = ChildWorker.start(warm_text=not has_tensorboard_logger(trainer))
        if waits_for_child(trainer.strategy.root_device.type):
            with self.ledger.diagnosis if self.ledger is not None else contextlib.nullcontext():
                self.worker.wait_ready()

    def train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Read the run's configuration, install the sync hooks, set up the gather, start the window."""
        from lightning_bottleneck.live.run_inspection import environment, run_config

        self.trainer, self.pl_module = trainer, pl_module
        self.config = run_config(trainer, pl_module)
        self.env = environment(trainer, self.config)
        every = self.options.log_every_n_steps
        self.scalar_gap_s = SCALARS_MIN_GAP_S if every is None else 0.0  # an explicit cadence is kept exactly
        every = getattr(trainer, "log_every_n_steps", 50) if every is None else every
        self.scalar_every = every if trainer.loggers else 0
        self.world_size = trainer.world_size
        self.memory = memory_sampler(trainer)
        self.next_work = self.memory.next_step if self.memory is not None else NEVER
        if self.options.track_syncs:
            from lightning_bottleneck.live.sync_hooks import SyncTracker

            self.tracker = SyncTracker(device_type=self.config.accelerator)
            self.tracker.install()
        self.gather.setup()  # collective (every rank runs on_train_start): the gather's gloo group
        assert self.trace_dir is not None
        cuda = trainer.strategy.root_device.type == "cuda" and torch.cuda.is_available()
        self.window.start(self.trace_dir, worker_name(self.rank), cuda)
        self.profiling = True
        self.phase_hooks()

    def exception(self, exception: BaseException) -> None:
        """Remember what ended the fit: an OOM is evidence, anything else a note."""
        if is_oom(exception):
            self.oom = f"{type(exception).__name__}: {exception}"
        else:
            self.notes.append(exit_note(exception))

    def release(self, fit_over: bool = True) -> None:
        """Undo everything, never raising: labels and profiler (a partial window is discarded), patches, the
        analysis thread (joined), the picture thread, the kept batch; once the fit is over (its end or exception,
        not a callback disabled while the fit goes on), the workers of what autotune put in the fit loop."""
        self.profiling = False
        if fit_over and self.autotune is not None:
            with contextlib.suppress(Exception):
                self.autotune.close()
            self.autotune.threads.restore()  # the user's intra-op threads (never raises)
        self.next_work = NEVER
        self.batch = None
        analysis = self.analysis
        if analysis is not None:
            with contextlib.suppress(Exception):
                analysis.close()  # kills its child process if it still runs
        with contextlib.suppress(Exception):
            self.join_picture()
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.close()
        back_to_hooks(self)
        if self.memory is not None:
            self.memory.close()
        self.trainer = self.pl_module = None
        ledger, self.ledger = self.ledger, None
        if ledger is not None:
            ledger.uninstall()
        self.window.release()
        tracker, self.tracker = self.tracker, None
        if tracker is not None:
            tracker.uninstall()
        self.phase_hooks(force_on=True)

    def phase_hooks(self, force_on: bool = False) -> None:
        """The owner's phase-label hooks run only while the torch profiler runs (:mod:`.phase_hooks`); back in
        place when the fit ends, on every path."""
        on = force_on or self.window.prof is not None
        if on != self.phase_hooks_on and self.owner is not None:
            self.phase_hooks_on = on
            set_phase_hooks(self.owner, on)

    # ------------------------------------------------------------------ per step (hot path)
    def batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """After the training step: window bookkeeping (inside it), due work and scalars (rarely)."""
        if self.profiling:
            self.batch, self.batch_idx = batch, batch_idx  # a reference, released after the trials
            if self.window.advance():
                self.profiling = False
                self.finish_window()
                go_hookless(self)  # the ledger times the steps from here on, when it can
            elif self.cpu_start is None and self.window.recording():
                self.window_started()
            self.phase_hooks()
        after_step(self, trainer, pl_module)

    def pause(self) -> None:
        """Time that is not training (validation): out of the step timing and the sync attribution."""
        self.timer.pause()
        if self.tracker is not None:
            self.tracker.pause()

    def resume(self) -> None:
        self.timer.resume()
        if self.tracker is not None:
            self.tracker.resume()

    # ------------------------------------------------------------------ the window and the mid-run verdict
    def window_started(self) -> None:
        """The profiler records from the next step on (warm-up): the busy-machine snapshot, the ring mark."""
        self.cpu_start = take_snapshot(threads=torch.get_num_threads())
        self.window_ring = (self.timer.step_ms.n, self.timer.step_ms.n)
        if self.ledger is not None:
            self.ledger.mark_window()

    def finish_window(self) -> None:
        """The profiling window just closed and its traces are written; training goes on.

        Its trace is read in a background thread; the verdict is taken at a later batch end (:meth:`due`)
        and published mid-run. Closing the window (the profiler's stop and trace export) is not training: the
        gap until the next batch is left out of the step timing, as the mid-run verdict's is (autotune's
        check timed a 135-200 ms export as a step of its "after" and called a 4x speed-up inconclusive).
        """
        self.timer.pause()
        self.cpu_end = take_snapshot(threads=torch.get_num_threads())
        if self.window_ring is not None:
            self.window_ring = (self.window_ring[0], self.timer.step_ms.n)
        if self.ledger is not None and self.cpu_start is not None:
            self.ledger.mark_window()
        if not self.window.trace_files:
            return
        if self.worker is None:  # started in setup; not when the run was set up some other way
            self.worker = ChildWorker.start()
        self.analysis = WindowAnalysis.start(self.window.trace_files[-1], self.rank, self.worker)
        # a single process looks at the thread at every batch end; DDP ranks all wait for the fixed step
        self.measure_at = NEVER if self.world_size == 1 else self.timer.steps + MIDRUN_DELAY_STEPS
        self.schedule(self.timer.steps + 1 if self.world_size == 1 else self.measure_at)

    def schedule(self, at: int) -> None:
        mem = self.memory.next_step if self.memory is not None else NEVER
        self.next_work = min(at, mem, self.autotune.switch_at if self.autotune is not None else NEVER)

    def due(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A memory sample or the mid-run verdict is due (rare: every few steps at most)."""
        steps = self.timer.steps
        if self.memory is not None and steps >= self.memory.next_step:
            self.memory.sample(steps)
        analysis = self.analysis
        pending = analysis is not None and self.measured is None
        if pending and (steps >= self.measure_at or (self.world_size == 1 and analysis.done)):  # type: ignore[union-attr]
            self.midrun_verdict(trainer, pl_module)
            pending = False
        if (
            self.autotune is not None and steps >= self.autotune.switch_at
        ):  # a mid-epoch switch (live/autotune.py)
            self.autotune.step(self, trainer)
        if self.span_open and (self.picture is None or not self.picture.is_alive()):
            self.span_open = False
            if self.ledger is not None:
                self.ledger.mark_window()
        if self.span_open or (pending and self.world_size == 1):
            self.schedule(steps + 1)  # the next batch end looks again
        else:
            self.schedule(self.measure_at if pending else NEVER)

    def midrun_verdict(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Take the window's analysis, run the measurement stage, diagnose, publish (global rank zero).

        The time this takes is not training: the gap until the next batch is left out of the step timing
        (as a validation run is) and the sync tracker does not count the trials' syncs."""
        self.timer.pause()
        if self.tracker is not None:
            self.tracker.pause()
        try:
            self.collect_analysis()
            self.run_measurements(trainer, pl_module)
        finally:
            # syncs cost nothing on a CPU run: counted until here (the sites' rates are per step counted)
            if self.tracker is not None:
                cpu_run = self.config is not None and self.config.accelerator == "cpu"
                self.tracker.uninstall() if cpu_run else self.tracker.resume()
        report = self.verdict(
            trainer, [self.summary] if self.summary else [], [], list(self.window.trace_files)
        )
        report.notes.append(midrun_note(self.timer.steps, trainer.global_step))
        self.midrun_report = report
        if trainer.is_global_zero:
            self.publish(trainer, report)
        if self.autotune is not None:  # the choice, and the switch where it can be made mid-epoch
            self.autotune.midrun(self, trainer)
        self.span_open = self.ledger is not None and self.cpu_start is not None

    def epoch_start(self) -> None:
        self.timer.epoch_start()
        if self.autotune is not None:
            self.autotune.epoch_start(self)

    def epoch_end(self, trainer: pl.Trainer) -> None:
        if self.autotune is not None:
            self.autotune.epoch_end(self, trainer)

    def collect_analysis(self) -> None:
        analysis = self.analysis
        if analysis is None or self.summary is not None:
            return
        try:
            self.summary, self.phases = analysis.result(JOIN_TIMEOUT_S)
            self.notes += analysis.notes  # the child process failed: analysed in-process
        except Exception as err:
            self.notes.append(f"the window's trace could not be analysed: {type(err).__name__}: {err}")

    def run_measurements(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.measured is not None:
            return
        measured = Evidence(  # the evidence so far; the stage adds what it measures
            summaries=[self.summary] if self.summary is not None else [],
            timing=self.timing(),
            config=self.config or RunConfig(),
            ledger=self.ledger_snapshot(),
            rank=self.rank,
        )
        try:
            measure(
                trainer,
                pl_module,
                self.options.measure,
                measured,
                outside_ms=self.outside_steps(),
                batch=self.batch,
                batch_idx=self.batch_idx,
                cpu_start=self.cpu_start,
                cpu_end=self.cpu_end,
                agree=self.gather.agree if self.world_size > 1 else None,
                **(self.autotune.probe_kwargs(trainer) if self.autotune is not None else {}),
            )
        finally:
            self.batch = None
        self.measured = measured
        self.notes += measured.notes

    def outside_steps(self) -> list[float]:
        """Always-on step times outside the profiled window (its steps cut out of the ring by position)."""
        ring = self.timer.step_ms
        return outside_steps(ring.values(), max(0, ring.n - ring.capacity), self.window_ring)

    # ------------------------------------------------------------------ the end of fit
    def finalize(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gather: bool = True) -> None:
        """Close the window, finish its analysis (and, on a normal end, the measurement stage if the run
        ended before the mid-run verdict), diagnose with the whole run's timing (every rank), publish
        (global rank zero) with what changed since the mid-run verdict."""
        self.finalized = True
        self.profiling = False
        self.next_work = NEVER
        window = self.window
        if window.labels:
            window.close_all()
        if window.running:
            if not window.done:
                self.notes.append(unfinished_window_note(self.timer.steps, window.options))
            window.stop(save=True)  # saves a partial active window, if any
            if self.cpu_start is not None and self.cpu_end is None:
                self.cpu_end = take_snapshot(threads=torch.get_num_threads())
        self.notes += window.notes  # a trace that could not be written (a full disk)
        sites = []
        if self.tracker is not None:
            sites = self.tracker.sites()
            self.tracker.uninstall()
            self.tracker = None
        self.collect_analysis()
        if self.summary is None and self.analysis is None and window.trace_files:
            self.summary, self.phases = analyse_trace_file(window.trace_files[-1], self.rank)
        if gather:  # a normal end: every rank gets here, so every rank runs the same plan
            self.run_measurements(trainer, pl_module)
        if self.measured is not None and self.summary is not None:  # against the whole run now
            self.measured.window_check = window_check(
                self.summary, self.outside_steps(), self.measured.contention
            )
        self.batch = None
        own = self.summary
        summaries = [own] if own is not None else []
        trace_files = list(window.trace_files)
        ledgers: list[FitLedger] | None = None  # this rank's alone, when the fit ended in an error
        if gather:
            busy = self.measured.contention if self.measured is not None else None
            busy_note = busy.note if busy is not None and busy.busy else None
            merged = merge_rank_summaries(
                self.gather, self.rank, own, window.trace_files, busy_note, self.ledger_snapshot()
            )
            if self.measured is not None:
                self.measured.busy_ranks = merged.busy_ranks
            summaries = merged.summaries
            trace_files += merged.trace_files
            self.notes += merged.notes
            ledgers = merged.ledgers
        autotune = self.autotune.result(self) if self.autotune is not None else None
        self.report = self.verdict(trainer, summaries, sites, trace_files, ledgers, autotune)
        against_midrun(self.midrun_report, self.report)
        if trainer.is_global_zero:
            self.publish(trainer, self.report)

    def timing(self) -> TimingStats:
        size = self.config.batch_size if self.config else None
        return self.timer.stats(float(size) if size else None, skip=self.window_ring)

    def ledger_snapshot(self) -> FitLedger | None:
        return self.ledger.snapshot() if self.ledger is not None else None

    def verdict(
        self,
        trainer: pl.Trainer,
        summaries: list[TraceSummary],
        sites: list[Any],
        trace_files: list[str],
        ledgers: list[FitLedger] | None = None,
        autotune: AutotuneRecord | None = None,
    ) -> Report:
        """The run's evidence as it stands (what the stage measured, and everything else the run saw), diagnosed by
        the same :func:`diagnose` the offline CLI runs; ``ledgers`` are every rank's fit ledgers (default: this
        rank's, as it stands now)."""
        if ledgers is None:
            own = self.ledger_snapshot()
            ledgers = [own] if own is not None else []
        evidence = dataclasses.replace(
            self.measured or Evidence(),
            summaries=summaries,
            timing=self.timing(),
            sync_sites=sites,
            memory=memory_stats(trainer),
            oom=self.oom,
            config=self.config or RunConfig(),
            environment=self.env,
            trace_files=trace_files,
            notes=list(self.notes),
            rank=trainer.global_rank,
            memory_trend=self.memory.trend() if self.memory is not None else None,
            ledger=merge_ranks(ledgers) if ledgers else None,
            ledger_ranks=list(ledgers),
            autotune=autotune,
        )
        return diagnose(evidence)

    def publish(self, trainer: pl.Trainer, report: Report) -> None:
        changed = picture_changed(self.midrun_report, report)  # the first verdict, or another than mid-run
        text_dir = text_to_child(trainer, self.trace_dir, self.worker, self.analysis is not None)
        written = publish(
            trainer,
            report,
            report_file=self.report_file,
            trace_dir=self.trace_dir,
            baseline=self.options.baseline,
            verbose=self.options.verbose,
            explicit_path=self.options.report_path is not None,
            owner=self.owner,
            unchanged=not changed,
            text_in_child=text_dir is not None,
        )
        publish_scalars(trainer, report)
        self.join_picture()
        # the image again at the end of fit only when the verdict or the first advice changed (~0.05 s), and
        # none without a profiled window (no per-step bars: the fit would wait at its end for the child
        # to draw the text that TensorBoard's Text tab and the HTML page already hold)
        image = changed and self.phases is not None
        file = written or self.report_file
        self.picture = publish_picture(trainer, report, self.phases, file, image, self.worker, text_dir)

    def join_picture(self) -> None:
        picture, self.picture = self.picture, None
        if picture is not None:
            picture.join(JOIN_TIMEOUT_S)
