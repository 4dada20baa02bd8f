"""Candidate fixes for the rest of the fit: the levers of :mod:`lightning_bottleneck.rules.fit` on the ranking's
scale (seconds saved per training step over the fit the ledger saw)."""

from __future__ import annotations

from typing import Any

from lightning_bottleneck.categories import (
    Category,
)
from lightning_bottleneck.evidence import Evidence
from lightning_bottleneck.rules.candidates import Candidate, RunAccount
from lightning_bottleneck.rules.fit import fit_levers


def fit_candidates_of(evidence: Evidence, account: RunAccount) -> list[Candidate]:
    """The rest of the fit's levers (rules/fit.py), on the same scale: seconds saved per training step over
    the fit the ledger saw, projected onto the whole run."""
    ledger = evidence.ledger
    if ledger is None or ledger.train_steps <= 0:
        return []
    out = []
    for lever in fit_levers(evidence):
        per_step = lever.saved_s * 1e3 / ledger.train_steps
        more: dict[str, Any] = {}
        for bound in ("low", "high"):  # a range: the lever may save less or more than its computed part
            if f"saved_{bound}_s" in lever.evidence:
                more[f"saved_{bound}_ms_per_step"] = (
                    float(lever.evidence[f"saved_{bound}_s"]) * 1e3 / ledger.train_steps
                )
                more["range_why"] = lever.evidence.get("range_why", "")
        out.append(
            Candidate(
                Category.REST_OF_FIT,
                lever.name,
                lever.key or None,
                dict(lever.settings),
                per_step,
                account.over_run(per_step),
                lever.method,
                account.speedup(per_step),
                lever.basis,
                evidence={"part": lever.part.value, "where": lever.where, "trade": lever.trade, **more},
                lever=lever.lever,
                ceiling_only=lever.high_is_ceiling,
            )
        )
    return out
