"""The ladder climb: the loader alone at ``num_workers`` = 0, 1, 2, 4, ... and a larger prefetch factor.

num_workers=0 first: CPU time against wall time of its fetch tells CPU-bound loading (more workers than cores
cannot help) from loading that waits (disk, network, remote storage: more workers than cores do help), so the
ladder stops at the usable CPU count in the first case and goes on in the second. It also stops once a rung
covers the model's rate, after rungs without a gain, or when the budget would not pay for the next rung; the
best count then gets a larger ``prefetch_factor`` where it covers the model's rate (else the queue is empty
whatever its depth).
"""

from __future__ import annotations

import time

from lightning_bottleneck.evidence.loader_ladder import (
    BOUND_CPU,
    BOUND_UNKNOWN,
    BOUND_WAIT,
    LoaderLadder,
    Rung,
)
from lightning_bottleneck.measure.loader_factory import ProbePlan
from lightning_bottleneck.measure.loader_rung import MIN_MEASURE_S, affordable, time_rung

__all__ = ["WAIT_BOUND_MAX_WORKERS", "climb"]

# A fetch whose CPU time is below half its wall time spends most of it waiting (I/O, sleep, remote
# storage): the same 50% split as the package's overhead rule (device busy less than half the time).
CPU_BOUND_SHARE = 0.5
# Wait-bound loading gets workers beyond the CPU count up to this many: each worker is a process with
# a copy of the dataset object; 16 is twice the advice's MAX_SUGGESTED_WORKERS.
WAIT_BOUND_MAX_WORKERS = 16
# The ladder stops climbing when doubling the workers gains less than this (10%: about the run-to-run
# spread of a loader timing on a shared machine).
LADDER_GAIN_MIN = 1.10
# ... twice in a row: one flat rung is often noise on a busy machine (a 3 ms sleep measured 49 to 300
# samples/s at num_workers=0 from one probe to the next while other processes kept both cores busy).
PLATEAU_RUNGS = 2
# Prefetch factors tried for the best worker count besides torch's default of 2.
PREFETCH_FACTORS = (4,)


def _ladder_counts(bound: str, cpus: int, current: int) -> list[int]:
    cap = cpus if bound == BOUND_CPU else max(cpus, WAIT_BOUND_MAX_WORKERS)
    counts, w = [], 1
    while w <= cap:
        counts.append(w)
        w *= 2
    if bound == BOUND_CPU and cpus not in counts and cpus > 0:
        counts.append(cpus)
    if current > 0 and current not in counts:
        counts.append(current)
    return sorted(set(counts))


def _first_useful_count(bound: str, counts: list[int], zero: Rung, target: float | None) -> int:
    """The smallest worker count worth timing first: with loading that waits (I/O, sleep), each worker adds
    about num_workers=0's rate, so the counts below ``target / rate`` cannot cover the model and are skipped;
    a short budget then goes to the count that can (issue 19: a 1-second probe spent its budget on
    num_workers=0 and 1 of a loader asleep 2 ms a sample, and never reached the 2-4 workers that cover)."""
    if bound != BOUND_WAIT or not target or zero.samples_per_s <= 0:
        return 0
    need = target / zero.samples_per_s
    return next((w for w in counts if w >= need), counts[-1] if counts else 0)


def climb(
    plan: ProbePlan,
    ladder: LoaderLadder,
    cpus: int,
    current: int,
    target: float | None,
    memory_budget: int,
    start: float,
    deadline: float,
    seed: int,
    reserve: float = 0.0,
    wait_reserve: float = 0.0,
    cpu_deadline: float | None = None,
    alone_decides: bool = True,
    zero: Rung | None = None,
) -> None:
    """Climb the ladder onto ``ladder.rungs`` (see the module docstring); a share of the budget is left for
    timing with the step: ``reserve`` with CPU-bound loading, ``wait_reserve`` with loading that waits. With
    CPU-bound loading the probe ends by ``cpu_deadline`` when that is earlier (nothing more at ``start``), and
    stops after num_workers=0 when the rates of the loader alone decide nothing (``alone_decides`` False: the
    counts are timed with the step, which decides for CPU-bound loading, and the run confirms the choice). ``zero``:
    num_workers=0 already timed (read from its fetches beside the step: ``time_in_process_with_step``)."""
    budget = deadline - start
    batch_bytes: list[int] = []
    if zero is None:
        zero = time_rung(plan, 0, None, deadline, budget, seed, ladder, batch_bytes)
    if zero is None:
        return
    ladder.rungs.append(zero)
    ladder.bound = _bound(zero)
    if ladder.bound == BOUND_CPU and cpu_deadline is not None and cpu_deadline < deadline:
        saves = 1.0 - 1.0 / max(1, cpus)
        if cpu_deadline <= start:
            ladder.notes.append(
                f"Loading is CPU-bound on {cpus} usable CPU(s): workers could save at most {saves:.0%} of it, too "
                "little for the automatic loader probe to time a worker count (set loader_budget_s to measure)."
            )
            return
        deadline = cpu_deadline
        budget = ladder.budget_s = deadline - start
        ladder.notes.append(
            f"Loading is CPU-bound on {cpus} usable CPU(s): workers could save at most {saves:.0%} of it, so the "
            f"automatic loader probe keeps to {budget:.2f} s."
        )
    if ladder.bound == BOUND_CPU and reserve and not alone_decides:
        return  # the rest of the budget times worker counts with the step
    kept = {BOUND_CPU: reserve, BOUND_WAIT: wait_reserve}.get(ladder.bound, 0.0)
    if kept:  # the rest of the budget times worker counts with the step
        budget *= 1.0 - kept
        deadline = start + budget
    best = zero
    covered = target is not None and zero.samples_per_s >= target
    counts = _ladder_counts(ladder.bound, cpus, current)
    skip_below = _first_useful_count(ladder.bound, counts, zero, target)
    flat = 0
    for w in counts:
        if (covered or w < skip_below) and w != current:
            continue
        if not affordable(w, 2, batch_bytes, memory_budget, ladder):
            break
        if time.perf_counter() + _expected_cost(ladder.rungs) > deadline:
            ladder.notes.append(f"Loader probe budget ({budget:.1f} s) spent before num_workers={w}.")
            break
        rung = time_rung(plan, w, 2, deadline, budget, seed, ladder, batch_bytes)
        if rung is None:
            break
        ladder.rungs.append(rung)
        if ladder.bound == BOUND_UNKNOWN:
            ladder.bound = _bound(rung)
        if target is not None and rung.samples_per_s >= target:
            covered = True
        gained = rung.samples_per_s >= best.samples_per_s * LADDER_GAIN_MIN
        best = max(best, rung, key=lambda r: r.samples_per_s)
        flat = 0 if gained else flat + 1
        if flat >= PLATEAU_RUNGS and w > current:
            ladder.notes.append(f"The ladder stopped at num_workers={w}: {flat} rungs without a gain.")
            break
    if best.num_workers > 0 and (target is None or best.samples_per_s >= target):
        # a count that does not cover the model's rate has its workers busy all the time and the queue empty
        # whatever its depth: a deeper one cannot raise the rate (issue 29's io_wait: 16 workers at ~4 800 samples/s
        # against a step that takes 25 800, prefetch_factor=4 timed at 4 065, 0.4 s of start-up for nothing)
        for pf in PREFETCH_FACTORS:
            if not affordable(best.num_workers, pf, batch_bytes, memory_budget, ladder):
                break
            if time.perf_counter() + _expected_cost(ladder.rungs) > deadline:
                break
            rung = time_rung(plan, best.num_workers, pf, deadline, budget, seed, ladder, batch_bytes)
            if rung is None:
                break
            ladder.rungs.append(rung)


def _bound(rung: Rung) -> str:
    if rung.cpu_share is None:
        return BOUND_UNKNOWN
    return BOUND_CPU if rung.cpu_share >= CPU_BOUND_SHARE else BOUND_WAIT


def _expected_cost(rungs: list[Rung]) -> float:
    """What the next rung will probably cost: the last one's start-up plus a minimal window."""
    if not rungs:
        return 0.0
    last = rungs[-1]
    return last.startup_s + min(last.measured_s, MIN_MEASURE_S)
