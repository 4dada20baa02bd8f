"""Per-step phase times: where each profiled step's wall time went, for the per-step picture.

Pure (numpy only, no torch). Input: a parsed :class:`~lightning_bottleneck.trace.model.Trace` and the
analysed step windows (``(start, end)`` in trace µs, from the step discovery shared with the rest of the
analysis). Output: a :class:`StepPhases`, milliseconds per phase for every step, phases disjoint so that
they add up to the step exactly.

The phases are read on the training loop's host thread, from the callback's ``bottleneck/<phase>``
``record_function`` labels (``data_wait``, ``training_step``, ``backward``, ``optimizer_step``) and from
torch's own spans (``enumerate(DataLoader)#...__next__``, ``Optimizer.step#``/``Optimizer.zero_grad#``,
sync runtime calls, collectives). Where they nest (an ``.item()`` sync inside ``training_step``, an
all-reduce inside ``backward``) the narrower, more specific phase wins, in the order of
:data:`PRECEDENCE`; time no phase claims is ``other`` (Python between hooks, logging, callbacks, and on a
GPU the tail of a step whose device work outlasts the host loop).

Example::

    >>> from lightning_bottleneck.trace.reader import load_trace
    >>> trace = load_trace("runs/.../bottleneck/host_rank0.123.pt.trace.json.gz")  # doctest: +SKIP
    >>> starts, ends, main = analysed_step_windows(trace)  # doctest: +SKIP
    >>> print(step_phases(trace, list(zip(starts, ends)), main_thread=main))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightning_bottleneck.analysis.intervals import (
    EMPTY,
    Intervals,
    intersect,
    merge,
    per_window_total,
    subtract,
)
from lightning_bottleneck.categories import Phase
from lightning_bottleneck.trace.model import DEVICE_WORK_KINDS, EventKind, Trace
from lightning_bottleneck.vocabulary import (
    NAMESPACE,
    PHASE_BACKWARD,
    PHASE_DATA_WAIT,
    PHASE_OPTIMIZER_STEP,
    PHASE_TRAINING_STEP,
    PROFILER_STEP_PREFIX,
    label,
)

__all__ = ["PRECEDENCE", "Phase", "StepPhase", "StepPhases", "analysed_step_windows", "step_phases"]


#: Which phase owns an instant claimed by several (nested spans): the narrowest, most specific first.
#: A collective or a blocking sync is the reason the host sat still, whatever hook it happened in;
#: a DataLoader fetch never nests in the others; the optimizer's span (torch's ``Optimizer.step#``)
#: wraps Lightning's closure, so backward and forward must come after it only where they are labelled
#: themselves, which the callback's labels guarantee (they are separate, consecutive spans).
PRECEDENCE = (
    Phase.COMMUNICATION,
    Phase.SYNC,
    Phase.DATA_WAIT,
    Phase.BACKWARD,
    Phase.FORWARD,
    Phase.OPTIMIZER,
)

#: Phases device work can be launched in (the host's phase at the launch call's start), in carving order.
LAUNCH_PHASES = (Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER, Phase.DATA_WAIT)

#: Device work starting within this of a gap's end is what ended the gap (timestamps in µs with ns
#: fractions: float rounding), as in trace_metrics.
GAP_END_TOLERANCE_US = 1e-3

#: The callback's labels -> phase.
LABELS = {
    label(PHASE_DATA_WAIT): Phase.DATA_WAIT,
    label(PHASE_TRAINING_STEP): Phase.FORWARD,
    label(PHASE_BACKWARD): Phase.BACKWARD,
    label(PHASE_OPTIMIZER_STEP): Phase.OPTIMIZER,
}


@dataclass
class StepPhase:
    """One step: its number (``ProfilerStep#N`` when known), start (trace µs) and ms per phase."""

    step: int
    start_us: float
    duration_ms: float
    ms: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "start_us": round(self.start_us, 3),
            "duration_ms": round(self.duration_ms, 4),
            "ms": {k: round(v, 4) for k, v in self.ms.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepPhase:
        return cls(int(d["step"]), float(d["start_us"]), float(d["duration_ms"]), dict(d["ms"]))


@dataclass
class StepPhases:
    """Per-step phase times of one rank's profiled window; ``str()`` prints them as a table."""

    steps: list[StepPhase] = field(default_factory=list)
    labelled: bool = False  # the callback's bottleneck/ labels were found (else torch's spans only)
    notes: list[str] = field(default_factory=list)

    @property
    def phases(self) -> tuple[str, ...]:
        return tuple(p.value for p in Phase)

    def mean_ms(self) -> dict[str, float]:
        if not self.steps:
            return {p: 0.0 for p in self.phases}
        return {p: sum(s.ms.get(p, 0.0) for s in self.steps) / len(self.steps) for p in self.phases}

    def to_dict(self) -> dict[str, Any]:
        return {
            "phases": list(self.phases),
            "labelled": self.labelled,
            "steps": [s.to_dict() for s in self.steps],
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepPhases:
        return cls(
            [StepPhase.from_dict(s) for s in d.get("steps", [])],
            bool(d.get("labelled", False)),
            list(d.get("notes", [])),
        )

    def __str__(self) -> str:
        head = "step  " + "".join(f"{p:>14}" for p in self.phases) + f"{'total':>10}"
        rows = [head]
        for s in self.steps:
            cells = "".join(f"{s.ms.get(p, 0.0):>14.2f}" for p in self.phases)
            rows.append(f"{s.step:<6}{cells}{s.duration_ms:>10.2f}")
        return "\n".join(rows) + "\n(ms per step)"


def step_phases(
    trace: Trace,
    windows: Sequence[tuple[float, float]] | tuple[np.ndarray, np.ndarray],
    main_thread: int | None = None,
) -> StepPhases:
    """Milliseconds per :class:`Phase` for each step window of ``trace``; the phases add up to the step.

    ``windows`` is a sequence of ``(start_us, end_us)`` pairs or a ``(starts, ends)`` pair of arrays, in
    the trace's clock. ``main_thread`` is the interned thread id of the training loop; by default the
    thread carrying the most ``ProfilerStep#``/``bottleneck/`` labels (else the one with most host events).
    """
    starts, ends = _as_arrays(windows)
    out = StepPhases()
    if starts.size == 0:
        out.notes.append("no step windows: no per-step phases")
        return out
    host = np.isin(trace.kind, (EventKind.CPU_OP, EventKind.USER_ANNOTATION))
    main = trace.thread == (main_thread if main_thread is not None else _main_thread(trace, host))
    on_main = host & main
    spans = _phase_spans(trace, on_main)
    out.labelled = bool((on_main & trace.name_mask(lambda n: n in LABELS)).any())
    remaining = merge(starts, ends)
    host_phase: dict[Phase, Intervals] = {}
    for phase in PRECEDENCE:
        take = intersect(spans.get(phase, EMPTY), remaining)
        host_phase[phase] = take
        remaining = subtract(remaining, take)
    host_phase[Phase.OTHER] = remaining
    if trace.has_device_events:
        claimed, drain = _device_phases(trace, merge(starts, ends), host_phase, main, out.labelled)
        out.notes.append(
            "device trace: each phase is device time of the work launched in it (communication: exposed "
            "collective kernels); device idle time goes to what the host was doing (data wait, sync), else "
            "to idle/other"
        )
    else:
        claimed, drain = host_phase, EMPTY
    if not out.labelled:
        out.notes.append(
            "no bottleneck/ labels in the trace: forward and backward are told apart only "
            + (
                "by the launching thread (autograd's device thread launches backward)"
                if trace.has_device_events
                else "where torch records them (they count as other here)"
            )
        )
    per_phase = {p: per_window_total(claimed[p], starts, ends) / 1000.0 for p in Phase}
    if len(drain):
        # As the breakdown does: device idle the host caused (it launched late) is sync, up to the time
        # the host spent blocked in syncs in that step (the pipeline drains while it waits, then idles
        # until the host catches up).
        blocked = intersect(spans.get(Phase.SYNC, EMPTY), merge(starts, ends))  # all sync calls, as sync_api
        host_sync = per_window_total(blocked, starts, ends) / 1000.0
        drained = per_window_total(drain, starts, ends) / 1000.0
        extra = np.minimum(drained, np.maximum(0.0, host_sync - per_phase[Phase.SYNC]))
        per_phase[Phase.SYNC] = per_phase[Phase.SYNC] + extra
        per_phase[Phase.OTHER] = per_phase[Phase.OTHER] - extra
    numbers = _step_numbers(trace, on_main, starts)
    for i in range(starts.size):
        ms = {p.value: float(per_phase[p][i]) for p in Phase}
        out.steps.append(StepPhase(numbers[i], float(starts[i]), float(ends[i] - starts[i]) / 1000.0, ms))
    return out


def analysed_step_windows(trace: Trace) -> tuple[np.ndarray, np.ndarray, int] | None:
    """The analysed steps of ``trace`` as ``(starts, ends, main_thread)``: the same steps every other
    metric uses (:func:`~lightning_bottleneck.analysis.steps.analysed_steps`); None without host events."""
    from lightning_bottleneck.analysis.steps import analysed_steps

    steps = analysed_steps(trace)
    if steps is None:
        return None
    return steps.starts, steps.ends, steps.main_thread


def step_phases_from_file(path: Any) -> StepPhases:
    """Parse one trace file and compute its per-step phases over the analysed steps."""
    from lightning_bottleneck.trace.reader import load_trace

    trace = load_trace(path)
    found = analysed_step_windows(trace)
    if found is None:
        return StepPhases(notes=["no host events in the trace: no per-step phases"])
    starts, ends, main = found
    return step_phases(trace, (starts, ends), main_thread=main)


# ---- internals ---------------------------------------------------------------------------------------


def _as_arrays(windows: Any) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(windows, tuple) and len(windows) == 2 and isinstance(windows[0], np.ndarray):
        starts, ends = np.asarray(windows[0], dtype=np.float64), np.asarray(windows[1], dtype=np.float64)
    else:
        pairs = np.asarray(list(windows), dtype=np.float64).reshape(-1, 2)
        starts, ends = pairs[:, 0], pairs[:, 1]
    order = np.argsort(starts, kind="stable")
    return starts[order], np.maximum(ends[order], starts[order])


def _main_thread(trace: Trace, host: np.ndarray) -> int:
    labels = host & trace.name_mask(lambda n: n.startswith((PROFILER_STEP_PREFIX, NAMESPACE)))
    pool = labels if labels.any() else host
    if not pool.any():
        return -1
    threads, counts = np.unique(trace.thread[pool], return_counts=True)
    return int(threads[np.argmax(counts)])


def _merged(trace: Trace, mask: np.ndarray) -> Intervals:
    return merge(trace.ts[mask], trace.end[mask]) if mask.any() else EMPTY


def _phase_spans(trace: Trace, on_main: np.ndarray) -> dict[Phase, Intervals]:
    """Raw (possibly nested) intervals of each phase on the training thread."""
    from lightning_bottleneck.vocabulary import (
        COLLECTIVE,
        D2H,
        DEVICE_COLLECTIVE_ENQUEUE,
        MEMCPY_APIS,
        SYNC_APIS,
        is_comm_kernel,
    )

    spans: dict[Phase, Intervals] = {}
    for name, phase in LABELS.items():
        spans[phase] = _merged(trace, on_main & trace.name_mask(lambda n, name=name: n == name))
    loader = on_main & trace.name_mask(
        lambda n: (
            (n.startswith("enumerate(DataLoader)#") and n.endswith(".__next__"))
            or n.startswith("enumerate(DataPipe)#")
        )
    )
    spans[Phase.DATA_WAIT] = merge(
        np.concatenate([spans[Phase.DATA_WAIT].starts, trace.ts[loader]]),
        np.concatenate([spans[Phase.DATA_WAIT].ends, trace.end[loader]]),
    )
    # torch's optimizer spans: zero_grad always belongs to the update; Optimizer.step# wraps Lightning's
    # closure, so it only counts where forward/backward are not labelled (PRECEDENCE puts them first).
    opt = on_main & trace.name_mask(lambda n: n.startswith(("Optimizer.step#", "Optimizer.zero_grad#")))
    spans[Phase.OPTIMIZER] = merge(
        np.concatenate([spans[Phase.OPTIMIZER].starts, trace.ts[opt]]),
        np.concatenate([spans[Phase.OPTIMIZER].ends, trace.end[opt]]),
    )
    runtime = trace.kind == EventKind.RUNTIME
    sync = runtime & trace.name_mask(lambda n: n in SYNC_APIS)
    memcpy = runtime & trace.name_mask(lambda n: bool(MEMCPY_APIS.match(n)))
    if memcpy.any():
        d2h = (trace.kind == EventKind.MEMCPY) & trace.name_mask(lambda n: bool(D2H.search(n)))
        corr = np.unique(trace.correlation[d2h & (trace.correlation >= 0)])
        sync |= memcpy & np.isin(trace.correlation, corr)
    spans[Phase.SYNC] = _merged(trace, sync)
    coll = on_main & trace.name_mask(lambda n: bool(COLLECTIVE.search(n)))
    if trace.has_device_events:
        coll &= ~trace.name_mask(lambda n: bool(DEVICE_COLLECTIVE_ENQUEUE.match(n)))
    comm = _merged(trace, coll)
    kernel = trace.kind == EventKind.KERNEL
    comm_kernel = kernel & trace.name_mask(is_comm_kernel)
    if comm_kernel.any():
        # A host sync that waits while only communication runs on the device is a wait on the collective.
        exposed = subtract(_merged(trace, comm_kernel), _merged(trace, kernel & ~comm_kernel))
        waited = intersect(spans[Phase.SYNC], exposed)
        comm = merge(np.concatenate([comm.starts, waited.starts]), np.concatenate([comm.ends, waited.ends]))
    spans[Phase.COMMUNICATION] = comm
    return spans


def _device_phases(
    trace: Trace, windows: Intervals, host_phase: dict[Phase, Intervals], main: np.ndarray, labelled: bool
) -> tuple[dict[Phase, Intervals], Intervals]:
    """GPU steps on the device timeline: the device is where time goes, the host only launches.

    Device work belongs to the phase the host was in when it launched it (its runtime call's start);
    without the callback's labels, work launched from another thread is backward (autograd runs it on its
    own device thread) and the rest forward. Communication is collective kernel time not overlapped by
    compute (the breakdown's ``comm_exposed``). Device idle time is data wait or sync when the host was
    waiting for data or blocked in a sync then, else idle/other. Also returns the idle/other time the host
    caused (gaps ended by work launched after they began: HTA's "host wait"), for the sync cap.
    """
    from lightning_bottleneck.vocabulary import is_comm_kernel

    work = np.isin(trace.kind, DEVICE_WORK_KINDS)
    launch_ts, launch_thread = _launches(trace)
    comm = work & (trace.kind == EventKind.KERNEL) & trace.name_mask(is_comm_kernel)
    compute = work & ~comm
    owner = np.full(len(trace), -1, dtype=np.int64)  # index into LAUNCH_PHASES
    known = compute & ~np.isnan(launch_ts)
    for i, phase in enumerate(LAUNCH_PHASES):
        iv = host_phase.get(phase, EMPTY)
        if len(iv) == 0:
            continue
        t = launch_ts[known]
        k = np.searchsorted(iv.starts, t, side="right") - 1
        inside = k >= 0
        inside[inside] &= t[inside] < iv.ends[k[inside]]
        sel = np.flatnonzero(known)[inside]
        owner[sel] = i
    if not labelled:
        main_threads = np.unique(trace.thread[main])
        free = compute & (owner < 0) & (launch_thread >= 0)
        owner[free & ~np.isin(launch_thread, main_threads)] = LAUNCH_PHASES.index(Phase.BACKWARD)
        owner[free & np.isin(launch_thread, main_threads)] = LAUNCH_PHASES.index(Phase.FORWARD)
    claimed: dict[Phase, Intervals] = {p: EMPTY for p in Phase}
    all_compute = intersect(_merged(trace, compute), windows)
    claimed[Phase.COMMUNICATION] = subtract(intersect(_merged(trace, comm), windows), all_compute)
    remaining = subtract(windows, claimed[Phase.COMMUNICATION])
    for i, phase in enumerate(LAUNCH_PHASES):
        take = intersect(_merged(trace, compute & (owner == i)), remaining)
        claimed[phase] = take
        remaining = subtract(remaining, take)
    unowned = intersect(_merged(trace, compute & (owner < 0)), remaining)  # launched in unlabelled host time
    idle = subtract(remaining, unowned)
    for phase in (Phase.DATA_WAIT, Phase.SYNC, Phase.COMMUNICATION):
        take = intersect(idle, host_phase.get(phase, EMPTY))
        claimed[phase] = merge(
            np.concatenate([claimed[phase].starts, take.starts]),
            np.concatenate([claimed[phase].ends, take.ends]),
        )
        idle = subtract(idle, take)
    claimed[Phase.OTHER] = merge(
        np.concatenate([unowned.starts, idle.starts]), np.concatenate([unowned.ends, idle.ends])
    )
    return claimed, intersect(idle, _host_wait_gaps(trace, windows, work, launch_ts))


def _host_wait_gaps(trace: Trace, windows: Intervals, work: np.ndarray, launch_ts: np.ndarray) -> Intervals:
    """Device gaps (no work on any stream) ended by work whose launch call started after the gap began."""
    gaps = subtract(windows, _merged(trace, work))
    idx = np.flatnonzero(work)
    if len(gaps) == 0 or idx.size == 0:
        return EMPTY
    idx = idx[np.argsort(trace.ts[idx], kind="stable")]
    nxt = np.searchsorted(trace.ts[idx], gaps.ends - GAP_END_TOLERANCE_US, side="left")
    has_next = nxt < idx.size
    has_next[has_next] &= trace.ts[idx[nxt[has_next]]] <= gaps.ends[has_next] + GAP_END_TOLERANCE_US
    host_wait = np.zeros(len(gaps), dtype=bool)
    with np.errstate(invalid="ignore"):
        host_wait[has_next] = launch_ts[idx[nxt[has_next]]] > gaps.starts[has_next]
    return Intervals(gaps.starts[host_wait], gaps.ends[host_wait])


def _launches(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """For every device event: start time and thread of the runtime call with its correlation id."""
    n = len(trace)
    launch_ts = np.full(n, np.nan)
    launch_thread = np.full(n, -1, dtype=np.int64)
    rt = np.flatnonzero((trace.kind == EventKind.RUNTIME) & (trace.correlation >= 0))
    dev = np.flatnonzero(np.isin(trace.kind, DEVICE_WORK_KINDS) & (trace.correlation >= 0))
    if rt.size == 0 or dev.size == 0:
        return launch_ts, launch_thread
    order = np.argsort(trace.correlation[rt], kind="stable")
    rt_corr, rt_idx = trace.correlation[rt][order], rt[order]
    pos = np.clip(np.searchsorted(rt_corr, trace.correlation[dev]), 0, rt_corr.size - 1)
    found = rt_corr[pos] == trace.correlation[dev]
    launch_ts[dev[found]] = trace.ts[rt_idx[pos[found]]]
    launch_thread[dev[found]] = trace.thread[rt_idx[pos[found]]]
    return launch_ts, launch_thread


def _step_numbers(trace: Trace, on_main: np.ndarray, starts: np.ndarray) -> list[int]:
    """``N`` of the ``ProfilerStep#N`` span each window starts in (else its position in the window)."""
    prof = on_main & trace.name_mask(lambda n: n.startswith(PROFILER_STEP_PREFIX))
    if not prof.any():
        return list(range(starts.size))
    idx = np.flatnonzero(prof)
    idx = idx[np.argsort(trace.ts[idx], kind="stable")]
    numbers = []
    for i, start in enumerate(starts):
        pos = int(np.searchsorted(trace.ts[idx], start + 1e-3, side="right")) - 1
        name = trace.names[int(trace.name[idx[pos]])] if pos >= 0 else ""
        tail = name[len(PROFILER_STEP_PREFIX) :]
        numbers.append(int(tail) if tail.isdigit() else i)
    return numbers
