"""Busy-machine detection: two CPU snapshots around a window; live with real spinning processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from lightning_bottleneck.measure.contention import (
    INVOLUNTARY_SWITCHES_PER_S,
    MATERIAL_SHORTFALL,
    CpuSnapshot,
    assess,
    take_snapshot,
)
from lightning_bottleneck.measure.cpus import usable_cpus


def _snap(**kw: float) -> CpuSnapshot:
    base = dict(wall_s=0.0, cpu_s=0.0, children_cpu_s=0.0, involuntary_switches=0, voluntary_switches=0,
                threads=2, usable_cpus=2, cpus_busy_s=0.0, cpus_steal_s=0.0, cpus_total_s=0.0, loadavg_1m=0.5)  # fmt: skip
    base.update(kw)
    return CpuSnapshot(**base)  # type: ignore[arg-type]


def test_quiet_window_is_not_busy() -> None:
    # 1 s, 2 CPUs: this process used 1.9 cores, the CPUs were busy 1.95 s in all: others 0.05 cores
    c = assess(
        _snap(), _snap(wall_s=1.0, cpu_s=1.9, cpus_busy_s=1.95, cpus_total_s=2.0, involuntary_switches=5)
    )
    assert not c.busy and c.others_cores == pytest.approx(0.05) and c.free_cores == pytest.approx(1.95)
    assert "not contended" in str(c)


def test_others_taking_a_core_is_busy_with_a_thread_hint() -> None:
    c = assess(
        _snap(), _snap(wall_s=1.0, cpu_s=1.0, cpus_busy_s=2.0, cpus_total_s=2.0, involuntary_switches=300)
    )
    assert c.busy and c.others_cores == pytest.approx(1.0) and c.free_cores == pytest.approx(1.0)
    assert "50% short" in c.note and "torch.set_num_threads(1)" in c.note
    # the same load is no loss for a run that wants one core only
    assert not assess(
        _snap(threads=1), _snap(threads=1, wall_s=1.0, cpu_s=1.0, cpus_busy_s=2.0, cpus_total_s=2.0)
    ).busy


def test_material_threshold_is_the_boundary() -> None:
    def others(x: float) -> bool:
        return assess(_snap(), _snap(wall_s=1.0, cpu_s=2 - x, cpus_busy_s=2.0, cpus_total_s=2.0)).busy

    assert not others(2 * MATERIAL_SHORTFALL - 0.05) and others(2 * MATERIAL_SHORTFALL + 0.05)


def test_without_proc_stat_uses_cpu_time_and_preemptions() -> None:
    no_stat = dict(cpus_busy_s=None, cpus_total_s=None, cpus_steal_s=None)
    start = _snap(**no_stat)  # type: ignore[arg-type]
    preempted = assess(
        start, replace(start, wall_s=1.0, cpu_s=1.0, involuntary_switches=int(3 * INVOLUNTARY_SWITCHES_PER_S))
    )
    assert preempted.busy and preempted.others_cores is None and "preempted" in preempted.note
    # the same CPU time with few preemptions is a run that waited on something else (I/O, a GPU)
    assert not assess(start, replace(start, wall_s=1.0, cpu_s=1.0, involuntary_switches=3)).busy


def test_steal_and_short_windows() -> None:
    c = assess(_snap(), _snap(wall_s=1.0, cpu_s=1.9, cpus_busy_s=1.95, cpus_steal_s=0.4, cpus_total_s=2.0))
    assert "stole 20%" in c.note
    assert "too short" in assess(_snap(), _snap(wall_s=0.001)).note


@pytest.fixture
def spinners() -> Iterator[int]:
    """One busy-looping process per usable CPU, NOT our children (so not counted as our own workers)."""
    n = usable_cpus()
    out = subprocess.run(
        ["sh", "-c", " ".join([f'{sys.executable} -c "while True: pass" >/dev/null 2>&1 & echo $!;'] * n)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    pids = [int(p) for p in out.stdout.split()]
    try:
        time.sleep(0.3)
        yield n
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_live_busy_processes_are_detected(spinners: int) -> None:
    start = take_snapshot(threads=spinners)
    _spin(0.8)
    c = assess(start, take_snapshot(threads=spinners))
    assert c.busy, c
    if c.others_cores is not None:  # /proc/stat readable (Linux)
        assert c.others_cores >= 0.4 * spinners, c
    assert start.usable_cpus == spinners and start.cpu_s > 0 and c.to_dict()["busy"] is True


def test_snapshot_is_cheap() -> None:
    t0 = time.perf_counter()
    for _ in range(20):
        take_snapshot()
    assert (time.perf_counter() - t0) / 20 < 0.02  # a few file reads: well under the 20 ms bound


def test_no_thread_hint_for_a_single_threaded_run() -> None:
    c = assess(_snap(threads=1), _snap(threads=1, wall_s=1.0, cpu_s=0.4, cpus_busy_s=2.0, cpus_total_s=2.0))
    assert c.busy and "set_num_threads" not in c.note
