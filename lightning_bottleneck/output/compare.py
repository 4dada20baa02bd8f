"""Before/after comparison of two runs: did the one change help, beyond run-to-run noise?

Used by ``lightning-bottleneck compare`` and by the callback's ``baseline`` option. The decision comes
from the per-step samples of both runs (``StepTime.samples``): a seeded bootstrap interval on the ratio
of median step times (after / before). When the interval includes no change, the answer is
"inconclusive" with the interval, never "helped" or "hurt". Pure (numpy only; no torch, no lightning).
"""

from __future__ import annotations

import math
from typing import Any

from lightning_bottleneck.bootstrap import (
    BOOTSTRAP_RESAMPLES,
    COMPARE_NOISE,
    CONFIDENCE,
    HELPED,
    HURT,
    INCONCLUSIVE,
    MIN_SAMPLES,
    NO_CHANGE,
    ratio_interval,
)
from lightning_bottleneck.report import Report

__all__ = [
    "HELPED",
    "HURT",
    "INCONCLUSIVE",
    "NO_CHANGE",
    "compare_runs",
    "ratio_interval",
    "render_comparison",
    "slower_beyond",
]


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
