"""A PNG of one :class:`Report`: per-step stacked bars, with the breakdown and the advice beside them.

Pure rendering (no torch). Drawn with matplotlib's object API on the Agg canvas (no pyplot, no global
state, no display needed, safe from any thread); matplotlib is imported only when a picture is drawn, and
:func:`image_available` says whether it can be.

Example::

    >>> png = render_png(report, step_phases)  # doctest: +SKIP
    >>> Path("bottleneck_report.png").write_bytes(png)  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import io
import textwrap
from typing import Any

import numpy as np

from lightning_bottleneck.analysis.step_phases import StepPhases
from lightning_bottleneck.output.html import (
    BREAKDOWN_COLORS,
    FIT_COLORS,
    PHASE_COLORS,
    PHASE_LABELS,
    fit_items,
)
from lightning_bottleneck.output.text import HEADLINES, fit_line
from lightning_bottleneck.report import Report

__all__ = ["IMAGE_SIZE", "MISSING_NOTE", "image_available", "render_png", "render_rgb"]

#: Width x height in pixels: TensorBoard's Images tab shows an image at its own size up to the card's
#: width (about 1200 px on a laptop screen), and 1200x600 keeps the text legible there.
IMAGE_SIZE = (1200, 600)
_DPI = 100
#: Monospace columns that fit the side panel at 8.5 pt in a 1200 px image (measured: ~6.1 px per glyph
#: in DejaVu Sans Mono at 100 dpi over the panel's ~440 px).
SNIPPET_COLUMNS = 66
#: Characters of the fit's one-line ledger that fit the image's width at 10 pt (~6.9 px per glyph).
FIT_LINE_COLUMNS = 168
MISSING_NOTE = (
    "matplotlib is not installed: no picture in TensorBoard's Images tab (pip install matplotlib); "
    "bottleneck_report.html has the same chart."
)


def image_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


#: Colours of the palette PNG. TensorBoard's writer checksums every record with a pure-Python CRC-32C
#: (tensorboard.compat.tensorflow_stub, ~0.3 ms per KB) on a thread of the training process, holding the GIL
#: the training steps need: the 1200x600 RGB chart is ~100 KB (a ~20 ms stall), its 256-colour palette
#: version ~28 KB and looks the same (flat colours and anti-aliased text).
PNG_COLORS = 256


def render_png(report: Report, phases: StepPhases | None, size: tuple[int, int] = IMAGE_SIZE) -> bytes:
    """The picture as PNG bytes (``size`` in pixels), a palette PNG when Pillow (matplotlib's own
    dependency) is there. Raises ImportError without matplotlib."""
    fig = _figure(report, phases, size)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    try:
        from PIL import Image

        with Image.open(io.BytesIO(buf.getvalue())) as img:
            small = img.convert("RGB").quantize(colors=PNG_COLORS, method=Image.Quantize.FASTOCTREE)
        out = io.BytesIO()
        small.save(out, format="PNG", optimize=True)
        if out.tell() < buf.tell():
            return out.getvalue()
    except Exception:  # no Pillow, or an old one: the RGB PNG as drawn
        pass
    return buf.getvalue()


def render_rgb(report: Report, phases: StepPhases | None, size: tuple[int, int] = IMAGE_SIZE) -> np.ndarray:
    """The picture as an ``(H, W, 3)`` uint8 array (what ``SummaryWriter.add_image(..., dataformats="HWC")``
    takes). Raises ImportError without matplotlib."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = _figure(report, phases, size)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def _figure(report: Report, phases: StepPhases | None, size: tuple[int, int]) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(size[0] / _DPI, size[1] / _DPI), dpi=_DPI, facecolor="white")
    FigureCanvasAgg(fig)
    fit_s, fit = fit_items(report)
    top = 0.69 if fit else 0.83  # room for the whole fit's bar above the per-step bars
    grid = fig.add_gridspec(1, 2, width_ratios=(1.45, 1.0), left=0.065, right=0.985, top=top, bottom=0.1)
    ax = fig.add_subplot(grid[0, 0])
    side = fig.add_subplot(grid[0, 1])
    side.axis("off")
    conf = f"confidence {report.confidence:.0%}"
    fig.text(0.015, 0.95, HEADLINES[report.primary], fontsize=15, fontweight="bold", va="center")
    st = report.step_time_ms
    step = f"step median {st.median:.1f} ms, p90 {st.p90:.1f} ms  ·  " if st is not None else ""
    fig.text(
        0.015,
        0.905,
        f"{conf}  ·  {step}{report.steps_profiled} steps profiled",
        fontsize=10.5,
        color="#555",
        va="center",
    )
    if fit:
        _fit_bar(fig, report, fit_s, fit)
    _bars(ax, phases)
    _side_panel(side, report)
    return fig


def _fit_bar(fig: Any, report: Report, fit_s: float, items: list[tuple[str, str, float, float]]) -> None:
    """One horizontal bar of the whole fit by part (the ledger), labelled where a segment is wide enough."""
    line = fit_line(report) or f"fit {fit_s:.1f} s"
    line = line if len(line) <= FIT_LINE_COLUMNS else line[: FIT_LINE_COLUMNS - 4] + " ..."
    fig.text(0.015, 0.835, line, fontsize=10, color="#333", va="center")
    bar = fig.add_axes((0.015, 0.755, 0.97, 0.05))
    bar.set_xlim(0, 1)
    bar.set_ylim(0, 1)
    bar.axis("off")
    left = 0.0
    for key, label, _seconds, share in items:
        bar.barh(0.5, share, left=left, height=1.0, color=FIT_COLORS.get(key, "#999"), edgecolor="white")
        if share >= 0.1:
            bar.text(left + share / 2, 0.5, f"{label} {share:.0%}", ha="center", va="center", fontsize=8.5,
                     color="white", fontweight="bold", clip_on=True)  # fmt: skip
        left += share


def _bars(ax: Any, phases: StepPhases | None) -> None:
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)
    if phases is None or not phases.steps:
        ax.set_xticks([])
        ax.set_yticks([])
        why = phases.notes[0] if phases is not None and phases.notes else "no per-step data"
        ax.text(0.5, 0.5, "\n".join(textwrap.wrap(why, 50)), ha="center", va="center", color="#666",
                transform=ax.transAxes)  # fmt: skip
        return
    steps = phases.steps
    x = np.arange(len(steps))
    bottom = np.zeros(len(steps))
    mean = phases.mean_ms()
    for p in phases.phases:
        values = np.array([s.ms.get(p, 0.0) for s in steps])
        if not values.any():
            continue
        ax.bar(x, values, bottom=bottom, width=0.7, color=PHASE_COLORS.get(p, "#999"),
               label=f"{PHASE_LABELS.get(p, p)} ({mean[p]:.1f} ms)")  # fmt: skip
        bottom += values
    every = max(1, int(np.ceil(len(steps) / 20)))
    ax.set_xticks(x[::every])
    ax.set_xticklabels([str(s.step) for s in steps][::every], fontsize=9)
    ax.set_xlabel("profiled step", fontsize=10)
    ax.set_ylabel("ms", fontsize=10)
    ax.tick_params(axis="y", labelsize=9)
    ax.grid(axis="y", color="#e5e5e5")
    ax.set_axisbelow(True)
    ax.set_title("time per phase, per step (mean in legend)", fontsize=10.5, loc="left", color="#333")
    ax.legend(fontsize=8.5, frameon=False, loc="upper left", bbox_to_anchor=(0.0, 1.0), ncol=2)
    ax.set_ylim(0, float(bottom.max()) * 1.32 or 1.0)  # headroom for the legend


def _side_panel(ax: Any, report: Report) -> None:
    y = 1.0
    ax.text(0.0, y, "share of step time", fontsize=10.5, fontweight="bold", va="top", transform=ax.transAxes)
    y -= 0.075
    items = [(k, v) for k, v in sorted(report.breakdown.items(), key=lambda kv: -kv[1]) if v >= 0.005]
    left = 0.0
    for k, v in items:  # one stacked share bar
        ax.add_patch(_rect((left, y - 0.045), v, 0.045, BREAKDOWN_COLORS.get(k, "#999"), ax))
        left += v
    y -= 0.085
    for k, v in items[:6]:
        ax.add_patch(_rect((0.0, y - 0.028), 0.025, 0.028, BREAKDOWN_COLORS.get(k, "#999"), ax))
        ax.text(0.04, y, f"{k}", fontsize=9.5, va="top", transform=ax.transAxes)
        ax.text(0.42, y, f"{v:.0%}", fontsize=9.5, va="top", ha="right", transform=ax.transAxes)
        y -= 0.045
    y -= 0.03
    ax.text(0.0, y, "advice", fontsize=10.5, fontweight="bold", va="top", transform=ax.transAxes)
    y -= 0.06
    if not report.recommendations:
        ax.text(
            0.0, y, "no change to recommend", fontsize=9.5, color="#666", va="top", transform=ax.transAxes
        )
        return
    for i, r in enumerate(report.recommendations[:3], 1):
        if y < 0.08:
            break
        lines = textwrap.wrap(f"{i}. {r.title}", 58)[:2]
        ax.text(0.0, y, "\n".join(lines), fontsize=9.5, va="top", transform=ax.transAxes)
        y -= 0.045 * len(lines) + 0.01
        detail = textwrap.wrap(r.detail, 60)[:3]
        if detail and y > 0.12:
            if len(textwrap.wrap(r.detail, 60)) > 3:
                detail[-1] = detail[-1][:56] + " ..."
            ax.text(0.03, y, "\n".join(detail), fontsize=8.5, color="#444", va="top", transform=ax.transAxes)
            y -= 0.04 * len(detail) + 0.015
        snippet = _wrap_code(r.snippet, SNIPPET_COLUMNS)[:6] if r.snippet else []
        if snippet and y > 0.1:
            ax.text(0.03, y, "\n".join(snippet), fontsize=8.5, family="monospace", va="top", color="#1f2430",
                    transform=ax.transAxes, bbox={"facecolor": "#eef0f3", "edgecolor": "none", "pad": 3})  # fmt: skip
            y -= 0.042 * len(snippet) + 0.04
    more = len(report.recommendations) - 3
    if more > 0 and y > 0.04:
        ax.text(0.0, y, f"... {more} more in bottleneck_report.html", fontsize=9, color="#666", va="top",
                transform=ax.transAxes)  # fmt: skip


def _wrap_code(code: str, width: int) -> list[str]:
    """Hard-wrap code lines to ``width`` columns, continuation lines indented (a PNG cannot scroll)."""
    out: list[str] = []
    for line in code.splitlines():
        indent = len(line) - len(line.lstrip())
        out += textwrap.wrap(line, width, subsequent_indent=" " * (indent + 4), drop_whitespace=False) or [""]
    return out


def _rect(xy: tuple[float, float], w: float, h: float, color: str, ax: Any) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle(xy, w, h, facecolor=color, edgecolor="none", transform=ax.transAxes, clip_on=False)
