"""Candidate fixes for the input bucket: the loader rule's measured changes when the probe measured a ladder, else
the share estimates (hide the data wait, keep restarting workers alive)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.categories import (
    Category,
    FitPart,
    Provenance,
    Share,
)
from lightning_bottleneck.evidence import Evidence, RunConfig
from lightning_bottleneck.rules.candidates import Candidate, Ranking, RunAccount, estimate, share_of
from lightning_bottleneck.rules.loader_choice import LoaderAdvice
from lightning_bottleneck.rules.loader_pace import persistent_extra_s, step_cores_from_window
from lightning_bottleneck.rules.loader_plan import plan_from_timing, plan_loader
from lightning_bottleneck.stats import median


def _boundary_ms_per_epoch(evidence: Evidence) -> float:
    """What an epoch boundary costs beyond a steady batch fetch, from the fit ledger (0 without one): its
    epoch-boundary part (the epoch's start, the first fetch with the workers' start-up, the loop between
    epochs with the old workers' shutdown) per epoch. The first batch's extra wait alone (``stall_ms``)
    misses the shutdown and the iterator's set-up, which persistent workers also remove: on the scoreboard's
    worker_restart workload it predicted 3.45x for an applied 6.69x."""
    ledger = evidence.ledger
    if ledger is None or ledger.epochs < 2:
        return 0.0
    boundary_s = ledger.parts.get(FitPart.EPOCH_BOUNDARIES, 0.0)
    timing = evidence.timing
    steady = median(timing.data_wait_ms) if timing is not None and timing.data_wait_ms else 0.0
    return max(0.0, boundary_s * 1e3 / ledger.epochs - steady)


def input_candidates_of(
    evidence: Evidence, breakdown: dict[str, float], account: RunAccount, ranking: Ranking
) -> list[Candidate]:
    wait = share_of(breakdown, Share.DATA_WAIT)
    cfg = evidence.config
    ladder = evidence.loader_ladder
    if ladder is not None and not ladder.skipped and ladder.rungs and cfg is not None:
        return _measured_loader(evidence, cfg, wait, account, ranking)
    if ladder is not None and ladder.notes:
        ranking.notes += [f"Loader probe: {n}" for n in ladder.notes]
    out: list[Candidate] = []
    if wait >= T.INPUT_SHARE_MEDIUM:
        saved = wait * T.RECOVERABLE["input"] * account.step_ms
        out.append(
            estimate(
                Category.INPUT,
                "hide the data wait",
                "num_workers",
                {},
                saved,
                account,
                f"{wait:.0%} of the step waits for the DataLoader; enough workers hide it all",
            )
        )
    workers = cfg.num_workers if cfg is not None else None
    persistent = cfg.persistent_workers if cfg is not None else None
    if account.known and account.stall_ms > 0 and (workers or 0) > 0 and not persistent and account.epochs:
        restarts = max(0.0, account.epochs - 1.0)  # persistent workers still start once
        stall_ms = max(account.stall_ms, _boundary_ms_per_epoch(evidence))
        saved_s = restarts * stall_ms / 1e3
        saved = account.per_step(saved_s)
        if saved >= T.INPUT_SHARE_MEDIUM * account.step_ms:
            out.append(
                Candidate(
                    Category.INPUT,
                    "persistent_workers=True",
                    "persistent_workers",
                    {"persistent_workers": True},
                    saved,
                    saved_s,
                    Provenance.ESTIMATED,
                    account.speedup(saved),
                    f"workers restart {restarts:.0f} time(s), {stall_ms:.0f} ms each",
                )
            )
    return out


def _measured_loader(
    evidence: Evidence, cfg: RunConfig, wait: float, account: RunAccount, ranking: Ranking
) -> list[Candidate]:
    ladder = evidence.loader_ladder
    assert ladder is not None
    rl = evidence.run_length
    spe = rl.steps_per_epoch if rl is not None else None
    timing = evidence.timing
    steady = timing is not None and bool(timing.step_ms) and bool(timing.samples_per_step)
    c = evidence.contention
    # the step's own CPU use over the profiled window (not on a busy machine: others' load would hide in it)
    self_cores = c.self_cores if c is not None and c.checked and not c.busy else None
    k = step_cores_from_window(self_cores, timing.data_wait_share if steady else wait, ladder, cfg)  # type: ignore[union-attr]
    bs = ladder.batch_size or cfg.batch_size or 1
    # the step timed back-to-back (the trials, or the probe; no loading between steps): the fastest it may run
    # once loading leaves the training process (a thread pool idle through in-process loading wakes slowly)
    step_ms = evidence.back_to_back_step_ms
    back_to_back = bs / (step_ms / 1e3) if step_ms else None
    if steady:
        assert timing is not None
        plan = plan_from_timing(
            ladder,
            cfg,
            timing,
            spe,
            step_cores=k,
            back_to_back_samples_per_s=back_to_back,
            epochs=account.epochs,
        )
    else:
        busy_s = account.step_ms * (1 - wait) / 1e3
        plan = plan_loader(
            ladder,
            cfg,
            consumption_samples_per_s=bs / busy_s if busy_s > 0 else None,
            data_wait_share=wait,
            step_s=account.step_ms / 1e3,
            steps_per_epoch=spe,
            epoch_start_stall_s=account.stall_ms / 1e3 if account.stall_ms else None,
            step_cores=k,
            back_to_back_samples_per_s=back_to_back,
            epochs=account.epochs,
        )
    ranking.loader_plan = plan
    ranking.notes += [f"Loader probe: {n}" for n in plan.notes]
    out = []
    tail = _slow_tail_ms(evidence, account)
    eff = account.effective_step_ms
    for i, rec in enumerate(plan.changes):
        key = next(iter(rec.settings), None) if rec.settings else None
        if rec.expected_speedup and rec.expected_speedup > 1.0:
            saved = eff * (1 - 1 / rec.expected_speedup)
            method, basis = Provenance.MEASURED, "the loader probe's ladder on this run's own DataLoader"
            swap = _worker_swap_saving_ms(evidence, cfg, rec.settings, rec.evidence, account)
            if rec.in_process_step_s is not None:
                saved = _in_process_saving_ms(evidence, rec.in_process_step_s, saved + tail)
                basis += ", loading in the training process timed beside the model's own training step"
            elif rec.advice == LoaderAdvice.WORKERS_TIMED:
                basis += ", each worker count feeding the model's own training step"
            elif plan.covered is False:
                basis += (
                    f" (its settings alone; the loader tops out at {ladder.ceiling_samples_per_s:.0f} "
                    f"samples/s, so cheaper samples can save up to the whole {wait:.0%} data wait)"
                )
            if swap is not None and rec.in_process_step_s is None:
                saved, words = swap
                basis += words
                if rec.expected_speedup_range is not None:
                    # the plan's range spreads its ratio of steady rates (the current count's timings apart, the
                    # step's pace); the fit is no longer weighed by them: a point (io_wait, eighteenth session: the
                    # rescaled range read 4.92-5.10x, x1.04, for an applied 4.87x, its point 5.01x)
                    rec = plan.changes[i] = replace(rec, expected_speedup_range=None, uncertainty="")
        elif not rec.settings:  # "make samples cheaper": at best, all of the data wait
            swap = None
            saved = wait * account.step_ms
            method = Provenance.ESTIMATED
            basis = (
                f"all of the {wait:.0%} data wait if samples cost nothing; the loader measured at most "
                f"{ladder.ceiling_samples_per_s:.0f} samples/s"
            )
        else:
            continue
        if i == 0 and not rec.settings:
            key = "cheaper_samples"
        extra: dict[str, Any] = {"plan_index": i}
        high = (rec.expected_speedup_range or (0.0, rec.expected_speedup or 0.0))[1]
        if (
            method == Provenance.MEASURED
            and tail > 0
            and high > 1.0
            and _changes_workers(rec.settings)
            and rec.in_process_step_s is None
            and swap is None  # the ledger's steps, the slow ones in, were its baseline
        ):
            # the run's steps averaged more than their median (slow steps waiting on the workers): the high end has
            # that tail speed up like the median step (worker_restart: 7.9 ms mean, 6.1 ms median with 2 workers;
            # without workers the whole fit ran 23x faster against a 17x high end without the tail)
            extra["saved_high_ms_per_step"] = (eff + tail) * (1 - 1 / high)
            extra["range_why"] = (
                f"the run's training steps averaged {account.step_ms + tail:.1f} ms against a "
                f"{account.step_ms:.1f} ms median; the high end has the slow ones speed up like the rest"
            )
        out.append(
            Candidate(
                Category.INPUT,
                _describe_change(rec.settings),
                key,
                dict(rec.settings),
                saved,
                account.over_run(saved),
                method,
                # the plan's figure is the training steps'; with a ledger the speed-up is the whole fit's
                rec.expected_speedup
                if method == Provenance.MEASURED and account.fit_ms_per_step is None
                else account.speedup(saved),
                basis,
                evidence=extra,
                lever=rec.lever,
            )
        )
    return out


def _worker_swap_saving_ms(
    evidence: Evidence, cfg: RunConfig, settings: dict[str, Any], found: dict[str, Any], account: RunAccount
) -> tuple[float, str] | None:
    """What a change of worker count saves a step (ms), from the fit ledger: the fit's training steps and epoch
    boundaries as timed (the current workers' waits, start-ups, shutdowns and refills all in), against the new
    fit with the new count: its epochs as the probe timed one with the model's step (:attr:`Rung.epoch_s`, a short
    epoch's queue filling from empty in) plus the workers' start and shutdown (once per fit when they persist, each
    epoch when not); without that timing, the new steps (``found["predicted_step_ms"]``, the step scaled by the
    rates timed with the model's step) with the start-up, shutdown and each later epoch's refill
    (:func:`persistent_extra_s`). The plan's own ratio weighed only the steps at their steady rate, and took the
    current workers' start-up off the new one although the ledger keeps it outside the steps it scales:
    io_wait_slow's 16 workers (40-batch epochs) predicted 6.3-6.4x for an applied 4.8-5.3x. None without a
    ledger, a timed new step, or the new count's rung; the saving and the words that say how it was found."""
    ledger = evidence.ledger
    ladder = evidence.loader_ladder
    workers = int(settings.get("num_workers", cfg.num_workers or 0) or 0)
    step_ms = found.get("predicted_step_ms")
    if ledger is None or ledger.train_steps <= 0 or ladder is None or workers <= 0 or not step_ms:
        return None
    if not account.total_steps or not account.epochs or account.epochs < 1:
        return None
    rung = ladder.in_training_rung(workers) or ladder.rung(workers)
    if rung is None:
        return None
    persistent = bool(settings.get("persistent_workers", cfg.persistent_workers))
    epochs = account.epochs
    spent_s = ledger.parts.get(FitPart.TRAINING_STEPS, 0.0) + ledger.parts.get(FitPart.EPOCH_BOUNDARIES, 0.0)
    now_ms = spent_s * 1e3 / ledger.train_steps
    rl = evidence.run_length
    if rung.epoch_s is not None and rl is not None and rl.steps_per_epoch:
        # an epoch of the run's length timed with the step, its queue filling from empty: the workers start (and
        # stop) once when they persist, each epoch when not
        starts = 1.0 if persistent else epochs
        # the start and the shutdown as the faster of their timings (alone and with the step): a process start's
        # noise only adds (io_wait_slow's 16 workers: 0.23-0.33 s to start in the probe, ~0.2 s in the fit)
        timed = [r for r in (rung, ladder.rung(workers)) if r is not None]
        spawn = min((r.spawn_s for r in timed if r.spawn_s > 0), default=0.0)
        down = min((r.shutdown_s for r in timed if r.shutdown_s > 0), default=0.0)
        new_s = starts * (spawn + down) + epochs * rung.epoch_s
        new_s *= account.total_steps / (epochs * rl.steps_per_epoch)  # a partial last epoch
        words = (
            f"; the fit's training steps and epoch boundaries as timed ({now_ms:.1f} ms a step), against an epoch "
            f"of {rl.steps_per_epoch} batches timed with the step from an empty queue ({rung.epoch_s * 1e3:.0f} ms) "
            f"and the workers' start ({spawn * 1e3:.0f} ms) and shutdown ({down * 1e3:.0f} ms)"
        )
        return max(0.0, now_ms - new_s * 1e3 / account.total_steps), words
    bs = ladder.batch_size or cfg.batch_size or 1
    if persistent:
        boundaries_s = persistent_extra_s(rung, ladder, bs, epochs) * epochs
    else:  # restarting workers: a start-up (timed to the first batch) and a shutdown each epoch
        boundaries_s = (rung.startup_s + rung.shutdown_s) * epochs
    words = (
        f"; the fit's training steps and epoch boundaries as timed ({now_ms:.1f} ms a step), against the new "
        f"steps ({float(step_ms):.1f} ms) with the workers' start-up, shutdown and refills"
    )
    return max(0.0, now_ms - float(step_ms) - boundaries_s * 1e3 / account.total_steps), words


def _in_process_saving_ms(evidence: Evidence, step_s: float, fallback_ms: float) -> float:
    """What ``num_workers=0`` saves a step (ms): the fit's training steps and epoch boundaries as the ledger timed
    them (the workers' waits, start-ups and shutdowns all in), replaced by the step with in-process loading
    (``step_s``, measured: :attr:`LoaderChange.in_process_step_s`); ``fallback_ms`` without a ledger. The run's
    median step and its epoch-start stall left the shutdowns and the slow steps waiting on the workers out:
    worker_restart_long's 4.1 ms mean step against a 2.9 ms median, predicted 5.5-6.7x for an applied 9.1-9.5x."""
    ledger = evidence.ledger
    if ledger is None or ledger.train_steps <= 0:
        return fallback_ms
    spent_s = ledger.parts.get(FitPart.TRAINING_STEPS, 0.0) + ledger.parts.get(FitPart.EPOCH_BOUNDARIES, 0.0)
    saved = spent_s * 1e3 / ledger.train_steps - step_s * 1e3
    return saved if saved > 0 else fallback_ms


def _describe_change(settings: dict[str, Any]) -> str:
    """A loader change named by its settings (the advice gives it a title)."""
    return ", ".join(f"{k}={v!r}" for k, v in settings.items()) or "cheaper samples"


def _changes_workers(settings: dict[str, Any]) -> bool:
    return "num_workers" in settings or "persistent_workers" in settings


def _slow_tail_ms(evidence: Evidence, account: RunAccount) -> float:
    """How much the ledger's mean training step (ms) exceeds the account's median step: slow steps the median
    leaves out; 0 without a ledger, or when under SLOW_TAIL_MIN of the median (noise)."""
    ledger = evidence.ledger
    if ledger is None or ledger.train_steps <= 0:
        return 0.0
    tail = ledger.train_step_ms() - account.step_ms
    return tail if tail > T.SLOW_TAIL_MIN * account.step_ms else 0.0
