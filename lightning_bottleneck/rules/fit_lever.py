"""A lever for the rest of the fit (:class:`FitLever`: a Lightning setting, where it goes, the seconds it saves over
the fit the ledger saw and how that figure was obtained), and the arithmetic the part rules share."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.analysis.ledger import FitLedger
from lightning_bottleneck.categories import FitPart, Provenance
from lightning_bottleneck.evidence import Evidence

#: Where a setting goes (``Recommendation.where``).
TRAINER = "Trainer"
MODEL_CHECKPOINT = "ModelCheckpoint"
VAL_LOADER = "val DataLoader"
SELF_LOG = "self.log"
#: A val loader setting counts as faster when the probe measured it this much faster: the loader probe's
#: own LADDER_GAIN_MIN (10%, the run-to-run spread of a loader timing on a shared machine).
VAL_LOADER_GAIN_MIN = 1.10


@dataclass(frozen=True)
class FitLever:
    """One change to a part of the fit and the seconds it saves over the fit the ledger saw."""

    part: FitPart
    settings: dict[str, Any]
    where: str  # Trainer | ModelCheckpoint | val DataLoader | self.log | a callback's class
    saved_s: float
    method: Provenance  # how saved_s was obtained
    basis: str  # how saved_s was obtained, in words
    trade: str  # what the user gives up ("" when nothing)
    evidence: dict[str, Any] = field(default_factory=dict)
    # True: ``evidence["saved_high_s"]`` bounds an after-effect no timing saw (:func:`after_effect`): a ceiling
    # beside the point, not the top of a range
    high_is_ceiling: bool = False

    @property
    def key(self) -> str:
        return next(iter(self.settings), "")

    @property
    def lever(self) -> str:
        """The stable id its candidate and its recommendation are joined by (``fit:<where>:<setting>``)."""
        return f"fit:{self.where}:{self.key or 'hook:' + str(self.evidence.get('hook', ''))}"

    @property
    def name(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.settings.items())
        return f"{self.where}({args})" if self.where not in (SELF_LOG,) else f"self.log(..., {args})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "part": self.part.value,
            "settings": dict(self.settings),
            "where": self.where,
            "saved_s": round(self.saved_s, 4),
            "method": self.method.value,
            "basis": self.basis,
            "trade": self.trade,
            "evidence": dict(self.evidence),
            "high_is_ceiling": self.high_is_ceiling,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FitLever:
        return cls(
            FitPart(d["part"]),
            dict(d.get("settings") or {}),
            str(d.get("where") or TRAINER),
            float(d.get("saved_s") or 0.0),
            Provenance(d.get("method") or Provenance.ESTIMATED),
            str(d.get("basis") or ""),
            str(d.get("trade") or ""),
            dict(d.get("evidence") or {}),
            bool(d.get("high_is_ceiling", False)),
        )


LeverFn = Callable[[FitLedger, Evidence], list[FitLever]]


def growth_factor(part_s: float, fit_s: float) -> int:
    """How many times less often a part must run to take at most FIT_PART_TARGET_SHARE of the fit.

    With ``p`` seconds of the part and ``r = fit - p`` of everything else, ``p / k`` must satisfy
    ``(p / k) / (r + p / k) <= target``, i.e. ``k >= p (1 - target) / (target r)``; capped at
    FIT_INTERVAL_GROWTH_MAX (an order of magnitude per piece of advice), at least 1.
    """
    rest = max(fit_s - part_s, 1e-9)
    target = T.FIT_PART_TARGET_SHARE
    k = part_s * (1.0 - target) / (target * rest)
    return int(max(1, min(T.FIT_INTERVAL_GROWTH_MAX, math.ceil(k - 1e-9))))


def steps_per_epoch_of(ledger: FitLedger, evidence: Evidence) -> int | None:
    rl = evidence.run_length
    if rl is not None and rl.steps_per_epoch:
        return rl.steps_per_epoch
    if ledger.epochs and ledger.train_steps:
        return max(1, round(ledger.train_steps / ledger.epochs))
    return None


def seconds_text(x: float) -> str:
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.1f} s"


def step_excess_s(ledger: FitLedger, evidence: Evidence) -> float:
    """Seconds per training step the run's own step (the ledger's training steps without the data wait) took
    beyond the same step timed back-to-back (:attr:`Evidence.back_to_back_step_ms`: the trials, else the loader
    probe); 0 when neither timed it. Work interleaved with the steps (a hook, a validation run) can slow the steps
    around it (caches, the allocator), which no timing of that work sees: this bounds it. An upper bound:
    Lightning's loop and the optimizer step are in the excess too."""
    back_to_back = evidence.back_to_back_step_ms
    if back_to_back is None or ledger.train_steps <= 0:
        return 0.0
    waits = sorted(evidence.timing.data_wait_ms) if evidence.timing is not None else []
    wait_ms = waits[len(waits) // 2] if waits else 0.0
    step_ms = ledger.train_step_ms() - wait_ms
    return max(0.0, step_ms - back_to_back) / 1e3


def hook_indirect_max_s(ledger: FitLedger, evidence: Evidence, per_call_s: float) -> float:
    """How much slower, at most, the training step after a hook call may run because of it (seconds): the
    step's excess (:func:`step_excess_s`) and the step's ``self.log`` calls (booked to logging, run inside
    ``training_step`` on the caches the hook left; the back-to-back timing discards them, so they have no
    reference and all of their time is counted), capped at HOOK_INDIRECT_MAX_SHARE of the hook's own time.
    heavy_callback (issue 28): with its 10 ms hook every step, the steps and their self.log took 4.0 ms a step;
    called every 10th step, 2-2.75 ms: 1.3-2 ms a call on top, where the steps' excess alone bounded it at 1 ms
    and the range's high end fell short of the applied speed-up in three runs of three."""
    steps = ledger.train_steps
    self_log_s = ledger.self_log_s / steps if steps > 0 and evidence.back_to_back_step_ms is not None else 0.0
    return min(step_excess_s(ledger, evidence) + self_log_s, T.HOOK_INDIRECT_MAX_SHARE * per_call_s)


def after_effect(
    ledger: FitLedger, evidence: Evidence, per_call_s: float, avoided: float, what: str
) -> tuple[dict[str, Any], str]:
    """The high end of the saving from ``avoided`` fewer calls of work interleaved with the steps (a hook, a logger
    write): each may also slow the step after it, by at most :func:`hook_indirect_max_s`. The evidence keys the
    ranking reads (``saved_high_s``, ``range_why``) and the words the basis adds; nothing when there is no bound."""
    indirect = hook_indirect_max_s(ledger, evidence, per_call_s)
    if indirect <= 0:
        return {}, ""
    spread: dict[str, Any] = {
        "saved_high_s": round((per_call_s + indirect) * avoided, 6),
        "indirect_max_s_per_call": round(indirect, 6),
        "range_why": (
            f"the step after each {what} may run slower because of it (its caches, its memory); how much was bounded "
            "by this run's step against the same step timed back-to-back and the step's self.log calls"
        ),
    }
    return spread, (
        f"; the step after each {what} may also run up to {seconds_text(indirect)} slower (this run's step over the "
        "same step timed back-to-back, its self.log calls)"
    )
