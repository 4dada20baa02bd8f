"""Always-on timing of the whole ``fit`` by part: the live side of :class:`~lightning_bottleneck.analysis.ledger.FitLedger`.

How it sees the fit
-------------------
Every hook and loop stage Lightning runs goes through ``trainer.profiler.profile(action)`` (or
``start``/``stop``): ``[Callback]<state_key>.<hook>``, ``[LightningModule]<cls>.<hook>``,
``[Strategy]<cls>.<hook>``, ``run_training_epoch``, ``run_training_batch``,
``[_TrainingEpochLoop].train_dataloader_next``, ``[_EvaluationLoop].val_next``, ``save_checkpoint``. The
Trainer reads ``trainer.profiler`` at call time, so :class:`~.ledger_profiler.LedgerProfiler`, installed in
the callback's ``setup``, sees them all. It forwards every call to the user's profiler
(``PassThroughProfiler`` by default, then nothing is forwarded at all), so
``Trainer(profiler="simple" | "advanced")`` keeps its output.

What has no action of its own is bounded by instance attributes set for the fit and removed at its end:
``val_loop.run`` (a validation run or the sanity check, including its ``iter(val_dataloader)``), ``fit_loop.run``
(the fit loop outside the epochs: ``setup_data``, samplers, epoch hooks), the logger connector's metric
updates and ``log_metrics``, the epoch loop's ``logger.save()``, and ``LightningModule.log`` / ``log_dict``.

Accounting
----------
A stack of *slots* (a slot is a part, or one callback hook inside :attr:`FitPart.CALLBACKS`). Each boundary
reads ``perf_counter`` once and adds the time since the previous boundary to the slot running until then, so
every second between ``setup`` and the snapshot lands in exactly one slot: **self time**, never nested time.
Inside a training epoch the base slot is *between steps* (``UNACCOUNTED``): a step runs from its batch fetch
to the end of ``LightningModule.on_train_batch_end``, and whatever the loop does outside that (and outside
validation, logging, checkpointing, callbacks) is the ledger's unaccounted time. Hooks nobody overrides
(Lightning calls every callback's hooks, overridden or not) cost one dict lookup and two no-op calls:
cheaper than ``PassThroughProfiler``'s generator-based ``profile`` they replace.

This package's own work (its callback's hooks: the profiling window, the mid-run verdict and measurement
stage) is the part :attr:`FitPart.DIAGNOSIS`.

Where the pieces are
--------------------
This module installs the ledger for the fit (profiler, bounds) and reads the figures off it. The clock and
its generic contexts are :mod:`~lightning_bottleneck.live.ledger_clock`; which part each action name belongs
to is :mod:`~lightning_bottleneck.live.ledger_actions`; the profiler that stands in for ``trainer.profiler``
is :mod:`~lightning_bottleneck.live.ledger_profiler`.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import warnings
from collections.abc import Callable
from time import perf_counter
from typing import Any

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.profilers import Profiler

from lightning_bottleneck.analysis.ledger import FitLedger, HookTime
from lightning_bottleneck.categories import FitPart
from lightning_bottleneck.live.ledger_actions import ActionClassifier
from lightning_bottleneck.live.ledger_clock import PART_SLOT, SlotClock, StepFeed, Timed
from lightning_bottleneck.live.ledger_profiler import LedgerProfiler
from lightning_bottleneck.thresholds import NO_CHANGE_BAND

__all__ = ["LiveLedger"]

#: Logger-connector methods that update/compute logged metrics or hand them to the loggers (Lightning 2.x;
#: a method a version lacks is skipped). ``on_batch_start`` is not one (a batch-size read).
_CONNECTOR_METHODS = (
    "update_train_step_metrics",
    "update_train_epoch_metrics",
    "update_eval_step_metrics",
    "update_eval_epoch_metrics",
    "log_eval_end_metrics",
    "on_epoch_end",
    "on_batch_end",
    "epoch_end_reached",
    "_evaluation_epoch_end",
)


#: The parts that recur with every training step: their time per step outside the disturbed span (the
#: profiling window and the trace's analysis) is the reference for the span's steps.
PER_STEP_PARTS = (FitPart.TRAINING_STEPS, FitPart.LOGGING, FitPart.CALLBACKS, FitPart.UNACCOUNTED)
#: Fewest steps outside the disturbed span that make a reference: the profiler schedule's default wait and
#: warm-up before the window (5 + 5 steps) give 10 by the mid-run verdict; a mean of 10 steps moves ~10% for one
#: step at twice the others. Fewer: no extra is booked (the span's time stays training's: conservative).
DISTURBED_REFERENCE_MIN_STEPS = 10


class LiveLedger:
    """One fit's ledger: installs the profiler and the bounds at ``setup``, :meth:`snapshot` any time,
    :meth:`uninstall` on every way out (idempotent, never raises)."""

    def __init__(self, trainer: Any, pl_module: Any, owner: Callback) -> None:
        self.trainer = trainer
        self.pl_module = pl_module
        self.owner = owner
        self.clock = c = SlotClock()
        i = PART_SLOT
        self.s_step = i[FitPart.TRAINING_STEPS]
        self.s_between = i[FitPart.UNACCOUNTED]
        self.s_fetch = c.new_slot(FitPart.TRAINING_STEPS, "train fetch")
        self.s_train_steps = c.new_slot(FitPart.TRAINING_STEPS, "training steps (count)")
        self.s_epoch = c.new_slot(FitPart.EPOCH_BOUNDARIES, "epoch start")
        self.s_first_fetch = c.new_slot(FitPart.EPOCH_BOUNDARIES, "first fetch of the epoch")
        self.s_fit_loop = c.new_slot(FitPart.EPOCH_BOUNDARIES, "fit loop")
        self.s_val = c.new_slot(FitPart.VALIDATION, "validation run")
        self.s_val_fetch = c.new_slot(FitPart.VALIDATION, "val fetch")
        self.s_val_steps = c.new_slot(FitPart.VALIDATION, "validation batches (count)")
        self.s_sanity = c.new_slot(FitPart.SANITY_CHECK, "sanity check")
        self.s_sanity_fetch = c.new_slot(FitPart.SANITY_CHECK, "sanity fetch")
        self.s_sanity_steps = c.new_slot(FitPart.SANITY_CHECK, "sanity batches (count)")
        self.s_save = c.new_slot(FitPart.CHECKPOINTING, "save_checkpoint")
        self.s_ckpt_hooks = c.new_slot(FitPart.CHECKPOINTING, "checkpoint callbacks")
        self.s_log = c.new_slot(FitPart.LOGGING, "logger connector")
        self.s_log_metrics = c.new_slot(FitPart.LOGGING, "log_metrics")
        self.s_self_log = c.new_slot(FitPart.LOGGING, "self.log")
        self.s_diagnosis = i[FitPart.DIAGNOSIS]
        self.diagnosis = Timed(c, self.s_diagnosis)  # this package's work inside a step (live/step_feed.py)
        # told each training step's start and end once the callback's batch hooks are out (live/step_feed.py)
        self.feed: StepFeed | None = None
        self.epoch_depth = -1
        self.first_fetch = False
        self.in_sanity = False
        self.validation_runs = 0
        self.validation_wall_s = 0.0
        self.validation_run_walls: list[float] = []  # each validation run's wall seconds (8 bytes a run)
        self.save_min_s: float | None = None  # the fastest and slowest checkpoint save (wall seconds)
        self.save_max_s = 0.0
        self.save_s = 0.0  # the saves' wall seconds, summed (their min <= mean <= max, unlike the part's)
        self.actions = ActionClassifier(self)  # action name -> slot, and the other callbacks' hook slots
        self._patched: list[tuple[Any, str]] = []
        self._compile_s0 = _compile_seconds()
        # (per-step parts' seconds, training steps) when the profiling window started recording, when it
        # closed and when the mid-run picture was drawn (the disturbed span's end)
        self._window_marks: list[tuple[dict[FitPart, float], int]] = []
        self.user_profiler: Profiler = trainer.profiler
        self.profiler = LedgerProfiler(self.user_profiler, self)
        self.installed = False

    # ------------------------------------------------------------------ install / uninstall
    @classmethod
    def install(cls, trainer: Any, pl_module: Any, owner: Callback) -> LiveLedger | None:
        """The ledger for this fit, installed; None (one warning, the callback goes on without a ledger) when
        this Lightning version cannot take it, e.g. a read-only ``trainer.profiler``."""
        ledger = None
        try:
            ledger = cls(trainer, pl_module, owner)
            ledger._install()
        except Exception as err:
            if ledger is not None:
                ledger.uninstall()
            warnings.warn(
                f"lightning-bottleneck: no fit ledger for this run ({type(err).__name__}: {err}); "
                "the rest of the analysis goes on.",
                stacklevel=2,
            )
            return None
        return ledger

    def _install(self) -> None:
        trainer = self.trainer
        self.actions.index_callbacks()
        trainer.profiler = self.profiler
        self.installed = True
        fit_loop = trainer.fit_loop
        self._wrap(fit_loop, "run", self._timed(self.s_fit_loop))
        self._wrap(fit_loop.epoch_loop.val_loop, "run", self._validation_run)
        self._wrap(fit_loop.epoch_loop, "_save_loggers_on_train_batch_end", self._timed(self.s_log))
        connector = trainer._logger_connector
        for name in _CONNECTOR_METHODS:
            self._wrap(connector, name, self._timed(self.s_log))
        self._wrap(connector, "log_metrics", self._timed(self.s_log_metrics))
        if not _compiled(self.pl_module):  # torch.compile would trace the wrapper inside the step
            for name in ("log", "log_dict"):
                self._wrap(self.pl_module, name, self._timed(self.s_self_log, late=(self.pl_module, name)))

    def uninstall(self) -> None:
        """Put the user's profiler back and remove every bound; safe to call twice, never raises."""
        if self.installed:
            self.installed = False
            with contextlib.suppress(Exception):
                if self.trainer.profiler is self.profiler:
                    self.trainer.profiler = self.user_profiler
        patched, self._patched = self._patched, []
        for obj, name in reversed(patched):
            with contextlib.suppress(Exception):
                if name in vars(obj):
                    delattr(obj, name)

    def _wrap(
        self,
        obj: Any,
        name: str,
        around: Callable[[Callable[..., Any]], Callable[..., Any]],
    ) -> None:
        """Shadow ``obj.name`` by an instance attribute for the fit (skipped when the version lacks it)."""
        original = getattr(obj, name, None)
        if original is None or not callable(original) or name in vars(obj):
            return
        wrapped = functools.wraps(original)(around(original))
        object.__setattr__(obj, name, wrapped)  # nn.Module's __setattr__ is not needed for a function
        self._patched.append((obj, name))

    def _timed(
        self, slot: int, late: tuple[Any, str] | None = None
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A wrapper that times its call in ``slot``: :class:`Timed`'s clock moves inlined in one frame (a
        ``with`` would add two more calls: these run several times a step).

        ``late=(obj, name)``: the class's method is looked up at each call, not bound now, so that a patch of the
        class made after this (the sync tracker's ``LightningModule.log``, installed at train start, taken out
        after the mid-run verdict on a CPU run) still runs."""
        c = self.clock
        cls, name = (type(late[0]), late[1]) if late is not None else (None, "")
        obj = late[0] if late is not None else None

        def around(fn: Callable[..., Any]) -> Callable[..., Any]:
            def timed(*args: Any, **kwargs: Any) -> Any:
                now = perf_counter()
                c.acc[c.cur] += now - c.t
                c.t = now
                c.stack.append(c.cur)
                c.cur = slot
                c.calls[slot] += 1
                try:
                    if cls is None:
                        return fn(*args, **kwargs)
                    return getattr(cls, name)(obj, *args, **kwargs)
                finally:
                    now = perf_counter()
                    c.acc[c.cur] += now - c.t
                    c.t = now
                    if c.stack:
                        c.cur = c.stack.pop()

            return timed

        return around

    def _validation_run(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            sanity = bool(getattr(self.trainer, "sanity_checking", False))
            calls = self.clock.calls
            before = calls[self.s_val_steps]
            self.in_sanity = sanity
            t0 = perf_counter()
            self.clock.enter(self.s_sanity if sanity else self.s_val)
            try:
                return fn(*args, **kwargs)
            finally:
                self.clock.exit()
                self.in_sanity = False
                if not sanity and calls[self.s_val_steps] > before:
                    self.validation_runs += 1
                    # nested time: the logging, checkpoint saves and callbacks' hooks a validation run triggers
                    wall = perf_counter() - t0
                    self.validation_wall_s += wall
                    self.validation_run_walls.append(wall)

        return run

    # ------------------------------------------------------------------ classification (once per action name)
    def classify(self, name: str) -> Any:
        """The context for one action name (cached by the profiler). Never raises: anything unexpected is
        left to the slot around it (:class:`~lightning_bottleneck.live.ledger_actions.ActionClassifier`)."""
        return self.actions.classify(name)

    # ------------------------------------------------------------------ the figures
    def _per_step_parts(self) -> tuple[dict[FitPart, float], int]:
        c = self.clock
        c.flush()
        parts = dict.fromkeys(PER_STEP_PARTS, 0.0)
        for slot, seconds in enumerate(c.acc):
            if c.parts[slot] in parts:
                parts[c.parts[slot]] += seconds
        return parts, c.calls[self.s_train_steps]

    def mark_window(self) -> None:
        """Called when the profiling window starts recording, when it closes and at the first batch end after
        the mid-run verdict's picture is drawn: the steps from the first mark to the last ran beside this
        package's work (torch.profiler inside the steps, the trace's analysis and the picture's drawing in a
        child process on the same cores), and their extra time is this package's, not training's (see
        :meth:`snapshot`)."""
        if len(self._window_marks) < 3:
            self._window_marks.append(self._per_step_parts())

    def _window_extra_s(self, parts: dict[FitPart, float], train_steps: int) -> dict[FitPart, float]:
        """Per part recurring with the steps (:data:`PER_STEP_PARTS`), the seconds the steps of the disturbed
        span took beyond as many steps at the part's mean per step outside it; nothing until the window
        closed and DISTURBED_REFERENCE_MIN_STEPS steps ran outside the span."""
        if len(self._window_marks) < 2:
            return {}
        marks = self._window_marks
        (p0, n0), (p_end, n_end) = marks[0], marks[-1]
        outside_n = train_steps - (n_end - n0)
        if n_end <= n0 or outside_n < DISTURBED_REFERENCE_MIN_STEPS:
            return {}
        out: dict[FitPart, float] = {}
        for part in PER_STEP_PARTS:
            per_step = (parts.get(part, 0.0) - (p_end.get(part, 0.0) - p0.get(part, 0.0))) / outside_n
            extra = 0.0
            # each stretch on its own (the profiled steps, then those beside the analysis): the window's few slow
            # steps are not diluted by the longer stretch after it
            for (pa, na), (pb, nb) in zip(marks, marks[1:]):
                inside_s, reference_s = pb.get(part, 0.0) - pa.get(part, 0.0), (nb - na) * per_step
                # a few % either way is the steps' own noise
                if inside_s > reference_s * (1.0 + NO_CHANGE_BAND):
                    extra += inside_s - reference_s
            if extra > 0:
                out[part] = min(parts.get(part, 0.0), extra)
        return out

    def snapshot(self) -> FitLedger:
        """The ledger from ``setup`` until now (the fit goes on). The extra time of the steps that ran beside
        this package's work (the profiled steps, the steps while the trace was analysed) is moved from the
        training steps, logging, callbacks and the loop to DIAGNOSIS, this package's part, so that the fit
        without the callback (what every speed-up is predicted for) does not carry it."""
        c = self.clock
        fit_s = c.flush()
        parts = dict.fromkeys(FitPart, 0.0)
        for slot, seconds in enumerate(c.acc):
            parts[c.parts[slot]] += seconds
        extras = self._window_extra_s(parts, c.calls[self.s_train_steps])
        # what is left of each part: its own figures (self.log's seconds, each hook's) keep their share of it
        kept = {p: (parts[p] - x) / parts[p] if parts[p] > 0 else 1.0 for p, x in extras.items()}
        for part, seconds in extras.items():
            parts[part] -= seconds
        extra = sum(extras.values())
        parts[FitPart.DIAGNOSIS] += extra
        compiled = min(max(0.0, _compile_seconds() - self._compile_s0), parts[FitPart.TRAINING_STEPS])
        parts[FitPart.TRAINING_STEPS] -= compiled
        parts[FitPart.COMPILE_WARMUP] += compiled
        hooks = {
            str(c.names[slot]): HookTime(c.acc[slot] * kept.get(FitPart.CALLBACKS, 1.0), c.calls[slot])
            for slot in self.actions.hook_slots.values()
            if c.calls[slot]
        }
        val_wait = c.acc[self.s_val_fetch]
        return FitLedger(
            fit_s=fit_s,
            parts=parts,
            train_steps=c.calls[self.s_train_steps],
            epochs=c.calls[self.s_epoch],
            validation_runs=self.validation_runs,
            validation_wall_s=self.validation_wall_s,
            validation_typical_s=statistics.median(self.validation_run_walls)
            if self.validation_run_walls
            else 0.0,
            validation_batches=c.calls[self.s_val_steps],
            validation_loader_wait_s=val_wait,
            validation_compute_s=max(0.0, parts[FitPart.VALIDATION] - val_wait),
            sanity_batches=c.calls[self.s_sanity_steps],
            checkpoint_saves=c.calls[self.s_save],
            save_min_s=self.save_min_s or 0.0,
            save_max_s=self.save_max_s,
            save_s=self.save_s,
            log_calls=c.calls[self.s_log_metrics],
            self_log_calls=c.calls[self.s_self_log],
            self_log_s=c.acc[self.s_self_log] * kept.get(FitPart.LOGGING, 1.0),
            hooks=hooks,
            profiled_extra_s=extra,
        )


def _compiled(pl_module: Any) -> bool:
    """Whether the LightningModule's steps run under torch.compile (``trainer.fit(torch.compile(model))``:
    Lightning keeps the compiler context on the module), where ``self.log`` is traced by dynamo."""
    return getattr(pl_module, "_compiler_ctx", None) is not None


def _compile_seconds() -> float:
    """Seconds torch.compile (dynamo) spent compiling so far in this process, 0 when not available."""
    try:
        from torch._dynamo.utils import compilation_time_metrics

        return float(sum(compilation_time_metrics.get("_compile.compile_inner", ())))
    except Exception:
        return 0.0
