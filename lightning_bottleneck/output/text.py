"""Rendering of a :class:`Report`: terminal text and TensorBoard markdown."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from lightning_bottleneck.analysis.ledger import PART_LABELS
from lightning_bottleneck.categories import Category, FitPart, PredictionKind
from lightning_bottleneck.output.autotune import autotune_line
from lightning_bottleneck.vocabulary import settings_words

if TYPE_CHECKING:
    from lightning_bottleneck.report import Finding, Recommendation, Report

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


def _step_line(report: Report, shares: bool = False) -> str:
    """``step time median 37.3 ms, p90 47.6 ms; 11 steps observed, 5 profiled`` (``shares``: and the breakdown)."""
    st = report.step_time_ms
    steps = f"{report.steps_observed} steps observed, {report.steps_profiled} profiled"
    text = steps if st is None else f"step time median {st.median:.1f} ms, p90 {st.p90:.1f} ms; {steps}"
    if shares and report.breakdown:
        text += f"; {_shares(report, sep=', ')}"
    return text


def _shares(report: Report, sep: str = "  ") -> str:
    items = sorted(report.breakdown.items(), key=lambda kv: -kv[1])
    return sep.join(f"{k} {v:.0%}" for k, v in items if v >= 0.005)


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


#: The default terminal answer is at most this many lines (issue 28): the verdict, the step, the fit, the evidence
#: that decided it, the advice with its figures, autotune, ranks, up to MAX_NOTES notes and where the rest is.
MAX_LINES = 12
MAX_NOTES = 3
#: A note, or the evidence line, longer than this is cut at a word (the whole text is in the JSON and HTML).
LINE_WIDTH = 150


def render_text(report: Report, full: bool = False, report_path: object = None, max_recs: int = 3) -> str:
    """The terminal answer. By default at most MAX_LINES lines; ``full`` (``verbose=True``): every evidence line,
    note and the reason behind each figure. ``report_path``: where the JSON went (the last line points there)."""
    if full:
        return _render_full(report, report_path)
    lines = _head(report, "lightning-bottleneck", shares=True)
    if report.findings:
        lines.append(f"  evidence: {_one_line(_finding(report.findings[0]))}")
    lines += _advice_lines(report.recommendations[:max_recs], "  ", reasons=False)
    lines += _autotune_and_ranks(report)
    room = max(0, min(MAX_NOTES, MAX_LINES - len(lines) - 1))
    notes = report.notes[:room] if len(report.notes) <= room else report.notes[: max(0, room - 1)]
    lines += [f"  note: {_one_line(n)}" for n in notes]
    rest = _left_out(
        report, evidence=len(report.findings) - 1, notes=len(report.notes) - len(notes), recs=max_recs
    )
    lines.append(_pointer(report_path, rest))
    return "\n".join(line for line in lines if line)


def _render_full(report: Report, report_path: object) -> str:
    lines = _head(report, "lightning-bottleneck", shares=False)
    if report.breakdown:
        lines.append(f"  breakdown: {_shares(report)}")
    if report.findings:
        lines.append("  evidence:")
        lines += [f"    - {_finding(f)}" for f in report.findings]
    if report.recommendations:
        lines.append("  advice:")
        lines += _advice_lines(report.recommendations, "    ", reasons=True)
    lines += _autotune_and_ranks(report)
    for note in report.notes:
        lines.append(f"  note: {note}")
    if report_path:
        lines.append(f"  report: {report_path}")
    return "\n".join(lines)


def _head(report: Report, title: str, shares: bool) -> list[str]:
    """The headline, the step line (``shares``: with the breakdown) and the fit line."""
    lines = [f"{title}: {headline(report)}", f"  {_step_line(report, shares=shares)}"]
    fit = fit_line(report)
    return lines + ([f"  {fit}"] if fit else [])


def _autotune_and_ranks(report: Report) -> list[str]:
    lines = [f"  autotune: {autotune_line(report.autotune)}"] if report.autotune is not None else []
    ranks = _ranks_line(report)
    return lines + ([f"  {ranks}"] if ranks else [])


def _finding(f: Finding) -> str:
    loc = f" [{f.location}]" if f.location and f.location not in f.summary else ""
    return f"({f.severity.value}) {f.summary}{loc}"


def _ranks_line(report: Report) -> str:
    parts = []
    if len(report.ranks) > 1:
        parts.append("ranks: " + ", ".join(f"rank {r.rank}: {r.primary.value}" for r in report.ranks))
    if report.stragglers:
        parts.append(f"stragglers: {', '.join(str(r) for r in report.stragglers)}")
    return "; ".join(parts)


def _one_line(text: str) -> str:
    """``text`` on one line of at most LINE_WIDTH characters, cut at a word with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= LINE_WIDTH:
        return text
    cut = text[: LINE_WIDTH - 1].rsplit(" ", 1)[0]
    return cut.rstrip(",;:") + "…"


def _left_out(report: Report, *, evidence: int, notes: int, recs: int) -> list[str]:
    out = []
    more = len(report.recommendations) - recs
    if more > 0:
        out.append(f"{more} more advice")
    if evidence > 0:
        out.append(f"{evidence} more evidence line" + ("s" if evidence > 1 else ""))
    if notes > 0:
        out.append(f"{notes} more note" + ("s" if notes > 1 else ""))
    if any(r.speedup_reason for r in report.recommendations):
        out.append("how each figure was obtained")
    return out


def _pointer(report_path: object, rest: list[str]) -> str:
    """The last line: where the report is and what it holds that was not printed."""
    where = f"report: {report_path}" if report_path else "the JSON/HTML report"
    if not rest:
        return f"  {where}" if report_path else ""
    return (
        f"  {where} ({', '.join(rest)}; verbose=True prints them)"
        if report_path
        else (f"  in {where}: {', '.join(rest)}")
    )


def render_unchanged(report: Report, max_recs: int = 2, report_path: object = None) -> str:
    """The end-of-fit answer when its verdict and first advice are those printed mid-run: the headline, the
    step and fit lines (the whole run's figures), the advice with its figures now, and where the rest is; the
    evidence, breakdown and notes were printed mid-run and are in the report (issue 28: not printed twice)."""
    lines = _head(report, "lightning-bottleneck (end of fit, as mid-run)", shares=False)
    lines += _advice_lines(report.recommendations[:max_recs], "  ", reasons=False)
    if report.autotune is not None:
        lines.append(f"  autotune: {autotune_line(report.autotune)}")
    rest = _left_out(report, evidence=len(report.findings), notes=len(report.notes), recs=max_recs)
    lines.append(_pointer(report_path, rest))
    return "\n".join(line for line in lines if line)


def _advice_lines(recs: list[Recommendation], indent: str, reasons: bool) -> list[str]:
    """``1. title  (settings): 2.64x (measured); saves 3.1 ms/step``, numbered from 1; ``reasons``: how each figure
    was obtained on the line below."""
    lines = []
    for i, r in enumerate(recs, 1):
        settings = settings_words(r.settings)
        head = f"{indent}{i}. {r.title}" + (f"  ({settings})" if settings else "")
        lines.append(head + (f": {_saving(r)}" if r.speedup_text else ""))
        if reasons and r.speedup_reason:
            lines.append(f"{indent}   {r.speedup_reason}")
    return lines


def _saving(r: Recommendation) -> str:
    """``2.64x (measured); saves 3.1 ms/step, 620 s over the run``."""
    text = r.speedup_text
    if r.saved_ms_per_step and r.prediction_kind != PredictionKind.BOUND:
        run = ""
        if r.saved_s is not None:
            run = (
                f", {r.saved_s:.0f} s over the run"
                if r.saved_s >= 10
                else f", {r.saved_s:.2g} s over the run"
            )
        text += f"; saves {r.saved_ms_per_step:.2f} ms/step{run}"
    one_off, steps = r.evidence.get("one_off_s"), r.evidence.get("break_even_steps")
    if isinstance(one_off, (int, float)) and isinstance(steps, int):
        text += f"; a one-off {one_off:.1f} s, paid back after {steps} steps"
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
                if r.speedup_reason:
                    out += [f"How: {_md_escape(r.speedup_reason)}", ""]
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
