"""The ranking's vocabulary: a candidate fix and the time it saves (:class:`Candidate`), the run's length and where
its time goes (:class:`RunAccount`), and the ranked candidates (:class:`Ranking`). The generators that make
candidates are per area (``input_candidates``, ``model_candidates``, ``fit_candidates``); ``ranking`` ranks them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lightning_bottleneck.categories import (
    Category,
    Provenance,
    Share,
)
from lightning_bottleneck.rules.loader_choice import LoaderPlan
from lightning_bottleneck.rules.shares import best_bucket

#: Trial levers, by the setting they change (the first key of ``TrialResult.settings``), and the bucket
#: they count for; ``None``: the larger of compute and overhead (torch.compile removes dispatch and fuses
#: kernels alike). Every setting :mod:`lightning_bottleneck.measure.trials` can try is here (tests/test_ranking.py).
COMPUTE_LEVERS: dict[str, Category | None] = {
    "precision": Category.COMPUTE,
    "float32_matmul_precision": Category.COMPUTE,
    "channels_last": Category.COMPUTE,
    "compile": None,
    "batch_size": Category.OVERHEAD,  # a bigger batch amortises the per-step cost (sizes its advice only)
}


@dataclass(frozen=True)
class Candidate:
    """One fix and the time it saves (like ``torch.utils.benchmark.Measurement``, it prints itself).

    ``key`` is the setting it is matched on in the advice (``"num_workers"``, ``"precision"``, ...; ``None``:
    the bucket's first recommendation). ``saved_ms_per_step`` is amortised over the whole run (one-off costs
    included) when its length is known, else per steady-state step; ``saved_s`` is over the whole run
    (``None`` when the run's length is unknown). ``speedup`` is the whole-step speed-up it predicts;
    ``measured_speedup`` the trial's own figure on the part it timed.
    """

    category: Category
    name: str
    key: str | None
    settings: dict[str, Any]
    saved_ms_per_step: float
    saved_s: float | None
    method: Provenance  # how saved_ms_per_step was obtained
    speedup: float | None
    basis: str
    measured_speedup: float | None = None
    recommended: bool = True
    evidence: dict[str, Any] = field(default_factory=dict)
    # False: an estimate that only sizes its advice (its expected speed-up and range) without competing in
    # the ranking or the verdict (a bigger batch: a trade-off, estimated, never above a measured fix)
    competes: bool = True
    # the stable id a recommendation carries for this fix (``Recommendation.lever``): the loader rule's
    # ``loader:<advice>``, a fit lever's ``fit:<where>:<setting>``; None: matched on ``key`` and bucket
    lever: str | None = None
    # True: its ``saved_high_ms_per_step`` bounds an effect no timing saw (the step after a hook call running
    # slower), said beside the point as a ceiling, never the top of a range
    ceiling_only: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category.value,
            "name": self.name,
            "settings": dict(self.settings),
            "saved_ms_per_step": round(self.saved_ms_per_step, 4),
            "saved_s": None if self.saved_s is None else round(self.saved_s, 3),
            "method": self.method.value,
            "speedup": None if self.speedup is None else round(self.speedup, 3),
            "measured_speedup": None if self.measured_speedup is None else round(self.measured_speedup, 3),
            "recommended": self.recommended,
            "basis": self.basis,
        }

    def __str__(self) -> str:
        if not self.recommended:
            ms = f"{self.measured_speedup:.2f}x" if self.measured_speedup is not None else "not measured"
            return f"tried {self.name}: {ms}, not recommended ({self.basis})"
        run = f", {self.saved_s:.1f} s over the run" if self.saved_s is not None else ""
        sp = f" ({self.speedup:.2f}x)" if self.speedup else ""
        return (
            f"{self.name}: saves {self.saved_ms_per_step:.2f} ms/step{run}{sp}, {self.method}: {self.basis}"
        )


@dataclass
class RunAccount:
    """The run's length and where its time goes (seconds over the whole fit when the length is known)."""

    step_ms: float
    total_steps: int | None
    epochs: float | None
    stall_ms: float  # extra wait of an epoch's first batch (0 when none was seen)
    lost_s: dict[str, float] = field(default_factory=dict)  # bucket -> seconds lost over the run
    # the whole fit's wall time per training step (the ledger's fit_s without this package's own work, over
    # train_steps): validation, checkpoints, logging ... included; None without a ledger (offline, a trace alone)
    fit_ms_per_step: float | None = None

    @property
    def known(self) -> bool:
        return bool(self.total_steps)

    @property
    def run_s(self) -> float | None:
        if not self.total_steps:
            return None
        return (self.total_steps * self.step_ms + (self.epochs or 0.0) * self.stall_ms) / 1e3

    @property
    def effective_step_ms(self) -> float:
        """Wall time per training step over the run, stalls included."""
        run = self.run_s
        return run * 1e3 / self.total_steps if run and self.total_steps else self.step_ms

    def per_step(self, saved_run_s: float) -> float:
        return saved_run_s * 1e3 / self.total_steps if self.total_steps else 0.0

    def over_run(self, saved_ms_per_step: float) -> float | None:
        return saved_ms_per_step * self.total_steps / 1e3 if self.total_steps else None

    @property
    def whole_ms_per_step(self) -> float:
        """Wall time per training step over the whole fit (the ledger's when known, else the steps')."""
        return max(self.effective_step_ms, self.fit_ms_per_step or 0.0)

    def speedup(self, saved_ms_per_step: float) -> float | None:
        """The whole fit's speed-up: fit / (fit - saved) (the training steps' when no ledger was kept)."""
        eff = self.whole_ms_per_step
        return eff / (eff - saved_ms_per_step) if 0 < saved_ms_per_step < eff else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_ms": round(self.step_ms, 4),
            "total_steps": self.total_steps,
            "epochs": self.epochs,
            "epoch_start_stall_ms": round(self.stall_ms, 3),
            "run_s": None if self.run_s is None else round(self.run_s, 3),
            "fit_ms_per_step": None if self.fit_ms_per_step is None else round(self.fit_ms_per_step, 4),
            "lost_s": {k: round(v, 3) for k, v in self.lost_s.items()},
        }


@dataclass
class Ranking:
    """The candidates, best first, and what the verdict and advice read off them."""

    account: RunAccount
    candidates: list[Candidate] = field(default_factory=list)  # recommended ones, best first
    tried: list[Candidate] = field(default_factory=list)  # measured, not advised
    sizing: list[Candidate] = field(default_factory=list)  # estimates that size advice, not ranked
    loader_plan: LoaderPlan | None = None  # set when the loader probe measured a ladder
    notes: list[str] = field(default_factory=list)

    def bucket_savings(self) -> dict[str, float]:
        """Best saving per bucket (ms per step); the input bucket adds its steady wait and its stalls."""
        out: dict[str, float] = {}
        input_parts: dict[str, float] = {}
        for c in self.candidates:
            if c.category == Category.INPUT and self.loader_plan is None:
                part = "stall" if c.key == "persistent_workers" else "steady"
                input_parts[part] = max(input_parts.get(part, 0.0), c.saved_ms_per_step)
                continue
            out[c.category.value] = max(out.get(c.category.value, 0.0), c.saved_ms_per_step)
        if input_parts:
            out[Category.INPUT.value] = sum(input_parts.values())
        return out

    @property
    def primary(self) -> Category:
        """The verdict (:func:`~lightning_bottleneck.rules.shares.best_bucket`) over the best fix of each bucket."""
        return best_bucket(self.bucket_savings())

    def top_two_ratio(self) -> float | None:
        ordered = sorted(self.bucket_savings().values(), reverse=True)
        if len(ordered) < 2 or ordered[1] <= 0:
            return None
        return ordered[0] / ordered[1]

    def top_method(self) -> str | None:
        primary = self.primary
        best = [c for c in self.candidates if c.category == primary]
        return best[0].method if best else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "account": self.account.to_dict(),
            "candidates": [c.to_dict() for c in self.candidates],
            "tried": [c.to_dict() for c in self.tried],
            "sizing": [c.to_dict() for c in self.sizing],
            "bucket_savings_ms_per_step": {k: round(v, 4) for k, v in self.bucket_savings().items()},
        }


def share_of(breakdown: dict[str, float], share: Share) -> float:
    return float(breakdown.get(str(share), 0.0))


def estimate(
    category: Category,
    name: str,
    key: str | None,
    settings: dict[str, Any],
    saved_ms: float,
    account: RunAccount,
    basis: str,
) -> Candidate:
    return Candidate(
        category,
        name,
        key,
        settings,
        saved_ms,
        account.over_run(saved_ms),
        Provenance.ESTIMATED,
        account.speedup(saved_ms),
        basis,
    )
