"""The callback's optional hooks, in and out of Lightning's hook calls: the one place its hooks are removed.

The epoch-end hook serves autotune alone (:data:`AUTOTUNE_HOOKS`): out of the calls unless ``autotune=True``.
The two batch hooks (:data:`STEP_HOOKS`) are out of the calls after the profiling window when the fit ledger
tells each step's start and end instead (:mod:`lightning_bottleneck.live.step_feed`).
The hooks Lightning calls every batch that the callback never overrides (:data:`UNUSED_HOOKS`: the base class's
no-ops) are out of the calls for good.
Three hooks only label the phases of recorded steps (:data:`PHASE_HOOKS`). While the torch profiler does not
run (before the window, after it: the whole fit but ~15 steps) they have nothing to do, and are taken out of
Lightning's hook calls (issue 18: each call, with its profiler action, costs 5-15 us a step after a CPU step has
evicted the interpreter's caches, against ~1 us in a tight loop). An instance attribute ``None`` shadows the
method: every supported Lightning (``lightning>=2.2``; since 1.7) calls a callback's hook only
``if callable(fn)``, so there is no call and no profiler action; removing the attribute restores the method.
``tests/test_callback_behaviour.py`` checks both on a real fit.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AUTOTUNE_HOOKS",
    "PHASE_HOOKS",
    "REMOVABLE_HOOKS",
    "STEP_HOOKS",
    "UNUSED_HOOKS",
    "not_overridden",
    "reset_hooks",
    "set_hooks",
    "set_phase_hooks",
]

#: The hooks that open and close phase labels inside a training step.
PHASE_HOOKS = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")
#: The hooks that serve ``autotune=True`` alone: without it, not in Lightning's hook calls at all.
AUTOTUNE_HOOKS = ("on_train_epoch_end",)
#: The batch hooks: out of Lightning's hook calls after the window, when the ledger times the steps
#: (:mod:`lightning_bottleneck.live.step_feed`).
STEP_HOOKS = ("on_train_batch_start", "on_train_batch_end")
#: The per-batch hooks the callback does not override: ``Callback``'s no-ops, which Lightning still calls, with a
#: profiler action named from ``state_key``, on every training step (``on_before_zero_grad``) and every validation,
#: test or predict batch. Out of Lightning's hook calls always: ``on_before_zero_grad`` alone, switched in and out
#: every other step of one fit, cost a ~0.9 ms step 2.1-3.9 us (``python benchmarks/tiny_steps.py --unused-hook
#: --rounds 3``, twenty-seventh session).
UNUSED_HOOKS = (
    "on_before_zero_grad",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
)
#: Every hook this module may take out (instance attributes, never pickled with the callback's options).
REMOVABLE_HOOKS = PHASE_HOOKS + AUTOTUNE_HOOKS + STEP_HOOKS + UNUSED_HOOKS


def not_overridden(callback: Any, names: tuple[str, ...]) -> tuple[str, ...]:
    """Of ``names``, the hooks ``callback``'s class leaves as Lightning's ``Callback`` no-ops (a subclass's own
    override stays in the calls)."""
    from lightning.pytorch.callbacks import Callback

    cls = type(callback)
    return tuple(n for n in names if getattr(cls, n, None) is getattr(Callback, n, None))


def reset_hooks(callback: Any, autotune: bool) -> None:
    """The hooks as a fit starts: the phase-label hooks in, the autotune hook in with ``autotune`` only, the unused
    per-batch hooks out."""
    set_phase_hooks(callback, True)
    set_hooks(callback, AUTOTUNE_HOOKS, autotune)
    set_hooks(callback, not_overridden(callback, UNUSED_HOOKS), False)


def set_phase_hooks(callback: Any, on: bool) -> None:
    """Put the phase-label hooks of ``callback`` in Lightning's hook calls (``on``) or take them out."""
    set_hooks(callback, PHASE_HOOKS, on)


def set_hooks(callback: Any, names: tuple[str, ...], on: bool) -> None:
    """Put the hooks ``names`` of ``callback`` in Lightning's hook calls (``on``) or take them out."""
    for name in names:
        if on:
            callback.__dict__.pop(name, None)
        else:
            callback.__dict__[name] = None
