"""Re-creating a running fit's train DataLoader(s) with other worker settings, the samples kept exactly.

The samples the model sees stay the same: the same dataset, sampler object, batch size, collate_fn,
worker_init_fn, generator and drop_last. A DataLoader draws a base seed for its workers from its generator (or
torch's global RNG) each time it creates an iterator, which a persistent iterator does only once: where the
original loader re-created its iterator every epoch and the new one persists, and where workers exhaust the sampler
that in-process loading leaves one step short of its end (or the other way round), the sampler is wrapped
(:class:`SameDraws`) so that the generator advances exactly as before and a shuffling sampler draws the same
order. A loader whose workers already persist is left alone (its iterator is re-used; a new loader would draw
once more). Random augmentations inside workers draw from per-worker seeds, which depend on the worker count.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import deque
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, Sampler

__all__ = [
    "SameDraws",
    "back_to_own_setting",
    "can_switch_mid_epoch",
    "continue_epoch",
    "draws_every_epoch",
    "eligible",
    "epoch_batches",
    "loader_settings",
    "recreate",
    "rest_of_epoch",
    "shutdown_iterator",
    "shutdown_workers",
    "uncut",
]


class SameDraws(Sampler):
    """The loader's own sampler, drawing from its generator exactly as it did under the previous setting.

    Two things a worker setting changes about the draws, both undone here:

    * ``DataLoader`` draws a base seed (``torch.empty((), dtype=torch.int64).random_(generator=loader.generator)``)
      when it creates an iterator, which a persistent iterator does once: with ``reused_draw``, every iteration
      after the first makes that draw first, as a new iterator would have.
    * ``RandomSampler`` draws one more permutation when asked past its last index (the tail of its ``__iter__``).
      Under Lightning's batch limit an in-process loader never asks (the epoch ends at its last batch), while
      workers always do (the main process queues indices ahead until the sampler is exhausted). ``tail=True``
      looks one index ahead, so the sampler is exhausted with its last index (the workers' draws, in-process);
      ``tail=False`` stops after ``len(sampler)`` indices (the in-process draws, with workers).
    """

    def __init__(
        self,
        sampler: Any,
        generator: torch.Generator | None,
        reused_draw: bool,
        tail: bool | None,
        started: int = 0,
    ) -> None:
        self.sampler = sampler
        self.generator = generator
        self.reused_draw = reused_draw
        self.tail = tail
        self.started = started  # 1: an iterator made for other batches came first (every iteration draws)

    def __iter__(self) -> Iterator[Any]:
        self.started += 1
        if self.reused_draw and self.started > 1:  # a re-used iterator: the draw a new one would have made
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        it = iter(self.sampler)
        if self.tail is False:
            for _, index in zip(range(len(self.sampler)), it):
                yield index
            return
        if self.tail is True:
            try:
                current = next(it)
            except StopIteration:
                return
            for following in it:
                yield current
                current = following
            yield current
            return
        yield from it

    def __len__(self) -> int:
        return len(self.sampler)

    def set_epoch(self, epoch: int) -> None:
        set_epoch = getattr(self.sampler, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)


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


def recreate(dl: DataLoader, settings: dict[str, Any]) -> DataLoader:
    """``dl`` re-instantiated by Lightning with ``settings`` in place of its worker arguments; the same dataset,
    sampler object, batch size, collate_fn, worker_init_fn, generator and drop_last."""
    from lightning.fabric.utilities.data import _reinstantiate_wrapped_cls
    from lightning.pytorch.trainer.states import RunningStage
    from lightning.pytorch.utilities.data import _get_dataloader_init_args_and_kwargs

    workers = int(settings.get("num_workers", dl.num_workers))
    persistent = bool(settings.get("persistent_workers", dl.persistent_workers)) and workers > 0
    prefetch = settings.get("prefetch_factor", dl.prefetch_factor if dl.num_workers > 0 else None)
    wanted: dict[str, Any] = {
        "num_workers": workers,
        "persistent_workers": persistent,
        "prefetch_factor": prefetch if workers > 0 else None,
        "pin_memory": bool(settings.get("pin_memory", dl.pin_memory)),
    }
    if workers == 0 and dl.multiprocessing_context is not None:
        wanted["multiprocessing_context"] = None  # torch refuses a context without workers
    if workers > 0 and dl.num_workers == 0 and getattr(dl, "in_order", True) is False:
        wanted["in_order"] = True  # in-process loading had no other order (torch >= 2.6)
    sampler: Any = dl.sampler
    reused_draw = persistent and draws_every_epoch(dl)
    tail = (
        None
        if (workers > 0) == (dl.num_workers > 0) or not hasattr(dl.sampler, "__len__")
        else dl.num_workers > 0
    )
    if reused_draw or tail is not None:
        sampler = SameDraws(dl.sampler, dl.generator, reused_draw, tail)
    saved_args, kwargs = _get_dataloader_init_args_and_kwargs(dl, sampler, RunningStage.TRAINING)
    arg_names = tuple(getattr(dl, "__pl_saved_arg_names", ()))
    args = list(saved_args)
    for name, value in wanted.items():
        if name in arg_names and arg_names.index(name) < len(args):
            args[arg_names.index(name)] = value
        else:
            kwargs[name] = value
    new = _reinstantiate_wrapped_cls(dl, *args, **kwargs)
    if (
        new.worker_init_fn is not dl.worker_init_fn
    ):  # one Lightning added after construction (seed_everything)
        new.worker_init_fn = dl.worker_init_fn
    return new


#: Batches kept beyond a worker iterator's read-ahead (:class:`_Remaining`'s ``keep``): a margin, not a measure;
#: a few index lists cost nothing.
READ_AHEAD_SLACK = 16


class _Remaining(Sampler):
    """The batches of index lists the running iterator has not fetched (in-process) or sent to its workers yet:
    exactly ``left`` of them, taken from its own batch sampler iterator. ``exhaust``: then asked once more, as the
    workers of the loader it continues would have asked (``RandomSampler``'s tail draw, which in-process loading
    under Lightning never makes). It counts the batches it handed out and keeps the last ``keep`` of them: those a
    worker iterator drew ahead of the fit (:func:`back_to_own_setting`)."""

    def __init__(self, batches: Iterator[Any], left: int, keep: int = 0, exhaust: bool = False) -> None:
        self.batches = batches
        self.left = left
        self.exhaust = exhaust
        self.handed = 0
        self.recent: deque[Any] = deque(maxlen=keep)

    def __iter__(self) -> Iterator[Any]:
        for _ in range(self.left):
            try:
                batch = next(self.batches)
            except StopIteration:
                return
            self.handed += 1
            self.recent.append(batch)
            yield batch
        if self.exhaust:
            next(self.batches, None)

    def __len__(self) -> int:
        return self.left

    def last(self, n: int) -> list[Any]:
        """The last ``n`` batches handed out, in order (raises where fewer are kept)."""
        if n < 0 or n > len(self.recent):
            raise RuntimeError(f"{n} batches wanted back, {len(self.recent)} kept")
        return list(self.recent)[len(self.recent) - n :] if n else []


class _Drain:
    """The fit loop's iterator for a loader switched mid-epoch from a worker iterator (``old``): first the
    ``left`` batches ``old``'s workers were given before the switch, in their order, then ``new``'s (the rest of
    the sampler). ``old``'s workers stop after its last batch; ``new``'s start at the switch, so their start-up
    overlaps the batches ``old`` still delivers."""

    def __init__(self, old: Any, left: int, new: Iterator[Any]) -> None:
        self.old, self.left, self.new = old, left, new
        if left <= 0:
            shutdown_iterator(old)

    def __iter__(self) -> _Drain:
        return self

    def __next__(self) -> Any:
        if self.left > 0:
            try:
                batch = next(self.old)
            except StopIteration:  # not expected (every batch sent is delivered): go on with the rest
                self.left = 0
                shutdown_iterator(self.old)
                return next(self.new)
            self.left -= 1
            if self.left == 0:
                shutdown_iterator(self.old)
            return batch
        return next(self.new)

    def _shutdown_workers(self) -> None:
        shutdown_iterator(self.old)
        shutdown_iterator(self.new)


class _RestThenEpochs(Sampler):
    """A persistent iterator's batches: on its first iteration the rest of the running epoch (``rest``), on every
    later one a whole epoch of ``epochs`` (the loader's own sampler in a ``BatchSampler``, drawing as before:
    :class:`SameDraws`). Counted when iterated, not when ``iter()`` is called: a DataLoader iterator calls ``iter()``
    on its batch sampler once more than it iterates it."""

    def __init__(self, rest: _Remaining, epochs: BatchSampler) -> None:
        self.rest = rest
        self.epochs = epochs
        self.started = 0

    def __iter__(self) -> Iterator[Any]:
        self.started += 1
        yield from (self.rest if self.started == 1 else self.epochs)

    def __len__(self) -> int:
        return len(self.epochs)

    def set_epoch(self, epoch: int) -> None:
        set_epoch = getattr(self.epochs.sampler, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)


def _queued(it: Any) -> int | None:
    """Where the running iterator ``it`` is in its sampler: the batches it fetched (in-process) or sent to its
    workers; None where that is not known exactly (an iterator of another kind, or workers that persist)."""
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter, _SingleProcessDataLoaderIter

    if isinstance(it, _SingleProcessDataLoaderIter):
        return int(it._num_yielded)
    if isinstance(it, _MultiProcessingDataLoaderIter) and not it._persistent_workers:
        return int(it._send_idx)
    return None


def can_switch_mid_epoch(trainer: Any, settings: dict[str, Any] | None) -> bool:
    """The running epoch's loaders that would change (``settings``; None: any loader autotune may change) use
    automatic batching, and the fit loop's iterator holds their iterators, each at a known position in its
    sampler: loading in-process (the batches fetched) or by workers that do not persist (the batches sent to them:
    those are delivered first, then the rest of the sampler by the new setting, :func:`rest_of_epoch`)."""
    combined = getattr(trainer.fit_loop, "_combined_loader", None)
    running = getattr(getattr(combined, "_iterator", None), "iterators", None)
    if combined is None or not running or len(running) != len(combined.flattened):
        return False
    batches = epoch_batches(combined)
    found = False
    for dl, it in zip(combined.flattened, running):
        if not eligible(dl, batches) or (settings is not None and loader_settings(dl, settings) == settings):
            continue
        queued = _queued(it)
        if (
            queued is None
            or (dl.num_workers > 0) != (getattr(it, "_num_workers", 0) > 0)
            or dl.batch_size is None
            or set(getattr(dl, "__pl_saved_arg_names", ())) - {"dataset"}
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

    With persistent workers in ``settings`` it is also the loader of the epochs after (:class:`_RestThenEpochs`:
    whole epochs of ``dl``'s own sampler, each drawing what a new iterator of ``dl`` would have drawn), so its
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
    rest = _Remaining(running._sampler_iter, left, keep=4 * ahead + READ_AHEAD_SLACK, exhaust=from_workers)
    batches: Sampler = rest
    if persistent and dl.batch_size is not None:
        # every whole epoch after makes the base-seed draw that a new iterator of ``dl`` would (started=1); from
        # in-process loading, the sampler stops at its last index as it did (tail=False)
        draws = SameDraws(
            dl.sampler, dl.generator, reused_draw=True, tail=None if from_workers else False, started=1
        )
        batches = _RestThenEpochs(rest, BatchSampler(draws, dl.batch_size, dl.drop_last))
    else:
        persistent = False
    finish = _over(dl, batches, running._base_seed, workers, persistent, settings)
    if from_workers:  # its workers get nothing more: what they were given comes first (continue_epoch)
        running._sampler_iter = iter(())
    return finish


def _rest(finish: DataLoader) -> _Remaining:
    sampler = finish.batch_sampler
    if isinstance(sampler, _RestThenEpochs):
        sampler = sampler.rest
    if not isinstance(sampler, _Remaining):
        raise RuntimeError("not a loader that finishes a switched epoch")
    return sampler


def continue_epoch(running: Any, new: Iterator[Any]) -> Iterator[Any]:
    """The iterator that goes on from ``running`` after :func:`rest_of_epoch`: ``new`` (an iterator of the loader
    it returned), after the batches ``running``'s workers were given and have not delivered yet."""
    if getattr(running, "_num_workers", 0) > 0:
        return _Drain(running, int(running._send_idx) - int(running._num_yielded), new)
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
    from lightning.fabric.utilities.data import _reinstantiate_wrapped_cls
    from lightning.pytorch.trainer.states import RunningStage
    from lightning.pytorch.utilities.data import _get_dataloader_init_args_and_kwargs

    args, kwargs = _get_dataloader_init_args_and_kwargs(dl, dl.sampler, RunningStage.TRAINING)
    generator = torch.Generator()
    generator.manual_seed(int(base_seed) & (2**63 - 1))
    kwargs.update(
        batch_sampler=batches, batch_size=1, shuffle=None, sampler=None,
        drop_last=False, generator=generator, num_workers=workers, persistent_workers=persistent,
        prefetch_factor=settings.get("prefetch_factor") if workers > 0 else None,
        pin_memory=bool(settings.get("pin_memory", dl.pin_memory)),
    )  # fmt: skip
    if getattr(dl, "in_order", True) is False:  # in-process order before; workers must keep it (torch >= 2.6)
        kwargs["in_order"] = True
    new = _reinstantiate_wrapped_cls(dl, *args, **kwargs)
    new.worker_init_fn = dl.worker_init_fn
    return new


def back_to_own_setting(dl: DataLoader, running: Any, finish: DataLoader) -> DataLoader:
    """The user's loader ``dl`` again, mid-epoch, after :func:`rest_of_epoch` switched its epoch to ``finish``
    (whose iterator ``running``, as the fit loop holds it, is still in that epoch): its batch sampler is the
    batches ``finish``'s workers drew and the fit has not taken (yielded in order: the first ``_num_yielded`` of
    those handed out were taken), then the rest of the original sampler iterator; ``dl``'s own worker settings
    (not persistent: :func:`eligible`). The sequence of samples is the one without autotune; the caller shuts
    ``running``'s workers down. Raises where the batches queued before the switch are not all taken yet."""
    if isinstance(running, _Drain):
        if running.left > 0:
            raise RuntimeError(f"{running.left} batches queued before the switch are not taken yet")
        running = running.new
    sampler = finish.batch_sampler
    if isinstance(sampler, _RestThenEpochs) and sampler.started != 1:
        raise RuntimeError("the switched epoch is over: its position cannot be taken back mid-epoch")
    rest = _rest(finish)
    taken = int(running._num_yielded)
    drawn = rest.last(rest.handed - taken)  # drawn ahead by the workers, not taken by the fit
    batches = _Remaining(itertools.chain(drawn, rest.batches), rest.left - taken, exhaust=rest.exhaust)
    own = {"prefetch_factor": dl.prefetch_factor, "pin_memory": dl.pin_memory}
    return _over(dl, batches, running._base_seed, dl.num_workers, False, own)


def shutdown_iterator(it: Any) -> None:
    with contextlib.suppress(Exception):
        it._shutdown_workers()


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
    """A map-style DataLoader whose workers do not already persist and that ends with the epoch: under a
    ``CombinedLoader`` a shorter loader cycles (``max_size_cycle``) or a longer one is cut (``min_size``), and
    how far such a loader runs its sampler depends on its workers, so it is left as it is."""
    if not isinstance(dl, DataLoader) or isinstance(dl.dataset, IterableDataset) or not draws_every_epoch(dl):
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
