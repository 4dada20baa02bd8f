"""Which part of the fit each profiler action belongs to: the ledger's classification, once per action name.

:class:`ActionClassifier` turns an action name Lightning passes to ``trainer.profiler``
(``[Callback]<state_key>.<hook>``, ``[LightningModule]<cls>.<hook>``, ``[Strategy]<cls>.<hook>``,
``run_training_epoch``, ``run_training_batch``, ``[_TrainingEpochLoop].train_dataloader_next``,
``[_EvaluationLoop].val_next``, ``save_checkpoint``) into the context that moves the ledger's clock for it.
The contexts here know the fit's structure: a step runs from its batch fetch to the end of
``LightningModule.on_train_batch_end``, an epoch's first fetch is the epoch boundary's, a validation batch
counts as a sanity-check batch while the sanity check runs. This package's own callback is
:attr:`FitPart.DIAGNOSIS`; a hook nobody overrides costs nothing (:data:`UNTIMED`).
"""

from __future__ import annotations

import contextlib
from time import perf_counter
from typing import TYPE_CHECKING, Any

from lightning.pytorch.callbacks import Callback, Checkpoint

from lightning_bottleneck.categories import FitPart
from lightning_bottleneck.live.ledger_clock import UNTIMED, Count, Timed

if TYPE_CHECKING:
    from lightning_bottleneck.live.ledger import LiveLedger

__all__ = ["ActionClassifier"]

#: Callback hooks that are part of saving a checkpoint whichever callback overrides them.
_CHECKPOINT_HOOKS = frozenset({"on_save_checkpoint", "state_dict"})


class _Save:
    """A checkpoint save: timed in its own slot like :class:`Timed`, and each save's wall seconds widen the
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
        led.save_s += seconds


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


class _StepStart:
    """``LightningModule.on_train_batch_start`` (always called, right after the callbacks' own): the step's
    start for the ledger's feed, when it has one (its method named by ``tell``, looked up without a frame)."""

    __slots__ = ("ledger",)
    tell = "step_started"
    where = "step start"

    def __init__(self, ledger: LiveLedger) -> None:
        self.ledger = ledger

    def __enter__(self) -> None:
        feed = self.ledger.feed
        if feed is not None:
            try:
                getattr(feed, self.tell)()
            except Exception as err:
                feed.failed(self.where, err)

    def __exit__(self, *exc: object) -> None:
        return None


class _StepEnd(_StepStart):
    """``LightningModule.on_train_batch_end`` (always called, right after the callbacks' own): the step ends
    when it returns; its start tells the ledger's feed, when it has one."""

    __slots__ = ()
    tell = "step_ended"
    where = "step end"

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


class ActionClassifier:
    """One fit's classification of action names: the context for each (the profiler caches it), and the slot
    of every other callback's overridden hook (``hook_slots``, by ``"<class>.<hook>"``)."""

    def __init__(self, ledger: LiveLedger) -> None:
        self.ledger = ledger
        self.hook_slots: dict[str, int] = {}
        self.by_key: dict[str, Callback] = {}
        # the LightningModule's batch hooks have been seen (1: on_train_batch_start, 2: on_train_batch_end):
        # with both, the ledger can tell every training step's start and end (live/step_feed.py)
        self.step_marks = 0

    def index_callbacks(self) -> None:
        self.by_key = {}
        for cb in self.ledger.trainer.callbacks:
            with contextlib.suppress(Exception):
                self.by_key.setdefault(str(cb.state_key), cb)

    def classify(self, name: str) -> Any:
        """The context for one action name. Never raises: anything unexpected is left to the slot around
        it."""
        try:
            return self._classify(name)
        except Exception:
            return UNTIMED

    def _classify(self, name: str) -> Any:
        led = self.ledger
        if name.startswith("[Callback]"):
            return self._callback_action(name)
        if name.startswith("[LightningModule]"):
            hook = name.rsplit(".", 1)[-1]
            if hook == "on_train_batch_end":
                self.step_marks |= 2
                return _StepEnd(led)
            if hook == "on_train_batch_start":
                self.step_marks |= 1
                return _StepStart(led)
            return UNTIMED
        if name.startswith("[Strategy]"):
            hook = name.rsplit(".", 1)[-1]
            if hook == "validation_step":
                return _ValStep(led)
            return UNTIMED
        if name == "run_training_batch":
            return Count(led.clock, led.s_train_steps)
        if name == "run_training_epoch":
            return _Epoch(led)
        if name == "save_checkpoint":
            return _Save(led)
        if name.endswith("].train_dataloader_next"):
            return _TrainFetch(led)
        if name.endswith("].val_next"):
            return _ValFetch(led)
        return UNTIMED

    def _callback_action(self, name: str) -> Any:
        led = self.ledger
        hook = name.rsplit(".", 1)[-1]
        key = name[len("[Callback]") : -(len(hook) + 1)]
        cb = self.by_key.get(key)
        if cb is None:
            self.index_callbacks()  # a callback added since setup
            cb = self.by_key.get(key)
            if cb is None:
                return UNTIMED
        if cb is led.owner:
            return Timed(led.clock, led.s_diagnosis)
        if hook in _CHECKPOINT_HOOKS or isinstance(cb, Checkpoint):
            if not _overrides(cb, hook, Callback):
                return UNTIMED
            return Timed(led.clock, led.s_ckpt_hooks)
        if not _overrides(cb, hook, Callback):
            return UNTIMED
        label = f"{type(cb).__name__}.{hook}"
        slot = self.hook_slots.get(label)
        if slot is None:
            slot = self.hook_slots[label] = led.clock.new_slot(FitPart.CALLBACKS, label)
        return Timed(led.clock, slot)


def _overrides(obj: Any, hook: str, base: type) -> bool:
    """Whether ``obj``'s class (or the instance) defines ``hook`` differently from ``base``."""
    if hook in vars(obj) if hasattr(obj, "__dict__") else False:
        return True
    mine = getattr(type(obj), hook, None)
    return mine is not None and mine is not getattr(base, hook, None)
