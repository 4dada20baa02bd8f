"""Levers for validation (how often, on how many batches, the val loader's workers) and the sanity check."""

from __future__ import annotations

from typing import Any

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.analysis.ledger import FitLedger
from lightning_bottleneck.categories import FitPart, Provenance
from lightning_bottleneck.evidence import Evidence
from lightning_bottleneck.evidence.fit_probes import FitProbes
from lightning_bottleneck.rules.fit_lever import (
    TRAINER,
    VAL_LOADER,
    VAL_LOADER_GAIN_MIN,
    FitLever,
    growth_factor,
    seconds_text,
    step_excess_s,
    steps_per_epoch_of,
)


def validation_levers(ledger: FitLedger, evidence: Evidence) -> list[FitLever]:
    """val_check_interval (or check_val_every_n_epoch), limit_val_batches, the val loader's num_workers."""
    runs = ledger.validation_runs
    val_s = ledger.parts.get(FitPart.VALIDATION, 0.0)
    steps = ledger.train_steps
    if runs <= 0 or val_s <= 0 or steps <= 0:
        return []
    # one validation fewer also saves the logging, checkpoint saves and callbacks' hooks it triggers (booked
    # to their own parts as self time): its wall time, where the ledger has it; the median run's, so that
    # one-off costs of the first run (which the runs left still pay) do not count as saved
    per = ledger.validation_typical_s or max(val_s, ledger.validation_wall_s) / runs
    k = growth_factor(per * runs, ledger.own_fit_s())
    out: list[FitLever] = []
    spe = steps_per_epoch_of(ledger, evidence)
    interval = max(1, round(steps / runs))  # training batches between validations today
    per_epoch = spe is not None and interval >= spe  # validating once per epoch (or less often)
    if k > 1:
        if per_epoch and spe is not None:
            now_every = max(1, round(interval / spe))
            every = min(now_every * k, max(now_every, ledger.epochs))  # at least one validation left
            new_runs = steps // (every * spe)
            settings: dict[str, Any] = {"check_val_every_n_epoch": every}
            how = f"every {every} epochs instead of every {now_every}"
        else:
            new = min(interval * k, max(interval, steps))  # at least one validation left in the fit
            new_runs = steps // new
            settings = {"val_check_interval": new}
            if spe is not None and new > spe:
                # Lightning counts an int val_check_interval within an epoch unless check_val_every_n_epoch=None
                settings["check_val_every_n_epoch"] = None
            how = f"every {new} training batches instead of every {interval}"
        avoided = max(0, runs - new_runs)
        if avoided > 0:
            ev: dict[str, Any] = {
                "validations": runs,
                "validations_after": new_runs,
                "per_validation_s": round(per, 6),
            }
            # the steps between validations may also run faster without them: up to the avoided runs' share of
            # the steps' excess over back-to-back, at most VALIDATION_INDIRECT_MAX_SHARE of the time saved. An
            # after-effect no timing saw, like a hook's (`after_effect`): a ceiling beside the point, no range from
            # the point up, whose low end a point a hair over the applied speed-up misses (val_many_batches, issue
            # 28: 2.44-3.05x for 2.37x in the eighteenth session, 2.30-3.07x for 2.29x in the nineteenth)
            indirect = min(
                step_excess_s(ledger, evidence) * steps * avoided / runs,
                T.VALIDATION_INDIRECT_MAX_SHARE * avoided * per,
            )
            if indirect > 0:
                ev["saved_high_s"] = round(avoided * per + indirect, 6)
                ev["range_why"] = (
                    "the training steps between validations may run faster without them (caches, memory, the "
                    "metrics they collect); how much was bounded by this run's step against the same step timed "
                    "back-to-back, not measured"
                )
            out.append(
                FitLever(
                    FitPart.VALIDATION,
                    settings,
                    TRAINER,
                    avoided * per,
                    Provenance.COMPUTED,
                    f"{runs} validations took {seconds_text(per * runs)} ({seconds_text(per)} each"
                    + (", with the logging and saves they trigger" if per * runs > val_s * 1.01 else "")
                    + f"); validating {how} avoids "
                    f"{avoided} of them: {avoided} x {seconds_text(per)}",
                    "the validation metrics (and anything monitoring them: early stopping, the best "
                    f"checkpoint) update {k}x less often",
                    ev,
                    high_is_ceiling=indirect > 0,
                )
            )
        batches = ledger.validation_batches / runs if runs else 0.0
        if batches >= 2:
            frac = max(1.0 / k, 1.0 / batches)
            out.append(
                FitLever(
                    FitPart.VALIDATION,
                    {"limit_val_batches": round(frac, 3)},
                    TRAINER,
                    val_s * (1.0 - frac),
                    Provenance.COMPUTED,
                    f"each validation runs {batches:.0f} batches ({seconds_text(per)}); {frac:.0%} of them saves "
                    f"{1 - frac:.0%} of the {seconds_text(val_s)} of validation",
                    f"each validation sees {frac:.0%} of the validation set: noisier validation metrics",
                    {"validation_batches_per_run": round(batches, 1)},
                )
            )
    out += _val_loader_levers(ledger, evidence.fit_probes)
    return out


def _val_loader_levers(ledger: FitLedger, probes: FitProbes | None) -> list[FitLever]:
    """The val loader's num_workers, measured by the loader probe on the val loader."""
    if probes is None or probes.val_ladder is None or probes.val_ladder.skipped:
        return []
    ladder = probes.val_ladder
    current = probes.val_num_workers or 0
    now = ladder.rung(current)
    best = ladder.best
    wait = ledger.validation_loader_wait_s
    if now is None or best is None or best.num_workers == current or wait <= 0:
        return []
    # the probe's steady state, but a validation of B batches keeps at most B workers busy at once: the
    # fewest workers within the noise band of the best gain so capped
    per_run = ledger.validation_batches / ledger.validation_runs if ledger.validation_runs else 1.0

    def capped(rate: float) -> float:
        return min(rate / now.samples_per_s if now.samples_per_s > 0 else 1.0, max(1.0, per_run))

    top = capped(best.samples_per_s)
    best = min(
        (r for r in ladder.rungs if capped(r.samples_per_s) * VAL_LOADER_GAIN_MIN >= top),
        key=lambda r: (r.num_workers, -r.samples_per_s),
    )
    gain = capped(best.samples_per_s)
    if gain < VAL_LOADER_GAIN_MIN or best.num_workers == current:  # not faster beyond the noise band
        return []
    ratio = 1.0 / gain
    saved = wait * (1.0 - ratio)
    settings: dict[str, Any] = {"num_workers": best.num_workers}
    if best.num_workers > 0:
        settings["persistent_workers"] = True
    return [
        FitLever(
            FitPart.VALIDATION,
            settings,
            VAL_LOADER,
            saved,
            Provenance.MEASURED,
            f"validation waited {seconds_text(wait)} for its DataLoader; the loader probe measured the val loader at "
            f"{now.samples_per_s:.0f} samples/s with num_workers={current} and {best.samples_per_s:.0f} with "
            f"num_workers={best.num_workers} ({per_run:.0f} batches per validation): the wait shrinks to {ratio:.0%}",
            "",
            {"val_ladder": ladder.to_dict()},
        )
    ]


def sanity_levers(ledger: FitLedger, evidence: Evidence) -> list[FitLever]:
    sanity = ledger.parts.get(FitPart.SANITY_CHECK, 0.0)
    if sanity <= 0:
        return []
    return [
        FitLever(
            FitPart.SANITY_CHECK,
            {"num_sanity_val_steps": 0},
            TRAINER,
            sanity,
            Provenance.COMPUTED,
            f"the sanity check ran {ledger.sanity_batches} validation batch(es) before training: {seconds_text(sanity)}",
            "a bug in validation_step shows up at the first validation instead of before training",
        )
    ]
