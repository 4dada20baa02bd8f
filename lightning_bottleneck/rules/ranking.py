"""Rank candidate fixes by the time they save over the whole run; the verdict is the best fix's bucket.

Every kind of lost time competes on one scale, milliseconds saved per training step *amortised over the
whole fit*:

* steady-state data wait (window share x step), worker start-up stalls (stall x epochs / total steps),
  sync, exposed communication, compute and overhead shares (share x step);
* each candidate fix is one :class:`Candidate`: what to set, how much it saves, and whether that saving was
  **measured** (the loader probe's ladder through :mod:`lightning_bottleneck.rules.loader_plan`, trial
  steps on the live model in :class:`~lightning_bottleneck.evidence.trial_results.TrialReport`) or **estimated**
  (the named fractions in :mod:`lightning_bottleneck.thresholds`);
* a lever measured no faster than the noise band is kept as evidence and never advised; a one-off cost
  (compile time) is charged against the run.

Without the run's length (offline, an endless loader) the per-step savings compete alone, which is
``share x recoverable`` as before, so trace-only verdicts are unchanged.

Example::

    ranking = rank(evidence, breakdown, step_ms=12.0)
    ranking.primary, ranking.confidence(steps_profiled=5, from_trace=True)
    for c in ranking.candidates: print(c)   # best first; ``recommended`` False: tried, not advised
"""

from __future__ import annotations

from dataclasses import replace

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.categories import (
    BUCKET_SHARES,
    Category,
    FindingKind,
    Severity,
)
from lightning_bottleneck.evidence import Evidence
from lightning_bottleneck.report import Finding
from lightning_bottleneck.rules.candidates import COMPUTE_LEVERS, Candidate, Ranking, RunAccount
from lightning_bottleneck.rules.confidence import busy_machine_notes, confidence
from lightning_bottleneck.rules.fit_candidates import fit_candidates_of
from lightning_bottleneck.rules.input_candidates import input_candidates_of
from lightning_bottleneck.rules.model_candidates import (
    communication_candidates_of,
    model_candidates_of,
    sync_candidates_of,
)
from lightning_bottleneck.rules.shares import Verdict

__all__ = [
    "COMPUTE_LEVERS",
    "Candidate",
    "Ranking",
    "RunAccount",
    "busy_machine_notes",
    "confidence",
    "rank",
    "ranked_verdict",
    "tried_findings",
]


def rank(evidence: Evidence, breakdown: dict[str, float], step_ms: float | None) -> Ranking:
    """Every candidate fix for this run with the time it saves, best first."""
    account = run_account(evidence, breakdown, step_ms)
    ranking = Ranking(account)
    cands: list[Candidate] = []
    cands += input_candidates_of(evidence, breakdown, account, ranking)
    cands += sync_candidates_of(breakdown, account)
    cands += communication_candidates_of(evidence, breakdown, account)
    cands += model_candidates_of(evidence, breakdown, account, ranking)
    cands += fit_candidates_of(evidence, account)
    ranking.candidates = sorted(
        (c for c in cands if c.recommended and c.competes and c.saved_ms_per_step > 0),
        key=lambda c: -c.saved_ms_per_step,
    )
    ranking.tried = [c for c in cands if not c.recommended]
    ranking.sizing = [c for c in cands if c.recommended and not c.competes and c.saved_ms_per_step > 0]
    return ranking


def run_account(evidence: Evidence, breakdown: dict[str, float], step_ms: float | None) -> RunAccount:
    """The run's length (from ``evidence.run_length``) and the seconds each bucket loses over it."""
    rl = evidence.run_length
    total = rl.total_steps if rl is not None and rl.total_steps and rl.total_steps > 0 else None
    epochs: float | None = None
    if rl is not None and rl.epochs:
        epochs = float(rl.epochs)
    elif total and rl is not None and rl.steps_per_epoch:
        epochs = total / rl.steps_per_epoch
    stall_ms = _stall_ms(evidence)
    ledger = evidence.ledger
    fit_ms: float | None = None
    if ledger is not None and ledger.train_steps > 0 and ledger.own_fit_s() > 0:
        fit_ms = ledger.own_fit_s() * 1e3 / ledger.train_steps
        # The step timer (and a profiled step) spans the loop from batch to batch, so it also holds what runs
        # between two steps: logger writes, other callbacks' batch hooks. The ledger books those to their own
        # parts; the in-step fixes work on the training step alone, at most the ledger's mean step.
        ledger_step_ms = ledger.train_step_ms()
        if step_ms and 0 < ledger_step_ms < step_ms:
            step_ms = ledger_step_ms
        if not total:  # the ledger saw the whole fit (offline, from a report)
            total = ledger.train_steps
            epochs = epochs or float(ledger.epochs or 0) or None
    account = RunAccount(
        step_ms=step_ms or 1.0, total_steps=total, epochs=epochs, stall_ms=stall_ms, fit_ms_per_step=fit_ms
    )
    if total:
        for cat, share in BUCKET_SHARES.items():
            account.lost_s[cat.value] = breakdown.get(str(share), 0.0) * account.step_ms * total / 1e3
        account.lost_s["epoch_start_stall"] = (epochs or 0.0) * stall_ms / 1e3
    return account


def _stall_ms(evidence: Evidence) -> float:
    """Median extra wait of an epoch's first batch, when it passes the epoch-stall rule's thresholds."""
    return evidence.timing.epoch_start_stall_ms() if evidence.timing is not None else 0.0


def ranked_verdict(
    verdict: Verdict,
    ranking: Ranking,
    evidence: Evidence,
    steps_profiled: int,
    from_trace: bool,
    step_samples_ms: list[float] | None = None,
) -> tuple[Verdict, list[str]]:
    """The rules' verdict with its primary bucket and confidence taken from the ranking.

    An out-of-memory error keeps its verdict. When no fix is left (every lever measured no faster), the
    share-based verdict stands, capped at :data:`~.thresholds.UNCERTAIN_CONFIDENCE_MAX` with a note.
    """
    if evidence.oom:
        return verdict, []
    step = ranking.account.step_ms
    savings = {k: v / step for k, v in ranking.bucket_savings().items()} if step > 0 else {}
    primary = ranking.primary
    if primary == Category.UNKNOWN:
        notes = []
        conf = verdict.confidence
        if verdict.primary != Category.UNKNOWN and ranking.tried:
            conf = min(conf, T.UNCERTAIN_CONFIDENCE_MAX)
            notes.append(
                f"No measured fix pays off for {verdict.primary.value}: "
                + "; ".join(str(c) for c in ranking.tried)
                + "."
            )
        return replace(verdict, confidence=conf), notes
    top = savings.get(primary.value, 0.0)
    if top < T.VERDICT_SAVING_MIN and verdict.primary not in (Category.UNKNOWN, primary):
        best = next(c for c in ranking.candidates if c.category == primary)
        return replace(
            verdict, confidence=min(verdict.confidence, T.UNCERTAIN_CONFIDENCE_MAX), savings=savings
        ), [
            f"The best fix found ({best.name}) saves {top:.1%} of the step, under the {T.VERDICT_SAVING_MIN:.0%} "
            f"that can be told from no change: the verdict follows where the time goes ({verdict.primary.value})."
        ]
    conf, notes = confidence(ranking, evidence, steps_profiled, from_trace, step_samples_ms)
    findings = sorted(verdict.findings, key=lambda f: (f.kind != primary.value, f.severity.rank))
    return replace(verdict, primary=primary, confidence=conf, savings=savings, findings=findings), notes


def tried_findings(ranking: Ranking) -> list[Finding]:
    """One low-severity finding per lever that was measured and is not advised (kept as evidence)."""
    out = []
    for c in ranking.tried:
        ms = f"{c.measured_speedup:.2f}x" if c.measured_speedup is not None else "not measured"
        out.append(
            Finding(
                kind=FindingKind.of(c.category),
                severity=Severity.LOW,
                summary=f"Tried {c.name} on this model: {ms}, not recommended ({c.basis}).",
                evidence={"trial": c.evidence.get("trial", {}), "settings": dict(c.settings)},
            )
        )
    return out
