"""One trace -> one :class:`TraceSummary`: the analysis core shared by the live callback and the CLI.

Every number is computed on the *analysed steps* of one rank, with vectorised interval arithmetic on the
columnar :class:`~lightning_bottleneck.trace.model.Trace` (numpy only: no torch, no pandas). The
definitions, and how they compare with torch-tb-profiler and HolisticTraceAnalysis, are in
``docs/trace-metrics.md``; the thresholds are the named constants below.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.trace.intervals import EMPTY, Intervals, intersect, merge, subtract, union
from lightning_bottleneck.trace.model import DEVICE_WORK_KINDS, EventKind, Trace

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

#: torch-tb-profiler drops trailing steps whose device work was not fully captured: a last step with
#: fewer than this fraction of the previous step's device events (``_update_steps_duration``).
INCOMPLETE_TAIL_STEP_RATIO = 0.8

#: Minimum number of ``Optimizer.step#`` spans on one thread to delimit steps with them when the trace
#: has no ``ProfilerStep#N`` markers (two spans give one complete step between them).
MIN_OPTIMIZER_STEPS = 2

# ---- name vocabularies ------------------------------------------------------------------------------

PROFILER_STEP_PREFIX = "ProfilerStep#"
PHASE_PREFIX = "bottleneck/"
#: A step more than this many times the window's median step is a one-off stall, not the run's pattern:
#: a steady training loop's steps vary by tens of percent, and torch.utils.benchmark flags measurements
#: whose spread is a fraction of the median as noisy already; 3x is far outside any such spread.
OUTLIER_STEP_RATIO = 3.0
#: ... but only when such steps are rare: at most a third of the window (else they are the pattern).
OUTLIER_MAX_FRACTION = 1.0 / 3.0
#: Fewer steps than this give no meaningful median to compare against.
OUTLIER_MIN_STEPS = 3
VALIDATION_LABEL = PHASE_PREFIX + "validation"
#: Device work that starts within this of a gap's end is what ended the gap (float rounding of
#: microsecond timestamps with nanosecond fractions).
GAP_END_TOLERANCE_US = 1e-3  # the callback's label around an in-fit validation loop
#: record_function labels: never counted as CPU "ops" (old-schema traces record them as Operator).
LABEL_PREFIXES = (
    PROFILER_STEP_PREFIX,
    "enumerate(DataLoader)",
    "enumerate(DataPipe)",
    "Optimizer.step#",
    "Optimizer.zero_grad#",
    PHASE_PREFIX,
    "[pl][profile]",
)
SYNC_APIS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
    }
)
#: Runtime copy calls: they block the host when the copy goes device-to-host.
MEMCPY_APIS = re.compile(r"^(cuda|hip|cu)Memcpy", re.IGNORECASE)
D2H = re.compile(r"DtoH|D2H|Device -> (Pageable|Pinned|Host)", re.IGNORECASE)
LOCAL_SCALAR_DENSE = "aten::_local_scalar_dense"
#: CPU-side collectives: gloo/NCCL record_function labels, c10d ops, param-comms records, barriers.
COLLECTIVE = re.compile(r"^(gloo:|nccl:|rccl:|mpi:|c10d::|c10d:|record_param_comms)|barrier", re.IGNORECASE)
#: Collectives whose CPU-side span only enqueues device work (not a host wait) on GPU traces.
DEVICE_COLLECTIVE_ENQUEUE = re.compile(r"^(nccl:|rccl:)", re.IGNORECASE)
#: Communication kernels (NCCL on CUDA, RCCL on ROCm); kernel-name checks below are substring tests on
#: the lower-cased name (kernel names run to kilobytes of C++ templates: alternation regexes are slow).
COMM_KERNEL_SIGNATURES = ("nccl", "rccl")

#: CPU ops that do the math (matched on the op name): BLAS/oneDNN matmuls, convolutions, attention,
#: recurrent cells, and oneDNN/MKL-DNN ops whatever their name (``aten::mkldnn_*``, ``aten::_mkldnn_*``,
#: ``mkldnn::*``/``onednn::*`` records, ``_convolution`` and its backward), plus the CPU flash-attention
#: kernels. Composite ops (``aten::linear``, ``aten::matmul``) only dispatch to these, so their own
#: *self* time is dispatch and is judged as such.
MATH_OPS = re.compile(
    r"^(aten::(mm|addmm|_addmm_activation|bmm|baddbmm|addbmm|addmv|mv|dot|vdot|addr|ger|"
    r"_?convolution\w*|conv\w*|cudnn_convolution\w*|slow_conv\w*|thnn_conv\w*|_slow_conv\w*|"
    r"_?mkldnn\w*|mkldnn\w*|_scaled_dot_product\w*|_flash_attention\w*|_efficient_attention\w*|"
    r"_int_mm|_weight_int\w*|_fused_rms_norm\w*|native_layer_norm\w*|native_batch_norm\w*|"
    r"_batch_norm_impl_index\w*|lstm\w*|gru\w*|_thnn_fused\w*|_embedding_bag\w*)"
    r"|mkldnn::|onednn::|ideep::)"
)
#: Ops that never count as host compute whatever their duration: host-device syncs and scalar reads,
#: collectives (their time is communication), and the ops that only wait.
NOT_COMPUTE_OPS = re.compile(
    r"^(aten::(_local_scalar_dense|item|is_nonzero|_nested\w*|wait\w*|record_stream)|c10d|gloo|nccl|"
    r"record_param_comms)"
)

#: Tensor-core kernel signatures: torch-tb-profiler 0.4.3 ``TC_Allowlist`` (from NVIDIA PyProf), plus
#: the Ampere/Hopper/CUTLASS/flash-attention and ROCm MFMA names that list predates.
TENSOR_CORE_SIGNATURES = (
    # tb-profiler / PyProf
    "h884", "s884", "h1688", "s1688", "hmma", "i8816", "16816", "c1688", "dgrad_1x1_stride_2x2",
    "first_layer_wgrad_kernel", "conv1x1", "conv2d_c1_k1", "direct_group", "xmma",
    # Volta..Blackwell cuBLAS / CUTLASS names
    "wgmma", "gmma_", "tensorop", "_tc_", "tf32", "bf16gemm", "hgemm", "sm90_", "sm100_",
    # attention kernels (always tensor cores)
    "flash_fwd", "flash_bwd", "fmha",
    # ROCm matrix cores
    "mfma",
)  # fmt: skip
#: ROCm Tensile/hipBLASLt kernels name their matrix-core instruction ``_MI32x32x8`` etc.
ROCM_MATRIX_INSTRUCTION = re.compile(r"_mi\d+x\d+x\d+")
#: Ops whose kernels could run on tensor cores: torch-tb-profiler's ``TC_OP_Allowlist`` (the autocast
#: fp16 list) plus SDPA.
TENSOR_CORE_ELIGIBLE_OPS = frozenset(
    {
        "aten::_convolution", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::conv_tbc",
        "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d",
        "aten::convolution", "aten::cudnn_convolution", "aten::cudnn_convolution_transpose",
        "aten::prelu", "aten::addmm", "aten::addmv", "aten::addr", "aten::matmul", "aten::mm",
        "aten::mv", "aten::linear", "aten::addbmm", "aten::baddbmm", "aten::bmm",
        "aten::chain_matmul", "aten::linalg_multi_dot", "aten::_thnn_fused_lstm_cell",
        "aten::_thnn_fused_gru_cell", "aten::lstm_cell", "aten::gru_cell", "aten::rnn_tanh_cell",
        "aten::rnn_relu_cell", "aten::addmm_", "aten::cudnn_convolution_backward",
        "aten::cudnn_convolution_backward_input", "aten::cudnn_convolution_backward_weight",
        "aten::cudnn_convolution_transpose_backward", "aten::convolution_backward",
        "aten::_scaled_dot_product_attention", "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention", "aten::_flash_attention_forward",
        "aten::_efficient_attention_forward", "aten::_scaled_mm",
    }
)  # fmt: skip
#: Kernel names of GEMM / convolution / attention work (eligible whatever op launched them).
GEMM_LIKE_SIGNATURES = ("gemm", "gemv", "conv", "cudnn", "cutlass", "attention", "fmha", "flash", "cijk_")
#: fp32 GEMMs that run on the CUDA cores (no tensor-core signature): cuBLAS ``sgemm`` family, CUTLASS
#: ``simt`` fp32 kernels, Tensile single-precision (``_SB_``), ``gemmSN``; plus gemm/gemv kernels
#: templated on ``float`` (checked by :data:`FP32_TEMPLATE`).
FP32_GEMM_SIGNATURES = ("sgemm", "simt_s", "_sb_", "gemmsn")
FP32_TEMPLATE = re.compile(r"gem[mv]\w*<[^>]*\bfloat\b")


def is_comm_kernel(name: str) -> bool:
    low = name.lower()
    return any(sig in low for sig in COMM_KERNEL_SIGNATURES)


def uses_tensor_cores(name: str) -> bool:
    low = name.lower()
    if any(sig in low for sig in TENSOR_CORE_SIGNATURES):
        return True
    return "_mi" in low and ROCM_MATRIX_INSTRUCTION.search(low) is not None


def is_gemm_like(name: str) -> bool:
    low = name.lower()
    return any(sig in low for sig in GEMM_LIKE_SIGNATURES)


def is_fp32_gemm(name: str) -> bool:
    low = name.lower()
    if any(sig in low for sig in FP32_GEMM_SIGNATURES):
        return True
    return "float" in low and FP32_TEMPLATE.search(low) is not None


@dataclass
class _Steps:
    starts: np.ndarray
    ends: np.ndarray
    main_thread: int
    source: str
    notes: list[str]

    @property
    def windows(self) -> Intervals:
        return merge(self.starts, self.ends)

    @property
    def count(self) -> int:
        return int(self.starts.shape[0])


def summarize_trace(trace: Trace, source: str | None = None) -> TraceSummary:
    """Compute every :class:`TraceSummary` field for one rank's trace."""
    summary = TraceSummary(
        rank=trace.rank,
        world_size=trace.world_size,
        device=trace.device_type,
        device_name=_device_name(trace),
        source=source if source is not None else str(trace.path),
    )
    launch_ts, launch_end = _launch_times(trace)
    steps = _find_steps(trace)
    if steps is None:
        summary.step_source = "no host events: nothing to analyse"
        summary.extra["notes"] = list(trace.notes)
        return summary
    steps = _drop_validation_steps(trace, steps)
    steps = _drop_outlier_steps(steps)
    if trace.has_device_events:
        steps = _align_steps_to_device(trace, steps, launch_ts, launch_end)
    summary.extra["compute_capability"] = _compute_capability(trace)
    summary.step_source = steps.source
    summary.num_steps = steps.count
    durations = steps.ends - steps.starts
    summary.step_times_ms = [round(float(d) / 1000.0, 4) for d in durations]
    total = float(durations.sum())
    notes = list(trace.notes) + steps.notes
    if total <= 0:
        summary.extra["notes"] = notes
        return summary
    _host_metrics(trace, steps, total, summary)
    if trace.has_device_events:
        _device_metrics(trace, steps, total, launch_ts, summary)
    summary.extra["notes"] = notes
    return summary


# ---- steps ----------------------------------------------------------------------------------------------


def _find_steps(trace: Trace) -> _Steps | None:
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
        return _Steps(trace.ts[sel], trace.end[sel], main, "ProfilerStep", [])
    main = _busiest_thread(trace, host)
    opt = host & (trace.thread == main) & trace.name_mask(lambda n: n.startswith("Optimizer.step#"))
    if int(opt.sum()) >= MIN_OPTIMIZER_STEPS:
        ends = np.sort(trace.end[opt])
        return _Steps(
            ends[:-1],
            ends[1:],
            main,
            f"no ProfilerStep#N markers: {ends.size - 1} step(s) delimited by consecutive "
            "Optimizer.step# spans on the main thread",
            [],
        )
    sel = host & (trace.thread == main)
    start, end = float(trace.ts[sel].min()), float(trace.end[sel].max())
    return _Steps(
        np.array([start]),
        np.array([end]),
        main,
        "no ProfilerStep#N markers and no repeated Optimizer.step#: the whole traced window of the "
        f"busiest host thread ({(end - start) / 1000.0:.1f} ms) is analysed as one step",
        [],
    )


def _drop_validation_steps(trace: Trace, steps: _Steps) -> _Steps:
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
    keep = ~contains
    note = f"{int(contains.sum())} profiled step(s) skipped: the validation loop ran inside them"
    return _Steps(steps.starts[keep], steps.ends[keep], steps.main_thread, steps.source, [*steps.notes, note])


def _drop_outlier_steps(steps: _Steps) -> _Steps:
    """A few steps far slower than the rest are one-off stalls (a GC pass, a checkpoint, an I/O hiccup).

    Over a window of a handful of steps one such stall would dominate every share and flip the verdict,
    so steps longer than ``OUTLIER_STEP_RATIO`` x the median step are set aside, as long as they are at
    most ``OUTLIER_MAX_FRACTION`` of the window (a stall that recurs more often is the run's real pattern).
    """
    n = steps.count
    if n < OUTLIER_MIN_STEPS:
        return steps
    durations = steps.ends - steps.starts
    median = float(np.median(durations))
    slow = durations > OUTLIER_STEP_RATIO * median
    if not slow.any() or slow.sum() > OUTLIER_MAX_FRACTION * n:
        return steps
    worst = float(durations[slow].max())
    note = (
        f"{int(slow.sum())} profiled step(s) set aside as one-off stalls: up to {worst / 1000.0:.1f} ms "
        f"against a median of {median / 1000.0:.1f} ms (over {OUTLIER_STEP_RATIO:g}x the median)"
    )
    keep = ~slow
    return _Steps(steps.starts[keep], steps.ends[keep], steps.main_thread, steps.source, [*steps.notes, note])


def _compute_capability(trace: Trace) -> list[int] | None:
    for p in trace.device_properties:
        major, minor = p.get("computeMajor"), p.get("computeMinor")
        if isinstance(major, int) and isinstance(minor, int):
            return [major, minor]
    return None


def _busiest_thread(trace: Trace, host: np.ndarray) -> int:
    """The host thread whose ops cover the most wall time."""
    best, best_cover = 0, -1.0
    for thread in np.unique(trace.thread[host]):
        sel = host & (trace.thread == thread)
        cover = merge(trace.ts[sel], trace.end[sel]).total
        if cover > best_cover:
            best, best_cover = int(thread), cover
    return best


def _launch_times(trace: Trace, with_sync: bool = False) -> tuple[np.ndarray, np.ndarray]:
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


def _align_steps_to_device(
    trace: Trace, steps: _Steps, launch_ts: np.ndarray, launch_end: np.ndarray
) -> _Steps:
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
    notes = list(steps.notes)
    source = steps.source
    keep = n
    if n > 1:
        last = int(np.flatnonzero(matched > 0)[-1])
        keep = last + 1
        if last > 0 and matched[last - 1] * INCOMPLETE_TAIL_STEP_RATIO > matched[last]:
            keep = last
        if keep < n:
            notes.append(f"dropped the last {n - keep} step(s): the trace ends before their device work does")
            source = f"{source} (last {n - keep} step(s) dropped: device work cut off by the trace end)"
    return _Steps(starts[:keep], ends[:keep], steps.main_thread, source, notes)


# ---- host side --------------------------------------------------------------------------------------


def _in_windows(ts: np.ndarray, steps: _Steps) -> np.ndarray:
    """Mask of timestamps falling inside one of the step windows."""
    i = np.searchsorted(steps.starts, ts, side="right") - 1
    ok = i >= 0
    ok[ok] &= ts[ok] < steps.ends[i[ok]]
    return ok


def _share(iv: Intervals, windows: Intervals, total: float) -> float:
    return intersect(iv, windows).total / total


def _merged(trace: Trace, mask: np.ndarray) -> Intervals:
    return merge(trace.ts[mask], trace.end[mask]) if mask.any() else EMPTY


def _host_metrics(trace: Trace, steps: _Steps, total: float, s: TraceSummary) -> None:
    windows = steps.windows
    n_steps = steps.count
    main = trace.thread == steps.main_thread
    cpu_op = trace.kind == EventKind.CPU_OP
    annotation = trace.kind == EventKind.USER_ANNOTATION
    label = trace.name_mask(lambda n: n.startswith(LABEL_PREFIXES))
    ops = cpu_op & ~label
    dataloader = trace.name_mask(
        lambda n: (
            (n.startswith("enumerate(DataLoader)#") and n.endswith(".__next__"))
            or n.startswith("enumerate(DataPipe)#")
        )
    )
    s.data_wait = _share(_merged(trace, main & (cpu_op | annotation) & dataloader), windows, total)
    # The iterator class names the loader mode: _SingleProcessDataLoaderIter means num_workers=0.
    loader_names = {trace.names[int(i)] for i in np.unique(trace.name[main & dataloader])}
    if loader_names:
        s.extra["dataloader_iter"] = sorted(n.split("#", 1)[-1].split(".", 1)[0] for n in loader_names)

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
    s.extra["softmax_per_step"] = float(_in_windows(trace.ts[softmax], steps).sum()) / n_steps
    s.extra["sdpa_per_step"] = float(_in_windows(trace.ts[sdpa], steps).sum()) / n_steps
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
    phase = (cpu_op | annotation) & trace.name_mask(lambda n: n.startswith(PHASE_PREFIX))
    phases: dict[str, float] = {}
    for name_id in np.unique(trace.name[phase]):
        key = trace.names[int(name_id)][len(PHASE_PREFIX) :]
        phases[key] = round(_share(_merged(trace, phase & (trace.name == name_id)), windows, total), 6)
    # Traces without the callback's optimizer_step label (older versions, other tools): derive the update
    # from torch's ``Optimizer.step#`` span, which in Lightning's automatic optimization wraps the closure
    # (forward and backward), minus the labelled training_step / backward phases.
    opt = (cpu_op | annotation) & (trace.thread == steps.main_thread)
    opt &= trace.name_mask(lambda n: n.startswith("Optimizer.step#"))
    if phases and opt.any() and "optimizer_step" not in phases:
        labelled = (cpu_op | annotation) & trace.name_mask(
            lambda n: n in (PHASE_PREFIX + "training_step", PHASE_PREFIX + "backward")
        )
        update = subtract(_merged(trace, opt), _merged(trace, labelled))
        phases["optimizer_step"] = round(_share(update, windows, total), 6)
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
    trace: Trace, sorted_ops: np.ndarray, steps: _Steps, exclude: Intervals, total: float
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


def _device_metrics(
    trace: Trace, steps: _Steps, total: float, launch_ts: np.ndarray, s: TraceSummary
) -> None:
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
    s.extra["kernel_busy"] = intersect(_merged(trace, kernel), windows).total / total
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

    s.extra["gpu_window"] = _gpu_window(trace, work & _launched_in(launch_ts, steps), compute)


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


def _launched_in(launch_ts: np.ndarray, steps: _Steps) -> np.ndarray:
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
    launch_ts, _ = _launch_times(trace, with_sync=True)
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
