"""Was the machine busy? Two cheap CPU snapshots (window start and end) and a verdict with a note.

A shared machine makes every timing in the window slower and flips verdicts (a descheduled tiny op looks
like work). :func:`take_snapshot` reads, through ``psutil`` (Linux, macOS, Windows), the process's CPU
time and context switches, the CPU time of all its descendants - the exited ones included (DataLoader and
compile workers, compilers Inductor ran) - the CPUs it may use (affinity, cgroup quota), the busy and
steal time of those CPUs and the load average; :func:`assess` compares two snapshots and says whether
*other* processes (machine busy time minus this process tree's) took a material share of the CPUs the run
wanted. Without psutil the check is off and says so. No torch import; a few reads per call; call it twice
per window, never per step.

Example::

    from lightning_bottleneck.measure.contention import assess, take_snapshot

    start = take_snapshot(threads=torch.get_num_threads())
    ...  # the profiled steps
    verdict = assess(start, take_snapshot(threads=torch.get_num_threads()))
    if verdict.busy:
        notes.append(verdict.note)
"""

from __future__ import annotations

import sys
import time
from types import ModuleType
from typing import Any

from lightning_bottleneck.evidence.contention import Contention, CpuSnapshot
from lightning_bottleneck.measure.cpus import PSUTIL_OFF_NOTE, affinity_cpus, psutil_module, usable_cpus

try:
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

__all__ = ["assess", "take_snapshot"]

#: Other processes are a *material* drain when they leave the run fewer free CPUs than it wanted by at
#: least this fraction: a CPU-bound step slows in proportion to the cores it loses, so a 20% shortfall
#: is ~20% on the step time, several times the 3% noise band the reports use and above the 5-10%
#: step-to-step spread of a steady CPU loop.
MATERIAL_SHORTFALL = 0.2
#: Without per-CPU times: a thread that shares its core with a runnable thread of another process is
#: preempted once per CFS time slice (``sched_latency_ns`` 6-24 ms over the runnable threads: 40-170
#: times a second); one that owns its core is almost never. 40 per second per wanted thread is the low
#: end of that range.
INVOLUNTARY_SWITCHES_PER_S = 40.0
#: Hypervisor steal above this share of the CPUs' time is reported (cloud guidance treats sustained steal
#: above ~10% as a noisy neighbour; AWS/GCP docs on CPU steal).
STEAL_SHARE = 0.1
#: Windows shorter than this give no meaningful rates (a few scheduler ticks at HZ=250).
MIN_WALL_S = 0.05


def _cpu_times(ps: ModuleType, cpus: set[int] | None) -> tuple[float, float, float] | None:
    """(busy, steal, total) seconds summed over ``cpus`` (all CPUs when None), from psutil's per-CPU times
    (Linux ``/proc/stat``, macOS ``host_processor_info``, Windows ``NtQuerySystemInformation``)."""
    try:
        per_cpu = ps.cpu_times(percpu=True)
    except (OSError, ps.Error):
        return None
    busy = steal = total = 0.0
    for idx, t in enumerate(per_cpu):
        if cpus is not None and idx not in cpus:
            continue
        times = t._asdict()
        # guest time is already inside user/nice on Linux (psutil's own cpu_percent drops it the same way)
        all_s = sum(v for k, v in times.items() if k not in ("guest", "guest_nice"))
        idle_s = times.get("idle", 0.0) + times.get("iowait", 0.0)
        busy += all_s - idle_s
        steal += times.get("steal", 0.0)
        total += all_s
    if total <= 0:
        return None
    return busy, steal, total


def own_cpu_s(ps: ModuleType | None = None) -> tuple[float, float] | None:
    """(this process, its descendants) CPU seconds, user + system, since they started.

    Descendants are all of this process's child processes and theirs, the exited ones included: a live
    one counts its own time and that of the children it has reaped; an exited one reaped by this process
    is in ``getrusage(RUSAGE_CHILDREN)`` (POSIX), one reaped by a descendant in that descendant's
    children times. So a DataLoader worker, a compile worker or a ``g++`` started by Inductor that ran and
    exited between two snapshots is this run's CPU, not another process's. (Windows keeps no CPU time of
    exited children: there only the live ones count.) None without psutil.
    """
    ps = ps if ps is not None else psutil_module()
    if ps is None:
        return None
    try:
        me = ps.Process()
        mine = me.cpu_times()
        self_s = float(mine.user + mine.system)
        kids: list[Any] = me.children(recursive=True)
    except (OSError, ps.Error):
        return None
    reaped = 0.0
    if resource is not None:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        reaped = ru.ru_utime + ru.ru_stime
    else:  # pragma: no cover - Windows: psutil reports 0 for these
        reaped = float(getattr(mine, "children_user", 0.0) + getattr(mine, "children_system", 0.0))
    live = 0.0
    for kid in kids:
        try:
            t = kid.cpu_times()
        except (OSError, ps.Error):
            continue  # exited since listed: reaped (then counted above next time) or a zombie
        live += t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
    return self_s, reaped + live


def _switches(ps: ModuleType) -> tuple[int, int]:
    """(involuntary, voluntary) context switches of this process."""
    if resource is not None:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return int(ru.ru_nivcsw), int(ru.ru_nvcsw)
    try:  # pragma: no cover - Windows
        c = ps.Process().num_ctx_switches()
        return int(c.involuntary), int(c.voluntary)
    except (OSError, ps.Error):  # pragma: no cover
        return 0, 0


def _loadavg(ps: ModuleType) -> float | None:
    try:
        return float(ps.getloadavg()[0])
    except (AttributeError, OSError, ps.Error):
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
    ``get_num_threads()`` when torch is imported, else 1). Without psutil the snapshot says so
    (``available=False``) and :func:`assess` judges nothing."""
    wall = time.perf_counter()
    n_threads = max(1, int(threads if threads is not None else _default_threads()))
    ps = psutil_module()
    own = own_cpu_s(ps) if ps is not None else None
    if ps is None or own is None:
        return CpuSnapshot(wall, 0.0, 0.0, 0, 0, n_threads, usable_cpus(), None, None, None, None, False)
    stat = _cpu_times(ps, affinity_cpus())
    invol, vol = _switches(ps)
    return CpuSnapshot(
        wall_s=wall,
        cpu_s=own[0],
        children_cpu_s=own[1],
        involuntary_switches=invol,
        voluntary_switches=vol,
        threads=n_threads,
        usable_cpus=usable_cpus(),
        cpus_busy_s=None if stat is None else stat[0],
        cpus_steal_s=None if stat is None else stat[1],
        cpus_total_s=None if stat is None else stat[2],
        loadavg_1m=_loadavg(ps),
    )


def assess(start: CpuSnapshot, end: CpuSnapshot, wanted_cores: float | None = None) -> Contention:
    """Did other processes take a material share of the CPUs the run wanted between two snapshots?

    ``wanted_cores`` defaults to ``min(threads, usable_cpus)`` (a CPU run's intra-op threads); for the host
    side of a GPU run pass what the host needs (1 for the main thread, plus the DataLoader workers).
    With per-CPU times readable: busy when the usable CPUs minus what other processes used on them
    leave the run short of ``wanted_cores`` by at least :data:`MATERIAL_SHORTFALL`. Without it: busy when
    the process ran on fewer cores than wanted by that fraction while its threads were preempted more
    than :data:`INVOLUNTARY_SWITCHES_PER_S` times a second each.
    """
    wall = end.wall_s - start.wall_s
    usable = float(end.usable_cpus)
    wanted = float(wanted_cores) if wanted_cores is not None else float(min(end.threads, end.usable_cpus))
    wanted = max(min(wanted, usable), 1e-9)
    if not (start.available and end.available):
        return Contention(False, wall, 0.0, None, wanted, None, 0.0, None, None, PSUTIL_OFF_NOTE, False)
    if wall < MIN_WALL_S:
        return Contention(False, wall, 0.0, None, wanted, None, 0.0, None, end.loadavg_1m,
                          f"window too short to judge ({wall * 1000:.0f} ms)", False)  # fmt: skip
    # descendants' time includes the exited ones (own_cpu_s), so it only grows; the clamp guards against
    # a descendant orphaned to init between the snapshots (its time leaves our account)
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
            # per-CPU times count whole affinity CPUs; scale to the quota when a cgroup limits us further
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
        self_cores=round((end.cpu_s - start.cpu_s) / wall, 3),
    )
