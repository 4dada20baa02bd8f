"""Memory over the whole run, sampled every few steps at no measurable cost: process RSS or device memory.

:class:`MemorySampler` keeps at most ``capacity`` samples (step, MB) for the whole fit: when the buffer is
full it keeps every other sample and doubles its interval, so a run of any length is covered from its
first step to its last in bounded memory. A sample is one RSS read through ``psutil`` (Linux, macOS,
Windows; tens of microseconds) or,
on CUDA, ``torch.cuda.memory_allocated`` (a counter read, no sync), every ``every`` steps; the per-step
cost is one integer comparison in the callback. :class:`MemoryTrend` is the pure result the rule
:mod:`lightning_bottleneck.rules.memory_creep` reads. Torch-free: the device reader is passed in.

Example::

    sampler = MemorySampler(every=10)
    for step in range(1, 1001):
        if step >= sampler.next_step:
            sampler.sample(step)
    trend = sampler.trend()      # MemoryTrend(source="rss", steps=[...], mb=[...])
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable
from typing import Any

from lightning_bottleneck.evidence.memory_trend import DEFAULT_EVERY, MemoryTrend
from lightning_bottleneck.measure.cpus import psutil_module

__all__ = ["DEFAULT_CAPACITY", "MemorySampler", "read_rss_mb"]

#: Samples kept (two arrays of doubles: 4 KiB); enough points for a stable least-squares slope.
DEFAULT_CAPACITY = 256


def read_rss_mb() -> float | None:
    """Resident set size of this process in MB (psutil: Linux, macOS, Windows); None without psutil or
    where unreadable (the sampler then stops, and the report carries psutil's one note)."""
    ps = psutil_module()
    if ps is None:
        return None
    try:
        return float(_process(ps).memory_info().rss) / 2**20
    except (OSError, ps.Error):
        return None


_PROCESS: Any = None


def _process(ps: Any) -> Any:
    """This process's ``psutil.Process``, made once per pid (making one reads /proc: ~60 us of a ~100 us
    sample); a forked child gets its own."""
    global _PROCESS
    if _PROCESS is None or _PROCESS.pid != os.getpid():
        _PROCESS = ps.Process()
    return _PROCESS


class MemorySampler:
    """Bounded samples of one memory reading for the whole run (see the module docstring)."""

    def __init__(
        self,
        every: int = DEFAULT_EVERY,
        capacity: int = DEFAULT_CAPACITY,
        reader: Callable[[], float | None] | None = None,
        source: str = "rss",
    ) -> None:
        if every < 1 or capacity < 4:
            raise ValueError(f"every must be >= 1 and capacity >= 4, got {every!r} and {capacity!r}")
        self.every = every
        self.capacity = capacity
        self.source = source
        self._read = reader or read_rss_mb
        self._steps = array("d")
        self._mb = array("d")
        self.next_step = every

    def sample(self, step: int) -> None:
        """Read memory now (``step``: the training steps done); schedule the next read."""
        self.next_step = step + self.every
        value = self._read()
        if value is None:
            self.next_step = 2**62  # unreadable here: never again
            return
        self._steps.append(float(step))
        self._mb.append(float(value))
        if len(self._steps) >= self.capacity:
            self._steps = self._steps[::2]
            self._mb = self._mb[::2]
            self.every *= 2
            self.next_step = int(self._steps[-1]) + self.every

    def trend(self) -> MemoryTrend:
        return MemoryTrend(self.source, list(self._steps), list(self._mb), self.every)
