"""``BottleneckCallback``: profile a window of training steps, classify the bottleneck, advise, report.

A table of Lightning hooks, each delegating in a few lines to :class:`~lightning_bottleneck.live.fit_run.FitRun`
(one fit's state: timing, the profiling window, sync hooks, the off-thread analysis, the measurement stage, the
verdicts and their publication). The verdict itself is the Trainer-free
:func:`~lightning_bottleneck.diagnose.diagnose` that the offline ``lightning-bottleneck analyze`` runs too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from lightning_bottleneck.live import options as opt
from lightning_bottleneck.live.fit_run import FitRun
from lightning_bottleneck.live.phase_hooks import REMOVABLE_HOOKS, reset_hooks
from lightning_bottleneck.live.profiler_window import stands_down
from lightning_bottleneck.live.run_options import RunOptions
from lightning_bottleneck.report import Report
from lightning_bottleneck.vocabulary import PHASE_BACKWARD, PHASE_TRAINING_STEP, PHASE_VALIDATION

F = TypeVar("F", bound=Callable[..., Any])


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
    the fetch of its batch. After the window the callback's batch hooks leave Lightning's hook calls and the fit
    ledger times each step (two ``time.perf_counter`` reads); on a CPU run the sync hooks are taken out after the
    mid-run verdict (a CPU tensor's read costs nothing).
    A few steps after the window it prints a verdict on global rank zero (training goes on); at the end of
    ``fit`` (also when fit dies of an exception) it refreshes it, writes a JSON report and an HTML page, and
    puts the verdict, evidence and advice in TensorBoard next to the traces in the PyTorch Profiler tab.

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
            name the user's line (about a microsecond per such call; nothing for other code); on a CPU run, where
            they cost nothing, until the mid-run verdict.
        log_every_n_steps: how often to log ``bottleneck/*`` scalars; ``None`` follows the Trainer's
            ``log_every_n_steps``, at most twice a second; ``0`` turns scalars off.
        output_dir: where traces go; default ``<log_dir>/bottleneck`` (a run in TensorBoard's profiler tab).
        report_path: the JSON report; default ``<log_dir>/bottleneck_report.json``.
        verbose: what global rank zero prints: ``None`` (default) the short answer (at most 12 lines: the verdict,
            the fit, the evidence that decided it, each advice with its figure, at most three notes), ``True``
            every evidence line, note and the reason behind each figure, ``False`` nothing (the report and the
            TensorBoard text are written either way).
        gather_timeout: seconds global rank zero waits for the other ranks' summaries at the end of fit
            (multi-process strategies); ranks that miss it are listed as missing in the report.
        baseline: a previous run's ``bottleneck_report.json``. After one change, the new report says whether
            it helped (median step time before vs after, beyond run-to-run noise) so the change can be
            kept or reverted; the comparison lands in ``metrics["comparison"]`` and the notes.
        probe_loader: after the window, time the train DataLoader at a ladder of worker counts (outside the
            training loop) when data wait or epoch-start stalls matter, so the input advice is measured.
        loader_budget_s: seconds the loader probe may take; 0 turns it off; ``None`` (automatic): 3 s, taken
            from one pool of 1% of the projected fit shared by every part of the measurement, so a short run
            is not slowed by its own diagnosis.
        trial_budget_s: seconds of trial steps on the live model (bf16/fp16 autocast, matmul precision,
            ``channels_last``, ``torch.compile``) when compute or overhead matter; 0 turns them off; ``None``:
            5 s, from the same pool after the loader probe.
        compile_budget_s: seconds ``torch.compile`` may take in the trials; 0 skips it; ``None``: 120 s, at most
            what is left of the pool.
        autotune: apply the loader probe's measured DataLoader setting to this fit, keep it only when faster
            beyond noise, else switch back (docs/callback.md#autotune). Off by default.

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
        verbose: bool | None = None,
        gather_timeout: float = 120.0,
        baseline: str | None = None,
        probe_loader: bool = True,
        loader_budget_s: float | None = None,
        trial_budget_s: float | None = None,
        compile_budget_s: float | None = None,
        autotune: bool = False,
    ) -> None:
        super().__init__()
        self.wait = opt.check_int("wait", wait, 0)
        self.warmup = opt.check_int("warmup", warmup, 0)
        self.active = opt.check_int("active", active, 1)
        self.repeat = opt.check_int("repeat", repeat, 1)
        self.skip_first = opt.check_int("skip_first", skip_first, 0)
        self.record_shapes = opt.check_bool("record_shapes", record_shapes)
        self.profile_memory = opt.check_bool("profile_memory", profile_memory)
        self.with_stack = opt.check_bool("with_stack", with_stack)
        self.track_syncs = opt.check_bool("track_syncs", track_syncs)
        self.log_every_n_steps = (
            None if log_every_n_steps is None else opt.check_int("log_every_n_steps", log_every_n_steps, 0)
        )
        self.output_dir = opt.check_path("output_dir", output_dir)
        self.report_path = opt.check_path("report_path", report_path)
        self.baseline = opt.check_path("baseline", baseline)
        self.verbose = opt.check_verbose(verbose)
        self.gather_timeout = opt.check_timeout("gather_timeout", gather_timeout)
        self.probe_loader = opt.check_bool("probe_loader", probe_loader)
        self.loader_budget_s = opt.check_seconds(
            "loader_budget_s", loader_budget_s, "0 turns the loader probe off", auto=True
        )
        self.trial_budget_s = opt.check_seconds(
            "trial_budget_s", trial_budget_s, "0 turns the trials off", auto=True
        )
        self.compile_budget_s = opt.check_seconds(
            "compile_budget_s",
            compile_budget_s,
            "on top of trial_budget_s; 0 skips the torch.compile trial",
            auto=True,
        )
        self.autotune = opt.check_bool("autotune", autotune)
        self._reset()

    # ------------------------------------------------------------------ state
    def _reset(self) -> None:
        reset_hooks(self, self.autotune)
        self._disabled = False
        self._active_fit = False
        self._run = FitRun(RunOptions.of(self), owner=self)
        self._labels = self._run.labels  # hot-path alias: a non-empty label stack means labels to close

    @property
    def report(self) -> Report | None:
        """The end-of-fit report (``None`` before the end of the first fit)."""
        return self._run.report

    @property
    def midrun_report(self) -> Report | None:
        """The verdict taken a few steps after the profiling window, while training went on."""
        return self._run.midrun_report

    @property
    def schedule_length(self) -> int:
        """Training steps until the last profiled step of the last cycle."""
        return self._run.window.options.length

    def _disable(self, why: str) -> None:
        rank_zero_warn(
            f"BottleneckCallback disabled itself after an internal error ({why}); training goes on."
        )
        self._disabled = True
        self._run.release(fit_over=False)  # a fit loop iterator autotune put in place goes on delivering

    # ------------------------------------------------------------------ setup / teardown / errors
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
        report = self._run.report
        self._reset()
        self._run.report = report  # the last fit's report stays readable until this fit's is taken
        if stands_down(self, trainer):  # another BottleneckCallback, or the user's own profiler session
            self._disabled = True
            return
        self._setup_paths(trainer)

    @_guarded
    def _setup_paths(self, trainer: pl.Trainer) -> None:
        self._run.setup(trainer)
        self._active_fit = True

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        try:
            self._finish_fit(trainer, pl_module)
        finally:
            self._run.release()
            self._run.gather.teardown()
            self._active_fit = False

    @_guarded
    def _finish_fit(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._active_fit and not self._run.finalized:
            self._run.finalize(trainer, pl_module)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if not self._active_fit:
            return
        try:
            self._run.exception(exception)
            if not self._run.finalized and not self._disabled:
                self._run.finalize(trainer, pl_module, gather=False)
        except Exception as err:
            rank_zero_warn(f"BottleneckCallback could not write its report after the error: {err}")
        finally:
            self._run.release()

    # ------------------------------------------------------------------ training hooks
    @_guarded
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._active_fit:
            return
        if stands_down(self, trainer, duplicates=False):  # a profiler started since setup
            self._active_fit, self._disabled = False, True
            return
        self._run.train_start(trainer, pl_module)

    @_guarded
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._run.epoch_start()

    @_guarded
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._active_fit:  # in Lightning's hook calls with autotune=True only (phase_hooks.AUTOTUNE_HOOKS)
            self._run.epoch_end(trainer)

    # The two hooks of every step guard themselves inline (as `_guarded` does): one Python frame less each, on
    # the always-on path.
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._disabled:
            return
        try:
            run = self._run
            run.timer.batch_start()
            if self._labels or run.profiling:  # one test outside the window
                run.window.enter(PHASE_TRAINING_STEP)
        except Exception as err:
            self._disable(f"on_train_batch_start: {type(err).__name__}: {err}")

    @_guarded
    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor
    ) -> None:
        self._run.window.enter(PHASE_BACKWARD)

    @_guarded
    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._run.window.enter(None)

    @_guarded
    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if self._run.profiling:
            self._run.window.open_optimizer_step()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._disabled:
            return
        try:
            run = self._run
            run.timer.batch_end()
            if self._labels:
                run.window.enter(None)
            run.batch_end(trainer, pl_module, batch, batch_idx)
        except Exception as err:
            self._disable(f"on_train_batch_end: {type(err).__name__}: {err}")

    # ------------------------------------------------------------------ validation never counts as training
    @_guarded
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not self._active_fit:
            return
        self._run.pause()
        self._run.window.enter(PHASE_VALIDATION)

    @_guarded
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not self._active_fit:
            return
        self._run.window.enter(None)
        self._run.resume()

    # ------------------------------------------------------------------ the end
    on_train_end = _finish_fit  # the verdict, report and pictures; teardown does it if training never ended

    # ------------------------------------------------------------------ checkpointing / spawning
    def __getstate__(self) -> dict[str, Any]:
        """Only the options travel (``ddp_spawn`` pickles callbacks); run state starts fresh in setup."""
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_") and k not in REMOVABLE_HOOKS}
        state["_report"] = self.report
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        report = state.pop("_report", None)
        self.__dict__.update(state)
        self._reset()
        self._run.report = report
