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

This module runs the probe; the ladder climb is :mod:`~lightning_bottleneck.measure.loader_climb`, timing
with the step :mod:`~lightning_bottleneck.measure.loader_with_step`, one rung's timing
:mod:`~lightning_bottleneck.measure.loader_rung`, and the probe's own DataLoaders
:mod:`~lightning_bottleneck.measure.loader_factory`.

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
from dataclasses import replace
from functools import partial
from typing import Any

import torch
from torch.utils.data import DataLoader

from lightning_bottleneck.evidence.loader_ladder import BOUND_CPU, BOUND_WAIT, LoaderLadder
from lightning_bottleneck.measure.cpus import usable_cpus as _usable_cpus
from lightning_bottleneck.measure.loader_climb import climb
from lightning_bottleneck.measure.loader_factory import plan_probe, probe_dataloader
from lightning_bottleneck.measure.loader_rung import time_in_process_with_step, time_rung
from lightning_bottleneck.measure.loader_with_step import (
    IN_TRAINING_SHARE,
    ONE_PASS_WINDOW_S,
    STEP_ALONE_SHARE,
    WAIT_IN_TRAINING_MIN_BUDGET_S,
    WAIT_IN_TRAINING_SHARE,
    time_in_training,
    time_step_alone,
    wait_bound_candidate,
)

__all__ = [
    "DEFAULT_BUDGET_S",
    "DEFAULT_MEMORY_BUDGET_BYTES",
    "consumption_target",
    "probe_loader",
    "time_fetch_growth",
    "time_in_process",
]

# Default wall-clock budget of the whole probe: "a few seconds" (issue 8), about one short validation
# pass; a rung needs worker start-up plus two rounds of batches.
DEFAULT_BUDGET_S = 5.0
# Batches in flight (workers x prefetch_factor x batch bytes) stay below this.
DEFAULT_MEMORY_BUDGET_BYTES = 512 * 2**20


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
    epoch_batches: int | None = None,
    cpu_bound_budget_s: float | None = None,
    run_confirms: bool = False,
    run_races: bool = True,
    step_on_cpu: bool = False,
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
            untouched; when given, worker counts are also timed with the step (:attr:`LoaderLadder.in_training`):
            with CPU-bound loading the current count, the cores and twice that; with loading that waits, the
            current count and the one the ladder found covering the model. The caller restores the model (see
            the module docstring).
        epoch_batches: the run's batches per epoch: with loading that waits, the counts timed with the step also
            time one epoch of them when it is short (:attr:`Rung.epoch_s`).
        cpu_bound_budget_s: the whole probe's budget once num_workers=0 finds the loading CPU-bound (when lower
            than ``budget_s``; ``0`` stops there, a note says so): the automatic budget's share of what workers can
            save of CPU-bound loading (``measure/stage.py``).
        run_confirms: the run itself will time the chosen setting against its own steps and switch back when it is
            not faster (``BottleneckCallback(autotune=True)``): the timings with the step take one pass over the
            counts (:func:`~lightning_bottleneck.measure.loader_with_step.time_in_training`), and with CPU-bound
            loading the ladder times no worker count alone (the step's timings decide there).
        run_races: with ``run_confirms``, the run can race the worker count the timings with the step leave to it
            (:attr:`LoaderLadder.left_to_run`) for an epoch once its choice is kept; False (a fit with too few epochs
            left for that): CPU-bound loading times that count with the step too, once.
        step_on_cpu: the training step runs on the CPU; with CPU-bound loading, worker counts are then timed with the
            step at the intra-op threads their workers leave the training process
            (:mod:`~lightning_bottleneck.measure.host_threads`: OpenMP threads that spin beside the workers take
            their cores), and the advice (and autotune) sets them with the workers (``torch_threads``).
    """
    if budget_s < 0:
        raise ValueError(f"budget_s must be >= 0 seconds, got {budget_s!r}")
    cpus = usable_cpus if usable_cpus is not None else _usable_cpus()
    ladder = LoaderLadder(budget_s=budget_s, usable_cpus=cpus)
    plan = plan_probe(loader, ladder, seed)
    if plan is None or budget_s == 0:
        if budget_s == 0 and plan is not None:
            ladder.notes.append("Loader probe turned off (budget 0 s).")
        ladder.skipped = True
        return ladder
    ladder.batch_size = plan.batch_size
    current = loader.num_workers if current_num_workers is None else current_num_workers
    start = time.perf_counter()
    deadline = start + budget_s
    cpu_deadline = None if cpu_bound_budget_s is None else start + max(0.0, cpu_bound_budget_s)
    with _rng_preserved(), warnings.catch_warnings():
        # torch warns when workers exceed its suggested maximum: the probe tries exactly that on purpose.
        warnings.filterwarnings("ignore", ".*worker processes in total.*")
        reserve = IN_TRAINING_SHARE if train_step is not None else 0.0
        wait_reserve = (
            WAIT_IN_TRAINING_SHARE
            if train_step is not None and budget_s >= WAIT_IN_TRAINING_MIN_BUDGET_S
            else 0.0
        )
        if train_step is not None:
            time_step_alone(plan, ladder, train_step, seed, start + STEP_ALONE_SHARE * budget_s)
            target_samples_per_s = consumption_target(target_samples_per_s, ladder)
        zero = None
        if run_confirms and train_step is not None and cpu_bound_budget_s != 0:
            # one timing of num_workers=0 beside the step: the ladder's first rung and its timing with the step (not
            # where CPU-bound loading stops there: alone, a fast in-process loader's window closes once its rate
            # settles; beside tiny_linear's 0.5 ms steps it ran its whole MIN_MEASURE_S, +0.2 s of the first epoch)
            timed = time_in_process_with_step(
                plan, deadline, budget_s, seed, ladder, [], train_step, ONE_PASS_WINDOW_S
            )
            if timed is not None:
                zero = timed[0]
                ladder.in_training.append(timed[1])
        climb(
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
            wait_reserve,
            cpu_deadline,
            alone_decides=not (run_confirms and train_step is not None),
            zero=zero,
        )
        if ladder.bound == BOUND_CPU and cpu_deadline is not None:
            deadline = min(deadline, cpu_deadline)
        stopped = ladder.bound == BOUND_CPU and cpu_bound_budget_s == 0  # the climb's note says so
        if train_step is not None and not stopped:
            with_step = partial(
                time_in_training, plan, ladder, cpus, current, train_step, memory_budget_bytes, deadline, seed
            )
            if ladder.bound == BOUND_CPU and ladder.rung(0) is not None:
                with_step(one_pass=run_confirms, race=run_races, cap_threads=step_on_cpu)
            elif ladder.bound == BOUND_WAIT:
                # the count the ladder found covering the model, fed to the model's own step (issue 28 item 2)
                w = wait_bound_candidate(
                    ladder, target_samples_per_s, current, deadline - time.perf_counter()
                )
                if w is not None:
                    with_step(candidates=[w], epoch_batches=epoch_batches, one_pass=run_confirms)
    ladder.elapsed_s = time.perf_counter() - start
    ladder.skipped = not ladder.rungs
    return ladder


def consumption_target(target: float | None, ladder: LoaderLadder) -> float | None:
    """The rate the climb aims at: the caller's (the faster of the profiled window's steps less their data wait and
    the steps timed outside it: measure/stage.py's ``_consumption_rate``), or the step timed back-to-back
    (:attr:`LoaderLadder.step_ms`: batch size over it), whichever is higher.

    The window's figure is low on small steps: the profiler's cost per op lands in the step, not in the wait.
    issue 29's io_wait: 83% of its 64 ms profiled steps waited, so the step seemed to take 10.7 ms (1 500 samples/s,
    covered by 8 workers of the in-process 313 samples/s), where it takes 0.62 ms back-to-back (25 800 samples/s, 16
    workers: the climb's cap) and 1.1-2.5 ms in the fit once workers load. The fit with 16 persistent workers was the
    sweep's best over 8 epochs (2.03 s; 8 workers, what the climb timed and autotune applied, 2.2-2.3 s). The higher
    figure only makes the climb skip counts that cannot cover the model; which count is advised stays the loader
    plan's, from the rates timed."""
    if ladder.step_ms is None or ladder.step_ms <= 0 or not ladder.batch_size:
        return target
    alone = ladder.batch_size * 1e3 / ladder.step_ms
    return alone if target is None else max(target, alone)


def time_in_process(loader: DataLoader, budget_s: float, seed: int = 0, timings: int = 1) -> float | None:
    """Seconds a batch of ``loader`` takes loaded in this process (``num_workers=0``), timed for about
    ``budget_s`` (at least one batch), or None where the probe cannot copy the loader (an IterableDataset, no
    len()) or the loading failed. With ``timings`` > 1 the budget is split into that many timings and the fastest
    is returned: a window of a few milliseconds that a scheduler slice, a page fault or another process falls in
    reads several times slower, and nothing reads it faster (``timeit``'s reasoning for its minimum). Like the
    probe, the training loader, its sampler and the RNGs are left as they were."""
    ladder = LoaderLadder(budget_s=budget_s, usable_cpus=1)
    plan = plan_probe(loader, ladder, seed)
    if plan is None:
        return None
    share = max(0.0, budget_s) / max(1, timings)
    rates: list[float] = []
    with _rng_preserved():
        for _ in range(max(1, timings)):
            rung = time_rung(plan, 0, None, time.perf_counter() + share, share, seed, ladder, [])
            if rung is None or rung.samples_per_s <= 0:
                return None
            rates.append(rung.samples_per_s)
    return plan.batch_size / max(rates)


# A bigger batch's fetch (issue 28): the fewest pairs its added time is taken from (the median of 3 survives one
# disturbed pair), and the most (beyond ~15 the median moves less than a tenth of a millisecond on the tiny
# TensorDataset loaders where the figure matters: there the fetch is ~0.1 ms and a step 1-2 ms)
FETCH_MIN_PAIRS = 3
FETCH_MAX_PAIRS = 15


def time_fetch_growth(
    loader: DataLoader, growth: int, budget_s: float, seed: int = 0
) -> tuple[float, float] | None:
    """(ms to fetch a batch of ``loader``, ms to fetch one ``growth`` times bigger), both loaded in this process
    (``num_workers=0``, the training loader's dataset, collate_fn and order), the median of each over alternating
    pairs timed for about ``budget_s``; None where the loader cannot be copied, fewer than FETCH_MIN_PAIRS pairs
    fit, or the loading failed. What a bigger batch's data wait becomes when the loading runs in the training
    process: on an in-memory TensorDataset (800 x 8) a batch of 16 took 0.21 ms for 8's 0.15 ms, not twice as
    long (the fixed cost of a fetch: the sampler, the collate call). The training loader, its sampler and the RNGs
    are left as they were."""
    ladder = LoaderLadder(budget_s=budget_s, usable_cpus=1)
    plan = plan_probe(loader, ladder, seed)
    if plan is None or growth < 2 or budget_s <= 0:
        return None
    bigger = replace(plan, batch_size=plan.batch_size * growth)
    deadline = time.perf_counter() + budget_s
    small_t: list[float] = []
    big_t: list[float] = []
    with _rng_preserved():
        try:
            small = iter(probe_dataloader(plan, 0, None, seed, deadline))
            big = iter(probe_dataloader(bigger, 0, None, seed, deadline))
            next(small), next(big)  # warm-up: the first fetch builds the sampler's iterator
            while len(small_t) < FETCH_MAX_PAIRS and time.perf_counter() < deadline:
                for it, times in (
                    ((small, small_t), (big, big_t)) if len(small_t) % 2 else ((big, big_t), (small, small_t))
                ):
                    t0 = time.perf_counter()
                    next(it)
                    times.append(time.perf_counter() - t0)
        except Exception:  # a failing dataset: no figure, the rule keeps its assumption
            return None
    if min(len(small_t), len(big_t)) < FETCH_MIN_PAIRS:
        return None
    return statistics.median(small_t) * 1e3, statistics.median(big_t) * 1e3


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
