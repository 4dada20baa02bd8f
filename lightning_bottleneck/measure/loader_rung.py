"""One rung of the loader ladder timed: a worker count and prefetch factor, alone or with the training step.

:func:`time_rung` times steady-state samples/s after the first round of batches (start-up is timed apart),
and, for the loader alone, the CPU the loading processes used against their wall time (what tells CPU-bound
loading from loading that waits). :func:`affordable` keeps the batches in flight within the memory budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from lightning_bottleneck.evidence.loader_ladder import LoaderLadder, Rung
from lightning_bottleneck.measure.cpus import psutil_module
from lightning_bottleneck.measure.loader_factory import (
    ProbePlan,
    batch_nbytes,
    probe_dataloader,
    shutdown_workers,
)

__all__ = [
    "MIN_MEASURE_S",
    "MIN_ROUNDS",
    "RUNG_BUDGET_SHARE",
    "SETTLED_BAND",
    "SETTLED_CHUNK",
    "SETTLED_MIN_S",
    "affordable",
    "time_in_process_with_step",
    "time_rung",
]

# A rung is measured well enough after this many rounds of batches (a round = one batch per worker)
# spanning at least this long; the first round (start-up) is never counted.
MIN_ROUNDS = 2
MIN_MEASURE_S = 0.25
# The loader alone in this process (num_workers=0: one batch after the other) closes its window sooner once its
# rate has settled: the window's two halves, split at a multiple of SETTLED_CHUNK batches, took times within
# SETTLED_BAND of each other, over SETTLED_MIN_S at least. A fast in-process loader has then told what the rest of
# MIN_MEASURE_S would (tiny_linear: 8 300 batches of 30 us in 0.25 s, 0.25 of the 0.41 s its diagnosis cost a 27 s
# fit, benchmarks/autotune_payoff.py); a stall or a busy core in either half (a 10 ms hiccup is 40% of the 25 ms
# half of a 50 ms window) keeps the window open to MIN_MEASURE_S as before. Slower loaders (a few ms a batch) reach
# MIN_MEASURE_S first: nothing changes for them.
SETTLED_CHUNK = 128
SETTLED_BAND = 0.05
SETTLED_MIN_S = 0.05
# ... and it never takes more than this share of the whole budget, so the ladder gets several rungs.
RUNG_BUDGET_SHARE = 0.35
# With the step, a rung runs on (within its deadline) to an epoch's batches when the epoch is at most this many
# batches long: in an epoch of a few prefetch queues the queue's filling from empty is much of its time, which the
# steady rate leaves out (io_wait_slow: 40 batches, 16 workers x 2 in flight; the steady rate predicted 4.1 ms a
# step, its epochs ran 4.3-8.7 ms a step after their first batch). Longer epochs are the steady state's.
EPOCH_TIMING_MAX_BATCHES = 256


def affordable(
    workers: int, prefetch: int, batch_bytes: list[int], budget: int, ladder: LoaderLadder
) -> bool:
    """Whether ``workers`` x ``prefetch`` batches in flight fit the memory ``budget`` (a note when not)."""
    if not batch_bytes:
        return True
    in_flight = workers * prefetch * batch_bytes[0]
    if in_flight <= budget:
        return True
    ladder.notes.append(
        f"num_workers={workers}, prefetch_factor={prefetch} not probed: {in_flight / 2**20:.0f} MiB of batches "
        f"in flight exceeds the probe's {budget / 2**20:.0f} MiB memory budget."
    )
    return False


def time_rung(
    plan: ProbePlan,
    workers: int,
    prefetch: int | None,
    deadline: float,
    budget: float,
    seed: int,
    ladder: LoaderLadder,
    batch_bytes: list[int],
    consume: Callable[[Any], None] | None = None,
    epoch_batches: int | None = None,
    fetches: list[tuple[float, float, float]] | None = None,
    window_s: float = MIN_MEASURE_S,
) -> Rung | None:
    """One setting timed: steady-state samples/s after the first round of batches, start-up, CPU. With
    ``consume`` (the training step) each batch is also stepped, and the CPU fields are left out; with
    ``epoch_batches`` too (at most EPOCH_TIMING_MAX_BATCHES), the rung runs on to that many batches within its
    deadline and times them as an epoch (:attr:`Rung.epoch_s`). The loader alone without workers stops sooner once
    its rate has settled (SETTLED_CHUNK, SETTLED_BAND, SETTLED_MIN_S). ``fetches`` (without workers) gets each
    batch's fetch: (wall seconds, CPU seconds, run-queue seconds) of this thread (:func:`time_in_process_with_step`).
    ``window_s``: the steady-state window's length once open (``MIN_MEASURE_S``; shorter where the run confirms the
    choice: :data:`~lightning_bottleneck.measure.loader_with_step.ONE_PASS_WINDOW_S`)."""
    rung_deadline = min(deadline, time.perf_counter() + max(budget * RUNG_BUDGET_SHARE, window_s))
    dl = probe_dataloader(plan, workers, prefetch, seed, deadline)
    round_size = max(1, workers)
    # Alone, the loader's first round is start-up. With the step, the workers also fill their prefetch queue
    # (workers x prefetch_factor batches) while the first batches are stepped: the window opens once that
    # queue is drained, or batches loaded during start-up would count as loaded at the step's pace.
    open_at = round_size if consume is None or not workers else workers * (prefetch or 2)
    epoch_at = (
        epoch_batches
        if consume is not None and epoch_batches and epoch_batches <= EPOCH_TIMING_MAX_BATCHES
        else 0
    )
    epoch_s: float | None = None
    settle = consume is None and workers == 0
    marks: list[float] = []  # the time at every SETTLED_CHUNK-th batch of the window (settle only)
    it: Any = None
    t0 = time.perf_counter()
    t_iter = t0
    down_s = 0.0

    def fetch() -> Any:
        if fetches is None:
            return next(it)
        t, c = time.perf_counter(), _cpu([])
        got = next(it)
        wall, c2 = time.perf_counter() - t, _cpu([])
        fetches.append((wall, c2[0] - c[0], c2[1] - c[1]) if c and c2 else (wall, wall, 0.0))
        return got

    try:
        it = iter(dl)
        t_iter = time.perf_counter()
        batch = fetch()
        t_first = time.perf_counter()
        if not batch_bytes:
            batch_bytes.append(batch_nbytes(batch))
        if consume is not None:
            consume(batch)
        del batch
        pids = [p.pid for p in getattr(it, "_workers", [])]
        fetched = 1
        # The steady-state window opens when the first round of batches is in (index round_size - 1).
        t_open, cpu_open, n_open = t_first, _cpu(pids), 1
        if open_at > 1:
            t_open = -1.0
        now = t_first
        if epoch_at == 1:
            epoch_s = time.perf_counter() - t_iter
        while True:
            if now >= rung_deadline and fetched >= round_size:
                break
            batch = fetch()
            if consume is not None:
                consume(batch)
            del batch
            fetched += 1
            now = time.perf_counter()
            if fetched == epoch_at:
                epoch_s = now - t_iter
            if fetched == open_at and open_at > 1:
                t_open, cpu_open, n_open = now, _cpu(pids), fetched
            if t_open >= 0:
                rounds = (fetched - n_open) // round_size
                if rounds >= MIN_ROUNDS and now - t_open >= window_s and fetched >= epoch_at:
                    break
                if settle and (fetched - n_open) % SETTLED_CHUNK == 0:
                    marks.append(now)
                    if _settled(t_open, marks):
                        break
        cpu_close = _cpu(pids)
    except Exception as err:  # a worker crash, an unpicklable dataset under spawn, a timeout, a failing step
        what = "Timing with the training step" if consume is not None else "Loader probe"
        ladder.notes.append(f"{what} stopped at num_workers={workers}: {type(err).__name__}: {err}")
        return None
    finally:
        t_down = time.perf_counter()
        shutdown_workers(it)
        down_s = time.perf_counter() - t_down if workers else 0.0
    window_batches = fetched - n_open
    rough = (fetched - n_open) // round_size < MIN_ROUNDS
    if window_batches > 0 and t_open >= 0 and now > t_open:  # t_open < 0: the window never opened
        rate = window_batches * plan.batch_size / (now - t_open)
        measured = now - t_open
    elif (
        fetched > 1 and now > t_first
    ):  # the budget ran out within the first round: all batches after the first
        rate = (fetched - 1) * plan.batch_size / (now - t_first)
        measured = now - t_first
        rough = True
    else:  # one batch in all: its fetch is the only evidence
        rate = plan.batch_size / max(t_first - t0, 1e-9)
        measured = t_first - t0
        rough = True
    samples = window_batches * plan.batch_size
    cpu_per_sample = cpu_share = None
    if consume is None and cpu_close is not None and cpu_open is not None and samples > 0:
        cpu_s = max(0.0, cpu_close[0] - cpu_open[0])
        runnable_wait_s = max(0.0, cpu_close[1] - cpu_open[1])
        cpu_per_sample = cpu_s / samples
        on_or_off_core = measured * max(1, workers) - runnable_wait_s
        cpu_share = min(1.0, cpu_s / on_or_off_core) if on_or_off_core > 0 else 1.0
    return Rung(
        num_workers=workers,
        prefetch_factor=prefetch if workers else None,
        samples_per_s=rate,
        startup_s=t_first - t0,
        cpu_per_sample_s=cpu_per_sample,
        cpu_share=cpu_share,
        batches=fetched,
        measured_s=measured,
        rough=rough,
        shutdown_s=down_s,
        spawn_s=t_iter - t0,
        epoch_s=epoch_s,
    )


def time_in_process_with_step(
    plan: ProbePlan,
    deadline: float,
    budget: float,
    seed: int,
    ladder: LoaderLadder,
    batch_bytes: list[int],
    consume: Callable[[Any], None],
    window_s: float = MIN_MEASURE_S,
) -> tuple[Rung, Rung] | None:
    """``num_workers=0`` timed once with the training step, read twice: the loader alone from its fetches (their wall
    and CPU time, the step's left out: the rate, the CPU share that tells the bound), and loading with the step (the
    whole window). In-process loading and the step take turns on one thread, so the fetches are the loader alone's
    batches; one timing then serves the ladder's first rung and the current count's timing with the step."""
    fetches: list[tuple[float, float, float]] = []
    stepped = time_rung(
        plan, 0, None, deadline, budget, seed, ladder, batch_bytes, consume, None, fetches, window_s
    )
    window = fetches[1:]  # the first fetch is the start-up
    wall = sum(f[0] for f in window)
    if stepped is None or not window or wall <= 0:
        return None
    cpu, queued = sum(f[1] for f in window), sum(f[2] for f in window)
    samples = len(window) * plan.batch_size
    alone = Rung(
        num_workers=0,
        prefetch_factor=None,
        samples_per_s=samples / wall,
        startup_s=stepped.startup_s,
        cpu_per_sample_s=cpu / samples,
        cpu_share=min(1.0, cpu / (wall - queued)) if wall > queued else 1.0,
        batches=len(fetches),
        measured_s=wall,
        rough=stepped.rough,
        spawn_s=stepped.spawn_s,
    )
    return alone, stepped


def _settled(t_open: float, marks: list[float]) -> bool:
    """Whether a window opened at ``t_open``, with ``marks`` every SETTLED_CHUNK batches since, has settled: an even
    number of chunks over SETTLED_MIN_S at least, whose two halves took times within SETTLED_BAND of each other."""
    k = len(marks)
    if k < 2 or k % 2 or marks[-1] - t_open < SETTLED_MIN_S:
        return False
    first, second = marks[k // 2 - 1] - t_open, marks[-1] - marks[k // 2 - 1]
    return first > 0 and second > 0 and max(first, second) <= min(first, second) * (1.0 + SETTLED_BAND)


def _cpu(worker_pids: list[int]) -> tuple[float, float] | None:
    """(CPU seconds, seconds runnable but waiting for a core) of the loading processes.

    Without workers that is the calling thread; with workers, each worker's main thread. The run-queue
    wait (``/proc/.../schedstat``, field 2) is what other processes on a busy machine take: it is
    subtracted from wall time so that contention does not make CPU-bound loading look wait-bound.
    Without schedstat (not Linux, or no CONFIG_SCHEDSTATS) the run-queue wait reads as 0.
    """
    paths = (
        [f"/proc/{pid}/schedstat" for pid in worker_pids] if worker_pids else ["/proc/thread-self/schedstat"]
    )
    cpu = wait = 0.0
    try:
        for path in paths:
            with open(path, encoding="ascii") as f:
                run_ns, wait_ns = f.read().split()[:2]
            cpu += int(run_ns) / 1e9
            wait += int(wait_ns) / 1e9
        return cpu, wait
    except (OSError, ValueError):
        pass
    if not worker_pids:
        return time.thread_time(), 0.0
    ps = psutil_module()  # macOS, Windows: the workers' CPU time through psutil, no run-queue wait
    if ps is None:
        return None
    try:
        for pid in worker_pids:
            t = ps.Process(pid).cpu_times()
            cpu += t.user + t.system
        return cpu, 0.0
    except (OSError, ps.Error):
        return None
