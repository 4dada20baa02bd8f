"""Rules for the rest of the fit: validation, the sanity check, checkpointing, logging, other callbacks.

The ledger (:class:`~lightning_bottleneck.analysis.ledger.FitLedger`) says how many wall seconds of ``fit``
each part took. Each part's rule is data (:class:`PartRule`): the part, its named thresholds (shares of the
whole fit, :mod:`lightning_bottleneck.thresholds`) and the function that lists its **levers**: the
Lightning settings that make the part cheaper, each with the seconds it saves over the fit the ledger saw and
how that figure was obtained:

* ``computed``: arithmetic on the ledger's measured seconds (validations avoided x seconds per validation,
  saves avoided x seconds per save, the sanity check's own seconds);
* ``measured``: the loader probe's ladder on the val DataLoader;
* ``estimated``: a named fraction (asynchronous saving, a callback called less often).

:func:`fit_findings` gives one finding per material part (its levers in ``evidence["levers"]``);
:func:`fit_candidates` turns the levers into ranking candidates (:mod:`lightning_bottleneck.rules.ranking`), so
that every fix, in the step and outside it, competes on seconds saved over the whole fit.

Example::

    for f in fit_findings(evidence):
        print(f.summary, [lever["settings"] for lever in f.evidence["levers"]])
"""

from __future__ import annotations

from dataclasses import dataclass

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.analysis.ledger import FitLedger
from lightning_bottleneck.categories import FindingKind, FitPart, Severity
from lightning_bottleneck.evidence import Evidence
from lightning_bottleneck.report import Finding
from lightning_bottleneck.rules.fit_lever import (
    MODEL_CHECKPOINT,
    SELF_LOG,
    TRAINER,
    VAL_LOADER,
    FitLever,
    LeverFn,
    growth_factor,
    seconds_text,
)
from lightning_bottleneck.rules.fit_saving_logging import callback_levers, checkpoint_levers, logging_levers
from lightning_bottleneck.rules.fit_validation import sanity_levers, validation_levers

__all__ = [
    "MODEL_CHECKPOINT",
    "PART_RULES",
    "SELF_LOG",
    "TRAINER",
    "VAL_LOADER",
    "FitLever",
    "PartRule",
    "fit_findings",
    "fit_levers",
    "growth_factor",
    "validation_levers",
]


@dataclass(frozen=True)
class PartRule:
    """A part of the fit is a finding when its share of fit reaches ``medium`` (``high``: severity high)."""

    part: FitPart
    medium: float
    high: float
    what: str  # "<share> of the fit (<s>) is <what>"
    levers: LeverFn


PART_RULES: tuple[PartRule, ...] = (
    PartRule(
        FitPart.VALIDATION, T.FIT_PART_SHARE_MEDIUM, T.FIT_PART_SHARE_HIGH, "validation", validation_levers
    ),
    PartRule(
        FitPart.SANITY_CHECK,
        T.FIT_PART_SHARE_MEDIUM,
        T.FIT_PART_SHARE_HIGH,
        "the sanity check before training",
        sanity_levers,
    ),
    PartRule(
        FitPart.CHECKPOINTING,
        T.FIT_PART_SHARE_MEDIUM,
        T.FIT_PART_SHARE_HIGH,
        "checkpoint saving",
        checkpoint_levers,
    ),
    PartRule(
        FitPart.LOGGING,
        T.FIT_PART_SHARE_MEDIUM,
        T.FIT_PART_SHARE_HIGH,
        "logging (metric computation, syncing, logger writes)",
        logging_levers,
    ),
    PartRule(
        FitPart.CALLBACKS,
        T.FIT_PART_SHARE_MEDIUM,
        T.FIT_PART_SHARE_HIGH,
        "other callbacks' hooks",
        callback_levers,
    ),
    PartRule(
        FitPart.EPOCH_BOUNDARIES,
        T.FIT_PART_SHARE_MEDIUM,
        T.FIT_PART_SHARE_HIGH,
        "epoch boundaries (DataLoader iterator and worker start-up, on_*_epoch_* hooks)",
        lambda ledger, evidence: [],  # the input rule's epoch-start stall advises persistent_workers
    ),
)


def _detail(ledger: FitLedger, part: FitPart) -> str:
    if part == FitPart.VALIDATION and ledger.validation_runs:
        wait, compute = ledger.validation_loader_wait_s, ledger.validation_compute_s
        return (
            f": {ledger.validation_runs} validation(s) of {ledger.validation_batches / ledger.validation_runs:.0f} "
            f"batches, {seconds_text(wait)} waiting for the val DataLoader and {seconds_text(compute)} computing"
        )
    if part == FitPart.CHECKPOINTING and ledger.checkpoint_saves:
        return f": {ledger.checkpoint_saves} save(s), {seconds_text(ledger.per_save_s())} each"
    if part == FitPart.LOGGING and ledger.log_calls:
        return f": {ledger.log_calls} logger write(s)"
    if part == FitPart.CALLBACKS and ledger.hooks:
        name, hook = max(ledger.hooks.items(), key=lambda kv: kv[1].seconds)
        return f": mostly {name} ({hook.calls} calls, {seconds_text(hook.seconds / max(1, hook.calls))} each)"
    return ""


def fit_levers(evidence: Evidence) -> list[FitLever]:
    """Every lever of every material part, best first (seconds saved over the fit the ledger saw)."""
    out: list[FitLever] = []
    for f in fit_findings(evidence):
        out += [FitLever.from_dict(d) for d in f.evidence.get("levers", [])]
    return sorted(out, key=lambda lv: -lv.saved_s)


def fit_findings(evidence: Evidence) -> list[Finding]:
    """One finding per part of the fit past its medium threshold, with its levers as evidence."""
    ledger = evidence.ledger
    fit_s = ledger.own_fit_s() if ledger is not None else 0.0
    if ledger is None or fit_s <= 0:
        return []
    out: list[Finding] = []
    for rule in PART_RULES:
        seconds = ledger.parts.get(rule.part, 0.0)
        share = seconds / fit_s
        if share < rule.medium:
            continue
        levers = [lv for lv in rule.levers(ledger, evidence) if lv.saved_s > 0]
        out.append(
            Finding(
                kind=FindingKind.REST_OF_FIT,
                severity=Severity.HIGH if share >= rule.high else Severity.MEDIUM,
                summary=(
                    f"{share:.0%} of the fit ({seconds_text(seconds)} of {seconds_text(fit_s)}) is {rule.what}"
                    f"{_detail(ledger, rule.part)}."
                ),
                evidence={
                    "part": rule.part.value,
                    "share_of_fit": round(share, 4),
                    "seconds": round(seconds, 4),
                    "fit_s": round(fit_s, 4),
                    "threshold_medium": rule.medium,
                    "threshold_high": rule.high,
                    "levers": [lv.to_dict() for lv in levers],
                },
            )
        )
    return out
