"""Per-rank summary of one profiled window: the contract between trace parsing and the rules.

Produced from a Kineto trace by :func:`lightning_bottleneck.analysis.trace_metrics.summarize_trace`
(offline CLI and live callback alike) and consumed by :mod:`lightning_bottleneck.analysis.breakdown`,
the rules, the advice and the CLI: every value they read is a typed field here.

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

    # ---- what rules, advice and the CLI read beyond the shares
    notes: list[str] = field(default_factory=list)  # reader and step notes (what was dropped and why)
    timing_doubt: str | None = None  # the trace's timing is implausible and its unit unknown (time_unit.py)
    timing_repaired: bool = (
        False  # the clock was rescaled or events with impossible timing dropped (the reader)
    )
    host: str | None = None  # the machine the rank ran on (live runs)
    dataloader_iter: list[str] = field(default_factory=list)  # e.g. ["_SingleProcessDataLoaderIter"]
    softmax_per_step: float = 0.0  # hand-written attention signature ...
    sdpa_per_step: float = 0.0  # ... vs the fused kernel
    compute_capability: list[int] | None = None  # [major, minor] of the device
    kernel_busy: float | None = None  # union of kernel intervals / step time (tb-profiler's GPU util)
    gpu_window: dict[str, Any] = field(default_factory=dict)  # HTA temporal breakdown of the window
    communication: CommunicationMetrics | None = None  # None without collectives

    # ---- anything else the parser wants to report (shown in evidence tables)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceSummary:
        """Inverse of :meth:`to_dict`; also reads summaries whose typed fields still lived in ``extra``."""
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in data.items() if k in known}
        extra = dict(values.get("extra") or {})
        for key in LEGACY_EXTRA_KEYS:
            if key in extra and key not in values:
                values[key] = extra.pop(key)
        values["extra"] = extra
        comm = values.get("communication")
        if isinstance(comm, dict):
            values["communication"] = CommunicationMetrics.from_dict(comm)
        return cls(**values)


#: Fields that schema_version 1 reports and rank payloads carried inside ``extra``.
LEGACY_EXTRA_KEYS = (
    "notes",
    "host",
    "dataloader_iter",
    "softmax_per_step",
    "sdpa_per_step",
    "compute_capability",
    "kernel_busy",
    "gpu_window",
    "communication",
)


@dataclass
class CollectiveKindMetrics:
    """One collective kind (all_reduce, all_gather, ...) over the analysed steps."""

    calls_per_step: float = 0.0
    ms_per_step: float = 0.0


@dataclass
class CommunicationMetrics:
    """Communication of one rank over its analysed steps (see :mod:`lightning_bottleneck.analysis.communication`).

    Shares are fractions of the summed step time; ``*_ms_per_step`` are per analysed step.
    """

    source: str  # "nccl/rccl kernels" | "host collective spans"
    wait_share: float
    wait_ms_per_step: float
    wait_in_backward_share: float
    wait_outside_backward_share: float
    collective_share: float
    collective_ms_per_step: float
    overlap: float | None  # fraction of collective time hidden behind the training thread's own work
    reducer_copy_share: float
    by_kind: dict[str, CollectiveKindMetrics] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CommunicationMetrics:
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in data.items() if k in known}
        values["by_kind"] = {
            k: v if isinstance(v, CollectiveKindMetrics) else CollectiveKindMetrics(**v)
            for k, v in (values.get("by_kind") or {}).items()
        }
        return cls(**values)
