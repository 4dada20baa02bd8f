"""A bigger batch's fetch, for the trials' bigger-batch lever (issue 28).

The trials time forward+backward on the batch repeated ``BATCH_GROWTH`` times; the rule then needs what the bigger
batch's data wait becomes. When the train loader has no workers that wait is the fetch in the training process, and
twice the wait overstates it (a fetch has a fixed cost: the sampler, the collate call): the fetch of the batch and
of the bigger batch are timed side by side (:func:`~lightning_bottleneck.measure.loader_probe.time_fetch_growth`)
and kept on the lever's :class:`~lightning_bottleneck.evidence.trial_results.TrialResult`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import lightning_bottleneck.thresholds as thresholds
from lightning_bottleneck.evidence.trial_results import TrialReport

__all__ = ["FETCH_BUDGET_S", "FETCH_BUDGET_SHARE", "bigger_fetch_budget", "time_bigger_fetch"]

#: The fetch timing takes at most this share of the trial budget, and at most FETCH_BUDGET_S: 15 pairs of a
#: TensorDataset's 0.15 / 0.21 ms fetches (batches of 8 and 16) take ~6 ms; a loader asleep 1 ms a sample (10 / 20 ms
#: a batch of 8 / 16) fits the warm-up and 3 pairs in 0.12 s, about 9 pairs in 0.3 s.
FETCH_BUDGET_SHARE = 0.06
FETCH_BUDGET_S = 0.3


def bigger_fetch_budget(trial_budget_s: float) -> float:
    """The seconds of the trial budget kept for the bigger batch's fetch."""
    return max(0.0, min(FETCH_BUDGET_S, FETCH_BUDGET_SHARE * trial_budget_s))


def time_bigger_fetch(loader: Any, report: TrialReport, budget_s: float, notes: list[str]) -> None:
    """A measured bigger batch on a train ``loader`` without workers gets its fetch timed beside the batch's
    (``TrialResult.fetch_ms``, ``lever_fetch_ms``); nothing for another loader (workers, not one DataLoader)."""
    from torch.utils.data import DataLoader

    from lightning_bottleneck.measure.loader_probe import time_fetch_growth

    if not isinstance(loader, DataLoader) or loader.num_workers != 0 or budget_s <= 0:
        return
    i = next((i for i, r in enumerate(report.results)
              if "batch_size" in r.settings and r.measured_speedup is not None), None)  # fmt: skip
    if i is None:
        return
    try:
        fetched = time_fetch_growth(loader, thresholds.BATCH_GROWTH, budget_s)
    except Exception as err:  # never breaks training: the rule keeps its assumption
        notes.append(f"timing the bigger batch's fetch failed: {type(err).__name__}: {err}")
        return
    if fetched is not None:
        r = report.results[i]
        report.results[i] = replace(r, fetch_ms=round(fetched[0], 4), lever_fetch_ms=round(fetched[1], 4))
