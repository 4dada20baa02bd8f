"""The loader rule's baseline and its prediction's measured parts: the run's current setting and what it costs
(:class:`LoaderNow`), the step with ``num_workers=0`` when in-process loading was timed beside the model's step
(:func:`in_process_step_s`), and the range a prediction gets when its measurements disagree
(:func:`predicted_range`)."""

from __future__ import annotations

from dataclasses import dataclass

from lightning_bottleneck.evidence import RunConfig
from lightning_bottleneck.evidence.loader_ladder import LoaderLadder, Rung
from lightning_bottleneck.rules.loader_pace import (
    CONTENDED_STEP_CORES,
    DEFAULT_STEP_CORES,
    IN_TRAINING_NOISE_MAX,
    STEP_SPREAD_MAX,
    contended,
    current_spread,
    epoch_s,
    persistent_extra_s,
    predicted_step_s,
    rung_for,
    usable_cpu_count,
    wait_scaling_ceiling,
)

__all__ = ["LoaderNow", "in_process_step_s", "loader_now", "predicted_range"]


@dataclass(frozen=True)
class LoaderNow:
    """The run's current loader setting and what it costs: the rule's baseline."""

    ladder: LoaderLadder
    current: RunConfig
    k: float  # cores the training step keeps busy
    k_measured: bool  # k was measured (else DEFAULT_STEP_CORES, assumed)
    batch: int
    workers: int
    persistent: bool
    rung: Rung | None  # the ladder's rung for the current setting
    stall: float  # seconds of worker start-up per epoch (restarting workers)
    once: float  # persistent workers' one start-up, per epoch of the fit
    epoch: float  # seconds per epoch (per step when the epoch's length is unknown)
    stall_share: float
    step_s: float
    steps_per_epoch: int | None
    epochs: float | None


def loader_now(
    ladder: LoaderLadder,
    current: RunConfig,
    step_s: float,
    steps_per_epoch: int | None,
    epoch_start_stall_s: float | None,
    step_cores: float | None,
    epochs: float | None,
) -> LoaderNow:
    workers = current.num_workers or 0
    persistent = bool(current.persistent_workers) and workers > 0
    rung = rung_for(ladder, workers, current.prefetch_factor)
    stall = 0.0
    if workers > 0 and not persistent:
        if epoch_start_stall_s is not None:
            stall = max(0.0, epoch_start_stall_s)
        elif rung is not None:
            stall = rung.startup_s
    epoch = epoch_s(steps_per_epoch, step_s, stall)
    batch = ladder.batch_size or current.batch_size or 1
    return LoaderNow(
        ladder=ladder,
        current=current,
        k=DEFAULT_STEP_CORES if step_cores is None else max(0.0, step_cores),
        k_measured=step_cores is not None,
        batch=batch,
        workers=workers,
        persistent=persistent,
        rung=rung,
        stall=stall,
        once=persistent_extra_s(rung if persistent else None, ladder, batch, epochs),
        epoch=epoch,
        stall_share=stall / epoch if epoch > 0 else 0.0,
        step_s=step_s,
        steps_per_epoch=steps_per_epoch,
        epochs=epochs,
    )


def in_process_step_s(now: LoaderNow, chosen: Rung | None, consumption: float | None) -> float | None:
    """The step with ``num_workers=0`` measured (seconds): the run's own step without its data wait (its fastest
    quarter, ``consumption``: the steps that ran beside the callback's analysis child or the profiler read up to
    0.5 ms slower on worker_restart's 0.3 ms step), plus the loading the training process then does, timed beside
    the model's step (the probe's in-training rung for ``num_workers=0``: load a batch, then the step, one after
    the other) over the same step alone (:attr:`LoaderLadder.step_ms`). None unless ``chosen`` has no workers and
    both were timed (not roughly).
    issue 28: worker_restart's num_workers=0 was a range between the run's median step and the back-to-back
    one, "up to 52.64x" for an applied 35.30x, though the probe had timed in-process loading with the step."""
    ladder = now.ladder
    if chosen is None or chosen.num_workers != 0 or not consumption or not ladder.step_ms:
        return None
    rung = ladder.in_training_rung(0)
    if rung is None or rung.rough or rung.samples_per_s <= 0:
        return None
    inline = now.batch / rung.samples_per_s
    loading = max(0.0, inline - ladder.step_ms / 1e3)
    return max(inline, now.batch / consumption + loading)


def predicted_range(
    now: LoaderNow,
    chosen: Rung,
    trained_now: Rung | None,
    speedup: float,
    stall_new: float,
    consumption: float | None,
    typical: float | None,
    back_to_back: float | None,
) -> tuple[tuple[float, float] | None, str]:
    """A measured range around the point and why, when the measurements disagree by more than a 20%
    prediction allows; ``(None, "")`` for a point."""
    ladder, current, k, spe = now.ladder, now.current, now.k, now.steps_per_epoch
    step_s, bs = now.step_s, now.batch
    if trained_now is not None:
        lo, hi = current_spread(ladder, trained_now)
        new_lo, new_hi = current_spread(ladder, chosen)
        if (
            lo > 0
            and new_lo > 0
            and (hi > lo * IN_TRAINING_NOISE_MAX or new_hi > new_lo * IN_TRAINING_NOISE_MAX)
        ):
            # a setting's two timings moved more than a 20% prediction allows: the speed-up is given as the
            # range between the chosen's slower timing against the current's faster, and the other way round
            ends = [
                now.epoch / epoch_s(spe, step_s * rate / new, stall_new)
                for rate, new in ((hi, new_lo), (lo, new_hi))
            ]
            moved = [
                f"num_workers={w} {b / a - 1:.0%}"
                for w, a, b in ((now.workers, lo, hi), (chosen.num_workers, new_lo, new_hi))
                if b > a * IN_TRAINING_NOISE_MAX
            ]
            return (round(min(ends[0], speedup), 3), round(max(ends[1], speedup), 3)), (
                f"the two timings with the step of {' and '.join(moved)} apart "
                "(the machine's speed moved while it was measured)"
            )
        return None, ""
    if contended(chosen, current, ladder, k):
        # workers need cores the step holds: the low end has the step lose CONTENDED_STEP_CORES to them
        worst = predicted_step_s(
            chosen, now.rung, typical, bs, step_s, current, ladder, k + CONTENDED_STEP_CORES
        )
        low = now.epoch / epoch_s(spe, worst, stall_new) if worst > 0 else speedup
        return (round(min(low, speedup), 3), round(speedup, 3)), (
            f"{chosen.num_workers} worker(s) and a step that keeps {k:.1f} core(s) busy share "
            f"{usable_cpu_count(current, ladder)} CPU(s)"
        )
    fastest = max(consumption or 0.0, back_to_back or 0.0)
    if typical is None or fastest <= typical:
        return None, ""
    top = wait_scaling_ceiling(chosen, ladder)  # the loader at the most it can deliver (waiting loads)
    fast = predicted_step_s(top, now.rung, fastest, bs, step_s, current, ladder, k)
    high = now.epoch / epoch_s(spe, fast, stall_new) if fast > 0 else speedup
    if high <= speedup * STEP_SPREAD_MAX:
        return None, ""
    quick = (
        f"{bs / consumption * 1e3:.1f} ms (the fastest quarter)"
        if consumption and consumption >= fastest
        else f"{bs / fastest * 1e3:.1f} ms (the same step timed back-to-back, no loading between)"
    )
    more = f"; the high end has the workers at {top.samples_per_s:.0f} samples/s" if top is not chosen else ""
    return (round(speedup, 3), round(high, 3)), (
        f"this run's own steps took {bs / typical * 1e3:.1f} ms (median) but {quick} without the data "
        f"wait; which of them the step runs at once {chosen.label} does the loading was not measured{more}"
    )
