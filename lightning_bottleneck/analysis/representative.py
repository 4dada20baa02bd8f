"""Is the profiled window representative of the run? Its step times against the always-on ones outside it.

Pure (no torch, no lightning): lists of step times in ms in, a :class:`WindowCheck` out. A window much
slower than the rest (profiler overhead on a many-small-op model, a busy machine, more intra-op threads
than free cores) or much faster (the rest held validation, checkpoints or stalls) makes every share
measured in it a poor guide to the run: the caller lowers the confidence and shows the note.

Example::

    check = check_window(window_ms=[3100, 3200, 3150], outside_ms=[118, 120, 117, 119],
                         intra_op_threads=2, free_cores=1.1)
    check.representative     # False
    check.likely_cause       # "threads": 2 intra-op threads for about 1.1 free cores ...
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from statistics import median
from typing import Any

__all__ = ["FASTER_RATIO", "SLOWER_RATIO", "WindowCheck", "check_window"]

#: The window is "much slower" when its median step is at least this many times the median outside it.
#: torch.profiler's CPU-side cost is ~1-3 µs per recorded op (Kineto's op callbacks; torch.profiler docs
#: and PyTorch issue #71302 measure 10-30% on eager CPU loops), so a compute-bound step is slowed
#: by well under 1.3x; 1.5x is beyond that with room for step-to-step spread.
SLOWER_RATIO = 1.5
#: ... and "much faster" when its median is at most 1/this of the median outside: steps outside the window
#: that are 1.3x slower than the window point to work the window did not see (validation, checkpoints,
#: stalls, contention outside it). A smaller band than SLOWER_RATIO because the profiler never speeds
#: a step up.
FASTER_RATIO = 1.3
#: Fewer steps than this on either side give no meaningful median.
MIN_STEPS = 3
#: torch.profiler's host cost per recorded op (µs): Kineto's record_function/op callback cost on a
#: current x86 core (torch.profiler docs: "~1-2 µs"; measured 1.5-3 µs here on the tiny-op scenario).
PROFILER_US_PER_OP = 2.0
#: The profiler is named as the cause when its estimated cost explains at least this share of the excess.
PROFILER_EXPLAINS = 0.5


@dataclass(frozen=True)
class WindowCheck:
    representative: bool
    ratio: float | None  # window median / outside median (>1: the window is slower)
    window_median_ms: float | None
    outside_median_ms: float | None
    direction: str | None  # "slower" | "faster" | None
    likely_cause: str | None  # "contention" | "threads" | "profiler" | "outside_stalls" | "unknown" | None
    note: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return self.note


def check_window(
    window_ms: list[float],
    outside_ms: list[float],
    *,
    contended: bool = False,
    intra_op_threads: int | None = None,
    free_cores: float | None = None,
    ops_per_step: float | None = None,
    slower_ratio: float = SLOWER_RATIO,
    faster_ratio: float = FASTER_RATIO,
) -> WindowCheck:
    """Compare the profiled steps' times with the steps outside the window (both in ms).

    Args:
        window_ms: the analysed steps' durations (``TraceSummary.step_times_ms``).
        outside_ms: the always-on step times of the same run outside the window (after warm-up).
        contended: the busy-machine verdict for the window (``contention.assess(...).busy``).
        intra_op_threads: ``torch.get_num_threads()`` during the run.
        free_cores: CPUs left free by other processes (``Contention.free_cores``), or the usable CPUs.
        ops_per_step: host ops per step from the trace (``TraceSummary.cpu_ops_per_step``).
    """
    w = [float(x) for x in window_ms if x is not None and x > 0]
    o = [float(x) for x in outside_ms if x is not None and x > 0]
    if len(w) < MIN_STEPS or len(o) < MIN_STEPS:
        return WindowCheck(True, None, _med(w), _med(o), None, None,
                           f"too few steps to compare the window with the rest ({len(w)} in, {len(o)} out)")  # fmt: skip
    wm, om = median(w), median(o)
    ratio = wm / om
    head = f"profiled steps took {wm:.1f} ms (median) against {om:.1f} ms outside the window ({ratio:.2f}x)"
    if ratio < slower_ratio and ratio > 1.0 / faster_ratio:
        return WindowCheck(True, round(ratio, 4), wm, om, None, None, head)
    if ratio <= 1.0 / faster_ratio:
        note = (
            f"{head}: the rest of the run was slower than the window; steps outside it held work the window "
            "did not see (validation, checkpointing, stalls) or ran on a busier machine"
        )
        return WindowCheck(False, round(ratio, 4), wm, om, "faster", "outside_stalls", note)
    cause, why = _slow_cause(wm, om, contended, intra_op_threads, free_cores, ops_per_step)
    return WindowCheck(False, round(ratio, 4), wm, om, "slower", cause, f"{head}: {why}")


def _slow_cause(
    wm: float,
    om: float,
    contended: bool,
    threads: int | None,
    free: float | None,
    ops_per_step: float | None,
) -> tuple[str, str]:
    if threads is not None and free is not None and threads > free + 0.5 and max(1, int(free)) < threads:
        return "threads", (
            f"{threads} intra-op threads for about {free:.1f} free core(s): threads wait on a descheduled "
            f"core at every parallel op; torch.set_num_threads({max(1, int(free))}) or a quieter machine"
        )
    if contended:
        return "contention", "other processes took CPUs the run wanted while the window was profiled"
    if ops_per_step:
        cost_ms = ops_per_step * PROFILER_US_PER_OP / 1000.0
        if cost_ms >= PROFILER_EXPLAINS * (wm - om):
            return "profiler", (
                f"profiler overhead: {ops_per_step:.0f} ops per step at ~{PROFILER_US_PER_OP:g} µs each "
                f"(~{cost_ms:.1f} ms) on a many-small-op model; shares of overhead are inflated"
            )
    return "unknown", "the window's steps differ from the rest of the run (data, a schedule change, GC, I/O)"


def _med(x: list[float]) -> float | None:
    return median(x) if x else None
