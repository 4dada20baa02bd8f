"""What ``BottleneckCallback(autotune=True)`` did to the train DataLoader: the typed record on the report.

Pure data (no torch): the live side (:mod:`lightning_bottleneck.live.autotune`) fills it, the report carries it
(``Report.autotune``, the ``"autotune"`` key of the JSON, present only when autotune was on), and the terminal
text, TensorBoard markdown and HTML page print :func:`autotune_line`.

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
    undone_at_epoch: int | None = None  # the first epoch back on the previous settings
    steps_before: int = 0
    steps_after: int = 0
    step_ratio: float | None = None
    ratio_interval: tuple[float, float] | None = None
    outcome: str | None = None  # compare's vocabulary: helped | hurt | no_change | inconclusive
    loaders: int = 0  # train DataLoaders re-created (several under a CombinedLoader)
    reason: str = ""  # why nothing was applied, or why it was undone, in one sentence
    keep_line: str = ""  # the one line to put in the code to keep the setting without autotune

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
            "steps_before": self.steps_before,
            "steps_after": self.steps_after,
            "step_ratio": None if self.step_ratio is None else round(self.step_ratio, 4),
            "ratio_interval": None
            if self.ratio_interval is None
            else [round(x, 4) for x in self.ratio_interval],
            "speedup": None if self.speedup is None else round(self.speedup, 3),
            "speedup_interval": None
            if self.speedup_interval is None
            else [round(x, 3) for x in self.speedup_interval],
            "outcome": self.outcome,
            "loaders": self.loaders,
            "reason": self.reason,
            "keep_line": self.keep_line,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AutotuneRecord:
        interval = d.get("ratio_interval")
        return cls(
            status=str(d.get("status", NOT_APPLIED)),
            settings=dict(d.get("settings") or {}),
            previous=dict(d.get("previous") or {}),
            applied_at_step=_int(d.get("applied_at_step")),
            applied_at_epoch=_int(d.get("applied_at_epoch")),
            mid_epoch=bool(d.get("mid_epoch", False)),
            decided_at_step=_int(d.get("decided_at_step")),
            undone_at_epoch=_int(d.get("undone_at_epoch")),
            steps_before=int(d.get("steps_before") or 0),
            steps_after=int(d.get("steps_after") or 0),
            step_ratio=None if d.get("step_ratio") is None else float(d["step_ratio"]),
            ratio_interval=(float(interval[0]), float(interval[1]))
            if isinstance(interval, (list, tuple)) and len(interval) == 2
            else None,
            outcome=d.get("outcome"),
            loaders=int(d.get("loaders") or 0),
            reason=str(d.get("reason") or ""),
            keep_line=str(d.get("keep_line") or ""),
        )


def _int(x: Any) -> int | None:
    return None if x is None else int(x)


def settings_text(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in settings.items())


def measured_text(record: AutotuneRecord) -> str:
    """``1.84x (95% interval 1.71x to 1.95x) over 40 steps after against 30 before``; empty when not measured."""
    if record.speedup is None:
        return ""
    text = f"{record.speedup:.2f}x"
    interval = record.speedup_interval
    if interval is not None:
        text += f" (95% interval {interval[0]:.2f}x to {interval[1]:.2f}x)"
    return text + f" over {record.steps_after} steps after against {record.steps_before} before"


def autotune_line(record: AutotuneRecord) -> str:
    """One sentence: what autotune applied, at which step, what it measured, and whether it was kept."""
    what = settings_text(record.settings)
    where = (
        f"at step {record.applied_at_step} ("
        + ("mid-epoch " if record.mid_epoch else "")
        + f"epoch {record.applied_at_epoch})"
        if record.applied_at_step is not None
        else ""
    )
    measured = measured_text(record)
    if record.status == KEPT:
        return f"applied {what} {where}: measured {measured}; kept. To keep it without autotune: {record.keep_line}"
    if record.status == UNDONE:
        return (
            f"applied {what} {where}, switched back from epoch {record.undone_at_epoch}: "
            + (f"measured {measured}; " if measured else "")
            + (record.reason or "not faster beyond noise")
            + "."
        )
    if record.status == APPLIED:
        return (
            f"applied {what} {where}; the fit ended before the check"
            + (f" (so far {measured})" if measured else "")
            + f". To keep it without autotune: {record.keep_line}"
        )
    return f"nothing applied: {record.reason or 'no measured DataLoader setting to apply'}"
