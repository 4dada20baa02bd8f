"""Always-on step timing from the batch hooks: two ``perf_counter`` reads per step, no device syncs.

Torch-free. Memory is bounded: the most recent ``capacity`` steady-state steps are kept in fixed-size
``array`` ring buffers (no per-step allocation once full), plus running totals for the whole run.
"""

from __future__ import annotations

from array import array
from time import perf_counter

from lightning_bottleneck.evidence import TimingStats
from lightning_bottleneck.stats import percentile

DEFAULT_CAPACITY = 4096  # ~64 KiB of doubles; enough for stable median/p90 and rolling shares
# The profiled window's steps are left out of the timing when at least this many others remain: the consumption rate
# is read at the 25th percentile (rules/loader_pace.CONSUMPTION_QUANTILE), which takes 4 steps to be other than the
# fastest one; with fewer outside the window (a fit of a few steps) all are kept
MIN_STEPS_OUTSIDE = 5


class _Ring:
    __slots__ = ("buf", "capacity", "n")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.buf = array("d", bytes(8 * capacity))
        self.n = 0

    def push(self, value: float) -> None:
        self.buf[self.n % self.capacity] = value
        self.n += 1

    def values(self) -> list[float]:
        if self.n <= self.capacity:
            return list(self.buf[: self.n])
        i = self.n % self.capacity
        return list(self.buf[i:]) + list(self.buf[:i])

    def last(self, k: int) -> list[float]:
        """The most recent ``k`` values, oldest first, without copying the whole buffer."""
        k = min(k, self.n, self.capacity)
        end = self.n % self.capacity
        if k <= end:
            return list(self.buf[end - k : end])
        return list(self.buf[self.capacity - (k - end) :]) + list(self.buf[:end])


class StepTimer:
    """Times training steps from ``on_train_batch_start`` / ``on_train_batch_end``.

    * data wait of step N = start(N) - end(N-1);
    * step time of step N = end(N) - end(N-1);
    * a step whose gap held a validation run (:meth:`pause` was called) is not sampled at all: the
      validation loader's first fetch happens before any hook fires, so no subtraction could be exact;
    * the first batch of each epoch is an *epoch-start* wait (worker start-up), kept apart.

    One state says whether the next gap is sampled: the last step's end, forgotten at an epoch start and by
    :meth:`pause`. The marks run at every step of the fit, between a millisecond of Lightning's Python that leaves
    the interpreter's caches cold: in a fit each took ~1.7 us (start) and ~2.5 us (end) at the median where a warm
    ``timeit`` loop reads 0.5 us for both (``benchmarks/step_marks.py``, twenty-fourth session).
    """

    __slots__ = (
        "_epoch_start",
        "_first_in_epoch",
        "_prev_end",
        "_start",
        "epoch_start_wait_ms",
        "step_ms",
        "steps",
        "wait_ms",
    )

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.steps = 0
        self.step_ms = _Ring(capacity)
        self.wait_ms = _Ring(capacity)
        self.epoch_start_wait_ms: list[float] = []
        self._prev_end: float | None = None  # the last step's end, None when the next step is not sampled
        self._start: float | None = None
        self._epoch_start: float | None = None
        self._first_in_epoch = False

    # -- hooks ----------------------------------------------------------------------------------
    def epoch_start(self) -> None:
        self._epoch_start = perf_counter()
        self._prev_end = None
        self._first_in_epoch = True

    def batch_start(self) -> None:
        now = perf_counter()
        self._start = now
        prev = self._prev_end
        if prev is not None:
            ring = self.wait_ms
            ring.buf[ring.n % ring.capacity] = (now - prev) * 1e3
            ring.n += 1
        elif self._first_in_epoch and self._epoch_start is not None:
            self.epoch_start_wait_ms.append((now - self._epoch_start) * 1e3)

    def batch_end(self) -> bool:
        """The step ends now; False (nothing counted) when no step started since the last end."""
        now = perf_counter()
        if self._start is None:
            return False
        self.steps += 1
        prev = self._prev_end
        if prev is not None:
            ring = self.step_ms
            ring.buf[ring.n % ring.capacity] = (now - prev) * 1e3
            ring.n += 1
        self._first_in_epoch = False
        self._prev_end = now
        self._start = None
        return True

    def pause(self) -> None:
        """Something that is not training (the validation loop) runs before the next batch: skip it."""
        self._prev_end = None

    def resume(self) -> None:
        """Nothing to do: the gap is not sampled (the last end is forgotten) and the next batch end starts over."""

    # -- results --------------------------------------------------------------------------------
    def rolling(self, k: int) -> tuple[float, float]:
        """(median step ms, data-wait share) over the last ``k`` steady-state steps."""
        steps = self.step_ms.last(k)
        waits = self.wait_ms.last(len(steps))
        if not steps:
            return 0.0, 0.0
        total = sum(steps)
        return percentile(sorted(steps), 50.0), (sum(waits) / total if total > 0 else 0.0)

    def stats(
        self, samples_per_step: float | None = None, skip: tuple[int, int] | None = None
    ) -> TimingStats:
        """What was timed; ``skip``: ring positions ``[lo, hi)`` of the step ring (the profiled window's steps,
        which ran under the profiler: io_wait's profiled steps read 10.7 ms of compute for a step that takes 0.6 ms
        back-to-back) left out with their data waits, unless fewer than MIN_STEPS_OUTSIDE would be left."""
        steps = self.step_ms.values()
        waits = self.wait_ms.values()[-len(steps) :] if steps else []
        if skip is not None and len(waits) == len(steps):
            lo, hi = skip
            first = self.step_ms.n - len(steps)
            keep = [i for i in range(len(steps)) if not lo <= first + i < hi]
            if MIN_STEPS_OUTSIDE <= len(keep) < len(steps):
                steps = [steps[i] for i in keep]
                waits = [waits[i] for i in keep]
        return TimingStats(
            steps=self.steps,
            step_ms=steps,
            data_wait_ms=waits,
            epoch_start_wait_ms=list(self.epoch_start_wait_ms),
            samples_per_step=samples_per_step,
        )
