"""The seeded bootstrap interval of a before/after ratio, and the outcomes of a before/after comparison.

One statistic serves every comparison of two runs or two stretches of one run: ``lightning-bottleneck compare``
(output/compare.py), the callback's ``baseline`` option and autotune's keep-or-undo decision (rules/autotune.py).
Pure numpy; no torch, no lightning.
"""

from __future__ import annotations

import numpy as np

from lightning_bottleneck.thresholds import NO_CHANGE_BAND

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "COMPARE_NOISE",
    "CONFIDENCE",
    "HELPED",
    "HURT",
    "INCONCLUSIVE",
    "MIN_SAMPLES",
    "NO_CHANGE",
    "ratio_interval",
]

#: A step-time change smaller than this fraction is no change worth reporting, even when the interval
#: says it is real: the project's no-change band (:data:`lightning_bottleneck.thresholds.NO_CHANGE_BAND`).
COMPARE_NOISE = NO_CHANGE_BAND

#: Two-sided confidence of the bootstrap interval (the usual 95%).
CONFIDENCE = 0.95

#: Bootstrap resamples. 2000 puts the 2.5th/97.5th percentiles within ~0.5% of their limit (Efron &
#: Tibshirani, ch. 13: 1000-2000 for percentile intervals) and costs a few ms on 100-step windows.
BOOTSTRAP_RESAMPLES = 2000

#: Fixed seed: the same two reports always give the same interval and the same answer (CI gates).
BOOTSTRAP_SEED = 20260

#: Fewer samples than this on a side give no interval: the answer is inconclusive.
MIN_SAMPLES = 2

#: Resamples drawn per numpy call (bounds the transient memory for 4096-sample windows to ~70 MB).
_BATCH_ELEMENTS = 1 << 23

HELPED, HURT, NO_CHANGE, INCONCLUSIVE = "helped", "hurt", "no_change", "inconclusive"


def ratio_interval(
    before: list[float], after: list[float], seed: int = BOOTSTRAP_SEED, statistic: str = "median"
) -> tuple[float, float] | None:
    """Bootstrap percentile interval (:data:`CONFIDENCE`) of median(after) / median(before), or None;
    ``statistic="mean"``: of the means (autotune, where a once-per-epoch stall is part of the cost)."""
    b = _clean(before)
    a = _clean(after)
    if b.size < MIN_SAMPLES or a.size < MIN_SAMPLES:
        return None
    stat = np.mean if statistic == "mean" else np.median
    rng = np.random.default_rng(seed)
    per_batch = max(1, _BATCH_ELEMENTS // max(a.size, b.size))
    ratios: list[np.ndarray] = []
    done = 0
    while done < BOOTSTRAP_RESAMPLES:
        n = min(per_batch, BOOTSTRAP_RESAMPLES - done)
        mb = stat(b[rng.integers(0, b.size, (n, b.size))], axis=1)
        ma = stat(a[rng.integers(0, a.size, (n, a.size))], axis=1)
        ratios.append(ma / mb)
        done += n
    tail = (1.0 - CONFIDENCE) / 2.0
    lo, hi = np.quantile(np.concatenate(ratios), [tail, 1.0 - tail])
    return float(lo), float(hi)


def _clean(samples: list[float]) -> np.ndarray:
    arr = np.asarray([x for x in samples if isinstance(x, (int, float))], dtype=np.float64)
    return arr[np.isfinite(arr) & (arr > 0)]
