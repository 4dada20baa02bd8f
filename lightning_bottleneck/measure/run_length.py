"""How long the whole fit is: its training steps, epochs and projected seconds (the automatic budgets' base)."""

from __future__ import annotations

import math
from statistics import median
from typing import Any

from lightning_bottleneck.evidence import RunLength, TimingStats

__all__ = ["projected_run_s", "run_length"]


def projected_run_s(length: RunLength | None, timing: TimingStats | None) -> float | None:
    """Seconds the whole fit will take: its training steps x the median step (None when unknown)."""
    if length is None or not length.total_steps or timing is None or not timing.step_ms:
        return None
    return length.total_steps * median(timing.step_ms) / 1e3


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
