"""How long the whole fit is: its training steps, epochs and projected seconds (the automatic budgets' base)."""

from __future__ import annotations

import math
from typing import Any

from lightning_bottleneck.evidence import RunLength, TimingStats

__all__ = ["projected_run_s", "run_length", "typical_step_ms"]


#: The share of the step times left out at each end before their mean is taken (:func:`typical_step_ms`): a step
#: that paid a one-off cost (a GC pass, a checkpoint, an epoch's start-up) is not projected onto every step.
TRIM_SHARE = 0.1


def typical_step_ms(step_ms: list[float]) -> float:
    """The mean step time, a tenth of the steps left out at each end (:data:`TRIM_SHARE`). Not the median: a
    fit's length is the sum of its steps, and their distribution can have two modes; two workers that deliver
    together make every other step wait for both batches (48 ms) and the next one find its batch ready (2 ms), and
    the median of the few steps timed by mid-run lands on either mode (issue 29's io_wait_workers: a 34 s fit
    projected at 5.8 s, too short to probe its loader)."""
    ordered = sorted(step_ms)
    cut = int(len(ordered) * TRIM_SHARE)
    kept = ordered[cut : len(ordered) - cut] or ordered
    return sum(kept) / len(kept)


def projected_run_s(length: RunLength | None, timing: TimingStats | None) -> float | None:
    """Seconds the whole fit will take: its training steps x the typical step (None when unknown)."""
    if length is None or not length.total_steps or timing is None or not timing.step_ms:
        return None
    return length.total_steps * typical_step_ms(list(timing.step_ms)) / 1e3


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return int(f) if math.isfinite(f) and f >= 0 else None


def run_length(trainer: Any) -> RunLength:
    """Training batches, batches per epoch and epochs of the whole fit (None where not known)."""
    per_epoch = _int_or_none(getattr(trainer, "num_training_batches", None))
    accumulate = int(getattr(trainer, "accumulate_grad_batches", 1) or 1)
    try:
        optimizer_steps = _int_or_none(trainer.estimated_stepping_batches)
    except Exception:
        optimizer_steps = None
    total = optimizer_steps * accumulate if optimizer_steps is not None else None
    max_epochs = _int_or_none(getattr(trainer, "max_epochs", None))
    epochs: int | None = max_epochs if max_epochs is not None and max_epochs > 0 else None
    if total is not None and per_epoch:
        derived = math.ceil(total / per_epoch)
        epochs = min(epochs, derived) if epochs is not None else derived
    if total is None and epochs is not None and per_epoch:
        total = epochs * per_epoch
    return RunLength(total_steps=total, steps_per_epoch=per_epoch, epochs=epochs)
