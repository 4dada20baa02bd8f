"""What the busy-machine check measured: two CPU snapshots and the verdict on them (typed, torch-free).

Taken by :mod:`lightning_bottleneck.measure.contention` (psutil reads, twice per window); read by the rules
(a busy machine caps the confidence) and the loader plan (the step's own CPU use).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Contention", "CpuSnapshot"]


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU accounting at one instant (seconds unless named otherwise)."""

    wall_s: float  # time.perf_counter()
    cpu_s: float  # this process, all threads, user + system (psutil)
    children_cpu_s: float  # all descendants, exited ones included (own_cpu_s): DataLoader/compile workers
    involuntary_switches: int  # ru_nivcsw: preemptions of this process's threads
    voluntary_switches: int  # ru_nvcsw: waits (I/O, locks, sleeps)
    threads: int  # intra-op threads the run wants busy (torch.get_num_threads())
    usable_cpus: int  # affinity and cgroup quota (lightning_bottleneck.measure.cpus.usable_cpus)
    cpus_busy_s: float | None  # busy time (incl. steal) of the CPUs in this process's affinity (psutil)
    cpus_steal_s: float | None  # steal time of those CPUs (a hypervisor running other guests)
    cpus_total_s: float | None  # all time of those CPUs
    loadavg_1m: float | None  # 1-minute load average (psutil; emulated on Windows)
    available: bool = True  # False: psutil could not be imported, nothing above was read

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Contention:
    """What two snapshots say about the window."""

    busy: bool
    wall_s: float
    own_cores: float  # CPU time of this process (and its workers) / wall time
    others_cores: float | None  # cores other processes used on our CPUs, when per-CPU times are readable
    wanted_cores: float  # min(intra-op threads, usable CPUs)
    free_cores: float | None  # usable CPUs minus others_cores
    involuntary_per_s: float
    steal_share: float | None
    loadavg_1m: float | None
    note: str
    checked: bool = True  # False: the check was off (no psutil) or the window too short
    self_cores: float | None = None  # CPU time of this process alone (not its workers) / wall time

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        if not self.checked:
            return "busy-machine check not run: " + self.note
        return ("busy machine: " if self.busy else "machine not contended: ") + self.note
