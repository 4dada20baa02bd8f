"""A PNG of one :class:`Report`: per-step stacked bars, with the breakdown and the advice beside them.

Pure rendering (no torch). Drawn with Pillow (matplotlib's own dependency) in matplotlib's DejaVu fonts,
laid out as the matplotlib figure it replaces (1200x600 px at 100 dpi, the same text, bars, ticks, legend
and colours): the picture costs the analysis child ~0.05 s of CPU instead of ~0.45 s (matplotlib's import
and its Agg drawing), beside training (issue 30). No global state, no display, safe from any thread;
Pillow is imported only when a picture is drawn, and :func:`image_available` says whether it can be.

Example::

    >>> png = render_png(report, step_phases)  # doctest: +SKIP
    >>> Path("bottleneck_report.png").write_bytes(png)  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import importlib.util
import io
import math
import textwrap
from pathlib import Path
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
    return importlib.util.find_spec("matplotlib") is not None and importlib.util.find_spec("PIL") is not None


#: Colours of the palette PNG. TensorBoard's writer checksums every record with a pure-Python CRC-32C
#: (tensorboard.compat.tensorflow_stub, ~0.3 ms per KB) on a thread of the training process, holding the GIL
#: the training steps need: the 1200x600 RGB chart is ~100 KB (a ~20 ms stall), its 256-colour palette
#: version ~25 KB and looks the same (flat colours and anti-aliased text).
PNG_COLORS = 256
_PX = _DPI / 72.0  # pixels per point
#: Where the per-step chart and the side panel sit, as fractions of the image (matplotlib's gridspec of the
#: figure this replaces: left 0.065, right 0.985, bottom 0.1, width ratios 1.45:1, wspace 0.2).
_CHART_X = (0.065, 0.5600)
_SIDE_X = (0.6436, 0.985)


def render_png(report: Report, phases: StepPhases | None, size: tuple[int, int] = IMAGE_SIZE) -> bytes:
    """The picture as PNG bytes (``size`` in pixels), a 256-colour palette PNG. Raises ImportError without
    Pillow."""
    from PIL import Image

    img = _draw_image(report, phases, size)
    out = io.BytesIO()
    img.quantize(colors=PNG_COLORS, method=Image.Quantize.FASTOCTREE).save(out, format="PNG")
    return out.getvalue()


def render_rgb(report: Report, phases: StepPhases | None, size: tuple[int, int] = IMAGE_SIZE) -> np.ndarray:
    """The picture as an ``(H, W, 3)`` uint8 array (what ``SummaryWriter.add_image(..., dataformats="HWC")``
    takes). Raises ImportError without Pillow."""
    return np.asarray(_draw_image(report, phases, size), dtype=np.uint8).copy()


class _Canvas:
    """An RGB image with text in points at 100 dpi, positions in pixels (y down) or figure fractions."""

    def __init__(self, size: tuple[int, int]) -> None:
        from PIL import Image, ImageDraw

        self.w, self.h = size
        self.img = Image.new("RGB", size, "white")
        self.draw = ImageDraw.Draw(self.img)

    def fx(self, x: float) -> float:
        return x * self.w

    def fy(self, y: float) -> float:
        return (1.0 - y) * self.h

    def text(self, xy: tuple[float, float], s: str, pt: float, color: str = "black", anchor: str = "la",
             bold: bool = False, mono: bool = False, spacing: float = 0.2) -> tuple[float, float, float, float]:  # fmt: skip
        """Draw ``s`` (may be several lines) at ``xy``; ``anchor``: Pillow's (``la`` left-top, ``lm``
        left-middle, ``mm`` centre, ``ra`` right-top, ``ma`` centre-top). Returns its box."""
        font = _font(pt, bold, mono)
        gap = round(pt * _PX * spacing)
        if "\n" in s:
            box = self.draw.multiline_textbbox(xy, s, font=font, anchor=anchor, spacing=gap)
            self.draw.multiline_text(xy, s, font=font, fill=color, anchor=anchor, spacing=gap)
        else:
            box = self.draw.textbbox(xy, s, font=font, anchor=anchor)
            self.draw.text(xy, s, font=font, fill=color, anchor=anchor)
        return box

    def rect(self, x0: float, y0: float, x1: float, y1: float, color: str) -> None:
        """A filled rectangle over pixels [x0, x1) x [y0, y1) (rounded to whole pixels)."""
        a, b, c, d = round(x0), round(min(y0, y1)), round(x1), round(max(y0, y1))
        if c > a and d > b:
            self.draw.rectangle((a, b, c - 1, d - 1), fill=color)


@functools.lru_cache(maxsize=32)
def _font(pt: float, bold: bool = False, mono: bool = False) -> Any:
    """matplotlib's DejaVu font at ``pt`` points (found on disk: matplotlib is not imported); Pillow's own
    font where that file is missing."""
    from PIL import ImageFont

    name = "DejaVuSans" + ("Mono" if mono else "") + ("-Bold" if bold else "") + ".ttf"
    size = max(1, round(pt * _PX))
    spec = importlib.util.find_spec("matplotlib")
    if spec is not None and spec.origin is not None:
        path = Path(spec.origin).parent / "mpl-data" / "fonts" / "ttf" / name
        if path.is_file():
            return ImageFont.truetype(str(path), size)
    return ImageFont.load_default(size)


def _draw_image(report: Report, phases: StepPhases | None, size: tuple[int, int]) -> Any:
    c = _Canvas(size)
    fit_s, fit = fit_items(report)
    top = 0.69 if fit else 0.83  # room for the whole fit's bar above the per-step bars
    conf = f"confidence {report.confidence:.0%}"
    c.text((c.fx(0.015), c.fy(0.95)), HEADLINES[report.primary], 15, anchor="lm", bold=True)
    st = report.step_time_ms
    step = f"step median {st.median:.1f} ms, p90 {st.p90:.1f} ms  ·  " if st is not None else ""
    line = f"{conf}  ·  {step}{report.steps_profiled} steps profiled"
    c.text((c.fx(0.015), c.fy(0.905)), line, 10.5, color="#555", anchor="lm")
    if fit:
        _fit_bar(c, report, fit_s, fit)
    box = (c.fx(_CHART_X[0]), c.fy(top), c.fx(_CHART_X[1]), c.fy(0.1))
    _bars(c, box, phases)
    _side_panel(c, (c.fx(_SIDE_X[0]), c.fy(top), c.fx(_SIDE_X[1]), c.fy(0.1)), report)
    return c.img


def _fit_bar(c: _Canvas, report: Report, fit_s: float, items: list[tuple[str, str, float, float]]) -> None:
    """One horizontal bar of the whole fit by part (the ledger), labelled where a segment is wide enough."""
    line = fit_line(report) or f"fit {fit_s:.1f} s"
    line = line if len(line) <= FIT_LINE_COLUMNS else line[: FIT_LINE_COLUMNS - 4] + " ..."
    c.text((c.fx(0.015), c.fy(0.835)), line, 10, color="#333", anchor="lm")
    x0, width, y0, y1 = c.fx(0.015), c.fx(0.97), c.fy(0.805), c.fy(0.755)
    left = 0.0
    for key, label, _seconds, share in items:
        a, b = x0 + left * width, x0 + min(1.0, left + share) * width
        c.rect(a, y0, b, y1, FIT_COLORS.get(key, "#999"))
        c.draw.line((round(b), round(y0), round(b), round(y1) - 1), fill="white", width=1)  # segment edge
        if share >= 0.1:
            c.text(
                ((a + b) / 2, (y0 + y1) / 2),
                f"{label} {share:.0%}",
                8.5,
                color="white",
                anchor="mm",
                bold=True,
            )
        left += share


def _nice_ticks(top: float) -> list[float]:
    """Round tick values from 0 to ``top`` (steps of 1, 2, 2.5 or 5 times a power of ten, at most ~7)."""
    if top <= 0:
        return [0.0]
    raw = top / 6
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(top / step + 1e-9) + 1)]


def _tick_label(v: float) -> str:
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 else f"{v:g}"


def _bars(c: _Canvas, box: tuple[float, float, float, float], phases: StepPhases | None) -> None:
    x0, y_top, x1, y_bottom = box
    axis = "black"
    c.draw.line((round(x0), round(y_top), round(x0), round(y_bottom)), fill=axis, width=1)  # left spine
    c.draw.line((round(x0), round(y_bottom), round(x1), round(y_bottom)), fill=axis, width=1)  # bottom spine
    if phases is None or not phases.steps:
        why = phases.notes[0] if phases is not None and phases.notes else "no per-step data"
        text = "\n".join(textwrap.wrap(why, 50))
        c.text(((x0 + x1) / 2, (y_top + y_bottom) / 2), text, 10, color="#666", anchor="mm")
        return
    steps = phases.steps
    n = len(steps)
    mean = phases.mean_ms()
    drawn = [p for p in phases.phases if any(s.ms.get(p, 0.0) for s in steps)]
    totals = [sum(s.ms.get(p, 0.0) for p in drawn) for s in steps]
    y_max = float(max(totals)) * 1.32 or 1.0  # headroom for the legend
    ticks = _nice_ticks(y_max)
    lo, hi = -0.35 - 0.05 * (n - 0.3), n - 0.65 + 0.05 * (n - 0.3)  # matplotlib's 5% margins around the bars

    def px(x: float) -> float:
        return x0 + (x - lo) / (hi - lo) * (x1 - x0)

    def py(v: float) -> float:
        return y_bottom - v / y_max * (y_bottom - y_top)

    for v in ticks:  # grid, tick marks and labels of the y axis
        y = round(py(v))
        if v > 0:
            c.draw.line((round(x0) + 1, y, round(x1), y), fill="#e5e5e5", width=1)
        c.draw.line((round(x0) - 5, y, round(x0), y), fill=axis, width=1)
        c.text((x0 - 8, y), _tick_label(v), 9, anchor="rm")
    for i, s in enumerate(steps):  # the stacked bars
        bottom = 0.0
        for p in drawn:
            value = s.ms.get(p, 0.0)
            if value:
                c.rect(
                    px(i - 0.35), py(bottom + value), px(i + 0.35), py(bottom), PHASE_COLORS.get(p, "#999")
                )
            bottom += value
    every = max(1, int(np.ceil(n / 20)))
    label_bottom = y_bottom
    for i in range(0, n, every):
        x = round(px(i))
        c.draw.line((x, round(y_bottom), x, round(y_bottom) + 5), fill=axis, width=1)
        label_bottom = max(label_bottom, c.text((x, y_bottom + 8), str(steps[i].step), 9, anchor="ma")[3])
    c.text(((x0 + x1) / 2, label_bottom + 5), "profiled step", 10, anchor="ma")
    _vertical_text(c, (x0 - 52, (y_top + y_bottom) / 2), "ms", 10)
    c.text((x0, y_top - 8), "time per phase, per step (mean in legend)", 10.5, color="#333", anchor="ld")
    _legend(c, (x0 + 0.4 * 8.5 * _PX, y_top + 0.4 * 8.5 * _PX), drawn, mean)


def _legend(c: _Canvas, xy: tuple[float, float], drawn: list[str], mean: dict[str, float]) -> None:
    """Two columns, filled column by column (matplotlib's order): a swatch, then the phase and its mean."""
    em = 8.5 * _PX
    rows = math.ceil(len(drawn) / 2)
    labels = [f"{PHASE_LABELS.get(p, p)} ({mean[p]:.1f} ms)" for p in drawn]
    font = _font(8.5)
    col_w = max((c.draw.textlength(t, font=font) for t in labels[:rows]), default=0.0) + 2.8 * em + 2.0 * em
    for k, (p, label) in enumerate(zip(drawn, labels)):
        x = xy[0] + (k // rows) * col_w
        y = xy[1] + (k % rows) * 1.5 * em + 0.7 * em
        c.rect(x, y - 0.35 * em, x + 2.0 * em, y + 0.35 * em, PHASE_COLORS.get(p, "#999"))
        c.text((x + 2.8 * em, y), label, 8.5, anchor="lm")


def _vertical_text(c: _Canvas, centre: tuple[float, float], s: str, pt: float) -> None:
    from PIL import Image, ImageDraw

    font = _font(pt)
    box = c.draw.textbbox((0, 0), s, font=font, anchor="lt")
    tile = Image.new("L", (int(box[2]) + 2, int(box[3]) + 2), 0)
    ImageDraw.Draw(tile).text((1, 1), s, font=font, fill=255, anchor="lt")
    tile = tile.rotate(90, expand=True)
    at = (round(centre[0] - tile.width / 2), round(centre[1] - tile.height / 2))
    c.img.paste((0, 0, 0), (*at, at[0] + tile.width, at[1] + tile.height), tile)


def _side_panel(c: _Canvas, box: tuple[float, float, float, float], report: Report) -> None:
    x0, y_top, x1, y_bottom = box
    width, height = x1 - x0, y_bottom - y_top

    def at(fx: float, fy: float) -> tuple[float, float]:  # the panel's own fractions, y up as before
        return x0 + fx * width, y_bottom - fy * height

    y = 1.0
    c.text(at(0.0, y), "share of step time", 10.5, anchor="la", bold=True)
    y -= 0.075
    items = [(k, v) for k, v in sorted(report.breakdown.items(), key=lambda kv: -kv[1]) if v >= 0.005]
    left = 0.0
    for k, v in items:  # one stacked share bar
        (a, b), (d, e) = at(left, y), at(left + v, y - 0.045)
        c.rect(a, b, d, e, BREAKDOWN_COLORS.get(k, "#999"))
        left += v
    y -= 0.085
    for k, v in items[:6]:
        (a, b), (d, e) = at(0.0, y), at(0.025, y - 0.028)
        c.rect(a, b, d, e, BREAKDOWN_COLORS.get(k, "#999"))
        c.text(at(0.04, y), f"{k}", 9.5, anchor="la")
        c.text(at(0.42, y), f"{v:.0%}", 9.5, anchor="ra")
        y -= 0.045
    y -= 0.03
    c.text(at(0.0, y), "advice", 10.5, anchor="la", bold=True)
    y -= 0.06
    if not report.recommendations:
        c.text(at(0.0, y), "no change to recommend", 9.5, color="#666", anchor="la")
        return
    for i, r in enumerate(report.recommendations[:3], 1):
        if y < 0.08:
            break
        lines = textwrap.wrap(f"{i}. {r.title}", 58)[:2]
        c.text(at(0.0, y), "\n".join(lines), 9.5, anchor="la")
        y -= 0.045 * len(lines) + 0.01
        detail = textwrap.wrap(r.detail, 60)[:3]
        if detail and y > 0.12:
            if len(textwrap.wrap(r.detail, 60)) > 3:
                detail[-1] = detail[-1][:56] + " ..."
            c.text(at(0.03, y), "\n".join(detail), 8.5, color="#444", anchor="la")
            y -= 0.04 * len(detail) + 0.015
        snippet = _wrap_code(r.snippet, SNIPPET_COLUMNS)[:6] if r.snippet else []
        if snippet and y > 0.1:
            text = "\n".join(snippet)
            pad = 3 * _PX
            font = _font(8.5, mono=True)
            gap = round(8.5 * _PX * 0.2)
            bx = c.draw.multiline_textbbox(at(0.03, y), text, font=font, anchor="la", spacing=gap)
            c.rect(bx[0] - pad, bx[1] - pad, bx[2] + pad, bx[3] + pad, "#eef0f3")
            c.text(at(0.03, y), text, 8.5, color="#1f2430", anchor="la", mono=True)
            y -= 0.042 * len(snippet) + 0.04
    more = len(report.recommendations) - 3
    if more > 0 and y > 0.04:
        c.text(at(0.0, y), f"... {more} more in bottleneck_report.html", 9, color="#666", anchor="la")


def _wrap_code(code: str, width: int) -> list[str]:
    """Hard-wrap code lines to ``width`` columns, continuation lines indented (a PNG cannot scroll)."""
    out: list[str] = []
    for line in code.splitlines():
        indent = len(line) - len(line.lstrip())
        out += textwrap.wrap(line, width, subsequent_indent=" " * (indent + 4), drop_whitespace=False) or [""]
    return out
