"""Before/after comparison of two runs: did the one change help, beyond run-to-run noise?

Used by ``lightning-bottleneck compare`` and by the callback's ``baseline`` option. The decision comes
from the per-step samples of both runs (``StepTime.samples``): a seeded bootstrap interval on the ratio
of median step times (after / before). When the interval includes no change, the answer is
"inconclusive" with the interval, never "helped" or "hurt". Pure (numpy only; no torch, no lightning).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lightning_bottleneck.output.report import Report
from lightning_bottleneck.rules.thresholds import NO_CHANGE_BAND

#: A step-time change smaller than this fraction is no change worth reporting, even when the interval
#: says it is real: the project's no-change band (:data:`lightning_bottleneck.rules.thresholds.NO_CHANGE_BAND`).
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


def compare_runs(before: Report, after: Report) -> dict[str, Any]:
    """Both verdicts, the step-time ratio (after / before, median) with its interval, and share changes.

    ``outcome`` is one of ``helped``, ``hurt``, ``no_change`` and ``inconclusive``; ``helped`` is True,
    False (hurt or no change) or None (cannot tell).
    """

    def side(r: Report) -> dict[str, Any]:
        return {
            "primary": r.primary.value,
            "confidence": round(r.confidence, 3),
            "step_time_ms": _step(r),
            "breakdown": {k: round(v, 4) for k, v in r.breakdown.items()},
            "trace_files": list(r.trace_files),
        }

    ratio: float | None = None
    bst, ast = before.step_time_ms, after.step_time_ms
    if bst and ast and _positive(bst.median) and _positive(ast.median):
        ratio = ast.median / bst.median
    interval = ratio_interval(bst.samples, ast.samples) if bst and ast and ratio is not None else None
    keys = list(dict.fromkeys([*before.breakdown, *after.breakdown]))
    delta = {k: round(after.breakdown.get(k, 0.0) - before.breakdown.get(k, 0.0), 4) for k in keys}
    outcome, verdict = _decide(ratio, interval, before, after)
    helped = {HELPED: True, HURT: False, NO_CHANGE: False}.get(outcome)
    return {
        "before": side(before),
        "after": side(after),
        "step_time_ratio": round(ratio, 4) if ratio is not None else None,
        "ratio_interval": [round(interval[0], 4), round(interval[1], 4)] if interval else None,
        "interval_confidence": CONFIDENCE,
        "samples": {"before": len(bst.samples) if bst else 0, "after": len(ast.samples) if ast else 0},
        "method": f"bootstrap of the ratio of median step times ({BOOTSTRAP_RESAMPLES} resamples, seeded)",
        "breakdown_change": delta,
        "outcome": outcome,
        "helped": helped,
        "verdict": verdict,
    }


def _step(r: Report) -> dict[str, float] | None:
    st = r.step_time_ms
    return {"median": round(st.median, 4), "p90": round(st.p90, 4)} if st else None


def _positive(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _decide(
    ratio: float | None, interval: tuple[float, float] | None, before: Report, after: Report
) -> tuple[str, str]:
    if ratio is None:
        return INCONCLUSIVE, "Cannot tell whether the change helped: a step time is missing."
    moved = f"the median step moved {_pct(ratio - 1)}"
    if interval is None:
        few = [
            name
            for name, r in (("before", before), ("after", after))
            if r.step_time_ms is None or len(r.step_time_ms.samples) < MIN_SAMPLES
        ]
        return INCONCLUSIVE, (
            f"Inconclusive: {moved}, but the {' and '.join(few)} report holds fewer than {MIN_SAMPLES} "
            "per-step samples (a report written before per-step samples were saved?), so run-to-run "
            "noise cannot be told apart from a change."
        )
    lo, hi = interval
    span = f"{CONFIDENCE:.0%} interval of the ratio {lo:.3f}x to {hi:.3f}x"
    if hi < 1.0 and ratio < 1.0 - COMPARE_NOISE:
        return HELPED, f"The change helped: steps are {1.0 / ratio:.2f}x faster ({_pct(ratio - 1)}; {span})."
    if lo > 1.0 and ratio > 1.0 + COMPARE_NOISE:
        return HURT, f"The change hurt: steps are {ratio:.2f}x slower ({_pct(ratio - 1)}; {span})."
    if lo >= 1.0 - COMPARE_NOISE and hi <= 1.0 + COMPARE_NOISE:
        return NO_CHANGE, f"No measurable change: {moved} ({span}, within ±{COMPARE_NOISE:.0%})."
    return INCONCLUSIVE, (
        f"Inconclusive: {moved}, but the {span} includes no change: the runs are too noisy "
        "(or too short) to tell. Profile more steps, or compare on a quieter machine."
    )


def slower_beyond(result: dict[str, Any], pct: float) -> bool:
    """True when AFTER is slower than BEFORE by more than ``pct`` percent beyond noise: the whole interval
    lies above ``1 + pct/100`` (``--fail-if-slower``)."""
    interval = result.get("ratio_interval")
    return result.get("outcome") == HURT and interval is not None and interval[0] > 1.0 + pct / 100.0


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def render_comparison(result: dict[str, Any]) -> str:
    b, a = result["before"], result["after"]

    def step(side: dict[str, Any]) -> str:
        st = side["step_time_ms"]
        return f"{st['median']:.2f} ms" if st else "n/a"

    lines = [
        result["verdict"],
        "",
        f"{'':16}{'before':>12}{'after':>12}{'change':>10}",
        f"{'verdict':16}{b['primary']:>12}{a['primary']:>12}",
        f"{'step (median)':16}{step(b):>12}{step(a):>12}"
        + (f"{result['step_time_ratio']:>9.2f}x" if result["step_time_ratio"] is not None else ""),
        f"{'steps sampled':16}{result['samples']['before']:>12}{result['samples']['after']:>12}",
    ]
    for key, change in result["breakdown_change"].items():
        was, now = b["breakdown"].get(key, 0.0) * 100, a["breakdown"].get(key, 0.0) * 100
        lines.append(f"{key:16}{was:>11.1f}%{now:>11.1f}%{change * 100:>+9.1f}pp")
    for name in ("before", "after"):
        source = result.get(f"{name}_source")
        if source:
            lines.append(f"{name}: {source}")
    return "\n".join(lines)
