"""Autotune within one epoch: the check and the undo of a setting switched mid-epoch in a fit with too few epochs
left to check it at an epoch boundary (one long epoch, or ``max_steps`` inside the first: :func:`~lightning_bottleneck.
live.autotune_steps.in_epoch_only`).

The switch is the mid-epoch one (:func:`~lightning_bottleneck.live.loader_switch.rest_of_epoch`: the index
batches the running iterator has not fetched, or not given to its workers, loaded with the new setting); the check
comes :data:`~lightning_bottleneck.rules.autotune.MIN_CONFIRM_STEPS` steps later, at a batch end inside the same
epoch, on every rank at the same step. Undone, every switched loader goes back to the user's own setting exactly
where the fit is (:func:`~lightning_bottleneck.live.loader_switch.back_to_own_setting`: the batches the new workers
drew ahead and the fit did not take, then the rest of the sampler), and the new workers are shut down; the user's
loaders are the fit loop's again for any epoch after.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning_bottleneck.live.loader_switch import back_to_own_setting, shutdown_iterator

if TYPE_CHECKING:  # the state machine that calls this (live/autotune.py imports this module)
    from lightning_bottleneck.live.autotune import Autotuner

__all__ = ["undo_in_epoch"]


def undo_in_epoch(tuner: Autotuner, trainer: Any) -> None:
    """Put the user's loaders (their own worker settings) back in the fit loop's running iterator, the sampler's
    position kept; the workers of the iterators they replace stop. Raises (before changing anything) where a switched loader's position cannot be
    taken back. The caller's undo then puts the user's loaders back for any epoch after (``flattened``) and shuts
    down the persistent workers, as at an epoch boundary."""
    iterators = trainer.fit_loop._combined_loader._iterator.iterators
    back = [
        (i, iter(back_to_own_setting(tuner.originals[i], iterators[i], finish)))
        for i, finish in tuner.switched
    ]
    for i, it in back:
        shutdown_iterator(iterators[i])
        iterators[i] = it
    tuner.switched = []
