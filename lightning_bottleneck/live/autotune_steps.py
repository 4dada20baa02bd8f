"""Autotune's step bookkeeping and eligibility, apart from its state machine (:mod:`lightning_bottleneck.live.
autotune`): why no setting can be applied to a fit, the step times timed since a position of the step ring, and an
epoch's start-up wait spread over its steps."""

from __future__ import annotations

from statistics import median
from typing import Any

from lightning_bottleneck.evidence import RunLength
from lightning_bottleneck.live.loader_switch import can_switch_mid_epoch, eligible, epoch_batches
from lightning_bottleneck.measure.stage import run_length
from lightning_bottleneck.rules.autotune import (
    CLEAN_BEFORE_STEPS,
    MIN_CONFIRM_STEPS,
    MIN_EPOCHS_LEFT,
    MIN_STEPS_AFTER_CHECK,
)

__all__ = [
    "DONE",
    "RACE",
    "TRIAL",
    "WAITING",
    "cannot_apply",
    "epochs_left",
    "in_epoch_only",
    "probe_plan",
    "spread",
    "steps_left_in_epoch",
    "steps_since",
]

#: The autotuner's states (live/autotune.py): waiting for its choice, timing the applied setting against the steps
#: before, racing the alternative for one epoch (live/autotune_race.py), done.
WAITING, TRIAL, RACE, DONE = "waiting", "trial", "race", "done"


def epochs_left(trainer: Any, length: RunLength | None = None) -> int | None:
    """Epochs the fit runs after the current one; None for a fit bounded by steps or time only."""
    epochs = (length if length is not None else run_length(trainer)).epochs
    return None if epochs is None else epochs - (trainer.current_epoch + 1)


def steps_left_in_epoch(trainer: Any, length: RunLength | None = None) -> int | None:
    """Training batches the running epoch has still to run after the current one (the fit's ``max_steps``
    included); None where not known."""
    length = length if length is not None else run_length(trainer)
    progress = trainer.fit_loop.epoch_loop.batch_progress
    if length.steps_per_epoch is None:
        return None
    left = length.steps_per_epoch - progress.current.processed
    if length.total_steps is not None:
        left = min(left, length.total_steps - progress.total.processed)
    return max(left, 0)


def in_epoch_only(trainer: Any, length: RunLength | None = None) -> bool:
    """Whether a setting can be applied only within the running epoch: too few epochs left to apply it at an epoch
    boundary and check it (rules/autotune.py: MIN_EPOCHS_LEFT)."""
    left = epochs_left(trainer, length)
    return left is not None and left < MIN_EPOCHS_LEFT


def cannot_apply(trainer: Any, length: RunLength | None = None) -> str | None:
    """Why no setting can be applied to this fit (one sentence), else None."""
    if getattr(trainer, "reload_dataloaders_every_n_epochs", 0):
        return "reload_dataloaders_every_n_epochs re-creates the train loader from the user's code"
    combined = getattr(trainer.fit_loop, "_combined_loader", None)
    loaders = list(combined.flattened) if combined is not None else []
    if not any(eligible(dl, epoch_batches(combined)) for dl in loaders):
        return "no train DataLoader autotune can re-create (map-style, each ending with the epoch)"
    if in_epoch_only(trainer, length):
        few = (
            f"the fit has {max(epochs_left(trainer, length) or 0, 0)} epoch(s) left after epoch "
            f"{trainer.current_epoch}, too few to apply a setting at an epoch boundary and check it"
        )
        if not can_switch_mid_epoch(trainer, None):
            return (
                f"{few}, and its train loader's position in the sampler cannot be kept mid-epoch (no batching by "
                "the loader, an iterator of another kind, or fewer than one batch left to queue)"
            )
        room = steps_left_in_epoch(trainer, length)
        need = CLEAN_BEFORE_STEPS + MIN_CONFIRM_STEPS + MIN_STEPS_AFTER_CHECK
        if room is None or room < need:
            return (
                f"{few}, and this epoch runs {room if room is not None else 'an unknown number of'} more steps, "
                f"fewer than the {need} a switch within it needs (to wait, check and pay back)"
            )
    return None


def probe_plan(trainer: Any, settled: str | None, waiting: bool) -> dict[str, Any]:
    """What the measurement stage is told of autotune (``measure``'s keywords): ``train_loader_settled``, why the train
    loader is not probed (autotune switched it already); ``run_confirms``, whether the run will apply a measured
    setting and time it on its own steps (``waiting``: nothing chosen yet; the probe then times each worker count
    once with the step); ``run_races``, whether it could then race the count the probe leaves to it for an epoch
    (live/autotune_race.py), where not the probe times that count with the step too. A race starts at the boundary
    after the check, with MIN_EPOCHS_LEFT epochs left; the check comes at the end of the running epoch or, where the
    switch waits for the boundary, of the next: one epoch more is asked of the fit (one bounded by steps or time
    only races, as :meth:`~lightning_bottleneck.live.autotune.Autotuner._decide` does)."""
    confirms = waiting and cannot_apply(trainer) is None
    left = epochs_left(trainer)
    races = confirms and (left is None or left >= MIN_EPOCHS_LEFT + 1)
    return {"train_loader_settled": settled, "run_confirms": confirms, "run_races": races}


def steps_since(run: Any, start: int) -> list[float]:
    """The step times timed from position ``start`` of the step ring on, the profiled ones left out."""
    ring = run.timer.step_ms
    count = ring.n - start
    values = ring.last(count) if count > 0 else []
    window = run.window_ring
    if window is None:
        return list(values)
    lo, hi = window
    return [v for i, v in enumerate(values, start=ring.n - len(values)) if not lo <= i < hi]


def spread(first: float | None, steps: list[float], per_epoch: int | None) -> list[float]:
    """An epoch's timed steps with its epoch-start wait (``first``: the wait plus a median step) spread over the
    epoch's ``per_epoch`` steps: one wait an epoch, which every epoch with the setting pays. The mean is then the
    epoch's time a step whatever steps were left out (the profiled ones), and one long wait among a few steps no
    longer makes the bootstrap interval of the mean span everything (issue 29's worker_restart: a 0.4 s start-up
    among 10 steps of 2 ms, "inconclusive" at 3.5x)."""
    if first is None or not steps:
        return ([first] if first is not None else []) + steps
    med = median(steps)
    share = max(0.0, first - med) / max(per_epoch or 0, len(steps) + 1)
    return [v + share for v in (med, *steps)]
