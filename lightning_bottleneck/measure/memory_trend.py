"""Memory over the whole run, sampled every few steps at no measurable cost: process RSS or device memory.

:class:`MemorySampler` keeps at most ``capacity`` samples (step, MB) for the whole fit: when the buffer is
full it keeps every other sample and doubles its interval, so a run of any length is covered from its
first step to its last in bounded memory. A sample is one RSS read (Linux: one ``pread`` of
``/proc/self/statm``, :class:`StatmReader`; elsewhere ``psutil``, tens of microseconds) or, on CUDA,
``torch.cuda.memory_allocated`` (a counter read, no sync), every ``every`` steps; the per-step cost is one
integer comparison in the callback. :class:`MemoryTrend` is the pure result the rule
:mod:`lightning_bottleneck.rules.memory_creep` reads. Torch-free: the device reader is passed in.

Example::

    sampler = MemorySampler(every=10)
    for step in range(1, 1001):
        if step >= sampler.next_step:
            sampler.sample(step)
    trend = sampler.trend()      # MemoryTrend(source="rss", steps=[...], mb=[...])
"""

from __future__ import annotations

import contextlib
import os
from array import array
from collections.abc import Callable
from typing import Any

from lightning_bottleneck.evidence.memory_trend import DEFAULT_EVERY, MemoryTrend
from lightning_bottleneck.measure.cpus import psutil_module

__all__ = ["DEFAULT_CAPACITY", "MemorySampler", "StatmReader", "read_rss_mb"]

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


class StatmReader:
    """The RSS from ``/proc/self/statm`` (Linux) through one descriptor kept open: one ``pread`` a sample
    (0.6 us in a loop against psutil's 6 us, whose open, read and close of the same file, through several
    Python frames, cost ~100 us after a training step has evicted the caches: 9 us a step at a sample every
    10 steps of a 0.9 ms step). :meth:`open` is None where the file is not there (macOS, Windows: psutil
    then); :meth:`close` gives the descriptor back (the sampler's owner closes it in teardown)."""

    __slots__ = ("fd", "page_mb", "pid")

    def __init__(self, fd: int, page_mb: float) -> None:
        self.fd = fd
        self.page_mb = page_mb
        self.pid = os.getpid()

    @classmethod
    def open(cls) -> StatmReader | None:
        try:
            fd = os.open("/proc/self/statm", os.O_RDONLY)
        except (OSError, AttributeError):
            return None
        try:
            page_mb = os.sysconf("SC_PAGE_SIZE") / 2**20
            reader = cls(fd, page_mb)
            if reader() is None:
                raise OSError("unreadable")
        except (OSError, ValueError, AttributeError):
            os.close(fd)
            return None
        return reader

    def __call__(self) -> float | None:
        if self.fd < 0 or self.pid != os.getpid():  # closed, or a forked child: its own RSS is psutil's
            return read_rss_mb()
        try:
            return int(os.pread(self.fd, 96, 0).split()[1]) * self.page_mb
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


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
        self._statm = StatmReader.open() if reader is None else None
        self._read: Callable[[], float | None] = reader or self._statm or read_rss_mb
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

    def close(self) -> None:
        """Give back what the RSS reader holds (its descriptor); later samples read through psutil."""
        if self._statm is not None:
            self._statm.close()

    def trend(self) -> MemoryTrend:
        return MemoryTrend(self.source, list(self._steps), list(self._mb), self.every)
