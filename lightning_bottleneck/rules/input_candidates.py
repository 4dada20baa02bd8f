"""Candidate fixes for the input bucket: the loader rule's measured changes when the probe measured a ladder, else
the share estimates (hide the data wait, keep restarting workers alive)."""

from __future__ import annotations

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
from lightning_bottleneck.rules.loader_pace import step_cores_from_window
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
            first = _first_fetch_ms(evidence, cfg, rec.settings)
            if first > 0 and rec.in_process_step_s is None:
                # the plan's new epochs have their first batch in the workers' start-up and refills; the old ones'
                # first fetch is outside the steps it weighed (the ledger's epoch boundaries): it goes too
                saved += account.per_step((account.epochs or 0.0) * first / 1e3)
                basis += f", each epoch's first fetch ({first:.0f} ms, at the epoch boundary) loaded by the workers"
        elif not rec.settings:  # "make samples cheaper": at best, all of the data wait
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


def _first_fetch_ms(evidence: Evidence, cfg: RunConfig, settings: dict[str, Any]) -> float:
    """An epoch's first fetch in the training process (ms) when ``settings`` give a loader without workers some:
    the ledger books it at the epoch boundary, outside the training steps the plan weighs, where the new workers'
    start-up and refills stand in for it (io_wait, 2 epochs: 0.11 s of a 4.1 s fit). The boundary's time per
    epoch, at most one steady fetch (the window's median data wait); 0 otherwise."""
    ledger, timing = evidence.ledger, evidence.timing
    if (cfg.num_workers or 0) > 0 or int(settings.get("num_workers") or 0) <= 0:
        return 0.0
    if ledger is None or ledger.epochs < 1 or timing is None or not timing.data_wait_ms:
        return 0.0
    per_epoch = ledger.parts.get(FitPart.EPOCH_BOUNDARIES, 0.0) * 1e3 / ledger.epochs
    return min(per_epoch, median(timing.data_wait_ms))


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
