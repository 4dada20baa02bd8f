"""Autotune's decisions, torch-free: which measured DataLoader setting to apply, whether to keep it, and which
advice its switch settled.

* :func:`choose`: the loader plan's measured recommendation on the mid-run report (an ``input`` advice that rests
  on the loader probe's ladder), reduced to the settings autotune may change (:data:`AUTOTUNE_SETTINGS`: nothing
  that changes what the model learns); ``pin_memory`` only on a CUDA run.
* :func:`decide`: the steps after the switch against the steps before, with the same noise-aware comparison as
  ``lightning-bottleneck compare`` (a seeded bootstrap interval of the step-time ratio, the
  :data:`~lightning_bottleneck.thresholds.NO_CHANGE_BAND`), on the *mean* step time with the epoch-start
  waits in (a worker start-up paid once per epoch is a cost of the setting the median would not see). Kept only
  when faster beyond noise; anything else is switched back.
* :func:`settled`: at the end of fit, the advice the switch already answered (not advised again).

Example::

    settings, why = choose(midrun_report, accelerator="cpu")
    decision = decide(before_ms, after_ms)
    decision.keep, decision.ratio, decision.interval
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lightning_bottleneck.autotune_record import APPLIED, KEPT, UNDONE, AutotuneRecord
from lightning_bottleneck.bootstrap import HELPED, HURT, INCONCLUSIVE, NO_CHANGE, ratio_interval
from lightning_bottleneck.categories import Category
from lightning_bottleneck.report import Recommendation, Report
from lightning_bottleneck.thresholds import NO_CHANGE_BAND

__all__ = [
    "AUTOTUNE_SETTINGS",
    "MIN_CONFIRM_STEPS",
    "MIN_EPOCHS_LEFT",
    "Decision",
    "choose",
    "decide",
    "settled",
]

#: The DataLoader arguments autotune may change: how batches are produced, never which or in what order.
AUTOTUNE_SETTINGS = ("num_workers", "persistent_workers", "prefetch_factor", "pin_memory")
#: Steps timed after the switch before it is judged (at least; and at least one whole epoch): enough for a
#: bootstrap interval of the mean to separate a 10% change from the noise of a shared 2-core machine.
MIN_CONFIRM_STEPS = 20
#: Epochs the fit must still run after the boundary where the setting would be applied: one to time it, one
#: at least to profit from it (a setting applied for the last epoch could never be checked or undone).
MIN_EPOCHS_LEFT = 2


def choose(report: Report | None, accelerator: str | None) -> tuple[dict[str, Any] | None, str]:
    """The settings to apply, or None with the reason in one sentence."""
    if report is None:
        return None, "no mid-run verdict was taken"
    for rec in report.recommendations:
        if rec.kind != Category.INPUT or not rec.settings or rec.where is not None:
            continue
        if "ladder" not in rec.evidence:
            continue  # estimated, not measured on the run's own loader
        settings = {k: v for k, v in rec.settings.items() if k in AUTOTUNE_SETTINGS}
        if accelerator != "cuda":
            settings.pop("pin_memory", None)
        if settings:
            return settings, ""
    return (
        None,
        "the mid-run report has no measured DataLoader setting to apply (no loader advice, or none measured)",
    )


@dataclass(frozen=True)
class Decision:
    keep: bool
    ratio: float | None  # mean step after / mean step before
    interval: tuple[float, float] | None
    outcome: str
    reason: str


def decide(before_ms: list[float], after_ms: list[float]) -> Decision:
    """Keep only when the steps after are faster beyond noise (the interval of the ratio below 1 and the ratio
    below ``1 - NO_CHANGE_BAND``)."""
    b = [x for x in before_ms if x > 0]
    a = [x for x in after_ms if x > 0]
    if len(b) < 2 or len(a) < 2:
        return Decision(False, None, None, INCONCLUSIVE, "too few steps timed to tell")
    ratio = (sum(a) / len(a)) / (sum(b) / len(b))
    interval = ratio_interval(b, a, statistic="mean")
    if interval is None:
        return Decision(False, ratio, None, INCONCLUSIVE, "too few steps timed to tell")
    lo, hi = interval
    if hi < 1.0 and ratio < 1.0 - NO_CHANGE_BAND:
        return Decision(True, ratio, interval, HELPED, "")
    if lo > 1.0 and ratio > 1.0 + NO_CHANGE_BAND:
        return Decision(False, ratio, interval, HURT, f"steps were {ratio:.2f}x as long")
    if lo >= 1.0 - NO_CHANGE_BAND and hi <= 1.0 + NO_CHANGE_BAND:
        return Decision(
            False, ratio, interval, NO_CHANGE, f"no change beyond the ±{NO_CHANGE_BAND:.0%} noise band"
        )
    return Decision(False, ratio, interval, INCONCLUSIVE, "not faster beyond the run's noise")


def settled(record: AutotuneRecord, rec: Recommendation) -> bool:
    """Whether the run's own switch already answered ``rec`` (so it is not advised again at the end of fit):

    * autotune applied a setting and kept it (or the fit ended before the check): every advice to change the
      train DataLoader's worker settings is settled; the loader probe measured the loader as it was before the
      switch, and the setting now in place was timed on the run itself;
    * autotune applied it and switched back: that same setting measured not faster on this run, so it is never
      advised (other loader settings stay).
    """
    if rec.kind != Category.INPUT or rec.where is not None or not set(rec.settings) & set(AUTOTUNE_SETTINGS):
        return False  # not a setting of the train DataLoader that autotune changes
    if record.status in (KEPT, APPLIED):
        return True
    if record.status == UNDONE:
        own = {k: v for k, v in rec.settings.items() if k in AUTOTUNE_SETTINGS}
        return bool(own) and own == record.settings
    return False
