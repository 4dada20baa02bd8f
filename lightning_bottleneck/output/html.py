"""A self-contained HTML page for one :class:`Report`: verdict, per-step chart, breakdown, evidence, advice.

Pure rendering (standard library only: no torch, no plotting library). The page needs no network: the
chart is inline SVG, the style inline CSS, and there is no script at all, so it opens offline, from a
file, in any browser (the hover tooltips on the bars are SVG ``<title>`` elements).

Example::

    >>> from lightning_bottleneck.report import Report
    >>> report = Report.read("runs/.../bottleneck_report.json")  # doctest: +SKIP
    >>> Path("bottleneck_report.html").write_text(render_html(report, step_phases))  # doctest: +SKIP
"""

from __future__ import annotations

import math
from html import escape

from lightning_bottleneck.analysis.ledger import PART_LABELS
from lightning_bottleneck.analysis.step_phases import StepPhases
from lightning_bottleneck.categories import FitPart, Phase
from lightning_bottleneck.output.text import HEADLINES, fit_line, headline
from lightning_bottleneck.report import Recommendation, Report

__all__ = [
    "BREAKDOWN_COLORS",
    "FIT_COLORS",
    "PHASE_COLORS",
    "PHASE_LABELS",
    "fit_items",
    "nice_ticks",
    "render_html",
]

#: One colour per phase, shared by the HTML chart and the PNG (Tableau 10, colour-blind friendlier than
#: matplotlib's default cycle; grey for the unexplained rest).
PHASE_COLORS: dict[str, str] = {
    Phase.DATA_WAIT.value: "#e15759",
    Phase.FORWARD.value: "#4e79a7",
    Phase.BACKWARD.value: "#76b7b2",
    Phase.OPTIMIZER.value: "#59a14f",
    Phase.SYNC.value: "#edc948",
    Phase.COMMUNICATION.value: "#b07aa1",
    Phase.OTHER.value: "#bab0ac",
}
PHASE_LABELS: dict[str, str] = {
    Phase.DATA_WAIT.value: "data wait",
    Phase.FORWARD.value: "forward",
    Phase.BACKWARD.value: "backward",
    Phase.OPTIMIZER.value: "optimizer",
    Phase.SYNC.value: "sync",
    Phase.COMMUNICATION.value: "communication",
    Phase.OTHER.value: "idle / other",
}
#: The report's breakdown keys (:class:`~lightning_bottleneck.categories.Share`) -> colour.
BREAKDOWN_COLORS: dict[str, str] = {
    "data_wait": PHASE_COLORS["data_wait"],
    "sync": PHASE_COLORS["sync"],
    "communication": PHASE_COLORS["communication"],
    "compute": "#4e79a7",
    "overhead": "#f28e2b",
    "other": PHASE_COLORS["other"],
}

#: One colour per part of the fit (the ledger's bar, HTML and PNG); training steps blue like compute,
#: unaccounted grey like the unexplained rest of a step.
FIT_COLORS: dict[str, str] = {
    FitPart.TRAINING_STEPS.value: "#4e79a7",
    FitPart.VALIDATION.value: "#f28e2b",
    FitPart.SANITY_CHECK.value: "#ffbe7d",
    FitPart.CHECKPOINTING.value: "#e15759",
    FitPart.LOGGING.value: "#edc948",
    FitPart.CALLBACKS.value: "#b07aa1",
    FitPart.EPOCH_BOUNDARIES.value: "#76b7b2",
    FitPart.COMPILE_WARMUP.value: "#59a14f",
    FitPart.DIAGNOSIS.value: "#9c755f",
    FitPart.SETUP_TEARDOWN.value: "#d4a6c8",
    FitPart.UNACCOUNTED.value: "#bab0ac",
}


def fit_items(report: Report) -> tuple[float, list[tuple[str, str, float, float]]]:
    """The report's fit ledger as (fit seconds, [(part, label, seconds, share)] in the ledger's order, parts
    with no time left out); (0, []) without a ledger. Shared by the HTML bar and the PNG."""
    ledger = report.metrics.get("ledger")
    if not isinstance(ledger, dict):
        return 0.0, []
    fit_s = float(ledger.get("fit_s") or 0.0)
    if fit_s <= 0:
        return 0.0, []
    items = []
    for key, seconds in (ledger.get("parts") or {}).items():
        if float(seconds) <= 0:
            continue
        label = PART_LABELS.get(FitPart(key), key) if key in FitPart._value2member_map_ else key
        items.append((str(key), label, float(seconds), float(seconds) / fit_s))
    return fit_s, items


_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#222;
  margin:0;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #ddd;
  padding-bottom:4px}
.card{background:#fff;border:1px solid #e1e4e8;border-radius:8px;padding:16px 18px}
.verdict{display:flex;gap:18px;align-items:center;flex-wrap:wrap}
.badge{font-weight:700;font-size:20px;color:#fff;border-radius:6px;padding:6px 14px;text-transform:uppercase;
  letter-spacing:.04em}
.muted{color:#666}.small{font-size:13px}
.conf{width:160px;height:10px;background:#e6e6e6;border-radius:5px;overflow:hidden;display:inline-block;
  vertical-align:middle;margin-left:6px}.conf>span{display:block;height:100%;background:#333}
.grid{display:grid;grid-template-columns:minmax(0,3fr) minmax(280px,2fr);gap:18px;margin-top:18px}
@media (max-width:900px){.grid{grid-template-columns:1fr}}
.legend{list-style:none;padding:0;margin:8px 0 0;display:flex;flex-wrap:wrap;gap:6px 16px;font-size:13px}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:5px;vertical-align:-1px}
table{border-collapse:collapse;width:100%;font-size:14px}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #eee;vertical-align:top}
th{font-weight:600;color:#444;background:#fafbfc}td.num,th.num{text-align:right;white-space:nowrap}
.sev{font-size:12px;font-weight:700;border-radius:4px;padding:1px 7px;color:#fff;white-space:nowrap}
.sev-high{background:#c0392b}.sev-medium{background:#d68910}.sev-low{background:#7f8c8d}
.shares{display:flex;height:22px;border-radius:4px;overflow:hidden;margin:6px 0 10px}
.advice{margin:0 0 14px}.advice h3{font-size:15px;margin:0 0 4px}
pre{background:#1f2430;color:#e6e6e6;border-radius:6px;padding:10px 12px;overflow-x:auto;font-size:13px;
  line-height:1.4}
pre.wrap{white-space:pre-wrap;overflow-wrap:anywhere}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
p code,td code,li code{background:#eef0f3;border-radius:3px;padding:0 4px;font-size:13px}
.note{border-left:3px solid #d68910;background:#fffaf0;padding:6px 10px;margin:6px 0;font-size:14px}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif}
"""

_VERDICT_COLORS = {
    "input": PHASE_COLORS["data_wait"],
    "sync": "#b8860b",
    "overhead": "#f28e2b",
    "compute": "#4e79a7",
    "memory": "#8e44ad",
    "communication": PHASE_COLORS["communication"],
    "unknown": "#7f8c8d",
}


def render_html(report: Report, phases: StepPhases | None = None, title: str | None = None) -> str:
    """The whole page, as one string (UTF-8 when written). ``phases`` adds the per-step chart."""
    verdict = report.primary.value
    page_title = title or f"lightning-bottleneck: {verdict}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(page_title)}</title><style>{_CSS}</style></head><body><main>",
        _header(report),
        _fit_bar(report),
        '<div class="grid">',
        f'<div class="card"><h2 style="margin-top:0">Per profiled step</h2>{_chart(phases)}</div>',
        f'<div class="card">{_breakdown(report)}{_top_advice(report)}</div>',
        "</div>",
        _evidence(report),
        _advice(report),
        _autotune(report),
        _phase_table(phases),
        _ranks(report),
        _notes(report, phases),
        _footer(report),
        "</main></body></html>",
    ]
    return "\n".join(p for p in parts if p)


# ---- sections ----------------------------------------------------------------------------------------


def _header(report: Report) -> str:
    verdict = report.primary.value
    color = _VERDICT_COLORS.get(verdict, "#555")
    st = report.step_time_ms
    step = (
        f"step time median <b>{st.median:.1f} ms</b>, p90 {st.p90:.1f} ms · "
        if st is not None
        else "no step time · "
    )
    conf = max(0.0, min(1.0, report.confidence))
    return (
        '<div class="card"><div class="verdict">'
        f'<span class="badge" style="background:{color}">{escape(verdict)}</span>'
        f"<div><h1>{escape(HEADLINES[report.primary])}</h1>"
        f'<div class="muted">confidence <b>{conf:.0%}</b><span class="conf"><span style="width:{conf * 100:.0f}%">'
        f"</span></span> · {step}{report.steps_observed} steps observed, {report.steps_profiled} profiled"
        "</div></div></div></div>"
    )


def _breakdown(report: Report) -> str:
    if not report.breakdown:
        return "<h2 style='margin-top:0'>Breakdown</h2><p class='muted'>No breakdown.</p>"
    items = sorted(report.breakdown.items(), key=lambda kv: -kv[1])
    bar = "".join(
        f'<span title="{escape(k)} {v:.1%}" style="width:{v * 100:.3f}%;background:{BREAKDOWN_COLORS.get(k, "#999")}"></span>'
        for k, v in items
        if v > 0
    )
    rows = "".join(
        f'<tr><td><span class="sw" style="background:{BREAKDOWN_COLORS.get(k, "#999")}"></span>{escape(k)}</td>'
        f'<td class="num">{v:.1%}</td></tr>'
        for k, v in items
    )
    return (
        "<h2 style='margin-top:0'>Share of step time</h2>"
        f'<div class="shares">{bar}</div>'
        f'<table><thead><tr><th>bucket</th><th class="num">share</th></tr></thead><tbody>{rows}</tbody></table>'
    )


def _fit_bar(report: Report) -> str:
    """A card with one bar of the whole fit by part (the ledger), above the per-step chart; empty without
    a ledger."""
    _fit_s, items = fit_items(report)
    if not items:
        return ""
    bar = "".join(
        f'<span title="{escape(label)}: {s:.2f} s, {share:.1%}" '
        f'style="width:{share * 100:.3f}%;background:{FIT_COLORS.get(k, "#999")}"></span>'
        for k, label, s, share in items
    )
    legend = "".join(
        f'<li><span class="sw" style="background:{FIT_COLORS.get(k, "#999")}"></span>{escape(label)} '
        f"{share:.0%} <span class='muted'>({s:.2f} s)</span></li>"
        for k, label, s, share in items
        if share >= 0.005
    )
    line = fit_line(report) or ""
    return (
        '<div class="card" style="margin-top:18px"><h2 style="margin-top:0">The whole fit</h2>'
        f'<p class="small muted">{escape(line)}</p>'
        f'<div class="shares">{bar}</div><ul class="legend">{legend}</ul></div>'
    )


def _top_advice(report: Report) -> str:
    if not report.recommendations:
        return "<h2>Advice</h2><p class='muted'>No change to recommend.</p>"
    r = report.recommendations[0]
    more = len(report.recommendations) - 1
    tail = f'<p class="small muted">{more} more below.</p>' if more > 0 else ""
    snippet = f'<pre class="wrap"><code>{escape(r.snippet)}</code></pre>' if r.snippet else ""
    speed = f'<p class="small muted">{escape(r.speedup_text)}</p>' if r.speedup_text else ""
    return f"<h2>Do this first</h2><p><b>{escape(r.title)}</b></p>{speed}{snippet}{tail}"


def _evidence(report: Report) -> str:
    if not report.findings:
        return ""
    rows = []
    for f in report.findings:
        loc = (
            f'<br><span class="small muted">at <code>{escape(f.location)}</code></span>'
            if f.location and f.location not in f.summary
            else ""
        )
        rows.append(
            f'<tr><td><span class="sev sev-{escape(f.severity.value)}">{escape(f.severity.value)}</span></td>'
            f"<td>{escape(f.kind)}</td><td>{escape(f.summary)}{loc}</td></tr>"
        )
    return (
        '<h2>Evidence</h2><div class="card"><table><thead><tr><th style="width:90px">severity</th>'
        f'<th style="width:150px">kind</th><th>finding</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    )


def _advice(report: Report) -> str:
    if not report.recommendations:
        return ""
    items = []
    for i, r in enumerate(report.recommendations, 1):
        settings = ", ".join(f"<code>{escape(f'{k}={v!r}')}</code>" for k, v in r.settings.items())
        items.append(
            f'<div class="advice"><h3>{i}. {escape(r.title)}</h3><p>{escape(r.detail)}</p>'
            + (f'<p class="small muted">{escape(_speedup_with_reason(r))}</p>' if r.speedup_text else "")
            + (f"<p>Settings: {settings}</p>" if settings else "")
            + (f"<pre><code>{escape(r.snippet)}</code></pre>" if r.snippet else "")
            + "</div>"
        )
    return f'<h2>Advice</h2><div class="card">{"".join(items)}</div>'


def _speedup_with_reason(r: Recommendation) -> str:
    """The figure with its kind, then how it was obtained and why a range or a bound (the terminal leaves it out)."""
    why = r.speedup_reason
    return r.speedup_text + (f": {why}" if why else "")


def _autotune(report: Report) -> str:
    """What ``autotune=True`` applied, when, what it measured, kept or undone (absent without autotune)."""
    if report.autotune is None:
        return ""
    from lightning_bottleneck.output.autotune import autotune_line

    return f'<h2>Autotune</h2><div class="card"><p>{escape(autotune_line(report.autotune))}</p></div>'


def _phase_table(phases: StepPhases | None) -> str:
    if phases is None or not phases.steps:
        return ""
    cols = phases.phases
    head = "".join(f'<th class="num">{escape(PHASE_LABELS.get(p, p))}</th>' for p in cols)
    rows = []
    for s in phases.steps:
        cells = "".join(f'<td class="num">{s.ms.get(p, 0.0):.2f}</td>' for p in cols)
        rows.append(f'<tr><td>{s.step}</td>{cells}<td class="num"><b>{s.duration_ms:.2f}</b></td></tr>')
    mean = phases.mean_ms()
    total = sum(s.duration_ms for s in phases.steps) / len(phases.steps)
    cells = "".join(f'<td class="num"><b>{mean[p]:.2f}</b></td>' for p in cols)
    rows.append(f'<tr><td><b>mean</b></td>{cells}<td class="num"><b>{total:.2f}</b></td></tr>')
    return (
        '<h2>Milliseconds per phase</h2><div class="card" style="overflow-x:auto"><table><thead><tr>'
        f'<th>step</th>{head}<th class="num">total</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
    )


def _ranks(report: Report) -> str:
    if len(report.ranks) <= 1:
        return ""
    rows = "".join(
        f"<tr><td>{r.rank}</td><td>{escape(r.primary.value)}</td>"
        f'<td class="num">{(f"{r.step_time_ms.median:.1f}" if r.step_time_ms else "")}</td></tr>'
        for r in report.ranks
    )
    strag = (
        f"<p>Stragglers: {escape(', '.join(str(r) for r in report.stragglers))}</p>"
        if report.stragglers
        else ""
    )
    return (
        '<h2>Ranks</h2><div class="card"><table><thead><tr><th>rank</th><th>verdict</th>'
        f'<th class="num">median step ms</th></tr></thead><tbody>{rows}</tbody></table>{strag}</div>'
    )


def _notes(report: Report, phases: StepPhases | None) -> str:
    notes = list(report.notes) + (list(phases.notes) if phases is not None else [])
    if not notes:
        return ""
    return "<h2>Notes</h2>" + "".join(f'<div class="note">{escape(n)}</div>' for n in notes)


def _footer(report: Report) -> str:
    env = report.environment
    keys = ("torch", "lightning", "accelerator", "device_name", "precision", "strategy", "world_size")
    facts = " · ".join(f"{k} {escape(str(env[k]))}" for k in keys if env.get(k) not in (None, ""))
    traces = ", ".join(f"<code>{escape(t)}</code>" for t in report.trace_files)
    return (
        f'<p class="small muted" style="margin-top:28px">{escape(headline(report))}'
        + (f"<br>{facts}" if facts else "")
        + (f"<br>traces: {traces}" if traces else "")
        + "<br>Written by lightning-bottleneck; this page needs no network.</p>"
    )


# ---- the chart ---------------------------------------------------------------------------------------


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round axis ticks from 0 to at least ``top`` (1-2-5 steps)."""
    if top <= 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def _chart(phases: StepPhases | None, width: int = 640, height: int = 340) -> str:
    if phases is None or not phases.steps:
        why = phases.notes[0] if phases is not None and phases.notes else "no per-step data for this report"
        return f'<p class="muted">{escape(why)}</p>'
    left, right, top, bottom = 56, 12, 14, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    steps = phases.steps
    ticks = nice_ticks(max(s.duration_ms for s in steps))
    y_max = ticks[-1]
    slot = plot_w / len(steps)
    bar_w = max(2.0, min(60.0, slot * 0.7))

    def y(v: float) -> float:
        return top + plot_h * (1.0 - v / y_max)

    out: list[str] = [
        f'<svg viewBox="0 0 {width} {height}" width="100%" '
        f'role="img" aria-label="milliseconds per phase for each profiled step">'
    ]
    for t in ticks:
        out.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#e5e5e5"/>'
            f'<text x="{left - 6}" y="{y(t) + 4:.1f}" font-size="11" text-anchor="end" fill="#555">{t:g}</text>'
        )
    out.append(
        f'<text transform="translate(14,{top + plot_h / 2:.0f}) rotate(-90)" font-size="12" '
        'text-anchor="middle" fill="#444">ms</text>'
    )
    label_every = max(1, math.ceil(len(steps) / 20))
    for i, s in enumerate(steps):
        x = left + slot * i + (slot - bar_w) / 2
        base = 0.0
        for p in phases.phases:
            v = s.ms.get(p, 0.0)
            if v <= 0:
                continue
            y0, y1 = y(base + v), y(base)
            tip = f"step {s.step}: {PHASE_LABELS.get(p, p)} {v:.2f} ms of {s.duration_ms:.2f} ms"
            out.append(
                f'<rect x="{x:.1f}" y="{y0:.2f}" width="{bar_w:.1f}" height="{max(0.0, y1 - y0):.2f}" '
                f'fill="{PHASE_COLORS.get(p, "#999")}"><title>{escape(tip)}</title></rect>'
            )
            base += v
        if i % label_every == 0:
            out.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{top + plot_h + 16}" font-size="11" '
                f'text-anchor="middle" fill="#555">{s.step}</text>'
            )
    out.append(
        f'<line x1="{left}" x2="{width - right}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#999"/>'
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 6}" font-size="12" text-anchor="middle" '
        'fill="#444">profiled step</text></svg>'
    )
    mean = phases.mean_ms()
    legend = "".join(
        f'<li><span class="sw" style="background:{PHASE_COLORS.get(p, "#999")}"></span>'
        f"{escape(PHASE_LABELS.get(p, p))} {mean[p]:.1f} ms</li>"
        for p in phases.phases
        if mean[p] > 0
    )
    caption = (
        ""
        if phases.labelled
        else '<p class="small muted">no bottleneck/ labels in this trace: forward/backward are estimated (see the notes).</p>'
    )
    return "".join(out) + f'<ul class="legend">{legend}</ul><p class="small muted">mean per step</p>{caption}'
