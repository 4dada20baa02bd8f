"""Per-rank summary of one profiled window: the contract between trace parsing and the rules.

Produced from a Kineto trace by :func:`lightning_bottleneck.analysis.trace_metrics.summarize_trace`
(offline CLI and live callback alike) and consumed by :mod:`lightning_bottleneck.analysis.breakdown`.
Pure data: no torch, no lightning.

Shares are fractions (0..1) of the *total step time* of the steps analysed (sum of step durations),
unless the field name says otherwise. ``None`` means "not measurable from this trace" (for example
device metrics on a CPU-only trace), never zero.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class TraceSummary:
    rank: int | None = None
    world_size: int | None = None
    device: str = "cpu"  # "cuda" | "rocm" | "cpu"
    device_name: str | None = None  # e.g. "NVIDIA A100-SXM4-40GB" from deviceProperties
    source: str = ""  # the file(s) this came from
    step_source: str = "ProfilerStep"  # how steps were delimited; a sentence when it had to fall back
    num_steps: int = 0
    step_times_ms: list[float] = field(default_factory=list)

    # ---- host side (main training thread: the thread carrying the step markers)
    data_wait: float = 0.0  # DataLoader ``enumerate(DataLoader)#...__next__`` spans
    host_op_long: float = 0.0  # self time of the ops doing the math (CPU compute: _host_compute)
    host_op_short: float = 0.0  # the rest of the top-level op time (dispatch, autograd bookkeeping)
    cpu_ops_per_step: float = 0.0  # all cpu_op events per step (any depth)
    cpu_op_median_us: float = 0.0  # median duration of top-level cpu ops
    sync_api: float = 0.0  # host time in cudaStream/Device/EventSynchronize and D2H cudaMemcpy
    sync_api_calls_per_step: float = 0.0
    local_scalar_dense_per_step: float = 0.0  # aten::_local_scalar_dense calls (.item() & co.)
    cpu_collective: float = 0.0  # host time inside CPU-side collectives (gloo, c10d ops, barriers)
    phases: dict[str, float] = field(default_factory=dict)  # our record_function labels -> share

    # ---- device side (None on CPU-only traces)
    device_busy: float | None = None  # union of kernel + memcpy + memset intervals / step time
    device_compute: float | None = None  # union of compute kernels (no comm, no memcpy/memset)
    device_idle: float | None = None  # 1 - device_busy
    idle_host_wait: float | None = None  # HTA's idle split, as shares of step time
    idle_kernel_wait: float | None = None
    idle_other: float | None = None
    kernels_per_step: float | None = None
    short_kernel_share: float | None = None  # share of kernel time in kernels shorter than SHORT_KERNEL_US
    memcpy: float | None = None
    memset: float | None = None
    pageable_memcpy_per_step: float | None = None
    comm_kernel: float | None = None  # NCCL/RCCL kernel time (union)
    comm_exposed: float | None = None  # comm kernel time not overlapped by compute kernels
    comm_overlap: float | None = None  # fraction (0..1) of comm kernel time overlapped by compute
    tensor_core_eligible_share: float | None = None  # share of kernel time in GEMM/conv/attention kernels
    tensor_core_share: float | None = None  # share of kernel time in kernels that use tensor cores
    fp32_gemm_share: float | None = None  # share of kernel time in fp32 (non tensor-core) GEMMs

    # ---- anything else the parser wants to report (shown in evidence tables)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceSummary:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})
