"""Time the train DataLoader itself, outside the training loop, at a ladder of worker counts.

The probe builds a *separate* DataLoader from the training loader's dataset, batch size, collate_fn,
worker_init_fn, pin_memory, drop_last and multiprocessing context, with a fresh sampler that draws from
its own ``torch.Generator`` (so neither the training sampler's state nor the global RNGs are touched),
and measures steady-state samples/s and the start-up time (iterator creation to first batch) for
``num_workers`` = 0, 1, 2, 4, ... and, for the best count, a larger ``prefetch_factor``.

CPU time against wall time of the fetch tells CPU-bound loading (more workers than cores cannot help)
from loading that waits (disk, network, remote storage: more workers than cores do help), so the
ladder stops at the usable CPU count in the first case and goes on in the second.

Given ``train_step`` (a function that runs the model's step on a batch and leaves training untouched:
:func:`~lightning_bottleneck.measure.trials.restored_trial_step`), CPU-bound loading is also timed *with
the step*: the worker counts worth trying feed the model's own step, so workers and step compete for the
cores as they will in training, and the rate is what the run gets (issue 19: the loader alone measured
1.2-2x for worker counts that trained at 0.74-0.99x on 2 cores). It takes the last 60% of the budget.

The probe never changes the training: the training DataLoader, its sampler and iterator are only read,
the Python/NumPy/torch RNG states are saved and restored, every worker the probe starts is shut down
before it returns, and it stays within a time budget (one batch fetch of slack) and a memory budget
(batches in flight). IterableDatasets are skipped with a note and never consumed.

Example::

    from lightning_bottleneck.measure.loader_probe import probe_loader

    ladder = probe_loader(trainer.train_dataloader, budget_s=5.0)
    print(ladder)                  # a table: workers, prefetch, samples/s, start-up, CPU per sample
    ladder.to_dict()               # JSON-able, for the report
"""

from __future__ import annotations

import contextlib
import random
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler, Sampler

from lightning_bottleneck.evidence.loader_ladder import (
    BOUND_CPU,
    BOUND_UNKNOWN,
    BOUND_WAIT,
    LoaderLadder,
    Rung,
)
from lightning_bottleneck.measure.cpus import psutil_module
from lightning_bottleneck.measure.cpus import usable_cpus as _usable_cpus

# Default wall-clock budget of the whole probe: "a few seconds" (issue 8), about one short validation
# pass; a rung needs worker start-up plus two rounds of batches.
DEFAULT_BUDGET_S = 5.0
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
# A rung is measured well enough after this many rounds of batches (a round = one batch per worker)
# spanning at least this long; the first round (start-up) is never counted.
MIN_ROUNDS = 2
MIN_MEASURE_S = 0.25
# ... and it never takes more than this share of the whole budget, so the ladder gets several rungs.
RUNG_BUDGET_SHARE = 0.35
# Batches in flight (workers x prefetch_factor x batch bytes) stay below this.
DEFAULT_MEMORY_BUDGET_BYTES = 512 * 2**20
# Prefetch factors tried for the best worker count besides torch's default of 2.
PREFETCH_FACTORS = (4,)
# Share of the budget kept for timing worker counts with the training step (CPU-bound loading, a train_step
# given): the loader-alone ladder of CPU-bound loading stops at the core count (two or three rungs on a
# laptop), so 40% of the budget suffices for it, and the in-training rungs (the current count twice, the core
# count, twice the core count), which must each drain the workers' prefetch queue before timing, get 60%.
IN_TRAINING_SHARE = 0.6
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


class _CyclingSampler(Sampler[int]):
    """Indices 0..n-1, shuffled with its own generator when asked, repeated without end."""

    def __init__(self, n: int, shuffle: bool, seed: int) -> None:
        self.n = n
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator()
        g.manual_seed(self.seed)
        while True:
            order = torch.randperm(self.n, generator=g).tolist() if self.shuffle else range(self.n)
            yield from order


@dataclass
class _Plan:
    dataset: Any
    batch_size: int
    shuffle: bool
    kwargs: dict[str, Any]


def probe_loader(
    loader: DataLoader,
    *,
    budget_s: float = DEFAULT_BUDGET_S,
    usable_cpus: int | None = None,
    target_samples_per_s: float | None = None,
    current_num_workers: int | None = None,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
    seed: int = 0,
    train_step: Callable[[Any], None] | None = None,
) -> LoaderLadder:
    """Measure a copy of ``loader`` at a ladder of worker counts and prefetch factors.

    Args:
        loader: the train DataLoader; only read, never iterated.
        budget_s: wall-clock budget of the whole probe (one batch fetch of slack); ``0`` measures nothing.
        usable_cpus: CPUs this process may use (affinity and cgroup quota); read from the machine when None.
        target_samples_per_s: the model's consumption rate; the ladder stops once a rung covers it.
        current_num_workers: always measured (so advice can compare with what the run uses);
            defaults to ``loader.num_workers``.
        memory_budget_bytes: rungs whose batches in flight would exceed this are skipped with a note.
        seed: seed of the probe's own sampler and worker seeds (never the global RNG).
        train_step: runs the model's training step on a batch from the probe's loader and leaves training
            untouched; when given and loading is CPU-bound, worker counts are also timed with the step
            (:attr:`LoaderLadder.in_training`). The caller restores the model (see the module docstring).
    """
    if budget_s < 0:
        raise ValueError(f"budget_s must be >= 0 seconds, got {budget_s!r}")
    cpus = usable_cpus if usable_cpus is not None else _usable_cpus()
    ladder = LoaderLadder(budget_s=budget_s, usable_cpus=cpus)
    plan = _plan(loader, ladder, seed)
    if plan is None or budget_s == 0:
        if budget_s == 0 and plan is not None:
            ladder.notes.append("Loader probe turned off (budget 0 s).")
        ladder.skipped = True
        return ladder
    ladder.batch_size = plan.batch_size
    current = loader.num_workers if current_num_workers is None else current_num_workers
    start = time.perf_counter()
    deadline = start + budget_s
    with _rng_preserved(), warnings.catch_warnings():
        # torch warns when workers exceed its suggested maximum: the probe tries exactly that on purpose.
        warnings.filterwarnings("ignore", ".*worker processes in total.*")
        reserve = IN_TRAINING_SHARE if train_step is not None else 0.0
        if train_step is not None:
            _time_step_alone(plan, ladder, train_step, seed, start + STEP_ALONE_SHARE * budget_s)
        _climb(
            plan,
            ladder,
            cpus,
            current,
            target_samples_per_s,
            memory_budget_bytes,
            start,
            deadline,
            seed,
            reserve,
        )
        if train_step is not None and ladder.bound == BOUND_CPU and ladder.rung(0) is not None:
            _time_in_training(plan, ladder, cpus, current, train_step, memory_budget_bytes, deadline, seed)
    ladder.elapsed_s = time.perf_counter() - start
    ladder.skipped = not ladder.rungs
    return ladder


def _plan(loader: DataLoader, ladder: LoaderLadder, seed: int) -> _Plan | None:
    dataset = loader.dataset
    if isinstance(dataset, IterableDataset):
        ladder.notes.append(
            "Loader probe skipped: the dataset is an IterableDataset (a stream cannot be re-read safely; "
            "it was not consumed)."
        )
        return None
    try:
        n = len(dataset)  # type: ignore[arg-type]
    except TypeError:
        ladder.notes.append("Loader probe skipped: the dataset has no len(), so it cannot be sampled.")
        return None
    if n == 0:
        ladder.notes.append("Loader probe skipped: the dataset is empty.")
        return None
    batch_size = loader.batch_size
    if batch_size is None:
        batch_size = getattr(loader.batch_sampler, "batch_size", None)
        ladder.notes.append(
            "The loader uses a custom batch_sampler: the probe times plain batches of its size."
        )
    if not isinstance(batch_size, int) or batch_size <= 0:
        ladder.notes.append("Loader probe skipped: the batch size cannot be read from the DataLoader.")
        return None
    sampler = loader.sampler
    inner = getattr(sampler, "shuffle", None)  # DistributedSampler(shuffle=...)
    shuffle = isinstance(sampler, RandomSampler) or bool(inner)
    pin = bool(loader.pin_memory) and torch.cuda.is_available()
    kwargs: dict[str, Any] = {
        "collate_fn": loader.collate_fn,
        "pin_memory": pin,
        "drop_last": loader.drop_last,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
    }
    if pin and loader.pin_memory_device:
        kwargs["pin_memory_device"] = loader.pin_memory_device
    return _Plan(dataset, batch_size, shuffle, kwargs)


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


def _climb(
    plan: _Plan,
    ladder: LoaderLadder,
    cpus: int,
    current: int,
    target: float | None,
    memory_budget: int,
    start: float,
    deadline: float,
    seed: int,
    reserve: float = 0.0,
) -> None:
    budget = deadline - start
    batch_bytes: list[int] = []
    zero = _measure(plan, 0, None, deadline, budget, seed, ladder, batch_bytes)
    if zero is None:
        return
    ladder.rungs.append(zero)
    ladder.bound = _bound(zero)
    if reserve and ladder.bound == BOUND_CPU:  # the rest of the budget times worker counts with the step
        budget *= 1.0 - reserve
        deadline = start + budget
    best = zero
    covered = target is not None and zero.samples_per_s >= target
    counts = _ladder_counts(ladder.bound, cpus, current)
    skip_below = _first_useful_count(ladder.bound, counts, zero, target)
    flat = 0
    for w in counts:
        if (covered or w < skip_below) and w != current:
            continue
        if not _affordable(w, 2, batch_bytes, memory_budget, ladder):
            break
        if time.perf_counter() + _expected_cost(ladder.rungs) > deadline:
            ladder.notes.append(f"Loader probe budget ({budget:.1f} s) spent before num_workers={w}.")
            break
        rung = _measure(plan, w, 2, deadline, budget, seed, ladder, batch_bytes)
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
    if best.num_workers > 0:
        for pf in PREFETCH_FACTORS:
            if not _affordable(best.num_workers, pf, batch_bytes, memory_budget, ladder):
                break
            if time.perf_counter() + _expected_cost(ladder.rungs) > deadline:
                break
            rung = _measure(plan, best.num_workers, pf, deadline, budget, seed, ladder, batch_bytes)
            if rung is None:
                break
            ladder.rungs.append(rung)


def _time_step_alone(
    plan: _Plan, ladder: LoaderLadder, train_step: Callable[[Any], None], seed: int, until: float
) -> None:
    """Time the training step back-to-back on one batch of the probe's own loader (no workers, no loading between
    the steps) until ``until``: :attr:`LoaderLadder.step_ms`, the step once loading leaves the process (issue 19:
    io_wait's steps took 13 ms beside in-process loading that sleeps, the same step back-to-back ~1 ms)."""
    times: list[float] = []
    try:
        batch = next(iter(_loader(plan, 0, None, seed, until)))
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


def _time_in_training(
    plan: _Plan,
    ladder: LoaderLadder,
    cpus: int,
    current: int,
    train_step: Callable[[Any], None],
    memory_budget: int,
    deadline: float,
    seed: int,
) -> None:
    """Time the current worker count, the usable core count and twice that with the training step, then the
    current count again (its two timings are averaged, so that drift over the measurement cancels), then the
    fastest other count again when it beat both timings of the current (a win from one short timing is often
    the machine's noise, see :func:`_to_confirm`)."""
    counts = sorted(
        {min(w, WAIT_BOUND_MAX_WORKERS) for w in (max(1, cpus), IN_TRAINING_OVERSUBSCRIPTION * max(1, cpus))}
        - {current}
    )
    order = [current, *counts, current]
    budget = max(0.0, deadline - time.perf_counter())
    batch_bytes: list[int] = []
    # a place held in the shares for the confirming timing (the most workers: the dearest to time)
    confirm = max(counts, default=current)
    i = 0
    while i < len(order):
        w = order[i]
        left = deadline - time.perf_counter()
        # a rung with workers first drains their prefetch queue: it gets a larger share; each gets at least the
        # minimal window while that much is left (the later ones go short: the current count's second timing last)
        weights = [1.0 + n / 2 for n in [*order[i:], *([confirm] if len(order) == len(counts) + 2 else [])]]
        share = max(MIN_MEASURE_S, left * weights[0] / sum(weights))
        if left < MIN_MEASURE_S:
            ladder.notes.append(
                f"Timing with the training step stopped before num_workers={w}: the probe's budget is spent."
            )
            break
        i += 1
        if w and not _affordable(w, 2, batch_bytes, memory_budget, ladder):
            continue
        rung = _measure(
            plan,
            w,
            2 if w else None,
            time.perf_counter() + share,
            budget,
            seed,
            ladder,
            batch_bytes,
            train_step,
        )
        if rung is None:
            break
        ladder.in_training.append(rung)
        if i == len(order) == len(counts) + 2:
            again = _to_confirm(ladder, current)
            if again is not None:
                order.append(again)
    if ladder.in_training_rung(current) is None:
        ladder.in_training.clear()


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


def _affordable(
    workers: int, prefetch: int, batch_bytes: list[int], budget: int, ladder: LoaderLadder
) -> bool:
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


def _measure(
    plan: _Plan,
    workers: int,
    prefetch: int | None,
    deadline: float,
    budget: float,
    seed: int,
    ladder: LoaderLadder,
    batch_bytes: list[int],
    consume: Callable[[Any], None] | None = None,
) -> Rung | None:
    """One setting timed: steady-state samples/s after the first round of batches, start-up, CPU. With
    ``consume`` (the training step) each batch is also stepped, and the CPU fields are left out."""
    rung_deadline = min(deadline, time.perf_counter() + max(budget * RUNG_BUDGET_SHARE, MIN_MEASURE_S))
    dl = _loader(plan, workers, prefetch, seed, deadline)
    round_size = max(1, workers)
    # Alone, the loader's first round is start-up. With the step, the workers also fill their prefetch queue
    # (workers x prefetch_factor batches) while the first batches are stepped: the window opens once that
    # queue is drained, or batches loaded during start-up would count as loaded at the step's pace.
    open_at = round_size if consume is None or not workers else workers * (prefetch or 2)
    it: Any = None
    t0 = time.perf_counter()
    try:
        it = iter(dl)
        batch = next(it)
        t_first = time.perf_counter()
        if not batch_bytes:
            batch_bytes.append(_nbytes(batch))
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
        while True:
            if now >= rung_deadline and fetched >= round_size:
                break
            batch = next(it)
            if consume is not None:
                consume(batch)
            del batch
            fetched += 1
            now = time.perf_counter()
            if fetched == open_at and open_at > 1:
                t_open, cpu_open, n_open = now, _cpu(pids), fetched
            if t_open >= 0:
                rounds = (fetched - n_open) // round_size
                if rounds >= MIN_ROUNDS and now - t_open >= MIN_MEASURE_S:
                    break
        cpu_close = _cpu(pids)
    except Exception as err:  # a worker crash, an unpicklable dataset under spawn, a timeout, a failing step
        what = "Timing with the training step" if consume is not None else "Loader probe"
        ladder.notes.append(f"{what} stopped at num_workers={workers}: {type(err).__name__}: {err}")
        return None
    finally:
        _shutdown(it)
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
    )


def _loader(plan: _Plan, workers: int, prefetch: int | None, seed: int, deadline: float) -> DataLoader:
    """The probe's own DataLoader over the training loader's dataset: its own sampler and generator (seeded), the
    training loader's collate_fn, pin_memory, drop_last, worker_init_fn and multiprocessing context (the last two
    only with workers), never persistent."""
    generator = torch.Generator()
    generator.manual_seed(seed)
    kwargs = dict(plan.kwargs)
    if workers == 0:
        kwargs.pop("multiprocessing_context", None)
        kwargs.pop("worker_init_fn", None)
    else:
        kwargs["prefetch_factor"] = prefetch
        # A stuck worker cannot hold the probe past its budget (torch raises after `timeout` seconds).
        kwargs["timeout"] = max(1.0, deadline - time.perf_counter() + 1.0)
    return DataLoader(
        plan.dataset,
        batch_size=plan.batch_size,
        sampler=_CyclingSampler(len(plan.dataset), plan.shuffle, seed),
        num_workers=workers,
        persistent_workers=False,
        generator=generator,
        **kwargs,
    )


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


def _shutdown(it: Any) -> None:
    shutdown = getattr(it, "_shutdown_workers", None)
    if callable(shutdown):
        with contextlib.suppress(Exception):  # best effort; the iterator's __del__ retries
            shutdown()


def _nbytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.element_size() * obj.nelement()
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    nbytes = getattr(obj, "nbytes", None)
    return int(nbytes) if isinstance(nbytes, int) else 0


@contextlib.contextmanager
def _rng_preserved() -> Iterator[None]:
    """Python, NumPy and torch (CPU and initialised CUDA) RNG states, restored on every path."""
    py_state = random.getstate()
    np_state: Any = None
    try:
        import numpy as np

        np_state = np.random.get_state()
    except ImportError:  # pragma: no cover - numpy is a dependency
        np = None  # type: ignore[assignment]
    torch_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        random.setstate(py_state)
        if np_state is not None:
            np.random.set_state(np_state)
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
