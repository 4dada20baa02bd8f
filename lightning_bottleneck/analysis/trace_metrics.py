"""One trace -> one :class:`TraceSummary`: the analysis core shared by the live callback and the CLI.

Every number is computed on the *analysed steps* of one rank (:mod:`lightning_bottleneck.analysis.steps`),
with vectorised interval arithmetic on the columnar :class:`~lightning_bottleneck.trace.model.Trace`
(numpy only). The definitions, and how they compare with torch-tb-profiler and HolisticTraceAnalysis, are
in ``docs/trace-metrics.md``; the thresholds are the named constants below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from lightning_bottleneck.analysis.intervals import EMPTY, Intervals, intersect, merge, subtract, union
from lightning_bottleneck.analysis.steps import Steps, analysed_steps, launch_times
from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.trace.model import DEVICE_WORK_KINDS, EventKind, Trace
from lightning_bottleneck.vocabulary import (
    COLLECTIVE,
    D2H,
    DATALOADER_PREFIX,
    DATAPIPE_PREFIX,
    DEVICE_COLLECTIVE_ENQUEUE,
    LABEL_PREFIXES,
    LOCAL_SCALAR_DENSE,
    MATH_OPS,
    MEMCPY_APIS,
    NAMESPACE,
    NOT_COMPUTE_OPS,
    OPTIMIZER_STEP_PREFIX,
    PHASE_BACKWARD,
    PHASE_OPTIMIZER_STEP,
    PHASE_TRAINING_STEP,
    PROFILER_STEP_PREFIX,
    SYNC_APIS,
    TENSOR_CORE_ELIGIBLE_OPS,
    is_comm_kernel,
    is_fp32_gemm,
    is_gemm_like,
    uses_tensor_cores,
)

__all__ = ["gpu_temporal_breakdown", "summarize_trace"]

# ---- thresholds ---------------------------------------------------------------------------------------

#: On a CPU-only trace an op *other than the math family below* (a large element-wise op, a reduction,
#: a fused optimizer ``_foreach_*``) is real work when its median SELF time per call is at least this.
#: Eager PyTorch spends ~5-20 µs per op in Python + dispatcher before any data is touched (a 32-element
#: ``aten::add`` measures 5-20 µs on current CPUs, of which ~1-3 µs inside the op's own span); 50 µs is
#: 2.5x the top of that range, so the op's own time grows with the tensor, not with the op count.
LONG_HOST_OP_US = 50.0

#: A math-family op (:data:`MATH_OPS`: matmul, conv, attention, oneDNN) is real work when its median
#: self time per call is at least this: below it the call is dispatch plus the BLAS/oneDNN call set-up
#: (an 8x8 ``aten::mm`` measures 2-6 µs of self time here; a 64x64x64 one, 262k flops, ~10 µs at a few
#: GFLOP/s of one core), so 10 µs is the smallest matmul whose arithmetic outweighs its call.
MATH_OP_MIN_US = 10.0

#: A kernel shorter than this runs for less time than the host needs to launch the next one
#: (cudaLaunchKernel costs ~3-10 µs of host time plus a few µs of device-side launch latency), so a GPU
#: fed a stream of such kernels idles between them: the "launch-bound" signature. 10 µs is the bound
#: NVIDIA's guidance and HTA's kernel-duration histograms use for "small kernels".
SHORT_KERNEL_US = 10.0

#: HTA's ``consecutive_kernel_delay`` default (trace time units, i.e. µs): a device gap shorter than this,
#: not caused by a late launch, is the normal back-to-back kernel launch latency ("kernel wait").
KERNEL_WAIT_US = 30.0

#: Device work that starts within this of a gap's end is what ended the gap (float rounding of
#: microsecond timestamps with nanosecond fractions).
GAP_END_TOLERANCE_US = 1e-3


def summarize_trace(
    trace: Trace,
    source: str | None = None,
    steps: Steps | None = None,
    launch: tuple[np.ndarray, np.ndarray] | None = None,
) -> TraceSummary:
    """Compute the :class:`TraceSummary` fields of one rank's trace over ``steps`` (by default its
    :func:`~lightning_bottleneck.analysis.steps.analysed_steps`); ``launch``: its ``launch_times``."""
    summary = TraceSummary(
        rank=trace.rank,
        world_size=trace.world_size,
        device=trace.device_type,
        device_name=_device_name(trace),
        source=source if source is not None else str(trace.path),
    )
    summary.timing_doubt = trace.timing_doubt
    summary.timing_repaired = trace.timing_repaired
    launch_ts, launch_end = launch if launch is not None else launch_times(trace)
    if steps is None:
        steps = analysed_steps(trace, (launch_ts, launch_end))
    if steps is None:
        summary.step_source = "no host events: nothing to analyse"
        summary.notes = list(trace.notes)
        return summary
    summary.compute_capability = _compute_capability(trace)
    summary.step_source = steps.source
    summary.num_steps = steps.count
    durations = steps.durations
    summary.step_times_ms = [round(float(d) / 1000.0, 4) for d in durations]
    total = steps.total
    summary.notes = list(trace.notes) + list(steps.notes)
    if total <= 0:
        return summary
    _host_metrics(trace, steps, total, summary)
    if trace.has_device_events:
        _device_metrics(trace, steps, total, launch_ts, summary)
    return summary


def _compute_capability(trace: Trace) -> list[int] | None:
    for p in trace.device_properties:
        major, minor = p.get("computeMajor"), p.get("computeMinor")
        if isinstance(major, int) and isinstance(minor, int):
            return [major, minor]
    return None


# ---- host side --------------------------------------------------------------------------------------


def _in_windows(ts: np.ndarray, steps: Steps) -> np.ndarray:
    """Mask of timestamps falling inside one of the step windows."""
    return steps.contains(ts)


def _share(iv: Intervals, windows: Intervals, total: float) -> float:
    return intersect(iv, windows).total / total


def _merged(trace: Trace, mask: np.ndarray) -> Intervals:
    return merge(trace.ts[mask], trace.end[mask]) if mask.any() else EMPTY


def _host_metrics(trace: Trace, steps: Steps, total: float, s: TraceSummary) -> None:
    windows = steps.windows
    n_steps = steps.count
    main = trace.thread == steps.main_thread
    cpu_op = trace.kind == EventKind.CPU_OP
    annotation = trace.kind == EventKind.USER_ANNOTATION
    label = trace.name_mask(lambda n: n.startswith(LABEL_PREFIXES))
    ops = cpu_op & ~label
    dataloader = trace.name_mask(
        lambda n: (
            (n.startswith(DATALOADER_PREFIX) and n.endswith(".__next__")) or n.startswith(DATAPIPE_PREFIX)
        )
    )
    s.data_wait = _share(_merged(trace, main & (cpu_op | annotation) & dataloader), windows, total)
    # The iterator class names the loader mode: _SingleProcessDataLoaderIter means num_workers=0.
    loader_names = {trace.names[int(i)] for i in np.unique(trace.name[main & dataloader])}
    if loader_names:
        s.dataloader_iter = sorted(n.split("#", 1)[-1].split(".", 1)[0] for n in loader_names)

    # top-level ops on the main thread: not nested in another (non-label) op of that thread
    main_ops = np.flatnonzero(main & ops)
    order = np.lexsort((-trace.dur[main_ops], trace.ts[main_ops]))
    main_ops = main_ops[order]
    ts, end = trace.ts[main_ops], trace.end[main_ops]
    top = np.ones(main_ops.size, dtype=bool)
    if main_ops.size > 1:
        running_end = np.maximum.accumulate(end)
        top[1:] = ts[1:] >= running_end[:-1]
    top_idx = main_ops[top]
    top_idx = top_idx[_in_windows(trace.ts[top_idx], steps)]
    durs = trace.dur[top_idx]
    loader_iv = _merged(trace, main & (cpu_op | annotation) & dataloader)
    host = _host_compute(trace, main_ops, steps, loader_iv, total)
    s.host_op_long = host.compute
    top_iv = intersect(merge(trace.ts[top_idx], trace.end[top_idx]), windows)
    s.host_op_short = max(0.0, subtract(top_iv, loader_iv).total / total - host.compute)
    s.cpu_op_median_us = round(float(np.median(durs)), 3) if durs.size else 0.0
    s.extra["host_compute_ops"] = host.top_ops
    s.extra["host_classification"] = (
        f"self time of math ops (median >= {MATH_OP_MIN_US:g} us/call) and of other ops with median "
        f">= {LONG_HOST_OP_US:g} us/call is compute; the rest (dispatch, autograd bookkeeping, Python "
        "gaps) is overhead"
    )
    s.cpu_ops_per_step = float(_in_windows(trace.ts[ops], steps).sum()) / n_steps
    # Attention written by hand (softmax between matmuls) vs the fused kernel: drives the SDPA advice.
    softmax = ops & trace.name_mask(lambda n: n in ("aten::softmax", "aten::_softmax"))
    sdpa = ops & trace.name_mask(lambda n: "scaled_dot_product" in n)
    s.softmax_per_step = float(_in_windows(trace.ts[softmax], steps).sum()) / n_steps
    s.sdpa_per_step = float(_in_windows(trace.ts[sdpa], steps).sum()) / n_steps
    s.extra["top_level_ops_per_step"] = round(top_idx.size / n_steps, 2)

    # sync APIs: sync calls and device-to-host copies, any host thread
    runtime = trace.kind == EventKind.RUNTIME
    sync = runtime & trace.name_mask(lambda n: n in SYNC_APIS)
    sync |= runtime & trace.name_mask(lambda n: bool(MEMCPY_APIS.match(n))) & _copies_to_host(trace)
    s.sync_api = _share(_merged(trace, sync), windows, total)
    s.sync_api_calls_per_step = float(_in_windows(trace.ts[sync], steps).sum()) / n_steps
    lsd = cpu_op & trace.name_mask(lambda n: n == LOCAL_SCALAR_DENSE)
    s.local_scalar_dense_per_step = float(_in_windows(trace.ts[lsd], steps).sum()) / n_steps

    # CPU-side collectives: on the main thread, plus main-thread waits while a blocking (gloo) collective
    # runs on another thread (DDP's reducer waiting for gloo all-reduce inside backward)
    coll = (cpu_op | annotation) & trace.name_mask(lambda n: bool(COLLECTIVE.search(n)))
    if trace.has_device_events:
        coll &= ~trace.name_mask(lambda n: bool(DEVICE_COLLECTIVE_ENQUEUE.match(n)))
    main_coll = _merged(trace, coll & main)
    other_coll = _merged(trace, coll & ~main)
    main_idle = subtract(windows, _merged(trace, main & ops))
    blocked = union(main_coll, intersect(main_idle, other_coll))
    s.cpu_collective = _share(blocked, windows, total)

    # phases: our record_function labels
    phase = (cpu_op | annotation) & trace.name_mask(lambda n: n.startswith(NAMESPACE))
    phases: dict[str, float] = {}
    for name_id in np.unique(trace.name[phase]):
        key = trace.names[int(name_id)][len(NAMESPACE) :]
        phases[key] = round(_share(_merged(trace, phase & (trace.name == name_id)), windows, total), 6)
    # Traces without the callback's optimizer_step label (older versions, other tools): derive the update
    # from torch's ``Optimizer.step#`` span, which in Lightning's automatic optimization wraps the closure
    # (forward and backward), minus the labelled training_step / backward phases.
    opt = (cpu_op | annotation) & (trace.thread == steps.main_thread)
    opt &= trace.name_mask(lambda n: n.startswith(OPTIMIZER_STEP_PREFIX))
    if phases and opt.any() and PHASE_OPTIMIZER_STEP not in phases:
        labelled = (cpu_op | annotation) & trace.name_mask(
            lambda n: n in (NAMESPACE + PHASE_TRAINING_STEP, NAMESPACE + PHASE_BACKWARD)
        )
        update = subtract(_merged(trace, opt), _merged(trace, labelled))
        phases[PHASE_OPTIMIZER_STEP] = round(_share(update, windows, total), 6)
    s.phases = phases


@dataclass
class _HostCompute:
    compute: float  # share of step time
    top_ops: dict[str, float]  # the largest compute ops by name -> share of step time


#: How many op names :func:`_host_compute` lists as evidence.
HOST_COMPUTE_TOP_OPS = 5


def _self_times(trace: Trace, sorted_ops: np.ndarray) -> np.ndarray:
    """Self time of each op (its duration minus its direct children's), ops sorted by (ts, -dur)."""
    ts, dur = trace.ts[sorted_ops], trace.dur[sorted_ops]
    end = ts + dur
    child = np.zeros(sorted_ops.size)
    stack: list[int] = []
    for i in range(sorted_ops.size):
        t = ts[i]
        while stack and end[stack[-1]] <= t:
            stack.pop()
        if stack:
            child[stack[-1]] += dur[i]
        stack.append(i)
    return np.maximum(dur - child, 0.0)


def _host_compute(
    trace: Trace, sorted_ops: np.ndarray, steps: Steps, exclude: Intervals, total: float
) -> _HostCompute:
    """CPU-only compute: the SELF time of the ops that do the math, not the length of top-level spans.

    A top-level span's length mixes the op's arithmetic with its dispatch, its children's dispatch and,
    on a busy machine, the time the process was descheduled (a 1 µs ``aten::mul`` preempted for 300 µs
    looks like work). So the self time of every main-thread op in the analysed steps (outside DataLoader
    fetches) is computed, and an op *name* counts as compute when its MEDIAN self time per call shows
    work: :data:`MATH_OP_MIN_US` for the math family (:data:`MATH_OPS`), :data:`LONG_HOST_OP_US` for any
    other ``aten::`` op (large element-wise ops, reductions, fused optimizers). Medians are insensitive to
    the few calls a busy machine stretches, so a tiny-op loop stays overhead however loaded the machine
    is. Autograd bookkeeping (``autograd::engine::*``, ``*Backward0``, ``AccumulateGrad``), syncs and
    collectives never count.
    """
    if sorted_ops.size == 0 or total <= 0:
        return _HostCompute(0.0, {})
    self_us = _self_times(trace, sorted_ops)
    keep = _in_windows(trace.ts[sorted_ops], steps)
    if len(exclude):
        keep &= ~_in_intervals(trace.ts[sorted_ops], exclude)
    idx, self_us = sorted_ops[keep], self_us[keep]
    if idx.size == 0:
        return _HostCompute(0.0, {})
    names = trace.name[idx]
    math_ids = set(trace.name_ids(lambda n: bool(MATH_OPS.match(n))).tolist())
    aten_ids = set(trace.name_ids(lambda n: n.startswith("aten::") and not NOT_COMPUTE_OPS.match(n)).tolist())
    order = np.argsort(names, kind="stable")
    names_sorted, self_sorted = names[order], self_us[order]
    uniq, first = np.unique(names_sorted, return_index=True)
    per_name: dict[str, float] = {}
    compute_us = 0.0
    for name_id, vals in zip(uniq.tolist(), np.split(self_sorted, first[1:])):
        if name_id in math_ids:
            bound = MATH_OP_MIN_US
        elif name_id in aten_ids:
            bound = LONG_HOST_OP_US
        else:
            continue
        if float(np.median(vals)) >= bound:
            t = float(vals.sum())
            compute_us += t
            per_name[trace.names[int(name_id)]] = t / total
    top = sorted(per_name.items(), key=lambda kv: -kv[1])[:HOST_COMPUTE_TOP_OPS]
    return _HostCompute(min(1.0, compute_us / total), {k: round(v, 4) for k, v in top})


def _in_intervals(ts: np.ndarray, iv: Intervals) -> np.ndarray:
    """Mask of timestamps inside one of the (merged, sorted) intervals."""
    i = np.searchsorted(iv.starts, ts, side="right") - 1
    ok = i >= 0
    ok[ok] &= ts[ok] < iv.ends[i[ok]]
    return ok


def _copies_to_host(trace: Trace) -> np.ndarray:
    """Mask of runtime events whose correlated device copy goes device-to-host."""
    out = np.zeros(len(trace), dtype=bool)
    d2h = (trace.kind == EventKind.MEMCPY) & trace.name_mask(lambda n: bool(D2H.search(n)))
    corr = np.unique(trace.correlation[d2h & (trace.correlation >= 0)])
    if corr.size:
        out = (trace.kind == EventKind.RUNTIME) & np.isin(trace.correlation, corr)
    return out


# ---- device side --------------------------------------------------------------------------------------


def _device_metrics(trace: Trace, steps: Steps, total: float, launch_ts: np.ndarray, s: TraceSummary) -> None:
    windows = steps.windows
    n_steps = steps.count
    kernel = trace.kind == EventKind.KERNEL
    memcpy = trace.kind == EventKind.MEMCPY
    memset = trace.kind == EventKind.MEMSET
    work = kernel | memcpy | memset
    comm = kernel & trace.name_mask(is_comm_kernel)
    compute = kernel & ~comm

    busy = intersect(_merged(trace, work), windows)
    compute_iv = intersect(_merged(trace, compute), windows)
    s.device_busy = busy.total / total
    s.device_compute = compute_iv.total / total
    s.device_idle = max(0.0, 1.0 - s.device_busy)
    s.kernel_busy = intersect(_merged(trace, kernel), windows).total / total
    host_wait, kernel_wait, other = _idle_split(trace, windows, busy, work, launch_ts)
    s.idle_host_wait = host_wait / total
    s.idle_kernel_wait = kernel_wait / total
    s.idle_other = other / total

    in_win = _in_windows(trace.ts, steps)
    k_in = kernel & in_win
    s.kernels_per_step = float(k_in.sum()) / n_steps
    kdur = trace.dur[k_in]
    ktime = float(kdur.sum())
    s.short_kernel_share = float(kdur[kdur < SHORT_KERNEL_US].sum()) / ktime if ktime > 0 else 0.0
    s.memcpy = _share(_merged(trace, memcpy), windows, total)
    s.memset = _share(_merged(trace, memset), windows, total)
    pageable = memcpy & in_win & trace.name_mask(lambda n: "Pageable" in n)
    s.pageable_memcpy_per_step = float(pageable.sum()) / n_steps

    comm_iv = intersect(_merged(trace, comm), windows)
    s.comm_kernel = comm_iv.total / total
    exposed = subtract(comm_iv, compute_iv).total
    s.comm_exposed = exposed / total
    s.comm_overlap = 1.0 - exposed / comm_iv.total if comm_iv.total > 0 else None

    tc = k_in & trace.name_mask(uses_tensor_cores)
    eligible = tc | (k_in & trace.name_mask(is_gemm_like))
    eligible |= k_in & _launched_by(trace, lambda n: n in TENSOR_CORE_ELIGIBLE_OPS)
    fp32 = k_in & ~tc & trace.name_mask(is_fp32_gemm)
    if ktime > 0:
        s.tensor_core_share = float(trace.dur[tc].sum()) / ktime
        s.tensor_core_eligible_share = float(trace.dur[eligible].sum()) / ktime
        s.fp32_gemm_share = float(trace.dur[fp32].sum()) / ktime
    else:
        s.tensor_core_share = s.tensor_core_eligible_share = s.fp32_gemm_share = 0.0

    s.gpu_window = _gpu_window(trace, work & _launched_in(launch_ts, steps), compute)


def _idle_split(
    trace: Trace, windows: Intervals, busy: Intervals, work: np.ndarray, launch_ts: np.ndarray
) -> tuple[float, float, float]:
    """HTA's idle categories, applied to the gaps of the whole device (all streams) inside the steps.

    A gap is *host wait* when the device work that ends it was launched (its runtime call started) after
    the gap began: the host had not enqueued it yet. Otherwise it is *kernel wait* when shorter than
    :data:`KERNEL_WAIT_US` (launch latency between back-to-back work), else *other* (waits on events,
    other streams, the end of the window).
    """
    gaps = subtract(windows, busy)
    if len(gaps) == 0:
        return 0.0, 0.0, 0.0
    idx = np.flatnonzero(work)
    order = np.argsort(trace.ts[idx], kind="stable")
    idx = idx[order]
    starts = trace.ts[idx]
    nxt = np.searchsorted(starts, gaps.ends, side="left")
    has_next = nxt < idx.size
    # Only work that starts where the gap ends ends it; a gap cut by the end of the analysed window is
    # judged without looking past the window (else the next, unanalysed step would decide it).
    has_next[has_next] &= starts[nxt[has_next]] <= gaps.ends[has_next] + GAP_END_TOLERANCE_US
    next_launch = np.full(len(gaps), np.nan)
    next_launch[has_next] = launch_ts[idx[nxt[has_next]]]
    length = gaps.ends - gaps.starts
    with np.errstate(invalid="ignore"):
        host = next_launch > gaps.starts
    kern = ~host & (length < KERNEL_WAIT_US)
    other = ~host & ~kern
    return float(length[host].sum()), float(length[kern].sum()), float(length[other].sum())


def _launched_in(launch_ts: np.ndarray, steps: Steps) -> np.ndarray:
    ok = ~np.isnan(launch_ts)
    out = np.zeros(launch_ts.shape, dtype=bool)
    out[ok] = _in_windows(launch_ts[ok], steps)
    return out


def _gpu_window(trace: Trace, work: np.ndarray, compute: np.ndarray) -> dict[str, Any]:
    """HTA's temporal breakdown over the device work launched in the analysed steps.

    Shares of the span from the first start to the last end of that work: idle (no work on any stream),
    compute (compute kernels), non-compute (the rest: communication and memory kernels).
    """
    iv = _merged(trace, work)
    if len(iv) == 0:
        return {}
    span = float(iv.ends[-1] - iv.starts[0])
    if span <= 0:
        return {}
    comp = _merged(trace, work & compute).total
    idle = span - iv.total
    return {
        "span_ms": round(span / 1000.0, 3),
        "idle": round(idle / span, 4),
        "compute": round(comp / span, 4),
        "non_compute": round((iv.total - comp) / span, 4),
    }


def gpu_temporal_breakdown(trace: Trace) -> dict[str, Any]:
    """HTA 0.5's ``get_temporal_breakdown`` window, for side-by-side comparison with that tool.

    HTA keeps the device events (kernels, copies, sets *and* ``cuda_sync`` markers) launched before the
    start of the last ``ProfilerStep`` (it always discards the last step) and divides by the span from
    the first to the last of them. Our own figures (:func:`summarize_trace`) use the analysed steps.
    """
    launch_ts, _ = launch_times(trace, with_sync=True)
    kinds = (*DEVICE_WORK_KINDS, EventKind.CUDA_SYNC)
    dev = np.isin(trace.kind, kinds) & ~np.isnan(launch_ts)
    host = np.isin(trace.kind, (EventKind.CPU_OP, EventKind.USER_ANNOTATION))
    steps = host & trace.name_mask(lambda n: n.startswith(PROFILER_STEP_PREFIX))
    if len(np.unique(trace.name[steps])) > 1:
        with np.errstate(invalid="ignore"):
            dev &= launch_ts < float(trace.ts[steps].max())
    comm = trace.name_mask(is_comm_kernel)
    compute = (trace.kind == EventKind.KERNEL) & ~comm
    return _gpu_window(trace, dev, compute)


def _launched_by(trace: Trace, predicate: Callable[[str], bool]) -> np.ndarray:
    """Mask of device events whose issuing CPU op (same External id) satisfies ``predicate``."""
    out = np.zeros(len(trace), dtype=bool)
    op = (trace.kind == EventKind.CPU_OP) & (trace.external_id >= 0) & trace.name_mask(predicate)
    ids = np.unique(trace.external_id[op])
    if ids.size:
        dev = np.isin(trace.kind, DEVICE_WORK_KINDS) & (trace.external_id >= 0)
        out[dev] = np.isin(trace.external_id[dev], ids)
    return out


def _device_name(trace: Trace) -> str | None:
    props = trace.device_properties
    if not props:
        return None
    used = trace.device[np.isin(trace.kind, DEVICE_WORK_KINDS) & (trace.device >= 0)]
    want = int(np.bincount(used).argmax()) if used.size else None
    for p in props:
        if want is None or p.get("id") == want:
            name = p.get("name")
            return str(name) if name else None
    name = props[0].get("name")
    return str(name) if name else None
