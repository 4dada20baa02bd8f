"""Was the machine busy? Two cheap CPU snapshots (window start and end) and a verdict with a note.

A shared machine makes every timing in the window slower and flips verdicts (a descheduled tiny op looks
like work). :func:`take_snapshot` reads the process's CPU time and context switches
(``resource.getrusage``), its live children's CPU time (DataLoader workers: ``/proc``), the CPUs it may
use (affinity, cgroup quota), the busy and steal time of those CPUs (``/proc/stat``) and the load average;
:func:`assess` compares two snapshots and says whether *other* processes took a material share of the
CPUs the run wanted. No torch import; a few file reads per call; call it twice per window, never per step.

Example::

    from lightning_bottleneck.measure.contention import assess, take_snapshot

    start = take_snapshot(threads=torch.get_num_threads())
    ...  # the profiled steps
    verdict = assess(start, take_snapshot(threads=torch.get_num_threads()))
    if verdict.busy:
        notes.append(verdict.note)
"""

from __future__ import annotations

import os
import resource
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lightning_bottleneck.measure.cpus import usable_cpus

__all__ = ["Contention", "CpuSnapshot", "assess", "take_snapshot"]

#: Other processes are a *material* drain when they leave the run fewer free CPUs than it wanted by at
#: least this fraction: a CPU-bound step slows in proportion to the cores it loses, so a 20% shortfall
#: is ~20% on the step time, several times the 3% noise band the reports use and above the 5-10%
#: step-to-step spread of a steady CPU loop.
MATERIAL_SHORTFALL = 0.2
#: Without ``/proc/stat``: a thread that shares its core with a runnable thread of another process is
#: preempted once per CFS time slice (``sched_latency_ns`` 6-24 ms over the runnable threads: 40-170
#: times a second); one that owns its core is almost never. 40 per second per wanted thread is the low
#: end of that range.
INVOLUNTARY_SWITCHES_PER_S = 40.0
#: Hypervisor steal above this share of the CPUs' time is reported (cloud guidance treats sustained steal
#: above ~10% as a noisy neighbour; AWS/GCP docs on CPU steal).
STEAL_SHARE = 0.1
#: Windows shorter than this give no meaningful rates (a few scheduler ticks at HZ=250).
MIN_WALL_S = 0.05

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU accounting at one instant (seconds unless named otherwise)."""

    wall_s: float  # time.perf_counter()
    cpu_s: float  # this process, all threads, user + system (getrusage RUSAGE_SELF)
    children_cpu_s: float  # live child processes (DataLoader workers), from /proc; 0 where unreadable
    involuntary_switches: int  # ru_nivcsw: preemptions of this process's threads
    voluntary_switches: int  # ru_nvcsw: waits (I/O, locks, sleeps)
    threads: int  # intra-op threads the run wants busy (torch.get_num_threads())
    usable_cpus: int  # affinity and cgroup quota (lightning_bottleneck.measure.cpus.usable_cpus)
    cpus_busy_s: float | None  # busy time (incl. steal) of the CPUs in this process's affinity, /proc/stat
    cpus_steal_s: float | None  # steal time of those CPUs (a hypervisor running other guests)
    cpus_total_s: float | None  # all time of those CPUs
    loadavg_1m: float | None  # /proc/loadavg

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Contention:
    """What two snapshots say about the window."""

    busy: bool
    wall_s: float
    own_cores: float  # CPU time of this process (and its workers) / wall time
    others_cores: float | None  # cores other processes used on our CPUs, when /proc/stat is readable
    wanted_cores: float  # min(intra-op threads, usable CPUs)
    free_cores: float | None  # usable CPUs minus others_cores
    involuntary_per_s: float
    steal_share: float | None
    loadavg_1m: float | None
    note: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return ("busy machine: " if self.busy else "machine not contended: ") + self.note


def _proc_stat_cpus(cpus: set[int] | None) -> tuple[float, float, float] | None:
    """(busy, steal, total) seconds summed over ``cpus`` (all CPUs when None) from /proc/stat."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    busy = steal = total = 0.0
    found = False
    for line in lines:
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *fields = line.split()
        try:
            idx = int(name[3:])
        except ValueError:
            continue
        if cpus is not None and idx not in cpus:
            continue
        v = [int(x) for x in fields[:8]] + [0] * max(0, 8 - len(fields))
        user, nice, system, idle, iowait, irq, softirq, st = v[:8]
        busy += user + nice + system + irq + softirq + st
        steal += st
        total += user + nice + system + idle + iowait + irq + softirq + st
        found = True
    if not found:
        return None
    return busy / _CLK_TCK, steal / _CLK_TCK, total / _CLK_TCK


def _children_cpu_s() -> float:
    """CPU seconds of this process's live descendants (DataLoader workers and their children)."""
    total = 0.0
    seen: set[int] = set()
    todo = _child_pids(os.getpid())
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
        todo.extend(_child_pids(pid))
    return total


def _child_pids(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                out.extend(int(x) for x in (task / "children").read_text().split())
            except (OSError, ValueError):
                continue
    except OSError:
        pass
    return out


def _loadavg() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _default_threads() -> int:
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            return int(torch.get_num_threads())
        except Exception:  # pragma: no cover
            pass
    return 1


def take_snapshot(threads: int | None = None) -> CpuSnapshot:
    """Read the CPU accounting now. ``threads``: the intra-op threads the run wants busy (default: torch's
    ``get_num_threads()`` when torch is imported, else 1)."""
    wall = time.perf_counter()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    try:
        affinity: set[int] | None = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    stat = _proc_stat_cpus(affinity)
    return CpuSnapshot(
        wall_s=wall,
        cpu_s=ru.ru_utime + ru.ru_stime,
        children_cpu_s=_children_cpu_s(),
        involuntary_switches=int(ru.ru_nivcsw),
        voluntary_switches=int(ru.ru_nvcsw),
        threads=max(1, int(threads if threads is not None else _default_threads())),
        usable_cpus=usable_cpus(),
        cpus_busy_s=None if stat is None else stat[0],
        cpus_steal_s=None if stat is None else stat[1],
        cpus_total_s=None if stat is None else stat[2],
        loadavg_1m=_loadavg(),
    )


def assess(start: CpuSnapshot, end: CpuSnapshot, wanted_cores: float | None = None) -> Contention:
    """Did other processes take a material share of the CPUs the run wanted between two snapshots?

    ``wanted_cores`` defaults to ``min(threads, usable_cpus)`` (a CPU run's intra-op threads); for the host
    side of a GPU run pass what the host needs (1 for the main thread, plus the DataLoader workers).
    With ``/proc/stat`` readable: busy when the usable CPUs minus what other processes used on them
    leave the run short of ``wanted_cores`` by at least :data:`MATERIAL_SHORTFALL`. Without it: busy when
    the process ran on fewer cores than wanted by that fraction while its threads were preempted more
    than :data:`INVOLUNTARY_SWITCHES_PER_S` times a second each.
    """
    wall = end.wall_s - start.wall_s
    usable = float(end.usable_cpus)
    wanted = float(wanted_cores) if wanted_cores is not None else float(min(end.threads, end.usable_cpus))
    wanted = max(min(wanted, usable), 1e-9)
    if wall < MIN_WALL_S:
        return Contention(False, wall, 0.0, None, wanted, None, 0.0, None, end.loadavg_1m,
                          f"window too short to judge ({wall * 1000:.0f} ms)")  # fmt: skip
    own = (end.cpu_s - start.cpu_s) + max(0.0, end.children_cpu_s - start.children_cpu_s)
    own_cores = own / wall
    invol = (end.involuntary_switches - start.involuntary_switches) / wall
    others: float | None = None
    free: float | None = None
    steal: float | None = None
    if None not in (start.cpus_busy_s, end.cpus_busy_s, start.cpus_total_s, end.cpus_total_s):
        busy_s = float(end.cpus_busy_s) - float(start.cpus_busy_s)  # type: ignore[arg-type]
        total_s = float(end.cpus_total_s) - float(start.cpus_total_s)  # type: ignore[arg-type]
        steal_s = float(end.cpus_steal_s or 0.0) - float(start.cpus_steal_s or 0.0)
        if total_s > 0:
            # /proc/stat counts whole affinity CPUs; scale to the quota when a cgroup limits us further
            n_stat = max(1.0, round(total_s / wall))
            others = max(0.0, busy_s / wall - own_cores) * min(1.0, usable / n_stat)
            free = max(0.0, usable - others)
            steal = steal_s / total_s
    shortfall = 0.0
    if free is not None:
        shortfall = max(0.0, wanted - free) / wanted
        busy = shortfall >= MATERIAL_SHORTFALL
    else:
        shortfall = max(0.0, wanted - own_cores) / wanted
        busy = shortfall >= MATERIAL_SHORTFALL and invol >= INVOLUNTARY_SWITCHES_PER_S * wanted
    parts = []
    if others is not None:
        parts.append(
            f"other processes used {others:.2f} of the {usable:g} CPU(s) this run may use, leaving "
            f"{free:.2f} for the {wanted:g} it wanted ({shortfall:.0%} short)"
        )
    else:
        parts.append(
            f"this process ran on {own_cores:.2f} core(s) for {wanted:g} wanted, preempted "
            f"{invol:.0f} times/s"
        )
    if steal is not None and steal >= STEAL_SHARE:
        parts.append(f"the hypervisor stole {steal:.0%} of the CPUs' time")
    if end.loadavg_1m is not None and end.loadavg_1m > usable:
        parts.append(f"load average {end.loadavg_1m:.1f} on {usable:g} usable CPU(s)")
    if busy:
        parts.append(
            "window timings are inflated by waiting for a core and shares measured on the host are less "
            "reliable; rerun on a quiet machine to confirm"
        )
        avail = free if free is not None else own_cores
        fewer = max(1, int(avail))
        if end.threads > avail + 0.5 and fewer < end.threads:
            parts.append(
                f"{end.threads} intra-op threads for about {avail:.1f} free core(s): "
                f"torch.set_num_threads({fewer}) avoids threads waiting on a descheduled core"
            )
    return Contention(
        busy=busy,
        wall_s=round(wall, 4),
        own_cores=round(own_cores, 3),
        others_cores=None if others is None else round(others, 3),
        wanted_cores=wanted,
        free_cores=None if free is None else round(free, 3),
        involuntary_per_s=round(invol, 1),
        steal_share=None if steal is None else round(steal, 4),
        loadavg_1m=end.loadavg_1m,
        note="; ".join(parts),
    )
