"""The training process's intra-op threads beside DataLoader workers on the CPU: how many, and holding them there.

PyTorch gives each DataLoader worker one thread (``torch.set_num_threads(1)`` in the worker loop) so that workers do
not oversubscribe the cores, but leaves the training process at one intra-op thread per core. When the step runs on
the CPU, those threads wait for work by spinning (OpenMP's default wait policy) and take the cores the workers load
on. Issue 29's cpu_transform on the 2-core VM (numpy FFTs per sample, a tiny MLP): an 8-epoch fit took 28.49 s with
2 persistent workers beside 2 intra-op threads, 17.57 s with ``OMP_NUM_THREADS=1``, 17.79 s with
``OMP_WAIT_POLICY=PASSIVE``, and 30.01 s (29.82 s at one thread) with loading in-process (``python
benchmarks/autotune_payoff.py --child cpu_transform settings '{"num_workers": 2, "persistent_workers": true}' 8 -1
OUT 11``); ``torch.set_num_threads(1)`` during the run does the same (``python benchmarks/threads_beside_workers.py``).
Where the loader probe times workers beside a CPU step, the training process keeps the cores they leave
(:func:`threads_beside_workers`), so that the figure is what the run gets with the advice (and autotune) setting
that count (``torch_threads``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["held_threads", "threads_beside_workers"]


def threads_beside_workers(cpus: int, workers: int, now: int | None = None) -> int | None:
    """The intra-op threads the training process keeps beside ``workers`` loader workers on ``cpus`` usable cores:
    the cores they leave, at least one; None with no workers, or where the process already runs that few
    (``now``: ``torch.get_num_threads()`` when None)."""
    if workers <= 0:
        return None
    keep = max(1, cpus - workers)
    now = torch.get_num_threads() if now is None else now
    return keep if keep < now else None


@contextlib.contextmanager
def held_threads(threads: int | None) -> Iterator[None]:
    """``torch.set_num_threads(threads)`` for the block, the process's own count back after it (None: unchanged)."""
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
