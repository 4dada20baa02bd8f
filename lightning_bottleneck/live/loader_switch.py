"""Re-creating a running fit's train DataLoader(s) with other worker settings, the samples kept exactly.

The samples the model sees stay the same: the same dataset, sampler object (or batch sampler object), batch size,
collate_fn, worker_init_fn, generator and drop_last. A DataLoader draws a base seed for its workers from its
generator (or torch's global RNG) each time it creates an iterator, which a persistent iterator does only once:
where the original loader re-created its iterator every epoch and the new one persists, and where workers exhaust
the sampler that in-process loading leaves one step short of its end (or the other way round), the sampler is
wrapped (:class:`~lightning_bottleneck.live.loader_batches.SameDraws`) so that the generator advances exactly as
before and a shuffling sampler draws the same order. A loader whose workers already persist made that draw once, at
its first iterator: a loader re-created from it draws its base seeds from a generator of its own (seeded with the
running iterator's base seed), so the user's generator draws nothing more. Random augmentations inside workers draw
from per-worker seeds, which depend on the worker count and the base seed.

The loaders are re-created through Lightning's own machinery (``_get_dataloader_init_args_and_kwargs`` +
``_reinstantiate_wrapped_cls``: the arguments the user's DataLoader was built with), an argument the user gave by
position staying in its place (:func:`_rebuild`).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, Sampler

from lightning_bottleneck.live.loader_batches import (
    READ_AHEAD_SLACK,
    Drain,
    Remaining,
    RestThenEpochs,
    SameDraws,
    shutdown_iterator,
)
from lightning_bottleneck.vocabulary import loader_arguments

__all__ = [
    "back_to_own_setting",
    "can_switch_mid_epoch",
    "continue_epoch",
    "draws_every_epoch",
    "eligible",
    "epoch_batches",
    "loader_settings",
    "own_loaders",
    "recreate",
    "rest_of_epoch",
    "shutdown_iterator",
    "shutdown_workers",
    "uncut",
]


def draws_every_epoch(dl: DataLoader) -> bool:
    return not (dl.persistent_workers and dl.num_workers > 0)


def loader_settings(dl: DataLoader, keys: Any) -> dict[str, Any]:
    values = {
        "num_workers": dl.num_workers,
        "persistent_workers": dl.persistent_workers,
        "prefetch_factor": dl.prefetch_factor,
        "pin_memory": dl.pin_memory,
    }
    return {k: values[k] for k in keys if k in values}


def _own_generator(dl: DataLoader) -> torch.Generator:
    """A generator for the base seeds of a loader re-created from ``dl`` whose workers persist, seeded with the base
    seed its iterator drew (0 before any): ``dl`` drew from its own generator once, at its first iterator, and a new
    loader drawing there again would change what a shuffling sampler on that generator draws next."""
    generator = torch.Generator()
    generator.manual_seed(int(getattr(getattr(dl, "_iterator", None), "_base_seed", 0)) & (2**63 - 1))
    return generator


def _own_batches(dl: DataLoader) -> bool:
    """Whether ``dl`` batches with a batch sampler of the user's (``batch_sampler=``), not ``batch_size``."""
    return dl.batch_size is None and dl.batch_sampler is not None


def _rebuild(dl: DataLoader, sampler: Any, overrides: dict[str, Any]) -> DataLoader:
    """``dl`` re-instantiated by Lightning (its captured arguments; ``sampler`` in its sampler's place) with
    ``overrides`` by name. Lightning passes the sampler arguments by name; one the user gave by position (a
    DataModule's ``DataLoader(data, 32, True)``) is put in its positional place instead, or the class would get it
    twice. A batch sampler of the user's is passed through as it is (``overrides``), never rebuilt."""
    from lightning.fabric.utilities.data import _reinstantiate_wrapped_cls
    from lightning.pytorch.trainer.states import RunningStage
    from lightning.pytorch.utilities.data import _get_dataloader_init_args_and_kwargs

    saved_args, kwargs = _get_dataloader_init_args_and_kwargs(dl, sampler, RunningStage.TRAINING)
    kwargs.update(overrides)
    args = list(saved_args)
    for i, name in enumerate(tuple(getattr(dl, "__pl_saved_arg_names", ()))[: len(args)]):
        if name in kwargs:
            args[i] = kwargs.pop(name)
    new = _reinstantiate_wrapped_cls(dl, *args, **kwargs)
    # the user's worker_init_fn, or one Lightning added after construction (seed_everything(workers=True))
    new.worker_init_fn = dl.worker_init_fn
    return new


#: The arguments that hand a loader a batch sampler of its own (DataLoader's rule: nothing else may batch).
_BATCHED_BY = {"batch_size": 1, "shuffle": None, "sampler": None, "drop_last": False}


def recreate(dl: DataLoader, settings: dict[str, Any]) -> DataLoader:
    """``dl`` re-instantiated by Lightning with ``settings`` in place of its worker arguments; the same dataset,
    sampler object (or batch sampler object), batch size, collate_fn, worker_init_fn, generator and drop_last
    (where ``dl``'s workers persist, its base seeds come from a generator of its own: :func:`_own_generator`)."""
    workers = int(settings.get("num_workers", dl.num_workers))
    persistent = bool(settings.get("persistent_workers", dl.persistent_workers)) and workers > 0
    prefetch = settings.get("prefetch_factor", dl.prefetch_factor if dl.num_workers > 0 else None)
    wanted: dict[str, Any] = {
        "num_workers": workers,
        "persistent_workers": persistent,
        "prefetch_factor": prefetch if workers > 0 else None,
        "pin_memory": bool(settings.get("pin_memory", dl.pin_memory)),
    }
    if not draws_every_epoch(dl):  # the sampler object keeps the user's generator: it alone draws the order
        wanted["generator"] = _own_generator(dl)
    if workers == 0 and dl.multiprocessing_context is not None:
        wanted["multiprocessing_context"] = None  # torch refuses a context without workers
    if workers > 0 and dl.num_workers == 0 and getattr(dl, "in_order", True) is False:
        wanted["in_order"] = True  # in-process loading had no other order (torch >= 2.6)
    # the draws are kept where the batches are drawn: the loader's batch sampler (its BatchSampler around its
    # sampler, or one of the user's), asked for as many batches as before (a sampler alone without batching)
    batches = dl.batch_sampler
    source: Any = batches if batches is not None else dl.sampler
    reused_draw = persistent and draws_every_epoch(dl)
    tail = (
        None
        if (workers > 0) == (dl.num_workers > 0) or not hasattr(source, "__len__")
        else dl.num_workers > 0
    )
    if reused_draw or tail is not None:
        source = SameDraws(source, dl.generator, reused_draw, tail)
    elif not _own_batches(dl):  # no draw to keep: the loader's own sampler, batched by its batch_size
        return _rebuild(dl, dl.sampler, wanted)
    if batches is None:
        return _rebuild(dl, source, wanted)
    return _rebuild(dl, dl.sampler, {**wanted, **_BATCHED_BY, "batch_sampler": source})


def _queued(it: Any) -> int | None:
    """Where the running iterator ``it`` is in its sampler this epoch: the batches it fetched (in-process) or sent
    to its workers (a persistent iterator counts from 0 again at each epoch's ``_reset``); None where that is not
    known exactly (an iterator of another kind)."""
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter, _SingleProcessDataLoaderIter

    if isinstance(it, _SingleProcessDataLoaderIter):
        return int(it._num_yielded)
    if isinstance(it, _MultiProcessingDataLoaderIter):
        return int(it._send_idx)
    return None


def can_switch_mid_epoch(trainer: Any, settings: dict[str, Any] | None) -> bool:
    """The running epoch's loaders that would change (``settings``; None: any loader autotune may change) batch
    their samples (``batch_size``, or a batch sampler of the user's), and the fit loop's iterator holds their
    iterators, each at a known position in its batch sampler: loading in-process (the batches fetched) or by
    workers, persistent or not (the batches sent to them: those are delivered first, then the rest of the batch
    sampler by the new setting, :func:`rest_of_epoch`)."""
    combined = getattr(trainer.fit_loop, "_combined_loader", None)
    running = getattr(getattr(combined, "_iterator", None), "iterators", None)
    if combined is None or not running or len(running) != len(combined.flattened):
        return False
    batches = epoch_batches(combined)
    found = False
    for dl, it in zip(combined.flattened, running):
        if not eligible(dl, batches) or (
            settings is not None and loader_settings(dl, settings) == loader_arguments(settings)
        ):
            continue
        queued = _queued(it)
        if (
            queued is None
            or (dl.num_workers > 0) != (getattr(it, "_num_workers", 0) > 0)
            or dl.batch_sampler is None
            or len(dl) - queued < 1
        ):
            return False
        if settings is not None and int(settings.get("num_workers", dl.num_workers)) == dl.num_workers == 0:
            return False  # nothing to gain before the next epoch from in-process loading
        found = True
    return found


def rest_of_epoch(dl: DataLoader, running: Any, settings: dict[str, Any]) -> DataLoader:
    """A loader for the rest of the running epoch with ``settings``: Lightning's captured arguments of ``dl`` with,
    as its batch sampler, the index batches ``running`` has not fetched (in-process) or sent to its workers (whose
    sampler iterator is cut here: they deliver what they were given, :func:`continue_epoch`); its workers' base
    seed comes from a generator of its own seeded with ``running``'s, so the user's generator (or torch's global
    one) draws nothing the run without autotune would not.

    With persistent workers in ``settings`` it is also the loader of the epochs after (:class:`RestThenEpochs`:
    whole epochs of ``dl``'s own batch sampler, each drawing what ``dl``'s iterator would have drawn), so its
    workers start once, at the switch, and not again at the next epoch boundary (issue 29's io_wait: a second
    start-up of 8 workers there, ~0.12 s of a 4.6 s autotuned fit). Without, its workers end with the epoch.
    Its read-ahead is kept: :func:`back_to_own_setting` can take the epoch back exactly; :func:`uncut` undoes this
    before its batches are taken."""
    queued = _queued(running)
    if queued is None:
        raise RuntimeError(f"the position of a {type(running).__name__} in its sampler is not known")
    from_workers = dl.num_workers > 0
    left = len(dl) - queued
    workers = int(settings.get("num_workers", dl.num_workers))
    persistent = bool(settings.get("persistent_workers", False)) and workers > 0
    # a worker iterator draws at most prefetch_factor batches a worker ahead of what it yielded: kept with room
    ahead = int(settings.get("prefetch_factor") or 2) * max(workers, 1)
    rest = Remaining(running._sampler_iter, left, keep=4 * ahead + READ_AHEAD_SLACK, exhaust=from_workers)
    batches: Sampler = rest
    if persistent:
        # every whole epoch after makes the base-seed draw that a new iterator of ``dl`` would (started=1; none
        # where ``dl``'s own iterator persists); from in-process loading, its batch sampler is asked for no more
        # batches than it was (tail=False)
        tail = None if from_workers else False
        epochs = SameDraws(dl.batch_sampler, dl.generator, draws_every_epoch(dl), tail, started=1)
        batches = RestThenEpochs(rest, epochs)
    finish = _over(dl, batches, running._base_seed, workers, persistent, settings)
    if from_workers:  # its workers get nothing more: what they were given comes first (continue_epoch)
        running._sampler_iter = iter(())
    return finish


def _rest(finish: DataLoader) -> Remaining:
    sampler = finish.batch_sampler
    if isinstance(sampler, RestThenEpochs):
        sampler = sampler.rest
    if not isinstance(sampler, Remaining):
        raise RuntimeError("not a loader that finishes a switched epoch")
    return sampler


def continue_epoch(running: Any, new: Iterator[Any], owner: Any = None) -> Iterator[Any]:
    """The iterator that goes on from ``running`` (the iterator of ``owner``, the user's loader) after
    :func:`rest_of_epoch`: ``new`` (an iterator of the loader it returned), after the batches ``running``'s workers
    were given and have not delivered yet."""
    if getattr(running, "_num_workers", 0) > 0:
        return Drain(running, int(running._send_idx) - int(running._num_yielded), new, owner)
    return new


def uncut(running: Any, finish: DataLoader) -> None:
    """Undo :func:`rest_of_epoch` before the fit took any batch of ``finish``: ``running`` gets its sampler
    iterator back, with the batches ``finish``'s iterator drew from it first."""
    rest = _rest(finish)
    running._sampler_iter = itertools.chain(rest.last(rest.handed), rest.batches)


def _over(
    dl: DataLoader, batches: Sampler, base_seed: int, workers: int, persistent: bool, settings: dict[str, Any]
) -> DataLoader:
    """Lightning's captured arguments of ``dl`` with ``batches`` as its batch sampler, ``workers`` and the worker
    ``settings``; its workers' base seed from a generator of its own seeded with ``base_seed``, so the user's
    generator (or torch's global one) draws nothing the run without autotune would not; batches in order."""
    generator = torch.Generator()
    generator.manual_seed(int(base_seed) & (2**63 - 1))
    overrides = {
        **_BATCHED_BY, "batch_sampler": batches, "generator": generator, "num_workers": workers,
        "persistent_workers": persistent, "prefetch_factor": settings.get("prefetch_factor") if workers > 0 else None,
        "pin_memory": bool(settings.get("pin_memory", dl.pin_memory)),
    }  # fmt: skip
    if getattr(dl, "in_order", True) is False:  # in-process order before; workers must keep it (torch >= 2.6)
        overrides["in_order"] = True
    return _rebuild(dl, dl.sampler, overrides)


def back_to_own_setting(dl: DataLoader, running: Any, finish: DataLoader) -> DataLoader:
    """The user's loader ``dl`` again, mid-epoch, after :func:`rest_of_epoch` switched its epoch to ``finish``
    (whose iterator ``running``, as the fit loop holds it, is still in that epoch): its batch sampler is the
    batches ``finish``'s workers drew and the fit has not taken (yielded in order: the first ``_num_yielded`` of
    those handed out were taken), then the rest of the original sampler iterator; ``dl``'s own worker settings,
    its workers ending with the epoch (the epochs after run :func:`own_loaders`). The sequence of samples is the
    one without autotune; the caller shuts ``running``'s workers down. Raises where the batches queued before the
    switch are not all taken yet."""
    if isinstance(running, Drain):
        if running.left > 0:
            raise RuntimeError(f"{running.left} batches queued before the switch are not taken yet")
        running = running.new
    sampler = finish.batch_sampler
    if isinstance(sampler, RestThenEpochs) and sampler.started != 1:
        raise RuntimeError("the switched epoch is over: its position cannot be taken back mid-epoch")
    rest = _rest(finish)
    taken = int(running._num_yielded)
    drawn = rest.last(rest.handed - taken)  # drawn ahead by the workers, not taken by the fit
    batches = Remaining(itertools.chain(drawn, rest.batches), rest.left - taken, exhaust=rest.exhaust)
    own = {"prefetch_factor": dl.prefetch_factor, "pin_memory": dl.pin_memory}
    return _over(dl, batches, running._base_seed, dl.num_workers, False, own)


def own_loaders(replaced: list[Any], originals: list[Any]) -> list[Any]:
    """The loaders that run the user's own settings from the next epoch on, where ``replaced`` ran instead of
    ``originals``: each original whose iterator starts every epoch; one whose workers persist (their iterator was
    shut down at the switch) re-created with its own settings (:func:`recreate`: the user's generator draws
    nothing more)."""
    return [o if r is o or draws_every_epoch(o) else recreate(o, {}) for r, o in zip(replaced, originals)]


def shutdown_workers(dl: Any) -> None:
    """Stop the workers of ``dl``'s persistent iterator, if any (best effort; never raises)."""
    it = getattr(dl, "_iterator", None)
    if it is None:
        return
    with contextlib.suppress(Exception):
        it._shutdown_workers()
    with contextlib.suppress(Exception):
        dl._iterator = None


def eligible(dl: Any, batches: int | None = None) -> bool:
    """A map-style DataLoader that ends with the epoch: under a ``CombinedLoader`` a shorter loader cycles
    (``max_size_cycle``) or a longer one is cut (``min_size``), and how far such a loader runs its sampler depends
    on its workers, so it is left as it is."""
    if not isinstance(dl, DataLoader) or isinstance(dl.dataset, IterableDataset):
        return False
    if batches is None:
        return True
    try:
        return len(dl) == batches
    except TypeError:
        return False


def epoch_batches(combined: Any) -> int | None:
    """Batches per epoch of the fit loop's ``CombinedLoader`` (None: not sized)."""
    try:
        from lightning.pytorch.utilities.data import sized_len

        return sized_len(combined)
    except Exception:
        return None
