"""What the loader rule chose, typed: which change (:class:`LoaderAdvice`, with the stable lever id its candidate
and its advice share), its settings and predicted speed-up with the measured facts the advice words
(:class:`LoaderChange`), and the plan of changes with its notes (:class:`LoaderPlan`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["LoaderAdvice", "LoaderChange", "LoaderPlan"]


class LoaderAdvice(str, Enum):
    """Which loader change the rule chose: each is worded once, in :mod:`lightning_bottleneck.advice.loader_plan`."""

    CHEAPER_SAMPLES = (
        "cheaper_samples"  # no setting covers the model: make samples cheaper (settings: interim)
    )
    WORKERS_TIMED = "workers_timed_with_step"  # a worker count timed with the training step beat the current
    WORKERS_SHORT = "workers_short_of_model"  # the fastest worker count measured, still short of the model
    NO_WORKERS = "no_workers"  # in-process loading beats workers that restart every epoch
    WORKERS_COVER = "workers_cover"  # the smallest worker count that covers the model
    PERSISTENT = "persistent_workers"  # keep the workers alive between epochs
    PREFETCH = "prefetch_factor"  # a larger prefetch measured faster

    @property
    def lever(self) -> str:
        """The stable id the ranking's candidate and the advice's recommendation are joined by."""
        return f"loader:{self.value}"


@dataclass
class LoaderChange:
    """One loader change the rule chose, with its predicted whole-epoch speed-up and the measured facts that the
    advice words (names as on :class:`~lightning_bottleneck.report.Recommendation` where they mean the same)."""

    advice: LoaderAdvice
    settings: dict[str, Any]
    expected_speedup: float | None
    evidence: dict[str, Any]
    expected_speedup_range: tuple[float, float] | None = None
    uncertainty: str = ""
    workers_now: int = 0
    workers_new: int = 0
    chosen_label: str = ""  # the chosen rung ("num_workers=4, prefetch_factor=2")
    chosen_samples_per_s: float = 0.0
    # the current setting's rate timed with the step (None: not timed with the step)
    current_samples_per_s: float | None = None
    consumption_samples_per_s: float | None = None
    cpus: int = 1
    bound: str = ""
    ceiling_samples_per_s: float = 0.0
    usable_cpus: int | None = None
    stall_now_s: float = 0.0
    epoch_now_s: float = 0.0
    # num_workers=0 advised and its loading timed beside the model's own step (the probe's in-training rung): the
    # step it predicts, seconds (None: not measured that way)
    in_process_step_s: float | None = None

    @property
    def lever(self) -> str:
        return self.advice.lever


@dataclass
class LoaderPlan:
    """What :func:`plan_loader` decided and why (changes first; empty means: leave the loader)."""

    changes: list[LoaderChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    covered: bool | None = None  # some measured setting covers consumption (None: not judged)
    ceiling_samples_per_s: float | None = None
    predicted_step_s: float | None = None
    expected_speedup: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "changes": [
                {
                    "advice": c.advice.value,
                    "settings": dict(c.settings),
                    "expected_speedup": c.expected_speedup,
                }
                for c in self.changes
            ],
            "notes": list(self.notes),
            "covered": self.covered,
            "ceiling_samples_per_s": self.ceiling_samples_per_s,
            "predicted_step_s": self.predicted_step_s,
            "expected_speedup": self.expected_speedup,
        }

    def __str__(self) -> str:
        if not self.changes:
            head = "LoaderPlan: leave the DataLoader as it is"
        else:
            c = self.changes[0]
            speed = f", expected {c.expected_speedup:.2f}x" if c.expected_speedup else ""
            head = f"LoaderPlan: {c.advice.value} {c.settings}{speed}"
        return "\n".join([head] + [f"  note: {n}" for n in self.notes])
