"""What ``BottleneckCallback(autotune=True)`` did to the train DataLoader: the typed record on the report.

Part of the report schema (pure data, no torch): the live side (:mod:`lightning_bottleneck.live.autotune`) fills
it, the report carries it (``Report.autotune``, the ``"autotune"`` key of the JSON, present only when autotune
was on), and the renderers print it (:func:`lightning_bottleneck.output.autotune.autotune_line`).

Example::

    record = report.autotune
    record.status            # "kept" | "undone" | "applied" (the fit ended before the check) | "not_applied"
    record.settings          # {"num_workers": 4, "persistent_workers": True}
    record.speedup, record.speedup_interval
    record.keep_line         # DataLoader(..., num_workers=4, persistent_workers=True)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KEPT, UNDONE, APPLIED, NOT_APPLIED = "kept", "undone", "applied", "not_applied"
STATUSES = (KEPT, UNDONE, APPLIED, NOT_APPLIED)
#: What the choice rested on: the mid-run verdict's measured loader advice; (before any profiling) the first
#: epoch's worker start-up with loading timed in the training process (rules/autotune.py: restart_fix); or that same
#: start-up once the verdict had no measured loader setting to apply (``restarts``: a smaller share of the epoch,
#: rules/autotune.py: RESTART_SHARE_AFTER_VERDICT).
BASIS_VERDICT, BASIS_FIRST_EPOCH, BASIS_RESTARTS = "verdict", "first_epoch", "restarts"
BASES = (BASIS_VERDICT, BASIS_FIRST_EPOCH, BASIS_RESTARTS)


@dataclass
class AutotuneRecord:
    """One fit's autotune: what was applied to the train DataLoader(s), when, what it measured, the outcome.

    ``step_ratio`` is the mean step time after the switch over the mean before (epoch-start waits included),
    ``ratio_interval`` its bootstrap 95% interval; ``speedup`` is its inverse."""

    status: str
    settings: dict[str, Any] = field(default_factory=dict)
    previous: dict[str, Any] = field(default_factory=dict)
    applied_at_step: int | None = None
    applied_at_epoch: int | None = None  # the epoch of the switch (mid_epoch) or the first that ran with it
    mid_epoch: bool = False  # switched within an epoch, the sampler's position kept
    decided_at_step: int | None = None
    #: the first epoch back on the previous settings (the epoch of a mid-epoch undo)
    undone_at_epoch: int | None = None
    undone_at_step: int | None = None  # the step after which a mid-epoch undo put the previous loader back
    steps_before: int = 0
    steps_after: int = 0
    step_ratio: float | None = None
    ratio_interval: tuple[float, float] | None = None
    outcome: str | None = None  # compare's vocabulary: helped | hurt | no_change | inconclusive
    loaders: int = 0  # train DataLoaders re-created (several under a CombinedLoader)
    reason: str = ""  # why nothing was applied, or why it was undone, in one sentence
    keep_line: str = ""  # the one line to put in the code to keep the setting without autotune
    basis: str = BASIS_VERDICT  # what the choice rested on (BASES)
    # first_epoch, restarts: the workers' start-up (the first epoch's wait for its first batch; from the second
    # epoch's end on, the later epochs' at their median), and a step's batches loaded in the training process
    # (timed there; one batch of each restarting loader under a CombinedLoader)
    startup_ms: float | None = None
    in_process_batch_ms: float | None = None
    # the race, once the setting was kept (live/autotune_race.py): the other worker setting run for one epoch
    # (``raced_at_epoch``; empty: none) against the one kept (``raced_against``), its mean step over that one's and
    # their bootstrap 95% interval, and whether it was faster and stayed (``settings`` is then the raced one, and
    # ``speedup`` its own against the steps before any switch)
    raced: dict[str, Any] = field(default_factory=dict)
    raced_against: dict[str, Any] = field(default_factory=dict)
    raced_at_epoch: int | None = None
    race_ratio: float | None = None
    race_interval: tuple[float, float] | None = None
    race_won: bool = False
    #: the raced epoch ended and the race was decided (False: the fit ended during it)
    race_ended: bool = False

    @property
    def speedup(self) -> float | None:
        return 1.0 / self.step_ratio if self.step_ratio else None

    @property
    def speedup_interval(self) -> tuple[float, float] | None:
        if self.ratio_interval is None or min(self.ratio_interval) <= 0:
            return None
        lo, hi = self.ratio_interval
        return 1.0 / hi, 1.0 / lo

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "settings": dict(self.settings),
            "previous": dict(self.previous),
            "applied_at_step": self.applied_at_step,
            "applied_at_epoch": self.applied_at_epoch,
            "mid_epoch": self.mid_epoch,
            "decided_at_step": self.decided_at_step,
            "undone_at_epoch": self.undone_at_epoch,
            "undone_at_step": self.undone_at_step,
            "steps_before": self.steps_before,
            "steps_after": self.steps_after,
            "step_ratio": None if self.step_ratio is None else round(self.step_ratio, 4),
            "ratio_interval": _rounded_pair(self.ratio_interval, 4),
            "speedup": None if self.speedup is None else round(self.speedup, 3),
            "speedup_interval": _rounded_pair(self.speedup_interval, 3),
            "outcome": self.outcome,
            "loaders": self.loaders,
            "reason": self.reason,
            "keep_line": self.keep_line,
            "basis": self.basis,
            "startup_ms": None if self.startup_ms is None else round(self.startup_ms, 3),
            "in_process_batch_ms": None
            if self.in_process_batch_ms is None
            else round(self.in_process_batch_ms, 4),
            "raced": dict(self.raced),
            "raced_against": dict(self.raced_against),
            "raced_at_epoch": self.raced_at_epoch,
            "race_ratio": None if self.race_ratio is None else round(self.race_ratio, 4),
            "race_interval": _rounded_pair(self.race_interval, 4),
            "race_won": self.race_won,
            "race_ended": self.race_ended,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AutotuneRecord:
        return cls(
            status=str(d.get("status", NOT_APPLIED)),
            settings=dict(d.get("settings") or {}),
            previous=dict(d.get("previous") or {}),
            applied_at_step=_int(d.get("applied_at_step")),
            applied_at_epoch=_int(d.get("applied_at_epoch")),
            mid_epoch=bool(d.get("mid_epoch", False)),
            decided_at_step=_int(d.get("decided_at_step")),
            undone_at_epoch=_int(d.get("undone_at_epoch")),
            undone_at_step=_int(d.get("undone_at_step")),
            steps_before=int(d.get("steps_before") or 0),
            steps_after=int(d.get("steps_after") or 0),
            step_ratio=None if d.get("step_ratio") is None else float(d["step_ratio"]),
            ratio_interval=_pair(d.get("ratio_interval")),
            outcome=d.get("outcome"),
            loaders=int(d.get("loaders") or 0),
            reason=str(d.get("reason") or ""),
            keep_line=str(d.get("keep_line") or ""),
            basis=str(d.get("basis") or BASIS_VERDICT),
            startup_ms=_float(d.get("startup_ms")),
            in_process_batch_ms=_float(d.get("in_process_batch_ms")),
            raced=dict(d.get("raced") or {}),
            raced_against=dict(d.get("raced_against") or {}),
            raced_at_epoch=_int(d.get("raced_at_epoch")),
            race_ratio=_float(d.get("race_ratio")),
            race_interval=_pair(d.get("race_interval")),
            race_won=bool(d.get("race_won", False)),
            race_ended=bool(d.get("race_ended", False)),
        )


def _int(x: Any) -> int | None:
    return None if x is None else int(x)


def _float(x: Any) -> float | None:
    return None if x is None else float(x)


def _rounded_pair(pair: tuple[float, float] | None, digits: int) -> list[float] | None:
    return None if pair is None else [round(x, digits) for x in pair]


def _pair(x: Any) -> tuple[float, float] | None:
    return (float(x[0]), float(x[1])) if isinstance(x, (list, tuple)) and len(x) == 2 else None
