"""Which steps of a trace are analysed: found, filtered and aligned once, for every metric.

:func:`analysed_steps` finds the training steps of one rank's trace (``ProfilerStep#N`` spans, else
consecutive ``Optimizer.step#`` spans, else the whole traced window), drops steps that ran the validation
loop and one-off stalls, and on GPU traces aligns each step to the device work it launched
(torch-tb-profiler's alignment). Every metric (:mod:`~lightning_bottleneck.analysis.trace_metrics`,
:mod:`~lightning_bottleneck.analysis.communication`) then measures the same :class:`Steps`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lightning_bottleneck.analysis.intervals import Intervals, merge
from lightning_bottleneck.trace.model import DEVICE_WORK_KINDS, EventKind, Trace
from lightning_bottleneck.vocabulary import OPTIMIZER_STEP_PREFIX, PROFILER_STEP_PREFIX, VALIDATION_LABEL

__all__ = ["Steps", "analysed_steps", "launch_times"]

#: torch-tb-profiler drops trailing steps whose device work was not fully captured: a last step with
#: fewer than this fraction of the previous step's device events (``_update_steps_duration``).
INCOMPLETE_TAIL_STEP_RATIO = 0.8

#: Minimum number of ``Optimizer.step#`` spans on one thread to delimit steps with them when the trace
#: has no ``ProfilerStep#N`` markers (two spans give one complete step between them).
MIN_OPTIMIZER_STEPS = 2

#: A step more than this many times the window's median step is a one-off stall, not the run's pattern:
#: a steady training loop's steps vary by tens of percent, and torch.utils.benchmark flags measurements
#: whose spread is a fraction of the median as noisy already; 3x is far outside any such spread.
OUTLIER_STEP_RATIO = 3.0
#: ... but only when such steps are rare: at most a third of the window (else they are the pattern).
OUTLIER_MAX_FRACTION = 1.0 / 3.0
#: Fewer steps than this give no meaningful median to compare against.
OUTLIER_MIN_STEPS = 3


@dataclass(frozen=True)
class Steps:
    """The analysed steps of one rank: ``[starts[i], ends[i])`` in trace µs, sorted, not overlapping.

    ``main_thread`` is the host thread that carries the step markers (the training loop); ``source``
    says how the steps were delimited (a sentence when it had to fall back); ``notes`` say what was
    dropped and why.
    """

    starts: np.ndarray
    ends: np.ndarray
    main_thread: int
    source: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def windows(self) -> Intervals:
        return merge(self.starts, self.ends)

    @property
    def count(self) -> int:
        return int(self.starts.shape[0])

    @property
    def durations(self) -> np.ndarray:
        return self.ends - self.starts

    @property
    def total(self) -> float:
        """Summed step time (µs): the denominator of every share."""
        return float(self.durations.sum())

    def contains(self, ts: np.ndarray) -> np.ndarray:
        """Mask of timestamps falling inside one of the steps."""
        i = np.searchsorted(self.starts, ts, side="right") - 1
        ok = i >= 0
        ok[ok] &= ts[ok] < self.ends[i[ok]]
        return ok

    def keep(self, mask: np.ndarray, note: str | None = None) -> Steps:
        """The steps where ``mask`` is true (with a note saying why the rest went)."""
        notes = self.notes if note is None else (*self.notes, note)
        return Steps(self.starts[mask], self.ends[mask], self.main_thread, self.source, notes)


def analysed_steps(trace: Trace, launch: tuple[np.ndarray, np.ndarray] | None = None) -> Steps | None:
    """The steps every metric of ``trace`` is computed on; ``None`` when the trace has no host events.

    ``launch`` is :func:`launch_times` of the trace when the caller already has it.
    """
    steps = find_steps(trace)
    if steps is None:
        return None
    steps = drop_validation_steps(trace, steps)
    steps = drop_outlier_steps(steps)
    if trace.has_device_events:
        launch_ts, launch_end = launch if launch is not None else launch_times(trace)
        steps = align_steps_to_device(trace, steps, launch_ts, launch_end)
    return steps


def find_steps(trace: Trace) -> Steps | None:
    """Raw steps: ``ProfilerStep#N`` spans on their busiest thread, else ``Optimizer.step#`` to
    ``Optimizer.step#``, else the busiest host thread's whole traced window as one step."""
    host = np.isin(trace.kind, (EventKind.CPU_OP, EventKind.USER_ANNOTATION))
    if not host.any():
        return None
    is_step = host & trace.name_mask(lambda n: n.startswith(PROFILER_STEP_PREFIX))
    if is_step.any():
        threads, counts = np.unique(trace.thread[is_step], return_counts=True)
        main = int(threads[np.argmax(counts)])
        sel = np.flatnonzero(is_step & (trace.thread == main))
        order = np.argsort(trace.ts[sel], kind="stable")
        sel = sel[order]
        return Steps(trace.ts[sel], trace.end[sel], main, "ProfilerStep")
    main = _busiest_thread(trace, host)
    opt = host & (trace.thread == main) & trace.name_mask(lambda n: n.startswith(OPTIMIZER_STEP_PREFIX))
    if int(opt.sum()) >= MIN_OPTIMIZER_STEPS:
        ends = np.sort(trace.end[opt])
        return Steps(
            ends[:-1],
            ends[1:],
            main,
            f"no ProfilerStep#N markers: {ends.size - 1} step(s) delimited by consecutive "
            "Optimizer.step# spans on the main thread",
        )
    sel = host & (trace.thread == main)
    start, end = float(trace.ts[sel].min()), float(trace.end[sel].max())
    return Steps(
        np.array([start]),
        np.array([end]),
        main,
        "no ProfilerStep#N markers and no repeated Optimizer.step#: the whole traced window of the "
        f"busiest host thread ({(end - start) / 1000.0:.1f} ms) is analysed as one step",
    )


def drop_validation_steps(trace: Trace, steps: Steps) -> Steps:
    """Steps that contain the callback's ``bottleneck/validation`` label are not training: drop them.

    The validation loader's first fetch happens before any hook can label it, so subtracting the label's
    span would still count that fetch as training data wait; dropping the whole step is exact.
    """
    is_val = (trace.kind == EventKind.USER_ANNOTATION) | (trace.kind == EventKind.CPU_OP)
    is_val &= trace.name_mask(lambda n: n == VALIDATION_LABEL)
    if not is_val.any():
        return steps
    val_ts = np.sort(trace.ts[is_val])
    first_after_start = np.searchsorted(val_ts, steps.starts, side="left")
    contains = (first_after_start < val_ts.size) & (
        val_ts[np.minimum(first_after_start, val_ts.size - 1)] < steps.ends
    )
    if contains.all() or not contains.any():
        return steps
    note = f"{int(contains.sum())} profiled step(s) skipped: the validation loop ran inside them"
    return steps.keep(~contains, note)


def drop_outlier_steps(steps: Steps) -> Steps:
    """A few steps far slower than the rest are one-off stalls (a GC pass, a checkpoint, an I/O hiccup).

    Over a window of a handful of steps one such stall would dominate every share and flip the verdict,
    so steps longer than ``OUTLIER_STEP_RATIO`` x the median step are set aside, as long as they are at
    most ``OUTLIER_MAX_FRACTION`` of the window (a stall that recurs more often is the run's real pattern).
    """
    n = steps.count
    if n < OUTLIER_MIN_STEPS:
        return steps
    durations = steps.durations
    median = float(np.median(durations))
    slow = durations > OUTLIER_STEP_RATIO * median
    if not slow.any() or slow.sum() > OUTLIER_MAX_FRACTION * n:
        return steps
    worst = float(durations[slow].max())
    note = (
        f"{int(slow.sum())} profiled step(s) set aside as one-off stalls: up to {worst / 1000.0:.1f} ms "
        f"against a median of {median / 1000.0:.1f} ms (over {OUTLIER_STEP_RATIO:g}x the median)"
    )
    return steps.keep(~slow, note)


def _busiest_thread(trace: Trace, host: np.ndarray) -> int:
    """The host thread whose ops cover the most wall time."""
    best, best_cover = 0, -1.0
    for thread in np.unique(trace.thread[host]):
        sel = host & (trace.thread == thread)
        cover = merge(trace.ts[sel], trace.end[sel]).total
        if cover > best_cover:
            best, best_cover = int(thread), cover
    return best


def launch_times(trace: Trace, with_sync: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """For every device event: start/end of the runtime call with the same correlation id (NaN if none)."""
    n = len(trace)
    launch_ts = np.full(n, np.nan)
    launch_end = np.full(n, np.nan)
    rt = np.flatnonzero((trace.kind == EventKind.RUNTIME) & (trace.correlation >= 0))
    kinds = (*DEVICE_WORK_KINDS, EventKind.CUDA_SYNC) if with_sync else DEVICE_WORK_KINDS
    dev = np.flatnonzero(np.isin(trace.kind, kinds) & (trace.correlation >= 0))
    if rt.size == 0 or dev.size == 0:
        return launch_ts, launch_end
    order = np.argsort(trace.correlation[rt], kind="stable")
    rt_corr = trace.correlation[rt][order]
    rt_idx = rt[order]
    pos = np.clip(np.searchsorted(rt_corr, trace.correlation[dev]), 0, rt_corr.size - 1)
    found = rt_corr[pos] == trace.correlation[dev]
    launch_ts[dev[found]] = trace.ts[rt_idx[pos[found]]]
    launch_end[dev[found]] = trace.end[rt_idx[pos[found]]]
    return launch_ts, launch_end


def align_steps_to_device(trace: Trace, steps: Steps, launch_ts: np.ndarray, launch_end: np.ndarray) -> Steps:
    """torch-tb-profiler's step alignment: a step ends when the device work it launched ends.

    A device op belongs to the step whose host span wholly contains its runtime launch call. Step i then
    runs from max(end of step i-1, its host start) to max(its host end, end of its device work); the first
    step starts after device work launched before it. Trailing steps whose device work was cut off by the
    end of the trace are dropped, as torch-tb-profiler does.
    """
    dev = np.isin(trace.kind, DEVICE_WORK_KINDS)
    idx = np.flatnonzero(dev & ~np.isnan(launch_ts))
    n = steps.count
    dev_max = np.full(n, -np.inf)
    dev_min = np.full(n, np.inf)
    matched = np.zeros(n, dtype=np.int64)
    step_of = np.searchsorted(steps.starts, launch_ts[idx], side="right") - 1
    ok = step_of >= 0
    ok[ok] &= launch_end[idx[ok]] <= steps.ends[step_of[ok]]
    in_step = idx[ok]
    s_of = step_of[ok]
    np.maximum.at(dev_max, s_of, trace.end[in_step])
    np.minimum.at(dev_min, s_of, trace.ts[in_step])
    np.add.at(matched, s_of, 1)
    if not matched.any():
        return steps
    prev_end = float(steps.starts[0])
    if np.isfinite(dev_min[0]):
        unmatched = np.ones(len(trace), dtype=bool)
        unmatched[in_step] = False
        early = dev & unmatched & (trace.end < dev_min[0])
        if early.any():
            prev_end = max(prev_end, float(trace.end[early].max()))
    starts = np.empty(n)
    ends = np.empty(n)
    for i in range(n):
        start = max(prev_end, float(steps.starts[i]))
        end = float(steps.ends[i]) if matched[i] == 0 else max(float(steps.ends[i]), float(dev_max[i]))
        end = max(end, start)
        starts[i], ends[i] = start, end
        prev_end = end
    notes = steps.notes
    source = steps.source
    keep = n
    if n > 1:
        last = int(np.flatnonzero(matched > 0)[-1])
        keep = last + 1
        if last > 0 and matched[last - 1] * INCOMPLETE_TAIL_STEP_RATIO > matched[last]:
            keep = last
        if keep < n:
            notes = (
                *notes,
                f"dropped the last {n - keep} step(s): the trace ends before their device work does",
            )
            source = f"{source} (last {n - keep} step(s) dropped: device work cut off by the trace end)"
    return Steps(starts[:keep], ends[:keep], steps.main_thread, source, notes)
