"""Autotune's choice for workers that restart every epoch: decided at each epoch's end before the profiling
window's verdict, where they spent most of the epoch starting up
(:func:`~lightning_bottleneck.rules.autotune.restart_bound`), or once the verdict had no measured loader setting
to apply, where they spent a smaller share of it
(:data:`~lightning_bottleneck.rules.autotune.RESTART_SHARE_AFTER_VERDICT`). Rank zero times a few batches loaded in
the training process (:func:`~lightning_bottleneck.measure.loader_probe.time_in_process`) and picks
``num_workers=0`` or ``persistent_workers=True`` (:func:`~lightning_bottleneck.rules.autotune.restart_fix`)."""

from __future__ import annotations

from statistics import median
from typing import TYPE_CHECKING, Any

from lightning_bottleneck.autotune_record import BASIS_FIRST_EPOCH, BASIS_RESTARTS
from lightning_bottleneck.live.loader_switch import draws_every_epoch, eligible, epoch_batches
from lightning_bottleneck.measure.loader_probe import time_in_process
from lightning_bottleneck.measure.run_length import typical_step_ms
from lightning_bottleneck.measure.stage import run_length
from lightning_bottleneck.rules.autotune import (
    MIN_EPOCHS_LEFT,
    RESTART_SHARE_AFTER_VERDICT,
    RESTART_SHARE_MIN,
    Choice,
    restart_bound,
    restart_fix,
    restart_saving_ms,
)

if TYPE_CHECKING:  # the state machine that calls this (live/autotune.py imports this module)
    from lightning_bottleneck.live.autotune import Autotuner

__all__ = [
    "IN_PROCESS_TIMINGS",
    "IN_PROCESS_TIMING_MAX_S",
    "IN_PROCESS_TIMING_SHARE",
    "restart_choice",
    "restarting_loaders",
]

#: The in-process timing of the first-epoch check takes at most this share of the start-up it would save once an
#: epoch (a twentieth: the check then costs the run far less than any epoch left gains; on issue 29's
#: worker_restart 19 ms time ~150 batches of 0.13 ms, where one start-up is 0.4 s), and never more than the
#: probe's shortest rung (loader_rung.MIN_MEASURE_S, 0.25 s). At least one batch is loaded whatever it takes.
#: A fiftieth until the thirty-fourth session: three windows of 2.5 ms, see below.
IN_PROCESS_TIMING_SHARE = 0.05
IN_PROCESS_TIMING_MAX_S = 0.25
#: ... split into this many timings, the fastest taken (measure/loader_probe.time_in_process): a window of a few
#: milliseconds that a stall falls in reads the loading several times slower. Issue 29's worker_restart: one
#: fit's 8 ms window read a batch at 0.66 ms where the others read 0.08-0.45 ms, and it kept persistent workers
#: (twenty-eighth session); one fit of four kept them again in the twenty-ninth (3.73 s against 1.75-2.15 s for
#: the three that load in-process). The median of three, taken since, survives one disturbed window; in the
#: thirty-fourth session one fit of three read 1.31 ms at the boundary after the verdict (the others 0.07 and
#: 0.15 ms) and kept persistent workers again (2.13x, where the others' num_workers=0 gave 6.4-7.5x): the fastest
#: of three survives two (tests/test_loader_probe.py), and the run's check undoes a fix that a fast read misled.
IN_PROCESS_TIMINGS = 3


def restarting_loaders(trainer: Any) -> list[Any]:
    """The fit's train DataLoaders that start their workers every epoch (``num_workers > 0`` without
    ``persistent_workers``), where autotune can re-create every train loader (under a ``CombinedLoader`` too: each
    ends with the epoch) and none is re-created by ``reload_dataloaders_every_n_epochs``; else empty."""
    if getattr(trainer, "reload_dataloaders_every_n_epochs", 0):
        return []
    combined = getattr(trainer.fit_loop, "_combined_loader", None)
    loaders = list(combined.flattened) if combined is not None else []
    batches = epoch_batches(combined)
    if not loaders or not all(eligible(dl, batches) for dl in loaders):
        return []
    return [dl for dl in loaders if dl.num_workers and draws_every_epoch(dl)]


def restart_choice(tuner: Autotuner, run: Any, trainer: Any, after_verdict: bool = False) -> Choice:
    """The fix for workers that restart every epoch (rules/autotune.py: restart_bound, restart_fix), or None: at
    an epoch's end before the verdict where they spent most of an epoch starting up, or, with
    ``after_verdict`` (the verdict had no measured setting to apply), where they spent at least
    RESTART_SHARE_AFTER_VERDICT of it. Applied at the next epoch boundary."""
    share, basis = (
        (RESTART_SHARE_AFTER_VERDICT, BASIS_RESTARTS)
        if after_verdict
        else (RESTART_SHARE_MIN, BASIS_FIRST_EPOCH)
    )
    waits = run.timer.epoch_start_wait_ms
    first = tuner.entries[0][0] if tuner.entries else None
    loaders = restarting_loaders(trainer)
    if not waits or first is None or not loaders:
        return Choice(None)
    length = run_length(trainer)
    if length.epochs is None or not length.steps_per_epoch:
        return Choice(None)
    epochs_left = length.epochs - (trainer.current_epoch + 1)
    # The start-up: Lightning creates the first epoch's iterator before the fit's on_train_start hooks
    # (FitLoop.setup_data), so the first epoch's wait is what is left of it after them; later epochs create theirs
    # after on_train_epoch_start and wait for all of it: from the second epoch on, their waits at their median (a
    # first epoch whose on_train_start hooks hid the start-up is caught an epoch later, before the verdict too).
    start_ms = median(waits[1:]) if len(waits) > 1 else waits[0]
    # the first epoch's steps (the profiled ones left out: slower) at their typical time, the trimmed mean: workers
    # that deliver together make their steps bimodal (one waits for both batches, the next finds its batch ready),
    # and the median lands on the short mode (issue 29's io_wait_workers at its own size: an epoch of ~0.9 s read as
    # a few steps' time, its 0.1 s wait as a fifth of it; kept workers were switched to and undone in 3 fits of 5)
    steps = tuner.entries[0][1]  # none timed outside the profiled window: the wait alone
    epoch_steps_ms = (typical_step_ms(steps) if steps else 0.0) * length.steps_per_epoch
    # the whole wait first: what a fix saves is at most that, and the in-process timing is spent only past it
    if epochs_left < MIN_EPOCHS_LEFT or not restart_bound(start_ms, epoch_steps_ms, share):
        return Choice(None)
    # a step takes a batch of every loader: in-process, their loading adds up (the budget shared among them)
    budget = min(IN_PROCESS_TIMING_SHARE * start_ms / 1e3, IN_PROCESS_TIMING_MAX_S) / len(loaders)
    times = [time_in_process(dl, budget, timings=IN_PROCESS_TIMINGS) for dl in loaders]
    batch_s = None if any(t is None for t in times) else sum(t for t in times if t is not None)
    batch_ms = None if batch_s is None else batch_s * 1e3
    tuner.first_epoch = (start_ms, batch_ms)
    fix = restart_fix(start_ms / 1e3, length.steps_per_epoch, epochs_left, batch_s)
    # kept workers would still wait for each epoch's first batch: the fix is weighed by what it saves
    if not restart_bound(start_ms, epoch_steps_ms, share, restart_saving_ms(fix, start_ms, batch_ms)):
        return Choice(None)
    return Choice(fix, basis=basis)
