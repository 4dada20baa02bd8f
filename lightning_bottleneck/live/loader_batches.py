"""The samplers and iterators a switched train DataLoader runs on (:mod:`lightning_bottleneck.live.loader_switch`
builds the loaders): the user's sampler drawing as before (:class:`SameDraws`), the rest of a running epoch
(:class:`Remaining`), the batches the user's workers still deliver after a switch (:class:`Drain`), and the rest of
an epoch followed by whole epochs (:class:`RestThenEpochs`).

Lightning tells a loader's samplers the epoch (``_set_sampler_epoch``: ``set_epoch`` on ``loader.sampler`` and on
``loader.batch_sampler.sampler``); where these objects stand in a loader's place they pass it on to the user's
sampler, or batch sampler's sampler, exactly as Lightning would have for the user's loader (a ``DistributedSampler``
shuffles each epoch by it).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Sampler

__all__ = ["READ_AHEAD_SLACK", "Drain", "Remaining", "RestThenEpochs", "SameDraws", "shutdown_iterator"]


def _tell_epoch(sampler: Any, epoch: int) -> None:
    set_epoch = getattr(sampler, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)


class SameDraws(Sampler):
    """The loader's own batch sampler (``source``: the ``BatchSampler`` around its sampler, or one of the user's;
    its sampler where it batches nothing), drawing from its generator exactly as it did under the previous setting.

    Two things a worker setting changes about the draws, both undone here:

    * ``DataLoader`` draws a base seed (``torch.empty((), dtype=torch.int64).random_(generator=loader.generator)``)
      when it creates an iterator, which a persistent iterator does once: with ``reused_draw``, every iteration
      after the first makes that draw first, as a new iterator would have.
    * ``RandomSampler`` draws one more permutation when asked past its last index (the tail of its ``__iter__``).
      Under Lightning's batch limit an in-process loader asks its batch sampler for its ``len`` batches and no more
      (a ``BatchSampler`` exhausts its sampler only to end a partial last batch), while workers always ask once
      more (the main process queues batches ahead until the batch sampler is exhausted). ``tail=True`` looks one
      batch ahead, so the batch sampler is exhausted with its last batch (the workers' draws, in-process);
      ``tail=False`` stops after ``len(source)`` batches (the in-process draws, with workers).

    As a loader's batch sampler, Lightning tells the epoch to ``source``'s sampler through :attr:`sampler`; as a
    loader's sampler, ``set_epoch`` reaches ``source``.
    """

    def __init__(
        self,
        source: Any,
        generator: torch.Generator | None,
        reused_draw: bool,
        tail: bool | None,
        started: int = 0,
    ) -> None:
        self.source = source
        self.generator = generator
        self.reused_draw = reused_draw
        self.tail = tail
        self.started = started  # 1: an iterator made for other batches came first (every iteration draws)

    @property
    def sampler(self) -> Any:
        """The sampler of ``source`` where it is a batch sampler (what Lightning tells the epoch), else None."""
        return getattr(self.source, "sampler", None)

    @property
    def batch_size(self) -> int | None:
        """``source``'s, for code that reads it off a loader's batch sampler (a ``BatchSampler``'s), else None."""
        return getattr(self.source, "batch_size", None)

    @property
    def drop_last(self) -> bool | None:
        return getattr(self.source, "drop_last", None)

    def __iter__(self) -> Iterator[Any]:
        self.started += 1
        if self.reused_draw and self.started > 1:  # a re-used iterator: the draw a new one would have made
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        it = iter(self.source)
        if self.tail is False:
            for _, index in zip(range(len(self.source)), it):
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
        return len(self.source)

    def set_epoch(self, epoch: int) -> None:
        _tell_epoch(self.source, epoch)


#: Batches kept beyond a worker iterator's read-ahead (:class:`Remaining`'s ``keep``): a margin, not a measure;
#: a few index lists cost nothing.
READ_AHEAD_SLACK = 16


class Remaining(Sampler):
    """The batches of index lists the running iterator has not fetched (in-process) or sent to its workers yet:
    exactly ``left`` of them, taken from its own batch sampler iterator. ``exhaust``: then asked once more, as the
    workers of the loader it continues would have asked (``RandomSampler``'s tail draw, which in-process loading
    under Lightning never makes). It counts the batches it handed out and keeps the last ``keep`` of them: those a
    worker iterator drew ahead of the fit (``loader_switch.back_to_own_setting``)."""

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


class Drain:
    """The fit loop's iterator for a loader switched mid-epoch from a worker iterator (``old``): first the
    ``left`` batches ``old``'s workers were given before the switch, in their order, then ``new``'s (the rest of
    the sampler). ``old``'s workers stop after its last batch (a persistent ``old`` is then dropped from its loader,
    ``owner``, which would otherwise re-use it); ``new``'s start at the switch, so their start-up overlaps the
    batches ``old`` still delivers."""

    def __init__(self, old: Any, left: int, new: Iterator[Any], owner: Any = None) -> None:
        self.old, self.left, self.new, self.owner = old, left, new, owner
        if left <= 0:
            self.stop_old()

    def stop_old(self) -> None:
        shutdown_iterator(self.old)
        if self.owner is not None and getattr(self.owner, "_iterator", None) is self.old:
            self.owner._iterator = None

    def __iter__(self) -> Drain:
        return self

    def __next__(self) -> Any:
        if self.left > 0:
            try:
                batch = next(self.old)
            except StopIteration:  # not expected (every batch sent is delivered): go on with the rest
                self.left = 0
                self.stop_old()
                return next(self.new)
            self.left -= 1
            if self.left == 0:
                self.stop_old()
            return batch
        return next(self.new)

    def _shutdown_workers(self) -> None:
        self.stop_old()
        shutdown_iterator(self.new)


class RestThenEpochs(Sampler):
    """A persistent iterator's batches: on its first iteration the rest of the running epoch (``rest``), on every
    later one a whole epoch of ``epochs`` (the loader's own batch sampler, drawing as before: :class:`SameDraws`). Counted when iterated, not when ``iter()`` is called: a DataLoader
    iterator calls ``iter()`` on its batch sampler once more than it iterates it. Lightning tells the epoch to
    :attr:`sampler`, as it would have told the user's loader."""

    def __init__(self, rest: Remaining, epochs: SameDraws) -> None:
        self.rest = rest
        self.epochs = epochs
        self.started = 0

    @property
    def sampler(self) -> Any:
        """What Lightning's ``_set_sampler_epoch`` reaches through this batch sampler: ``epochs``' sampler."""
        return getattr(self.epochs, "sampler", None)

    @property
    def batch_size(self) -> int | None:
        return self.epochs.batch_size

    @property
    def drop_last(self) -> bool | None:
        return self.epochs.drop_last

    def __iter__(self) -> Iterator[Any]:
        self.started += 1
        yield from (self.rest if self.started == 1 else self.epochs)

    def __len__(self) -> int:
        return len(self.epochs)


def shutdown_iterator(it: Any) -> None:
    with contextlib.suppress(Exception):
        it._shutdown_workers()
