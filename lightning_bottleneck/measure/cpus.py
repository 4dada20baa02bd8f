"""How many CPUs this process may really use (affinity and cgroup quota, not ``os.cpu_count()``), and the
one door to ``psutil``, through which CPU and memory are accounted on Linux, macOS and Windows.

``psutil`` is a dependency; should it not import (a broken install, a stripped environment) the checks that
need it - the busy-machine check, the CPU of worker processes, memory creep - are off and say so in one
note (:data:`PSUTIL_OFF_NOTE`), and nothing else changes.
"""

from __future__ import annotations

import importlib
import math
import os
from pathlib import Path
from types import ModuleType
from typing import Any

#: The one note a report carries when psutil cannot be imported.
PSUTIL_OFF_NOTE = (
    "CPU and memory accounting is off: psutil could not be imported, so the busy-machine check, the CPU "
    "time of worker processes and the memory-creep check were not run (pip install psutil)."
)


def psutil_module() -> ModuleType | None:
    """``psutil`` when importable, else None (looked up on every call: cheap once imported, and a test can
    block the import through ``sys.modules``)."""
    try:
        return importlib.import_module("psutil")
    except ImportError:
        return None


def affinity_cpus() -> set[int] | None:
    """The CPU indices this process may run on (None where the platform does not say: macOS)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    ps = psutil_module()
    if ps is not None:
        try:
            cpus: Any = ps.Process().cpu_affinity()  # Windows, FreeBSD
            return {int(c) for c in cpus} or None
        except (AttributeError, OSError, ps.Error):
            return None
    return None


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPU quota in cores from cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``; None when unlimited."""
    try:
        v2 = root / "cpu.max"
        if v2.is_file():
            quota, period = v2.read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        q1, p1 = root / "cpu" / "cpu.cfs_quota_us", root / "cpu" / "cpu.cfs_period_us"
        if q1.is_file() and p1.is_file():
            quota_us = int(q1.read_text())
            return None if quota_us <= 0 else quota_us / int(p1.read_text())
    except (OSError, ValueError):
        return None
    return None


def usable_cpus() -> int:
    affinity = affinity_cpus()
    n = len(affinity) if affinity else (os.cpu_count() or 1)
    quota = cgroup_cpu_quota()
    if quota is not None:
        n = min(n, max(1, math.floor(quota)))
    return max(1, n)


def cpu_has_bf16() -> bool:
    """Native bf16 on this x86 CPU (AVX512-BF16 or AMX-BF16), read from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool({"avx512_bf16", "amx_bf16"} & flags)
    except OSError:
        pass
    return False
