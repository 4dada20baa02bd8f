"""Before/after comparison of two runs: did the one change help? Pure (no torch, no lightning).

Used by ``lightning-bottleneck compare`` and by the callback's ``baseline`` option.
"""

from __future__ import annotations

from typing import Any

from lightning_bottleneck.report import Report

#: A step-time change smaller than this fraction is within run-to-run noise (profiled windows hold a
#: handful of steps; their median moves by a few percent between identical runs).
COMPARE_NOISE = 0.03


def compare_runs(before: Report, after: Report) -> dict[str, Any]:
    """Both verdicts, the step-time ratio (after / before, median) and per-key share changes."""

    def side(r: Report) -> dict[str, Any]:
        return {
            "primary": r.primary.value,
            "confidence": round(r.confidence, 3),
            "step_time_ms": r.step_time_ms.to_dict() if r.step_time_ms else None,
            "breakdown": {k: round(v, 4) for k, v in r.breakdown.items()},
            "trace_files": list(r.trace_files),
        }

    ratio: float | None = None
    if before.step_time_ms and after.step_time_ms and before.step_time_ms.median > 0:
        ratio = after.step_time_ms.median / before.step_time_ms.median
    keys = list(dict.fromkeys([*before.breakdown, *after.breakdown]))
    delta = {k: round(after.breakdown.get(k, 0.0) - before.breakdown.get(k, 0.0), 4) for k in keys}
    if ratio is None:
        helped, verdict = None, "Cannot tell whether the change helped: a step time is missing."
    elif ratio < 1.0 - COMPARE_NOISE:
        helped, verdict = True, f"The change helped: steps are {1.0 / ratio:.2f}x faster ({_pct(ratio - 1)})."
    elif ratio > 1.0 + COMPARE_NOISE:
        helped, verdict = False, f"The change hurt: steps are {ratio:.2f}x slower ({_pct(ratio - 1)})."
    else:
        helped, verdict = False, f"No measurable change: step time moved {_pct(ratio - 1)} (within noise)."
    return {
        "before": side(before),
        "after": side(after),
        "step_time_ratio": round(ratio, 4) if ratio is not None else None,
        "breakdown_change": delta,
        "helped": helped,
        "verdict": verdict,
    }


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
    ]
    for key, change in result["breakdown_change"].items():
        was, now = b["breakdown"].get(key, 0.0) * 100, a["breakdown"].get(key, 0.0) * 100
        lines.append(f"{key:16}{was:>11.1f}%{now:>11.1f}%{change * 100:>+9.1f}pp")
    return "\n".join(lines)
