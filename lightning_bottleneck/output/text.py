"""Rendering of a :class:`Report`: terminal text and TensorBoard markdown."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from lightning_bottleneck.analysis.ledger import PART_LABELS
from lightning_bottleneck.categories import Category, FitPart
from lightning_bottleneck.output.autotune import autotune_line

if TYPE_CHECKING:
    from lightning_bottleneck.report import Recommendation, Report

HEADLINES = {
    Category.INPUT: "input-bound: the device waits for the DataLoader",
    Category.SYNC: "sync-bound: the host blocks on the device inside the step",
    Category.OVERHEAD: "overhead-bound: per-op Python/dispatch/launch cost dominates",
    Category.COMPUTE: "compute-bound: the device is busy doing the math",
    Category.MEMORY: "memory-bound: out of memory or close to it",
    Category.COMMUNICATION: "communication-bound: ranks wait on collectives",
    Category.REST_OF_FIT: "rest-of-fit-bound: the time goes outside the training step",
    Category.UNKNOWN: "unknown: not enough evidence for a verdict",
}


def headline(report: Report) -> str:
    text = HEADLINES[report.primary]
    if report.primary == Category.REST_OF_FIT:
        ledger = report.metrics.get("ledger") or {}
        cause = ledger.get("cause")
        if cause:
            share = (ledger.get("shares") or {}).get(cause, 0.0)
            label = cause.replace("_", " ")
            text = f"rest-of-fit-bound: {label} takes {share:.0%} of fit"
    return f"{text} (confidence {report.confidence:.0%})"


def _step_line(report: Report) -> str:
    st = report.step_time_ms
    steps = f"{report.steps_observed} steps observed, {report.steps_profiled} profiled"
    if st is None:
        return steps
    return f"step time median {st.median:.1f} ms, p90 {st.p90:.1f} ms; {steps}"


def _shares(report: Report) -> str:
    items = sorted(report.breakdown.items(), key=lambda kv: -kv[1])
    return "  ".join(f"{k} {v:.0%}" for k, v in items if v >= 0.005)


#: Parts under this share of the fit are summed into "other" on the one-line ledger.
FIT_LINE_MIN_SHARE = 0.01
NO_LEDGER = "no fit ledger: a bare trace holds only the profiled window"


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s >= 100 else f"{s:.1f} s" if s >= 10 else f"{s:.2f} s"


def fit_line(report: Report) -> str | None:
    """``fit 120 s: training steps 38%, validation 55% (val loader wait 50%), checkpointing 5%, other 2%``;
    for a report from a bare trace, that there is no ledger; None when neither applies."""
    ledger = report.metrics.get("ledger")
    if not isinstance(ledger, dict):
        return NO_LEDGER if report.environment.get("source") == "trace" else None
    fit_s = float(ledger.get("fit_s") or 0.0)
    parts = ledger.get("parts") or {}
    if fit_s <= 0 or not parts:
        return None
    shown, other = [], 0.0
    for key, seconds in parts.items():
        share = float(seconds) / fit_s
        if share < FIT_LINE_MIN_SHARE:
            other += share
            continue
        label = PART_LABELS.get(FitPart(key), key) if key in FitPart._value2member_map_ else key
        text = f"{label} {share:.0%}"
        if key == FitPart.VALIDATION.value and ledger.get("validation_loader_wait_s"):
            text += f" (val loader wait {float(ledger['validation_loader_wait_s']) / fit_s:.0%})"
        if key == FitPart.CALLBACKS.value and ledger.get("hooks"):
            name, _ = max(ledger["hooks"].items(), key=lambda kv: float(kv[1].get("seconds", 0.0)))
            text += f" (most: {name})"
        shown.append(text)
    if other >= 0.005:
        shown.append(f"other {other:.0%}")
    return f"fit {_seconds(fit_s)}: " + ", ".join(shown)


def render_text(report: Report, max_findings: int = 6, max_recs: int = 4) -> str:
    lines = [f"lightning-bottleneck: {headline(report)}", f"  {_step_line(report)}"]
    fit = fit_line(report)
    if fit:
        lines.append(f"  {fit}")
    if report.breakdown:
        lines.append(f"  breakdown: {_shares(report)}")
    if report.findings:
        lines.append("  evidence:")
        for f in report.findings[:max_findings]:
            loc = f" [{f.location}]" if f.location and f.location not in f.summary else ""
            lines.append(f"    - ({f.severity.value}) {f.summary}{loc}")
        if len(report.findings) > max_findings:
            lines.append(f"    ... {len(report.findings) - max_findings} more in the JSON report")
    if report.recommendations:
        lines.append("  advice:")
        lines += _advice_lines(report.recommendations[:max_recs], "    ")
    if report.autotune is not None:
        lines.append(f"  autotune: {autotune_line(report.autotune)}")
    if len(report.ranks) > 1:
        per_rank = ", ".join(f"rank {r.rank}: {r.primary.value}" for r in report.ranks)
        lines.append(f"  ranks: {per_rank}")
    if report.stragglers:
        lines.append(f"  stragglers: {', '.join(str(r) for r in report.stragglers)}")
    for note in report.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def render_unchanged(report: Report, max_recs: int = 2) -> str:
    """The end-of-fit answer when its verdict and first advice are those printed mid-run: the headline, the
    step and fit lines (the whole run's figures), the advice with its figures now, and where the rest is; the
    evidence, breakdown and notes were printed mid-run and are in the report (issue 28: not printed twice)."""
    lines = [f"lightning-bottleneck (end of fit, as mid-run): {headline(report)}", f"  {_step_line(report)}"]
    fit = fit_line(report)
    if fit:
        lines.append(f"  {fit}")
    lines += _advice_lines(report.recommendations[:max_recs], "  ")
    if report.autotune is not None:
        lines.append(f"  autotune: {autotune_line(report.autotune)}")
    more = len(report.recommendations) - max_recs
    rest = [f"{more} more advice"] if more > 0 else []
    n, m = len(report.findings), len(report.notes)
    rest += [f"{n} evidence line" + ("s" if n > 1 else "")] if n else []
    rest += [f"{m} note" + ("s" if m > 1 else "")] if m else []
    if rest:
        lines.append(f"  in the report: {', '.join(rest)}")
    return "\n".join(lines)


def _advice_lines(recs: list[Recommendation], indent: str) -> list[str]:
    """``1. title  (settings)`` and, under it, the predicted saving; numbered from 1."""
    lines = []
    for i, r in enumerate(recs, 1):
        settings = ", ".join(f"{k}={v!r}" for k, v in r.settings.items())
        lines.append(f"{indent}{i}. {r.title}" + (f"  ({settings})" if settings else ""))
        if r.speedup_text:
            lines.append(f"{indent}   {_saving(r)}")
    return lines


def _saving(r: Recommendation) -> str:
    """``measured 1.96x ...; saves 3.1 ms/step (620 s over the run)``."""
    text = r.speedup_text
    if r.saved_ms_per_step:
        run = ""
        if r.saved_s is not None:
            run = (
                f", {r.saved_s:.0f} s over the run"
                if r.saved_s >= 10
                else f", {r.saved_s:.2g} s over the run"
            )
        text += f"; saves {r.saved_ms_per_step:.2f} ms/step{run}"
    return text


def _md_escape(text: str) -> str:
    """Escape what would turn prose into markup: table pipes, and a ``#`` that starts a line."""
    text = text.replace("|", "\\|")
    return re.sub(r"(?m)^(\s*)#", r"\1\\#", text)


def _fence(code: str) -> list[str]:
    """A fenced code block, unindented: Python-Markdown (TensorBoard's renderer, with its ``fenced_code``
    extension) only sees fences at the start of a line, and never inside a list item, so advice items
    are paragraphs, not a numbered list."""
    ticks = "```"
    while ticks in code:
        ticks += "`"
    return [ticks + "python", code.rstrip("\n"), ticks]


def render_markdown(report: Report) -> str:
    """Markdown for TensorBoard's Text tab.

    TensorBoard renders it server-side with Python-Markdown (``tables`` and ``fenced_code`` extensions)
    and shows it in a column about 700 px wide, so tables have two or three columns at most, snippets are
    fenced code blocks (a ``# comment`` in a snippet stays code, never a heading), and evidence reads as
    one row per finding with its severity in the first, short column. Order: verdict, advice, evidence,
    breakdown table, ranks, notes.
    """
    out = [
        f"## Verdict: **{report.primary.value}**",
        "",
        f"**{headline(report)}**",
        "",
        _step_line(report),
        "",
    ]
    fit = fit_line(report)
    if fit:
        out += [f"Fit: {_md_escape(fit)}", ""]
    if report.breakdown:
        shares = sorted(report.breakdown.items(), key=lambda kv: -kv[1])
        out += ["Breakdown: " + " · ".join(f"{k} {v:.0%}" for k, v in shares if v >= 0.005), ""]
    # The card TensorBoard draws is a few hundred pixels tall and scrolls: the change to make comes first.
    if report.recommendations:
        out += ["### Advice", ""]
        for i, r in enumerate(report.recommendations, 1):
            out += [f"**{i}. {_md_escape(r.title)}**", "", _md_escape(r.detail), ""]
            if r.speedup_text:
                out += [f"*Speed-up: {_md_escape(_saving(r))}*", ""]
            if r.settings:
                settings = ", ".join(f"`{k}={v!r}`" for k, v in r.settings.items())
                out += [f"Settings: {settings}", ""]
            if r.snippet:
                out += [*_fence(r.snippet), ""]
    if report.autotune is not None:
        out += ["### Autotune", "", _md_escape(autotune_line(report.autotune)), ""]
    if report.findings:
        out += ["### Evidence", "", "| severity | finding |", "|:---|:---|"]
        for f in report.findings:
            loc = f" (at `{f.location}`)" if f.location and f.location not in f.summary else ""
            out.append(f"| {f.severity.value} | **{f.kind}**: {_md_escape(f.summary)}{loc} |")
        out.append("")
    if report.breakdown:
        out += ["### Share of step time", "", "| bucket | share |", "|:---|---:|"]
        for k, v in sorted(report.breakdown.items(), key=lambda kv: -kv[1]):
            out.append(f"| {k} | {v:.1%} |")
        out.append("")
    if report.ranks and len(report.ranks) > 1:
        out += ["### Ranks", "", "| rank | verdict | median step ms |", "|---:|:---|---:|"]
        for rank in report.ranks:
            st = f"{rank.step_time_ms.median:.1f}" if rank.step_time_ms else ""
            out.append(f"| {rank.rank} | {rank.primary.value} | {st} |")
        out.append("")
    if report.stragglers:
        out += [f"Stragglers: {', '.join(str(r) for r in report.stragglers)}", ""]
    for note in report.notes:
        out += [f"> {_md_escape(note)}", ""]
    if report.trace_files:
        out += ["Traces (PyTorch Profiler tab): " + ", ".join(f"`{t}`" for t in report.trace_files)]
    return "\n".join(out)
