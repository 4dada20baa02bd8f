"""Always-on timing of the whole ``fit`` by part: the live side of :class:`~lightning_bottleneck.analysis.ledger.FitLedger`.

How it sees the fit
-------------------
Every hook and loop stage Lightning runs goes through ``trainer.profiler.profile(action)`` (or
``start``/``stop``): ``[Callback]<state_key>.<hook>``, ``[LightningModule]<cls>.<hook>``,
``[Strategy]<cls>.<hook>``, ``run_training_epoch``, ``run_training_batch``,
``[_TrainingEpochLoop].train_dataloader_next``, ``[_EvaluationLoop].val_next``, ``save_checkpoint``. The
Trainer reads ``trainer.profiler`` at call time, so :class:`LedgerProfiler`, installed in the callback's
``setup``, sees them all. It forwards every call to the user's profiler (``PassThroughProfiler`` by default,
then nothing is forwarded at all), so ``Trainer(profiler="simple" | "advanced")`` keeps its output.

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
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import warnings
from collections.abc import Callable
from time import perf_counter
from typing import Any

from lightning.pytorch.callbacks import Callback, Checkpoint
from lightning.pytorch.profilers import PassThroughProfiler, Profiler

from lightning_bottleneck.analysis.ledger import FitLedger, HookTime
from lightning_bottleneck.categories import FitPart

__all__ = ["LedgerProfiler", "LiveLedger"]

_PARTS = list(FitPart)
_INDEX = {p: i for i, p in enumerate(_PARTS)}
#: Callback hooks that are part of saving a checkpoint whichever callback overrides them.
_CHECKPOINT_HOOKS = frozenset({"on_save_checkpoint", "state_dict"})
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


class _Clock:
    """Seconds per slot: ``cur`` runs now, ``stack`` holds the slots interrupted by nested ones."""

    __slots__ = ("acc", "calls", "cur", "names", "parts", "stack", "t", "t0")

    def __init__(self) -> None:
        self.acc: list[float] = []
        self.calls: list[int] = []
        self.parts: list[FitPart] = []
        self.names: list[str | None] = []
        for part in _PARTS:
            self.new_slot(part)
        self.stack: list[int] = []
        self.cur = _INDEX[FitPart.SETUP_TEARDOWN]
        self.t0 = self.t = perf_counter()

    def new_slot(self, part: FitPart, name: str | None = None) -> int:
        self.acc.append(0.0)
        self.calls.append(0)
        self.parts.append(part)
        self.names.append(name)
        return len(self.acc) - 1

    def enter(self, slot: int) -> None:
        now = perf_counter()
        self.acc[self.cur] += now - self.t
        self.t = now
        self.stack.append(self.cur)
        self.cur = slot
        self.calls[slot] += 1

    def exit(self) -> None:
        now = perf_counter()
        self.acc[self.cur] += now - self.t
        self.t = now
        if self.stack:
            self.cur = self.stack.pop()

    def set_level(self, depth: int, slot: int) -> None:
        """The slot that runs at nesting ``depth`` (when the slots above it have ended) becomes ``slot``."""
        if depth < 0:
            return
        if depth < len(self.stack):
            self.stack[depth] = slot
        elif depth == len(self.stack):
            now = perf_counter()
            self.acc[self.cur] += now - self.t
            self.t = now
            self.cur = slot

    def flush(self) -> float:
        now = perf_counter()
        self.acc[self.cur] += now - self.t
        self.t = now
        return now - self.t0


class _Null:
    """A hook nobody overrides, or an action of no interest: its time stays with the slot around it."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NULL = _Null()


class _Timed:
    """An action with a slot of its own (inlined enter/exit: this is the per-hook cost)."""

    __slots__ = ("clock", "slot")

    def __init__(self, clock: _Clock, slot: int) -> None:
        self.clock = clock
        self.slot = slot

    def __enter__(self) -> None:
        c = self.clock
        now = perf_counter()
        c.acc[c.cur] += now - c.t
        c.t = now
        c.stack.append(c.cur)
        c.cur = self.slot
        c.calls[self.slot] += 1

    def __exit__(self, *exc: object) -> None:
        c = self.clock
        now = perf_counter()
        c.acc[c.cur] += now - c.t
        c.t = now
        if c.stack:
            c.cur = c.stack.pop()


class _Save:
    """A checkpoint save: timed in its own slot like :class:`_Timed`, and each save's wall seconds widen the
    ledger's per-save spread (min, max: two floats, updated once a save)."""

    __slots__ = ("ledger", "t")

    def __init__(self, ledger: LiveLedger) -> None:
        self.ledger = ledger
        self.t = 0.0

    def __enter__(self) -> None:
        self.ledger.clock.enter(self.ledger.s_save)
        self.t = perf_counter()

    def __exit__(self, *exc: object) -> None:
        seconds = perf_counter() - self.t
        led = self.ledger
        led.clock.exit()
        led.save_min_s = seconds if led.save_min_s is None else min(led.save_min_s, seconds)
        led.save_max_s = max(led.save_max_s, seconds)


class _Count:
    """An action only counted when it completes (its time stays with the slot around it)."""

    __slots__ = ("calls", "slot")

    def __init__(self, clock: _Clock, slot: int) -> None:
        self.calls = clock.calls
        self.slot = slot

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.calls[self.slot] += 1


class _Epoch:
    """``run_training_epoch``: the epoch's boundary until its first batch is fetched."""

    __slots__ = ("ledger",)

    def __init__(self, ledger: LiveLedger) -> None:
        self.ledger = ledger

    def __enter__(self) -> None:
        led = self.ledger
        led.clock.enter(led.s_epoch)
        led.epoch_depth = len(led.clock.stack)
        led.first_fetch = True

    def __exit__(self, *exc: object) -> None:
        led = self.ledger
        led.clock.exit()
        led.epoch_depth = -1


class _TrainFetch:
    """``train_dataloader_next``: a step starts with its batch fetch; an epoch's first fetch (worker start-up,
    the first batch's production) is the epoch boundary's."""

    __slots__ = ("ledger",)

    def __init__(self, ledger: LiveLedger) -> None:
        self.ledger = ledger

    def __enter__(self) -> None:
        led = self.ledger
        c = led.clock
        c.set_level(led.epoch_depth, led.s_step)  # after the fetch, the step goes on
        c.enter(led.s_first_fetch if led.first_fetch else led.s_fetch)

    def __exit__(self, *exc: object) -> None:
        led = self.ledger
        led.clock.exit()
        led.first_fetch = False


class _StepEnd:
    """``LightningModule.on_train_batch_end`` (always called): the step ends when it returns."""

    __slots__ = ("ledger",)

    def __init__(self, ledger: LiveLedger) -> None:
        self.ledger = ledger

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        led = self.ledger
        led.clock.set_level(led.epoch_depth, led.s_between)


class _ValFetch:
    """``val_next``: the validation loader's wait (or the sanity check's)."""

    __slots__ = ("ledger",)

    def __init__(self, ledger: LiveLedger) -> None:
        self.ledger = ledger

    def __enter__(self) -> None:
        led = self.ledger
        led.clock.enter(led.s_sanity_fetch if led.in_sanity else led.s_val_fetch)

    def __exit__(self, *exc: object) -> None:
        self.ledger.clock.exit()


class _ValStep:
    """``validation_step``: counted as a validation or a sanity-check batch."""

    __slots__ = ("ledger",)

    def __init__(self, ledger: LiveLedger) -> None:
        self.ledger = ledger

    def __enter__(self) -> None:
        led = self.ledger
        led.clock.calls[led.s_sanity_steps if led.in_sanity else led.s_val_steps] += 1

    def __exit__(self, *exc: object) -> None:
        return None


class _Forwarded:
    """Our context around the user's profiler's own ``profile(action)`` (theirs inside ours)."""

    __slots__ = ("cm", "name", "ours", "user")

    def __init__(self, ours: Any, user: Profiler, name: str) -> None:
        self.ours = ours
        self.user = user
        self.name = name
        self.cm: Any = None

    def __enter__(self) -> str:
        self.ours.__enter__()
        self.cm = self.user.profile(self.name)
        try:
            return self.cm.__enter__()
        except BaseException:
            self.ours.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: Any) -> Any:
        try:
            return self.cm.__exit__(*exc)
        finally:
            self.ours.__exit__(*exc)


_OWN = frozenset({"_user", "_ledger", "_ctxs", "_forward"})


class LedgerProfiler(Profiler):
    """``trainer.profiler`` for the fit: times actions for the ledger and forwards everything to the user's.

    Attributes it does not have itself (``dirpath``, ``_lightning_module``, a profiler's own fields) are read
    from and written to the user's profiler.
    """

    def __init__(
        self, user: Profiler, ledger: LiveLedger
    ) -> None:  # no super().__init__: fields are the user's
        object.__setattr__(self, "_user", user)
        object.__setattr__(self, "_ledger", ledger)
        object.__setattr__(self, "_ctxs", {})
        object.__setattr__(self, "_forward", type(user) is not PassThroughProfiler)

    # ---- the hot path
    def profile(self, action_name: str) -> Any:
        ctx = self._ctxs.get(action_name)
        if ctx is None:
            ctx = self._ctxs[action_name] = self._ledger.classify(action_name)
        if self._forward:
            return _Forwarded(ctx, self._user, action_name)
        return ctx

    def start(self, action_name: str) -> None:
        ctx = self._ctxs.get(action_name)
        if ctx is None:
            ctx = self._ctxs[action_name] = self._ledger.classify(action_name)
        ctx.__enter__()
        if self._forward:
            try:
                self._user.start(action_name)
            except BaseException:
                ctx.__exit__(None, None, None)
                raise

    def stop(self, action_name: str) -> None:
        try:
            if self._forward:
                self._user.stop(action_name)
        finally:
            ctx = self._ctxs.get(action_name)
            if ctx is not None:
                ctx.__exit__(None, None, None)

    # ---- everything else is the user's profiler's
    def summary(self) -> str:
        return self._user.summary()

    def describe(self) -> None:
        self._user.describe()

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        self._user.setup(stage, local_rank=local_rank, log_dir=log_dir)

    def teardown(self, stage: str | None) -> None:
        self._user.teardown(stage)

    def __getattr__(self, name: str) -> Any:
        if name in _OWN:  # not set yet (unpickling): never recurse
            raise AttributeError(name)
        return getattr(self._user, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._user, name, value)

    def __del__(
        self,
    ) -> None:  # the base class tears down on deletion: the user's profiler is not ours to close
        return None


class LiveLedger:
    """One fit's ledger: installs the profiler and the bounds at ``setup``, :meth:`snapshot` any time,
    :meth:`uninstall` on every way out (idempotent, never raises)."""

    def __init__(self, trainer: Any, pl_module: Any, owner: Callback) -> None:
        self.trainer = trainer
        self.pl_module = pl_module
        self.owner = owner
        self.clock = c = _Clock()
        i = _INDEX
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
        self.epoch_depth = -1
        self.first_fetch = False
        self.in_sanity = False
        self.validation_runs = 0
        self.validation_wall_s = 0.0
        self.validation_run_walls: list[float] = []  # each validation run's wall seconds (8 bytes a run)
        self.save_min_s: float | None = None  # the fastest and slowest checkpoint save (wall seconds)
        self.save_max_s = 0.0
        self._hook_slots: dict[str, int] = {}
        self._by_key: dict[str, Callback] = {}
        self._patched: list[tuple[Any, str]] = []
        self._compile_s0 = _compile_seconds()
        # (training seconds, training steps) when the profiling window started and ended recording
        self._window_marks: list[tuple[float, int]] = []
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
        self._index_callbacks()
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
                self._wrap(self.pl_module, name, self._timed(self.s_self_log), late=True)

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
        late: bool = False,
    ) -> None:
        """Shadow ``obj.name`` by an instance attribute for the fit (skipped when the version lacks it).

        ``late``: the class's method is looked up at each call, not bound now, so that a patch of the class made
        after this (the sync tracker's ``LightningModule.log``, installed at train start) still runs."""
        original = getattr(obj, name, None)
        if original is None or not callable(original) or name in vars(obj):
            return
        target = original
        if late:
            cls = type(obj)

            def target(*args: Any, **kwargs: Any) -> Any:
                return getattr(cls, name)(obj, *args, **kwargs)

        wrapped = functools.wraps(original)(around(target))
        object.__setattr__(obj, name, wrapped)  # nn.Module's __setattr__ is not needed for a function
        self._patched.append((obj, name))

    def _timed(self, slot: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        ctx = _Timed(self.clock, slot)

        def around(fn: Callable[..., Any]) -> Callable[..., Any]:
            def timed(*args: Any, **kwargs: Any) -> Any:
                with ctx:
                    return fn(*args, **kwargs)

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
    def _index_callbacks(self) -> None:
        self._by_key = {}
        for cb in self.trainer.callbacks:
            with contextlib.suppress(Exception):
                self._by_key.setdefault(str(cb.state_key), cb)

    def classify(self, name: str) -> Any:
        """The context for one action name (cached by the profiler). Never raises: anything unexpected is
        left to the slot around it."""
        try:
            return self._classify(name)
        except Exception:
            return _NULL

    def _classify(self, name: str) -> Any:
        if name.startswith("[Callback]"):
            return self._callback_action(name)
        if name.startswith("[LightningModule]"):
            hook = name.rsplit(".", 1)[-1]
            if hook == "on_train_batch_end":
                return _StepEnd(self)
            return _NULL
        if name.startswith("[Strategy]"):
            hook = name.rsplit(".", 1)[-1]
            if hook == "validation_step":
                return _ValStep(self)
            return _NULL
        if name == "run_training_batch":
            return _Count(self.clock, self.s_train_steps)
        if name == "run_training_epoch":
            return _Epoch(self)
        if name == "save_checkpoint":
            return _Save(self)
        if name.endswith("].train_dataloader_next"):
            return _TrainFetch(self)
        if name.endswith("].val_next"):
            return _ValFetch(self)
        return _NULL

    def _callback_action(self, name: str) -> Any:
        hook = name.rsplit(".", 1)[-1]
        key = name[len("[Callback]") : -(len(hook) + 1)]
        cb = self._by_key.get(key)
        if cb is None:
            self._index_callbacks()  # a callback added since setup
            cb = self._by_key.get(key)
            if cb is None:
                return _NULL
        if cb is self.owner:
            return _Timed(self.clock, self.s_diagnosis)
        if hook in _CHECKPOINT_HOOKS or isinstance(cb, Checkpoint):
            if not _overrides(cb, hook, Callback):
                return _NULL
            return _Timed(self.clock, self.s_ckpt_hooks)
        if not _overrides(cb, hook, Callback):
            return _NULL
        label = f"{type(cb).__name__}.{hook}"
        slot = self._hook_slots.get(label)
        if slot is None:
            slot = self._hook_slots[label] = self.clock.new_slot(FitPart.CALLBACKS, label)
        return _Timed(self.clock, slot)

    # ------------------------------------------------------------------ the figures
    def _training(self) -> tuple[float, int]:
        c = self.clock
        c.flush()
        seconds = sum(v for slot, v in enumerate(c.acc) if c.parts[slot] == FitPart.TRAINING_STEPS)
        return seconds, c.calls[self.s_train_steps]

    def mark_window(self) -> None:
        """Called when the profiling window starts recording and when it closes: the profiled steps' extra
        time (torch.profiler's own cost inside the steps) is this package's, not training's (see
        :meth:`snapshot`)."""
        if len(self._window_marks) < 2:
            self._window_marks.append(self._training())

    def _window_extra_s(self, train_s: float, train_steps: int) -> float:
        """Seconds the profiled steps took beyond the same number of steps at the mean training step outside
        the window (0 until the window closed and as many steps ran outside it as inside)."""
        if len(self._window_marks) < 2:
            return 0.0
        (s0, n0), (s1, n1) = self._window_marks
        inside_s, inside_n = s1 - s0, n1 - n0
        outside_n = train_steps - inside_n
        if inside_n <= 0 or outside_n < inside_n:
            return 0.0
        outside_per_step = (train_s - inside_s) / outside_n
        return max(0.0, inside_s - inside_n * outside_per_step)

    def snapshot(self) -> FitLedger:
        """The ledger from ``setup`` until now (the fit goes on). The profiled steps' extra time is moved from
        the training steps to DIAGNOSIS, this package's part, so that the fit without the callback (what
        every speed-up is predicted for) does not carry it."""
        c = self.clock
        fit_s = c.flush()
        parts = dict.fromkeys(FitPart, 0.0)
        for slot, seconds in enumerate(c.acc):
            parts[c.parts[slot]] += seconds
        extra = min(
            self._window_extra_s(parts[FitPart.TRAINING_STEPS], c.calls[self.s_train_steps]),
            parts[FitPart.TRAINING_STEPS],
        )
        parts[FitPart.TRAINING_STEPS] -= extra
        parts[FitPart.DIAGNOSIS] += extra
        compiled = min(max(0.0, _compile_seconds() - self._compile_s0), parts[FitPart.TRAINING_STEPS])
        parts[FitPart.TRAINING_STEPS] -= compiled
        parts[FitPart.COMPILE_WARMUP] += compiled
        hooks = {
            str(c.names[slot]): HookTime(c.acc[slot], c.calls[slot])
            for slot in self._hook_slots.values()
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
            log_calls=c.calls[self.s_log_metrics],
            self_log_calls=c.calls[self.s_self_log],
            self_log_s=c.acc[self.s_self_log],
            hooks=hooks,
            profiled_extra_s=extra,
        )


def _overrides(obj: Any, hook: str, base: type) -> bool:
    """Whether ``obj``'s class (or the instance) defines ``hook`` differently from ``base``."""
    if hook in vars(obj) if hasattr(obj, "__dict__") else False:
        return True
    mine = getattr(type(obj), hook, None)
    return mine is not None and mine is not getattr(base, hook, None)


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
