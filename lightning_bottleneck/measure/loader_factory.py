"""The loader probe's own DataLoaders: a copy of the training loader's settings over the same dataset.

:func:`plan_probe` reads what the probe needs from the training DataLoader (dataset, batch size, whether it
shuffles, collate_fn, pin_memory, drop_last, worker_init_fn, multiprocessing context) without iterating it, or
says in a note why the loader cannot be probed (an IterableDataset is never consumed). :func:`probe_dataloader`
builds one loader per setting from that plan, with a sampler that draws from its own ``torch.Generator`` (so
neither the training sampler's state nor the global RNGs are touched), never persistent workers, and a timeout
so that a stuck worker cannot hold the probe past its budget.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler, Sampler

from lightning_bottleneck.evidence.loader_ladder import LoaderLadder

__all__ = ["ProbePlan", "batch_nbytes", "plan_probe", "probe_dataloader", "shutdown_workers"]


class _CyclingSampler(Sampler[int]):
    """Indices 0..n-1, shuffled with its own generator when asked, repeated without end."""

    def __init__(self, n: int, shuffle: bool, seed: int) -> None:
        self.n = n
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator()
        g.manual_seed(self.seed)
        while True:
            order = torch.randperm(self.n, generator=g).tolist() if self.shuffle else range(self.n)
            yield from order


@dataclass
class ProbePlan:
    """What the probe copies from the training loader: its dataset, batch size, order and settings."""

    dataset: Any
    batch_size: int
    shuffle: bool
    kwargs: dict[str, Any]


def plan_probe(loader: DataLoader, ladder: LoaderLadder, seed: int) -> ProbePlan | None:
    """What the probe copies from ``loader`` (only read), or None with a note on ``ladder`` saying why not."""
    dataset = loader.dataset
    if isinstance(dataset, IterableDataset):
        ladder.notes.append(
            "Loader probe skipped: the dataset is an IterableDataset (a stream cannot be re-read safely; "
            "it was not consumed)."
        )
        return None
    try:
        n = len(dataset)  # type: ignore[arg-type]
    except TypeError:
        ladder.notes.append("Loader probe skipped: the dataset has no len(), so it cannot be sampled.")
        return None
    if n == 0:
        ladder.notes.append("Loader probe skipped: the dataset is empty.")
        return None
    batch_size = loader.batch_size
    if batch_size is None:
        batch_size = getattr(loader.batch_sampler, "batch_size", None)
        ladder.notes.append(
            "The loader uses a custom batch_sampler: the probe times plain batches of its size."
        )
    if not isinstance(batch_size, int) or batch_size <= 0:
        ladder.notes.append("Loader probe skipped: the batch size cannot be read from the DataLoader.")
        return None
    sampler = loader.sampler
    inner = getattr(sampler, "shuffle", None)  # DistributedSampler(shuffle=...)
    shuffle = isinstance(sampler, RandomSampler) or bool(inner)
    pin = bool(loader.pin_memory) and torch.cuda.is_available()
    kwargs: dict[str, Any] = {
        "collate_fn": loader.collate_fn,
        "pin_memory": pin,
        "drop_last": loader.drop_last,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
    }
    if pin and loader.pin_memory_device:
        kwargs["pin_memory_device"] = loader.pin_memory_device
    return ProbePlan(dataset, batch_size, shuffle, kwargs)


def probe_dataloader(
    plan: ProbePlan, workers: int, prefetch: int | None, seed: int, deadline: float
) -> DataLoader:
    """The probe's own DataLoader over the training loader's dataset: its own sampler and generator (seeded), the
    training loader's collate_fn, pin_memory, drop_last, worker_init_fn and multiprocessing context (the last two
    only with workers), never persistent."""
    generator = torch.Generator()
    generator.manual_seed(seed)
    kwargs = dict(plan.kwargs)
    if workers == 0:
        kwargs.pop("multiprocessing_context", None)
        kwargs.pop("worker_init_fn", None)
    else:
        kwargs["prefetch_factor"] = prefetch
        # A stuck worker cannot hold the probe past its budget (torch raises after `timeout` seconds).
        kwargs["timeout"] = max(1.0, deadline - time.perf_counter() + 1.0)
    return DataLoader(
        plan.dataset,
        batch_size=plan.batch_size,
        sampler=_CyclingSampler(len(plan.dataset), plan.shuffle, seed),
        num_workers=workers,
        persistent_workers=False,
        generator=generator,
        **kwargs,
    )


def shutdown_workers(it: Any) -> None:
    shutdown = getattr(it, "_shutdown_workers", None)
    if callable(shutdown):
        with contextlib.suppress(Exception):  # best effort; the iterator's __del__ retries
            shutdown()


def batch_nbytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.element_size() * obj.nelement()
    if isinstance(obj, dict):
        return sum(batch_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(batch_nbytes(v) for v in obj)
    nbytes = getattr(obj, "nbytes", None)
    return int(nbytes) if isinstance(nbytes, int) else 0
