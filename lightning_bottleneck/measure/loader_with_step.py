"""Timing with the training step: the step back-to-back, then worker counts feeding the model's own step.

Given ``train_step`` (a function that runs the model's step on a batch and leaves training untouched:
:func:`~lightning_bottleneck.measure.trials.restored_trial_step`), the step is first timed back-to-back on one
batch (:attr:`LoaderLadder.step_ms`). When loading is CPU-bound, the worker counts worth trying then feed the
step, so workers and step compete for the cores as they will in training, and the rate is what the run gets
(issue 19: the loader alone measured 1.2-2x for worker counts that trained at 0.74-0.99x on 2 cores):
:attr:`LoaderLadder.in_training`. When loading waits (I/O, sleeps), the count the ladder found covering the model
feeds the step beside the current one (issue 28: how fast the step runs once loading leaves the process was a
range between its median and its back-to-back time; now it is measured).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from lightning_bottleneck.evidence.loader_ladder import LoaderLadder
from lightning_bottleneck.measure.host_threads import held_threads, threads_beside_workers
from lightning_bottleneck.measure.loader_climb import WAIT_BOUND_MAX_WORKERS
from lightning_bottleneck.measure.loader_factory import ProbePlan, probe_dataloader
from lightning_bottleneck.measure.loader_rung import MIN_MEASURE_S, affordable, time_rung

__all__ = [
    "IN_TRAINING_SHARE",
    "ONE_PASS_WINDOW_S",
    "STEP_ALONE_SHARE",
    "STEP_ALONE_STEPS",
    "WAIT_IN_TRAINING_MIN_BUDGET_S",
    "WAIT_IN_TRAINING_SHARE",
    "time_in_training",
    "time_step_alone",
    "wait_bound_candidate",
]

# Share of the budget kept for timing worker counts with the training step (CPU-bound loading, a train_step
# given): the loader-alone ladder of CPU-bound loading stops at the core count (two or three rungs on a
# laptop), so 40% of the budget suffices for it, and the in-training rungs (the current count twice, the core
# count, twice the core count), which must each drain the workers' prefetch queue before timing, get 60%.
IN_TRAINING_SHARE = 0.6
# The same when loading waits (I/O, sleeps; issue 28: the advised count timed with the step in every case): the
# ladder climbs to the count that covers the model, which needs the larger share; the step then times two rungs
# (the current count twice, the advised one), each draining the prefetch queue first.
WAIT_IN_TRAINING_SHARE = 0.4
# ... only from this budget on: below it the climb needs the whole budget to reach a covering count (issue 29's
# io_wait with a 1 s probe: 0.6 s left to the climb was spent at num_workers=0, and no loader advice was given).
# The timing with the step then runs only if what the climb left holds the current count and the candidate (its
# start-up and MIN_MEASURE_S each; the current count's second timing is dropped when the budget is short).
WAIT_IN_TRAINING_MIN_BUDGET_S = 2.0
# Worker counts up to this multiple of the usable cores are timed with the step: more workers than cores
# cannot speed CPU-bound loading alone, but in training they take a larger share of the cores from the
# step's threads (the scheduler shares per thread), which can pay when loading is the longer part; at most
# WAIT_BOUND_MAX_WORKERS (each worker a process with a copy of the dataset object).
IN_TRAINING_OVERSUBSCRIPTION = 2
# With a train_step given, the step is first timed back-to-back on one batch (LoaderLadder.step_ms): at most this
# share of the budget (a few steps of a model small enough to train on the CPU), before the ladder so that its rungs
# never squeeze it out; STEP_ALONE_STEPS timed steps after one warm-up (the median: one hiccup does not move it), and
# no figure below STEP_ALONE_MIN_STEPS.
STEP_ALONE_SHARE = 0.1
STEP_ALONE_STEPS = 9
STEP_ALONE_MIN_STEPS = 3
# Where the run confirms the choice on its own steps (autotune: ``time_in_training(one_pass=True)``), each count's
# window with the step is this long once its prefetch queue is drained, not loader_rung.MIN_MEASURE_S: the timings
# only rank the counts (the run then times the one chosen against its own steps, on hundreds of steps, and switches
# back when it is not faster), and every trial step is time the fit does not train. Issue 29's cpu_transform: three
# windows of 0.23-0.26 s (num_workers 0, 2, 4: 27-48 batches each) were ~0.75 s of the ~0.95 s probe in a first
# epoch ~0.9 s longer than the best setting's; 0.15 s still holds 16+ batches of a loader as slow as its 9 ms
# in-process ones, two rounds at least of 4 workers. 0.10 s was tried (thirty-third session): the probe took 0.346 s
# against 0.455 s (medians, ``python benchmarks/probe_windows.py --rounds 8 --windows 0.15,0.1,0.08``; 0.08 s read two
# probes of eight at 0.09x and 0.28x), and ``python benchmarks/autotune_payoff.py --workloads cpu_transform --repeats
# 6`` read 0.974x paired (0.886-0.995x) at 0.10 s, 0.982x (0.917-1.011x) at 0.15 s an hour later; in both, some fits
# read 2 workers 1.10x faster and switched to them for the rest of the first epoch, undone at its end as
# inconclusive (2 of 6 at 0.10 s, 3 of 6 at 0.15 s, 0 of 9 in the session before): the 0.1 s did not show through
# this VM's noise, and the length all eight workloads were measured at stays.
ONE_PASS_WINDOW_S = 0.15


def time_step_alone(
    plan: ProbePlan, ladder: LoaderLadder, train_step: Callable[[Any], None], seed: int, until: float
) -> None:
    """Time the training step back-to-back on one batch of the probe's own loader (no workers, no loading between
    the steps) until ``until``: :attr:`LoaderLadder.step_ms`, the step once loading leaves the process (issue 19:
    io_wait's steps took 13 ms beside in-process loading that sleeps, the same step back-to-back ~1 ms)."""
    times: list[float] = []
    try:
        batch = next(iter(probe_dataloader(plan, 0, None, seed, until)))
        train_step(batch)  # warm-up: the allocator, oneDNN primitives
        while len(times) < STEP_ALONE_STEPS and time.perf_counter() < until:
            t0 = time.perf_counter()
            train_step(batch)
            times.append(time.perf_counter() - t0)
    except Exception as err:  # a failing step: the ladder goes on without the figure
        ladder.notes.append(f"Timing the training step back-to-back failed: {type(err).__name__}: {err}")
        return
    if len(times) >= STEP_ALONE_MIN_STEPS:
        ladder.step_ms = statistics.median(times) * 1e3


def time_in_training(
    plan: ProbePlan,
    ladder: LoaderLadder,
    cpus: int,
    current: int,
    train_step: Callable[[Any], None],
    memory_budget: int,
    deadline: float,
    seed: int,
    candidates: list[int] | None = None,
    epoch_batches: int | None = None,
    one_pass: bool = False,
    race: bool = True,
    cap_threads: bool = False,
) -> None:
    """Time the current worker count, ``num_workers=0`` (when the current count has workers), the usable core count
    and twice that with the training step (or the given ``candidates``), then the current count again (its two
    timings are averaged, so that drift over the measurement cancels), then the fastest other count again when it beat both timings of the current (a win from
    one short timing is often the machine's noise, see :func:`_to_confirm`). With ``epoch_batches`` (the run's epoch
    length), each count but the current one also times an epoch when that is short (:attr:`Rung.epoch_s`).

    ``one_pass``: the run confirms the choice on its own steps (autotune), which the two timings of the current count
    and the second timing of a win guard against here: each count is timed once, in the share the whole order
    would give it, and the shares of the timings left out are not spent. With CPU-bound loading (no ``candidates``)
    only the core count is timed then, and twice that is left to the run (:attr:`LoaderLadder.left_to_run`):
    autotune runs it for one epoch after the core count's and keeps the faster on the run's own steps
    (:mod:`lightning_bottleneck.live.autotune_race`). Issue 29's cpu_transform on the 2-core machine: 2 and 4
    workers timed 2 412-2 906 and 2 418-2 764 samples/s in 0.15 s windows, a coin toss, where over 8 epochs 4
    trained 1-10% faster in every sweep (15.68 against 16.47 s, 17.50 / 17.63, 17.22 / 18.14, 19.14 / 19.50,
    19.42 / 21.46): the pick of 2 in a third of the fits cost up to ~1 s of its later epochs, and timing 4 cost
    the probe ~0.3 s of its first. ``race=False`` (a fit with too few epochs left to race: one long epoch, where the
    count applied stays to its end) times both counts once instead.

    ``cap_threads`` (the step on the CPU): each count with workers but the current one is timed with the training
    process at the intra-op threads its workers leave (:func:`~lightning_bottleneck.measure.host_threads.
    threads_beside_workers`, :attr:`Rung.threads`), as the advice and autotune then set them."""
    given = candidates is not None
    raced: list[int] = []
    if candidates is None:
        candidates = [max(1, cpus), IN_TRAINING_OVERSUBSCRIPTION * max(1, cpus)]
        if one_pass and race and candidates[0] != current:
            # the run races the larger count against the one it applies (see the docstring)
            raced = [
                c for c in (min(w, WAIT_BOUND_MAX_WORKERS) for w in candidates[1:]) if c != candidates[0]
            ]
            candidates = candidates[:1]
        if current > 0:
            # loading in the training process, fed to the step too: the plan may advise dropping workers that
            # restart every epoch (issue 28: worker_restart's num_workers=0 was a bound "up to 56x", its step
            # once loading runs in-process never timed), and on a busy CPU in-process loading may train fastest
            candidates.append(0)
    counts = sorted({min(w, WAIT_BOUND_MAX_WORKERS) for w in candidates} - {current})
    order = [current, *counts, current]
    budget = max(0.0, deadline - time.perf_counter())
    batch_bytes: list[int] = []
    # a place held in the shares for the confirming timing (the most workers: the dearest to time)
    confirm = max(counts, default=current)
    window = ONE_PASS_WINDOW_S if one_pass else MIN_MEASURE_S
    i = 0
    while i < len(order) and not (one_pass and i > len(counts)):
        w = order[i]
        if one_pass and ladder.in_training_rung(w) is not None:
            i += 1  # timed already, beside the ladder's num_workers=0 (time_in_process_with_step)
            continue
        left = deadline - time.perf_counter()
        # a rung with workers first drains their prefetch queue: it gets a larger share; each gets at least the
        # minimal window while that much is left (the later ones go short: the current count's second timing last)
        weights = [1.0 + n / 2 for n in [*order[i:], *([confirm] if len(order) == len(counts) + 2 else [])]]
        share = max(window, left * weights[0] / sum(weights))
        if left < window:
            ladder.notes.append(
                f"Timing with the training step stopped before num_workers={w}: the probe's budget is spent."
            )
            break
        i += 1
        if w and not affordable(w, 2, batch_bytes, memory_budget, ladder):
            continue
        rung_end = time.perf_counter() + share
        if given and w != current:
            # the waiting load's count runs on to its two rounds (it stops there), within the probe's deadline; the
            # current count's second timing gets what is left, if that is its minimal window. On a slow machine
            # io_wait's 16 workers took 0.45 s to start and their share closed after 18 of 32 batches, too
            # briefly to count, and the figure became a bound; a reserve kept for the second timing (its start-up,
            # its window, the shutdowns) cut io_wait_slow's 16 workers short the same way
            rung_end = deadline
        # the training process at the threads this count's workers leave it, its own count back after (the rung
        # records it: the advice carries it)
        threads = threads_beside_workers(cpus, w) if cap_threads and w != current else None
        with held_threads(threads):
            rung = time_rung(
                plan,
                w,
                2 if w else None,
                rung_end,
                # given candidates (waiting loads), a rung gets its whole share: many waiting workers take most of a
                # capped one to start (io_wait's 16 timed 0.06 s after 0.35 s of start-up, too briefly to count)
                budget if not given else float("inf"),
                seed,
                ladder,
                batch_bytes,
                train_step,
                # the current count's epochs are in the fit ledger: only the others run on to time one
                epoch_batches if w != current else None,
                window_s=window,
            )
        if rung is not None:
            rung.threads = threads
        if rung is None:
            break
        ladder.in_training.append(rung)
        # a win timed again (CPU-bound loading's 1.1-1.4x wins are often noise); not for waiting loads, whose wins are
        # multiples: io_wait's 8 workers, 8.3x, were timed again too briefly and the rough timing voided the count
        if i == len(order) == len(counts) + 2 and not given:
            again = _to_confirm(ladder, current)
            if again is not None:
                order.append(again)
    if ladder.in_training_rung(current) is None:
        ladder.in_training.clear()
    elif raced and batch_bytes and ladder.in_training_rung(max(1, cpus)) is not None:
        ladder.left_to_run = [w for w in raced if affordable(w, 2, batch_bytes, memory_budget, ladder)]


def wait_bound_candidate(
    ladder: LoaderLadder, target: float | None, current: int, left_s: float | None = None
) -> int | None:
    """The worker count to time with the step when loading waits (I/O, sleeps): the smallest the loader-alone
    ladder found covering the model's ``target`` rate, else its fastest; None when that is the current count, or
    when ``left_s`` seconds cannot time it and the current count (a note says so)."""
    rungs = [r for r in ladder.rungs if r.num_workers > 0]
    if not rungs:
        return None
    covering = sorted(r.num_workers for r in rungs if target is not None and r.samples_per_s >= target)
    w = covering[0] if covering else max(rungs, key=lambda r: r.samples_per_s).num_workers
    if w == current:
        return None
    rung = ladder.rung(w)
    need = 2 * MIN_MEASURE_S + (rung.startup_s if rung is not None else 0.0)
    if left_s is not None and left_s < need:
        ladder.notes.append(
            f"num_workers={w} was not timed with the training step: {left_s:.1f} s of the probe's budget was left, "
            f"{need:.1f} s needed (raise loader_budget_s)."
        )
        return None
    return w


def _to_confirm(ladder: LoaderLadder, current: int) -> int | None:
    """The other worker count that trained faster than both timings of the current one, if any: it is timed a
    second time, since one short timing (about half a second) of CPU-bound loading beside the step is noisy on a
    shared machine (issue 19, cpu_transform on the 2-core VM: num_workers=2 timed 1.36x in training, applied
    0.90x; the sweep's best 1.08x). The plan then holds its slower timing against the current one's faster."""
    now = [r.samples_per_s for r in ladder.in_training if r.num_workers == current]
    others = [r for r in ladder.in_training if r.num_workers != current and not r.rough]
    if len(now) < 2 or not others:
        return None
    best = max(others, key=lambda r: r.samples_per_s)
    return best.num_workers if best.samples_per_s > max(now) else None
