"""How fast training runs with a loader setting: the arithmetic the loader rule
(:mod:`lightning_bottleneck.rules.loader_plan`) chooses and predicts with, and its named thresholds. Pure.

A sample costs the step's time plus its loading without workers; with workers the slower of the two sets the
pace, and when the model trains on the CPU and loading is CPU-bound the workers get only the cores the step
leaves free (:func:`per_sample_s`). Worker counts timed with the training step are read as measured
(:func:`pick_in_training`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.evidence import RunConfig, TimingStats
from lightning_bottleneck.evidence.loader_ladder import BOUND_CPU, BOUND_WAIT, LoaderLadder, Rung

# A loader "covers" the model when its measured rate is at least this multiple of the consumption rate.
# The probe timed the loader alone; during training the workers share CPUs with the training process (and,
# on a shared machine, with others), and repeated loader timings on this project's 2-core machine varied by
# 10-20% run to run (benchmarks/advice_payoff.py). 1.25x leaves room for both, so that a covering loader
# still hides behind the step.
COVER_MARGIN = 1.25
# A setting must measure at least this much faster than the current one to be advised: the probe's own
# rung-to-rung spread on a shared machine (the same 10% as the probe's LADDER_GAIN_MIN). Loading alone, that
# is; from in-process loading (num_workers=0) to workers whose loading does not take the step's cores (loading
# that waits on I/O, or a model off the CPU), the gain is the overlap of loading with the step, which a rate
# of the loader alone cannot show (a sleeping __getitem__ loads no faster in one worker than in-process): the
# prediction for the run as it trains must then clear the same bar. Issue 19: a 1-second probe ran out of
# budget after num_workers=1 (405 against 459 samples/s in-process, both asleep 2 ms a sample), no worker
# count was advised for a step 61% in data wait, and an estimated compile fix made the verdict overhead.
MEASURED_GAIN_MIN = 1.10
# persistent_workers keeps every worker (a process holding a copy of the dataset object) alive between
# epochs; it is worth that memory once re-starting workers costs more than the 3% noise band that
# `lightning-bottleneck compare` uses for "no change" -- 2% of an epoch stays under it.
PERSISTENT_STARTUP_SHARE_MIN = 0.03
# Cores the training process keeps busy during its step when they were not measured (no CPU snapshots of
# the window, or a busy machine): one, a Python training loop (issue 8's assumption). Measured, they are the
# process's own CPU time over the window's wall time with the in-process loading taken out (step_cores).
DEFAULT_STEP_CORES = 1.0
# When the model trains on the CPU and loading is CPU-bound, workers and the step share the cores, and the
# scheduler does not keep workers off the step's cores: a worker count that needs more cores than the step
# leaves free cannot be predicted within 20% (issue 19 measured num_workers=2 at 0.93x and 1 at 0.74-0.99x on
# 2 cores, against 1.2-2x from the loader alone). Its range's low end assumes the step loses this many
# cores' worth of time to the workers (half a core: the step's threads wait at barriers for a descheduled
# thread; a whole core would be the workers taking every cycle they want).
CONTENDED_STEP_CORES = 0.5
# The current worker count is timed with the step before and after the others; when those two timings differ
# by more than this ratio the machine's speed moved while it was measured, and the in-training speed-up is
# given as a range (half the 20% the predictions are held to, since either timing may be the off one).
IN_TRAINING_NOISE_MAX = 1.10
# The model's consumption rate: thresholds.CONSUMPTION_QUANTILE (where its value comes from).
CONSUMPTION_QUANTILE = T.CONSUMPTION_QUANTILE
# Without a timing with the step, the new step time is predicted from the step's own time (data wait taken out)
# at its median. When the same prediction at CONSUMPTION_QUANTILE is faster by more than this ratio, the run's
# own steps disagree about what the step costs, and the speed-up is a range between the two (the same half of
# the 20% allowance as IN_TRAINING_NOISE_MAX). Measured (issue 19, io_wait: 3 ms sleeps per sample, 2 intra-op
# threads): the step took 4 ms or 13 ms, bimodal, while loading ran in the training process (its thread pool
# slept through the loading: 2.6 ms per nn.Linear call under cProfile), 1.6 ms once 8 workers loaded; the
# median-based 6.4x point met 8.5x applied.
STEP_SPREAD_MAX = 1.10


def consumption_rate(timing: TimingStats, quantile: float = CONSUMPTION_QUANTILE) -> float | None:
    """Samples/s the model takes when it never waits: ``samples_per_step / quantile(step - data wait)``."""
    return timing.busy_samples_per_s(quantile)


def step_cores_from_window(
    self_cores: float | None, data_wait_share: float, ladder: LoaderLadder, current: RunConfig
) -> float | None:
    """Cores the training step keeps busy, measured: the training process's own CPU time over the
    profiled window's wall time (:attr:`~lightning_bottleneck.measure.contention.Contention.self_cores`,
    workers excluded), with the in-process loading taken out (``num_workers=0``: the data wait is the
    process loading at the probe's measured CPU share), spread over the non-waiting part of the step.
    None when not measured or when the step is nearly all data wait (too little left to measure)."""
    busy = 1.0 - data_wait_share
    if self_cores is None or busy < 0.05:
        return None
    loading = 0.0
    if not current.num_workers:
        rung0 = ladder.rung(0)
        loading = rung0.cpu_share if rung0 is not None and rung0.cpu_share is not None else 1.0
    cpus = float(usable_cpu_count(current, ladder))
    return min(cpus, max(0.0, (self_cores - data_wait_share * loading) / busy))


def pick_in_training(ladder: LoaderLadder, now: Rung, notes: list[str]) -> Rung | None:
    """The worker count that trained fastest with the step, if it beat the current one by
    :data:`MEASURED_GAIN_MIN`; else None, with a note giving the figures."""
    others = [
        r
        for w in sorted({r.num_workers for r in ladder.in_training} - {now.num_workers})
        if (r := ladder.in_training_rung(w)) is not None
    ]
    rough = [r for r in others if r.rough]
    if rough:  # its window closed before the workers' queue drained and two rounds were timed: not evidence
        notes.append(
            "Timed with the training step, but too briefly to count (the probe's budget ran out): "
            + ", ".join(f"num_workers={r.num_workers}" for r in rough)
            + "; raise loader_budget_s to time them."
        )
        others = [r for r in others if not r.rough]
    if not others or now.rough:
        return None
    best = max(others, key=lambda r: r.samples_per_s)
    gain = best.samples_per_s / now.samples_per_s if now.samples_per_s > 0 else 0.0
    figures = (
        ", ".join(f"num_workers={r.num_workers} {r.samples_per_s / now.samples_per_s:.2f}x" for r in others)
        if now.samples_per_s > 0
        else ""
    )
    lo, hi = current_spread(ladder, now)
    best_lo, _ = current_spread(ladder, best)
    if gain >= MEASURED_GAIN_MIN and best_lo >= hi:
        notes.append(
            f"Timed with the training step (the workers feeding the model's own step): {figures} of the current "
            f"num_workers={now.num_workers}."
        )
        return best
    if gain >= MEASURED_GAIN_MIN:  # faster on the mean, but not in every timing of both settings
        twice = best_lo < best.samples_per_s
        notes.append(
            f"Timed with the training step (the workers feeding the model's own step): {figures} of the current "
            f"num_workers={now.num_workers}, whose own two timings ({lo:.0f} and {hi:.0f} samples/s) "
            + (
                f"overlap num_workers={best.num_workers}'s slower one ({best_lo:.0f}, timed again)"
                if twice
                else "differ by as much"
            )
            + ": the machine's noise, not a measured gain; no worker count advised."
        )
        return None
    notes.append(
        f"Timed with the training step (the workers feeding the model's own step): {figures} of the current "
        f"num_workers={now.num_workers}; none is {MEASURED_GAIN_MIN:.2f}x faster: no worker count advised."
    )
    return None


def current_spread(ladder: LoaderLadder, now: Rung) -> tuple[float, float]:
    """The lowest and highest timing of a worker count with the step (the current one is timed twice, before and
    after the others, the fastest other again when it beat both: how much the machine's speed moved)."""
    rates = [r.samples_per_s for r in ladder.in_training if r.num_workers == now.num_workers] or [
        now.samples_per_s
    ]
    return min(rates), max(rates)


def usable_rungs(
    ladder: LoaderLadder, cfg: RunConfig, w_now: int, notes: list[str], k: float, measured: bool
) -> list[Rung]:
    """Rungs that can pay off during training, not only in the probe.

    The probe timed the loader alone. When loading is CPU-bound and the model also trains on the CPU, the
    training process needs a core of its own while workers load: worker counts beyond ``usable CPUs - 1``
    compete with the step itself (issue 8 measured ``num_workers=1`` at 0.84x on 2 cores, and this
    project's benchmark measured 1 to 4 workers at 0.2-0.5x of ``num_workers=0`` on a busy 2-core machine).
    """
    cpus = ladder.usable_cpus or cfg.usable_cpus
    if cfg.accelerator != "cpu" or ladder.bound != BOUND_CPU or not cpus:
        return list(ladder.rungs)
    cap = max(0, round(cpus - k))
    kept = [r for r in ladder.rungs if r.num_workers <= cap or r.num_workers == w_now]
    if len(kept) < len(ladder.rungs):
        how = "measured" if measured else "assumed"
        notes.append(
            f"Loading is CPU-bound and the model trains on the CPU: its step keeps {k:.1f} core(s) busy "
            f"({how}), so worker counts above {cap} would take the training process's cores ({cpus} usable) "
            "and are not advised."
        )
    return kept


def usable_cpu_count(cfg: RunConfig, ladder: LoaderLadder) -> int:
    return max(1, ladder.usable_cpus or cfg.usable_cpus or 1)


def shares_cores(cfg: RunConfig, ladder: LoaderLadder) -> bool:
    """The model trains on the CPU and loading is CPU-bound: workers and the step compete for cores."""
    return cfg.accelerator == "cpu" and ladder.bound == BOUND_CPU


def timed_with_step(cfg: RunConfig, ladder: LoaderLadder) -> bool:
    """Worker counts were timed feeding the model's own step, and that timing decides: loading that competes with a
    CPU step for the cores, or loading that waits (I/O, sleeps; issue 28: io_wait's count was predicted from the
    loader alone at 4.48x and applied at 6.69x)."""
    return bool(ladder.in_training) and (shares_cores(cfg, ladder) or ladder.bound == BOUND_WAIT)


def contended(rung: Rung, cfg: RunConfig, ladder: LoaderLadder, k: float) -> bool:
    """Workers that want more cores than the step leaves free while it runs."""
    return (
        rung.num_workers > 0
        and shares_cores(cfg, ladder)
        and rung.num_workers > usable_cpu_count(cfg, ladder) - k + 1e-9
    )


def shares_cores_well(rung: Rung, cfg: RunConfig, ladder: LoaderLadder, k: float) -> bool:
    """A rung "covers" the model only if it does so on the cores the step leaves (always, off the CPU)."""
    if rung.num_workers == 0 or not shares_cores(cfg, ladder):
        return True
    return not contended(rung, cfg, ladder, k)


def wait_scaling_ceiling(rung: Rung, ladder: LoaderLadder) -> Rung:
    """``rung`` at the most its workers can load when loading waits (I/O, sleeps): each worker as fast as loading in
    the training process, ``num_workers`` x the in-process rate (a worker waits on the same samples, and adds the
    copy between processes), or its own measured rate if higher. The high end of a loader-alone figure must be a
    bound: io_wait's 8 workers measured 1 564 samples/s alone for a short window and delivered 1 650 over the fit
    (2026-12-03 scoreboard: "up to 5.77x", applied 6.33x), where 8 x the in-process 293 is 2 344."""
    zero = ladder.rung(0)
    if ladder.bound != BOUND_WAIT or rung.num_workers <= 0 or zero is None or zero.rough:
        return rung
    top = rung.num_workers * zero.samples_per_s
    return replace(rung, samples_per_s=top) if top > rung.samples_per_s else rung


def rung_for(ladder: LoaderLadder, workers: int, prefetch: int | None) -> Rung | None:
    if workers == 0:
        return ladder.rung(0)
    return ladder.rung(workers, prefetch or 2) or ladder.rung(workers)


def covers(rung: Rung, consumption: float) -> bool:
    return rung.samples_per_s >= consumption * COVER_MARGIN


def per_sample_s(
    rung: Rung, consumption: float | None, cfg: RunConfig, ladder: LoaderLadder, k: float = DEFAULT_STEP_CORES
) -> float:
    """Predicted seconds per sample of training with this loader setting, the run as it trains.

    Without workers, loading and the step run one after the other. With workers they overlap, so the slower
    one sets the pace. When the model also trains on the CPU and loading is CPU-bound, the workers get, while
    the step runs, only the cores it leaves free (``usable - k``, ``k`` the cores the step keeps busy) and all
    of them (up to one per worker) while the step waits for data: the CPU time a sample needs
    (``cpu_per_sample_s``) that does not fit beside the step lengthens it.
    """
    step = 1.0 / consumption if consumption else 0.0
    load = 1.0 / rung.samples_per_s if rung.samples_per_s > 0 else float("inf")
    if rung.num_workers == 0:
        return step + load
    pace = max(step, load)
    if shares_cores(cfg, ladder) and rung.cpu_per_sample_s is not None:
        cpus = usable_cpu_count(cfg, ladder)
        beside = min(float(rung.num_workers), max(0.0, cpus - k)) * step  # loaded while the step runs
        rest = max(0.0, rung.cpu_per_sample_s - beside)
        pace = max(pace, step + rest / min(rung.num_workers, cpus))
    return pace


def in_process_instead(
    ladder: LoaderLadder,
    rung_now: Rung | None,
    consumption: float,
    bs: int,
    step_s: float,
    cfg: RunConfig,
    k: float,
    steps_per_epoch: int | None,
    stall_now: float,
    epochs: float | None,
    notes: list[str],
) -> Rung | None:
    """``num_workers=0`` when workers that restart every epoch cost more than loading in the training process:
    its epoch (the step, then the loading, one after the other, no start-up) must beat the epoch with the workers
    kept alive (their start-up once per fit) by MEASURED_GAIN_MIN. issue 19's worker_restart: 2 workers with a
    0.4 s start-up over an in-memory dataset the process loads at 90 000 samples/s; persistent workers made its
    6-epoch fit 3.6x faster, no workers 21.6x."""
    # the workers' start-up: the loader alone's for the current count, else the run's own epoch-start stall (a
    # probe whose budget ran out before the current count, as a 1 s budget does where each start takes 0.4 s)
    startup = rung_now.startup_s if rung_now is not None else stall_now
    if startup <= 0 or not steps_per_epoch:
        return None
    kept = epoch_s(steps_per_epoch, step_s, once_per_fit(startup, epochs))
    return in_process_beats(
        ladder, consumption, bs, cfg, k, steps_per_epoch, kept,
        f"with them kept alive ({stall_now * 1e3:.0f} ms start-up an epoch now)", notes,
    )  # fmt: skip


def in_process_over(
    ladder: LoaderLadder,
    chosen: Rung,
    trained_now: Rung | None,
    rung_now: Rung | None,
    consumption: float,
    bs: int,
    step_s: float,
    cfg: RunConfig,
    k: float,
    steps_per_epoch: int | None,
    epochs: float | None,
    notes: list[str],
) -> Rung | None:
    """``num_workers=0`` instead of the worker count chosen, when loading in the training process costs less than
    the chosen count does: its epoch (the step, then the loading) beats the chosen count's (its step, timed with the
    model's step or predicted from the loader alone, and its start-up once per fit) by MEASURED_GAIN_MIN.
    Held-out worker_restart_long (issue 28): loading in-process took 0.1 ms a batch (161 000 samples/s) where 4
    workers, timed 1.27x faster than the current 1 with the step, were advised (1.86x applied) and no workers gave
    8.27x."""
    if not steps_per_epoch:
        return None
    step_new = predicted_step_s(chosen, rung_now, consumption, bs, step_s, cfg, ladder, k, trained_now)
    other = epoch_s(steps_per_epoch, step_new, once_per_fit(chosen.startup_s, epochs))
    return in_process_beats(
        ladder, consumption, bs, cfg, k, steps_per_epoch, other,
        f"with num_workers={chosen.num_workers} kept alive", notes,
    )  # fmt: skip


def in_process_beats(
    ladder: LoaderLadder,
    consumption: float,
    bs: int,
    cfg: RunConfig,
    k: float,
    steps_per_epoch: int,
    other_epoch_s: float,
    other: str,
    notes: list[str],
) -> Rung | None:
    """The ladder's ``num_workers=0`` rung when an epoch loading in the training process (the step, then the
    loading, one after the other, no start-up) beats ``other_epoch_s`` (an epoch with workers, their start-up
    included, described by ``other``) by MEASURED_GAIN_MIN, with a note giving both; else None."""
    zero = ladder.rung(0)
    if zero is None or zero.rough:
        return None
    alone = epoch_s(steps_per_epoch, bs * per_sample_s(zero, consumption, cfg, ladder, k), 0.0)
    if alone <= 0 or other_epoch_s / alone < MEASURED_GAIN_MIN:
        return None
    notes.append(
        f"num_workers=0 loads {zero.samples_per_s:.0f} samples/s in the training process: an epoch without "
        f"workers is predicted at {alone:.3f} s against {other_epoch_s:.3f} s {other}."
    )
    return zero


def predicted_step_s(
    chosen: Rung | None,
    rung_now: Rung | None,
    consumption: float | None,
    bs: int,
    step_s: float,
    cfg: RunConfig,
    ladder: LoaderLadder,
    k: float = DEFAULT_STEP_CORES,
    trained_now: Rung | None = None,
) -> float:
    """The step with ``chosen``'s loading: with the current setting timed with the model's step
    (``trained_now``, the chosen one timed the same way), the run's step scaled by the two rates' ratio; else
    from the loader alone's rate and the model's consumption (:func:`per_sample_s`)."""
    if chosen is None:
        return step_s
    if trained_now is not None and chosen.samples_per_s > 0:  # measured with the step: the rates' ratio
        return step_s * trained_now.samples_per_s / chosen.samples_per_s
    if consumption is None:
        return step_s
    return bs * per_sample_s(chosen, consumption, cfg, ladder, k)


def once_per_fit(startup_s: float, epochs: float | None) -> float:
    """A start-up paid once per fit, per epoch (0 when the fit's epochs are unknown)."""
    return startup_s / epochs if epochs and epochs > 0 else 0.0


def persistent_extra_s(rung: Rung | None, ladder: LoaderLadder, bs: int, epochs: float | None) -> float:
    """What persistent workers cost an epoch beyond its steps (seconds): their start-up and shutdown, once per fit
    and spread over its epochs, and each epoch's refill: a new epoch's first batch waits for a worker to make one
    (``num_workers`` x ``bs`` over the loader alone's rate for that count). io_wait with 16 persistent workers
    over 2 epochs of 32 batches: 0.27 s to the first batch, 70 ms to each later epoch's, 94 ms to shut them down
    at the end, of a 0.75-0.81 s fit whose prediction counted only the start-up (7.80x predicted, 5.39x applied)."""
    if rung is None or rung.num_workers == 0:
        return 0.0
    alone = ladder.rung(rung.num_workers)
    rate = alone.samples_per_s if alone is not None else rung.samples_per_s
    refill = rung.num_workers * bs / rate if rate > 0 else 0.0
    if rung.startup_s > 0:
        # never longer than a fresh start to the first batch, which makes that batch too
        refill = min(refill, rung.startup_s)
    if epochs and epochs >= 1:
        # the first epoch's first batch comes with the start-up (timed to the first batch): epochs - 1 refills
        refill *= (epochs - 1) / epochs
    return once_per_fit(rung.startup_s + rung.shutdown_s, epochs) + refill


def epoch_s(steps_per_epoch: int | None, step_s: float, stall_s: float) -> float:
    """Seconds per epoch; with an unknown epoch length, per step (start-up stalls then cannot be weighed)."""
    if not steps_per_epoch:
        return step_s
    return steps_per_epoch * step_s + stall_s


def loader_evidence(
    ladder: LoaderLadder,
    consumption: float | None,
    step_s: float,
    step_new: float,
    stall_s: float,
    steps_per_epoch: int | None,
) -> dict[str, Any]:
    return {
        "ladder": [
            {
                "num_workers": r.num_workers,
                "prefetch_factor": r.prefetch_factor,
                "samples_per_s": round(r.samples_per_s, 1),
                "startup_ms": round(r.startup_s * 1e3, 1),
            }
            for r in ladder.rungs
        ],
        "bound": ladder.bound,
        "ceiling_samples_per_s": round(ladder.ceiling_samples_per_s, 1),
        "consumption_samples_per_s": None if consumption is None else round(consumption, 1),
        "step_ms": round(step_s * 1e3, 3),
        "predicted_step_ms": round(step_new * 1e3, 3),
        "epoch_start_stall_ms": round(stall_s * 1e3, 1),
        "steps_per_epoch": steps_per_epoch,
    }
