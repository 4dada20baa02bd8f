"""Write the picture of the profiled window: ``bottleneck_report.html`` and TensorBoard's Images tab.

Pure orchestration of the renderers (no torch import): the TensorBoard writer is passed in (any object
with ``add_image(tag, array, global_step, dataformats=...)``, e.g. ``torch.utils.tensorboard.SummaryWriter``
or ``TensorBoardLogger.experiment``). Never raises for a missing optional library: it returns notes.

Example::

    >>> out = write_picture(report, step_phases, log_dir, writer=logger.experiment)  # doctest: +SKIP
    >>> out.html  # doctest: +SKIP
    PosixPath('.../bottleneck_report.html')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_bottleneck.analysis.step_phases import StepPhases
from lightning_bottleneck.atomic_write import write_atomically
from lightning_bottleneck.output.html import render_html
from lightning_bottleneck.output.image import MISSING_NOTE, image_available, render_rgb
from lightning_bottleneck.report import Report

__all__ = ["HTML_FILENAME", "IMAGE_TAG", "PictureOutputs", "write_html", "write_picture"]

HTML_FILENAME = "bottleneck_report.html"
IMAGE_TAG = "bottleneck/window"


@dataclass
class PictureOutputs:
    html: Path | None = None
    image_logged: bool = False
    notes: list[str] = field(default_factory=list)


def write_html(report: Report, phases: StepPhases | None, path: str | Path) -> Path:
    """Write the self-contained page to ``path`` (atomically: a reader never sees half a page)."""
    return write_atomically(path, render_html(report, phases).encode("utf-8"))


def write_picture(
    report: Report,
    phases: StepPhases | None,
    out_dir: str | Path | None,
    writer: Any = None,
    global_step: int = 0,
) -> PictureOutputs:
    """``<out_dir>/bottleneck_report.html`` (when ``out_dir`` is given) and, with a ``writer``, the PNG
    as image ``bottleneck/window`` in TensorBoard's Images tab (skipped with a note without matplotlib)."""
    out = PictureOutputs()
    if out_dir is not None:
        out.html = write_html(report, phases, Path(out_dir) / HTML_FILENAME)
    if writer is None:
        return out
    if not image_available():
        out.notes.append(MISSING_NOTE)
        return out
    writer.add_image(IMAGE_TAG, render_rgb(report, phases), global_step, dataformats="HWC")
    out.image_logged = True
    return out
