"""``BottleneckCallback``: profile a window of training steps, classify the bottleneck, advise, report.

The callback keeps the hooks and the options and delegates: the profiling window to
:mod:`~lightning_bottleneck.profiler_window`, step timing to :mod:`~lightning_bottleneck.timing`, sync
tracking to :mod:`~lightning_bottleneck.sync_hooks`, the rank merge to :mod:`~lightning_bottleneck.distributed`,
the verdict to :func:`~lightning_bottleneck.diagnose.diagnose` (the same Trainer-free analysis the offline
``lightning-bottleneck analyze`` command runs) and the output to :mod:`~lightning_bottleneck.publishing`.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.autoload import stands_down
from lightning_bottleneck.diagnose import diagnose
from lightning_bottleneck.distributed import RankGather, merge_rank_summaries
from lightning_bottleneck.evidence import Evidence, RunConfig
from lightning_bottleneck.profiler_window import ProfilerWindow, WindowOptions, worker_name
from lightning_bottleneck.publishing import exit_note, publish
from lightning_bottleneck.report import Report
from lightning_bottleneck.timing import StepTimer
from lightning_bottleneck.vocabulary import (
    NAMESPACE,
    PHASE_BACKWARD,
    PHASE_TRAINING_STEP,
    PHASE_VALIDATION,
)

F = TypeVar("F", bound=Callable[..., Any])

REPORT_FILENAME = "bottleneck_report.json"
TRACE_SUBDIR = "bottleneck"  # a run in torch-tb-profiler's run list: <log_dir>/bottleneck


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


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MisconfigurationException(
            f"BottleneckCallback(`{name}`) must be an integer >= {minimum}, got {value!r}."
        )
    return value


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise MisconfigurationException(f"BottleneckCallback(`{name}`) must be True or False, got {value!r}.")
    return value


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
    ) -> None:
        super().__init__()
        self.wait = _check_int("wait", wait, 0)
        self.warmup = _check_int("warmup", warmup, 0)
        self.active = _check_int("active", active, 1)
        self.repeat = _check_int("repeat", repeat, 1)
        self.skip_first = _check_int("skip_first", skip_first, 0)
        self.record_shapes = _check_bool("record_shapes", record_shapes)
        self.profile_memory = _check_bool("profile_memory", profile_memory)
        self.with_stack = _check_bool("with_stack", with_stack)
        self.track_syncs = _check_bool("track_syncs", track_syncs)
        if log_every_n_steps is not None:
            _check_int("log_every_n_steps", log_every_n_steps, 0)
        self.log_every_n_steps = log_every_n_steps
        for name, value in (("output_dir", output_dir), ("report_path", report_path), ("baseline", baseline)):
            if value is not None and not isinstance(value, (str, os.PathLike)):
                raise MisconfigurationException(
                    f"BottleneckCallback(`{name}`) must be a path (str) or None, got {value!r}."
                )
        self.output_dir = output_dir
        self.report_path = report_path
        self.baseline = baseline
        self.verbose = _check_bool("verbose", verbose)
        if (
            isinstance(gather_timeout, bool)
            or not isinstance(gather_timeout, (int, float))
            or gather_timeout <= 0
        ):
            raise MisconfigurationException(
                f"BottleneckCallback(`gather_timeout`) must be a positive number of seconds, got {gather_timeout!r}."
            )
        self.gather_timeout = float(gather_timeout)
        self.report: Report | None = None
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
        self._gather = RankGather(self.gather_timeout)

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
            if _is_oom(exception):
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
        """Undo everything, never raising: labels and profiler (a partial window is discarded), patches."""
        self._profiling = False
        self._window.release()
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
        from lightning_bottleneck.run_inspection import environment, run_config

        self._config = run_config(trainer, pl_module)
        self._env = environment(trainer, self._config)
        every = (
            getattr(trainer, "log_every_n_steps", 50)
            if self.log_every_n_steps is None
            else self.log_every_n_steps
        )
        self._scalar_every = every if trainer.loggers else 0
        if self.track_syncs:
            from lightning_bottleneck.sync_hooks import SyncTracker

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
        if self._profiling and self._window.advance():
            self._profiling = False
            self._finish_window(trainer, pl_module)
        if self._scalar_every and self._timer.steps % self._scalar_every == 0:
            self._log_scalars(trainer)

    def _finish_window(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The profiling window just closed and its traces are written; training goes on.

        The seam for work that follows the window (a mid-run verdict, loader and model trials): nothing
        here yet, the verdict comes at the end of fit.
        """

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
        """Close the window, build the evidence, diagnose (every rank), publish (global rank zero)."""
        self._finalized = True
        self._profiling = False
        window = self._window
        if window.labels:
            window.close_all()
        if window.prof is not None:
            if not window.done:
                self._notes.append(
                    f"Training stopped after {self._timer.steps} step(s), before the profiling schedule "
                    f"(skip_first={self.skip_first}, wait={self.wait}, warmup={self.warmup}, "
                    f"active={self.active}) completed; lower wait/warmup for short runs."
                )
            window.stop(save=True)  # saves a partial active window, if any
        self._notes += window.notes  # a trace that could not be written (a full disk)
        sites = []
        if self._tracker is not None:
            sites = self._tracker.sites()
            self._tracker.uninstall()
            self._tracker = None
        from lightning_bottleneck.run_inspection import memory_stats

        own = self._own_summary()
        summaries = [own] if own is not None else []
        trace_files = list(window.trace_files)
        if gather:
            merged = merge_rank_summaries(self._gather, self._rank, own, window.trace_files)
            summaries = merged.summaries
            trace_files += merged.trace_files
            self._notes += merged.notes
        evidence = Evidence(
            summaries=summaries,
            timing=self._timer.stats(
                float(self._config.batch_size) if self._config and self._config.batch_size else None
            ),
            sync_sites=sites,
            memory=memory_stats(trainer),
            oom=self._oom,
            config=self._config or RunConfig(),
            environment=self._env,
            trace_files=trace_files,
            notes=self._notes,
            rank=trainer.global_rank,
        )
        self.report = diagnose(evidence)
        if trainer.is_global_zero:
            self._publish(trainer, self.report)

    def _own_summary(self) -> TraceSummary | None:
        """This rank's trace summary: the last cycle's trace (the latest warm state), or None."""
        if not self._window.trace_files:
            return None
        from lightning_bottleneck.analysis.trace_file import summarize_file

        summary = summarize_file(self._window.trace_files[-1])
        summary.rank = self._rank
        summary.host = socket.gethostname()
        return summary

    def _publish(self, trainer: pl.Trainer, report: Report) -> None:
        publish(
            trainer,
            report,
            report_file=self._report_file,
            trace_dir=self._trace_dir,
            baseline=self.baseline,
            verbose=self.verbose,
            explicit_path=self.report_path is not None,
            owner=self,
        )

    # ------------------------------------------------------------------ checkpointing / spawning
    def __getstate__(self) -> dict[str, Any]:
        """Only the options travel (``ddp_spawn`` pickles callbacks); run state starts fresh in setup."""
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        state["report"] = self.report
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()


def _is_oom(exception: BaseException) -> bool:
    oom_types: tuple[type[BaseException], ...] = (torch.cuda.OutOfMemoryError,)
    if hasattr(torch, "OutOfMemoryError"):
        oom_types += (torch.OutOfMemoryError,)
    return isinstance(exception, oom_types) or "out of memory" in str(exception).lower()
