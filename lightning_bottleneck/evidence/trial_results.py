"""Results of trial steps on the live model: pure data (the trials themselves live in :mod:`.trials`).

Kept apart from :mod:`lightning_bottleneck.measure.trials` (which needs torch) so that the evidence, the rules and
the report can carry measured speedups without importing torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: Seconds of trial steps after the window by default: a few seconds, once per fit, next to runs of
#: minutes to days (the callback's own window is ~15 steps). 0 turns the trials off.
DEFAULT_BUDGET_S = 5.0


@dataclass(frozen=True)
class TrialResult:
    """One lever measured against the unchanged step (like ``torch.utils.benchmark.Measurement``).

    ``measured_speedup`` is the median over A/B pairs of baseline time / lever time (>1: faster);
    ``spread`` the inter-quartile range of those ratios; ``settings`` is what the user would change
    (a Trainer argument or a torch setting), ``compile_s`` the one-off compile time (compile only).
    """

    name: str
    settings: dict[str, Any]
    measured_speedup: float | None = None
    spread: float | None = None
    repetitions: int = 0
    baseline_ms: float | None = None
    lever_ms: float | None = None
    compile_s: float | None = None
    recommended: bool = False
    note: str = ""
    #: measured while other processes took the CPUs: kept as evidence, used neither as a win nor as a veto
    unconfirmed: bool = False
    #: a bigger batch on a loader without workers: the batch's and the bigger batch's fetch in the training process
    #: (ms, medians over alternating pairs; ``measure.loader_probe.time_fetch_growth``); None: not timed
    fetch_ms: float | None = None
    lever_fetch_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        if self.measured_speedup is None:
            compiled = f"; compile {self.compile_s:.1f} s" if self.compile_s is not None else ""
            return f"{self.name}: {self.note}{compiled}"
        verdict = "recommended" if self.recommended else "not recommended"
        text = (
            f"{self.name}: {self.measured_speedup:.2f}x (IQR {self.spread or 0.0:.2f}, "
            f"{self.repetitions} pairs, {self.baseline_ms:.2f} -> {self.lever_ms:.2f} ms/step), {verdict}"
        )
        if self.compile_s is not None:
            text += f"; compile {self.compile_s:.1f} s"
        return text + (f" ({self.note})" if self.note else "")


@dataclass
class TrialReport:
    """All levers tried on one batch; ``skipped`` says why nothing was tried (manual optimization ...)."""

    results: list[TrialResult] = field(default_factory=list)
    skipped: str | None = None
    budget_s: float = DEFAULT_BUDGET_S
    elapsed_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    contention: dict[str, Any] | None = None  # contention.assess() over the trials, as a dict

    @property
    def best(self) -> TrialResult | None:
        wins = [r for r in self.results if r.recommended and r.measured_speedup is not None]
        return max(wins, key=lambda r: r.measured_speedup or 0.0) if wins else None

    @property
    def median_baseline_ms(self) -> float | None:
        """The unchanged step timed back-to-back (ms): the median over the levers' baselines; None when none ran."""
        base = sorted(r.baseline_ms for r in self.results if r.baseline_ms)
        return base[len(base) // 2] if base else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "results": [r.to_dict() for r in self.results],
            "skipped": self.skipped,
            "budget_s": self.budget_s,
            "elapsed_s": round(self.elapsed_s, 3),
            "notes": list(self.notes),
            "contention": self.contention,
        }

    def __str__(self) -> str:
        if self.skipped:
            return f"trials skipped: {self.skipped}"
        lines = [f"trials ({self.elapsed_s:.1f} s of a {self.budget_s:g} s budget):"]
        lines += [f"  {r}" for r in self.results]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)
