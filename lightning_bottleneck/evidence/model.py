"""Everything the rules look at, gathered in one typed, Trainer-free object.

The offline CLI fills only ``summaries`` (from trace files); the live callback adds what only a live
run can see: always-on step timing, sync call sites, memory statistics, an out-of-memory error, and
the run's real configuration (for advice).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.analysis.ledger import FitLedger
from lightning_bottleneck.analysis.representative import WindowCheck
from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.autotune_record import AutotuneRecord
from lightning_bottleneck.evidence.contention import Contention
from lightning_bottleneck.evidence.fit_probes import FitProbes
from lightning_bottleneck.evidence.loader_ladder import LoaderLadder
from lightning_bottleneck.evidence.memory_trend import MemoryTrend
from lightning_bottleneck.evidence.trial_results import TrialReport
from lightning_bottleneck.stats import median, percentile


@dataclass
class SyncSite:
    """One user source line that made the host wait for the device.

    ``location`` is ``path/to/file.py:LINE`` (relative to the working directory where possible): the
    first frame outside torch, lightning and this package. ``via`` names the API that synced
    (``"Tensor.item"``, ``"Tensor.__format__"``, ``"torch.cuda.synchronize"``, ...). ``lightning_log``
    is set when Lightning did the sync on the user's behalf for a ``self.log`` call at ``location``.
    """

    location: str
    via: str
    calls: int = 0
    total_ms: float = 0.0  # host time blocked inside the call
    steps: int = 0  # training steps during which the tracker was active
    lightning_log: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def calls_per_step(self) -> float:
        return self.calls / self.steps if self.steps else float(self.calls)

    @property
    def mean_ms(self) -> float:
        return self.total_ms / self.calls if self.calls else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TimingStats:
    """Always-on host timing of training steps (no device syncs), from the callback's batch hooks."""

    steps: int = 0
    step_ms: list[float] = field(default_factory=list)  # recent steady-state step times
    data_wait_ms: list[float] = field(default_factory=list)  # matching data waits (batch end -> next start)
    epoch_start_wait_ms: list[float] = field(default_factory=list)  # first fetch of each epoch
    samples_per_step: float | None = None

    @property
    def data_wait_share(self) -> float:
        total = sum(self.step_ms)
        return sum(self.data_wait_ms) / total if total > 0 else 0.0

    def busy_samples_per_s(self, quantile: float = T.CONSUMPTION_QUANTILE) -> float | None:
        """Samples/s the model takes when it never waits: ``samples_per_step / quantile(step - data wait)``."""
        if not self.samples_per_step or not self.step_ms:
            return None
        waits = (
            self.data_wait_ms if len(self.data_wait_ms) == len(self.step_ms) else [0.0] * len(self.step_ms)
        )
        busy_ms = percentile(sorted(max(0.0, s - w) for s, w in zip(self.step_ms, waits)), quantile)
        return self.samples_per_step / (busy_ms / 1e3) if busy_ms > 0 else None

    # ---- the epoch-start stall, defined once: what the rules, the ranking, the loader rule and the stage read

    def steady_wait_ms(self) -> float:
        """The median steady-state data wait (ms; 0 without waits)."""
        return median(self.data_wait_ms)

    def epoch_stalls_ms(self) -> list[float]:
        """The epoch starts whose first-batch wait is a stall: at least ``EPOCH_STALL_MIN_MS`` and
        ``EPOCH_STALL_RATIO`` times the steady wait (worker start-up, not a slow batch)."""
        floor = max(T.EPOCH_STALL_MIN_MS, T.EPOCH_STALL_RATIO * self.steady_wait_ms())
        return [w for w in self.epoch_start_wait_ms if w >= floor]

    def epoch_start_extra_ms(self) -> float:
        """The median epoch start's extra wait over the steady wait (ms; 0 without epoch starts)."""
        if not self.epoch_start_wait_ms:
            return 0.0
        return max(0.0, median(self.epoch_start_wait_ms) - self.steady_wait_ms())

    def epoch_start_stall_ms(self) -> float:
        """The run's epoch-start stall (ms): the median start's extra wait when the median start is a stall, else 0."""
        if not self.epoch_start_wait_ms:
            return 0.0
        floor = max(T.EPOCH_STALL_MIN_MS, T.EPOCH_STALL_RATIO * self.steady_wait_ms())
        return self.epoch_start_extra_ms() if median(self.epoch_start_wait_ms) >= floor else 0.0


@dataclass
class MemoryStats:
    """Device memory at the end of the window (CUDA); all bytes."""

    device_total: int | None = None
    peak_allocated: int | None = None
    peak_reserved: int | None = None
    num_alloc_retries: int = 0
    num_ooms: int = 0

    @property
    def peak_reserved_share(self) -> float | None:
        if not self.device_total or self.peak_reserved is None:
            return None
        return self.peak_reserved / self.device_total


@dataclass
class RunConfig:
    """The run's real settings, read from the Trainer and the train DataLoader by the callback."""

    num_workers: int | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None
    prefetch_factor: int | None = None
    batch_size: int | None = None
    dataset_len: int | None = None
    precision: str | None = None  # Trainer precision, e.g. "32-true", "bf16-mixed"
    accelerator: str = "cpu"  # "cpu" | "cuda" | "mps" | ...
    device_name: str | None = None
    bf16_supported: bool | None = None
    tf32_capable: bool | None = None  # Ampere or newer
    float32_matmul_precision: str | None = None  # torch.get_float32_matmul_precision()
    usable_cpus: int | None = None  # affinity and cgroup quota, not os.cpu_count()
    world_size: int = 1
    num_nodes: int = 1
    devices_per_node: int = 1
    strategy: str | None = None  # e.g. "ddp", "fsdp", "single_device"
    accumulate_grad_batches: int = 1
    compiled: bool | None = None  # the LightningModule is already torch.compile'd
    manual_optimization: bool = False
    distributed_backend: str | None = None  # "nccl" | "gloo"
    ddp_kwargs: dict[str, Any] = field(default_factory=dict)
    num_parameters: int | None = None


@dataclass
class RunLength:
    """How long the whole fit is (for whole-run accounting: a stall per epoch x epochs competes with a
    per-step loss x steps). ``None``: not known (an infinite or iterable-sized run, or offline)."""

    total_steps: int | None = (
        None  # training batches the fit will run (trainer.estimated_stepping_batches x accumulation)
    )
    steps_per_epoch: int | None = None  # trainer.num_training_batches
    epochs: int | None = None  # epochs the fit will run (max_epochs, or derived from max_steps)


@dataclass
class Evidence:
    summaries: list[TraceSummary] = field(default_factory=list)  # one per rank, from the trace files
    timing: TimingStats | None = None
    sync_sites: list[SyncSite] = field(default_factory=list)
    memory: MemoryStats | None = None
    oom: str | None = None  # the out-of-memory message, when training died of it
    config: RunConfig | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    trace_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    steps_observed: int | None = None  # overrides the count derived from timing/summaries
    rank: int = 0
    # ---- measured after the window by the live callback (None offline, or when not run) ----
    run_length: RunLength | None = None
    loader_ladder: LoaderLadder | None = None  # lightning_bottleneck.measure.loader_probe.probe_loader
    trials: TrialReport | None = (
        None  # lightning_bottleneck.measure.trials.run_trials on a batch of the window
    )
    contention: Contention | None = None  # contention.assess over the window (other processes' CPU use)
    busy_ranks: dict[int, str] = field(
        default_factory=dict
    )  # other ranks whose own check said busy: its note
    window_check: WindowCheck | None = None  # analysis.representative.check_window (window vs the rest)
    memory_trend: MemoryTrend | None = None  # memory_trend.MemorySampler over the whole run (RSS or CUDA)
    ledger: FitLedger | None = (
        None  # the whole fit by part (live/ledger.py); None offline or before the fit ends
    )
    ledger_ranks: list[FitLedger] = field(
        default_factory=list
    )  # each rank's ledger, when several were merged
    fit_probes: FitProbes | None = (
        None  # measure/stage.py: the val loader's ladder, the callbacks' frequency args
    )
    autotune: AutotuneRecord | None = None  # what autotune=True did to the train DataLoader (end of fit only)

    @property
    def back_to_back_step_ms(self) -> float | None:
        """The model's training step timed back-to-back, no loading between (ms): the trials' median baseline,
        else the loader probe's own timing of the step (:attr:`LoaderLadder.step_ms`); None when neither ran."""
        timed = self.trials.median_baseline_ms if self.trials is not None else None
        if timed is None and self.loader_ladder is not None:
            timed = self.loader_ladder.step_ms
        return timed
