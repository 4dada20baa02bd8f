"""What a verdict adds beside :func:`~lightning_bottleneck.live.publishing.publish` (global rank zero):
``bottleneck/*`` scalars for every logger, and the picture (``bottleneck_report.html`` next to the JSON
report and the Images tab of the TensorBoard logger). Called for the mid-run and the end-of-fit verdict,
so even a run shorter than ``log_every_n_steps`` gets its scalars.

Example::

    publish_scalars(trainer, report)   # bottleneck/step_time_ms, bottleneck/share/data_wait, ...
    publish_picture(trainer, report, step_phases, report_file)
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_warn

from lightning_bottleneck.analysis.step_phases import StepPhases
from lightning_bottleneck.output.report import Report
from lightning_bottleneck.vocabulary import NAMESPACE

__all__ = ["publish_picture", "publish_scalars", "verdict_scalars"]


def verdict_scalars(report: Report) -> dict[str, float]:
    """The report's numbers as ``bottleneck/*`` scalars: step time, samples/s, shares, confidence, the fit
    ledger's shares (``bottleneck/fit_share/<part>``, and ``bottleneck/fit_s``), and what the measurement stage found (best measured trial speed-up, the loader's measured ceiling)."""
    out: dict[str, float] = {NAMESPACE + "confidence": float(report.confidence)}
    if report.step_time_ms is not None and report.step_time_ms.median > 0:
        out[NAMESPACE + "step_time_ms"] = float(report.step_time_ms.median)
        per_step = (report.metrics.get("timing") or {}).get("samples_per_step")
        if per_step:
            out[NAMESPACE + "samples_per_sec"] = float(per_step) * 1000.0 / report.step_time_ms.median
    for key, share in report.breakdown.items():
        out[f"{NAMESPACE}share/{key}"] = float(share)
    if "data_wait" in report.breakdown:
        out[NAMESPACE + "data_wait_share"] = float(report.breakdown["data_wait"])
    trials = report.metrics.get("trials") or {}
    speedups = [r.get("measured_speedup") for r in trials.get("results", []) if r.get("measured_speedup")]
    if speedups:
        out[NAMESPACE + "trials/best_measured_speedup"] = float(max(speedups))
    ledger = report.metrics.get("ledger")
    if isinstance(ledger, dict):
        for part, share in (ledger.get("shares") or {}).items():
            out[f"{NAMESPACE}fit_share/{part}"] = float(share)
        if ledger.get("fit_s"):
            out[NAMESPACE + "fit_s"] = float(ledger["fit_s"])
    rungs = (report.metrics.get("loader_ladder") or {}).get("rungs") or []
    if rungs:
        out[NAMESPACE + "loader/ceiling_samples_per_s"] = float(max(r["samples_per_s"] for r in rungs))
    return out


def publish_scalars(trainer: Any, report: Report) -> None:
    metrics = verdict_scalars(report)
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=trainer.global_step)


def publish_picture(
    trainer: Any, report: Report, phases: StepPhases | None, report_file: Path | None, image: bool = True
) -> threading.Thread:
    """``bottleneck_report.html`` beside the JSON report and (``image``) the PNG in the TensorBoard logger's
    Images tab, drawn in a daemon thread (matplotlib takes ~0.2 s a picture: not on the training loop;
    its Agg canvas and TensorBoard's writer queue are thread-safe). The caller joins the thread before
    the next picture and at teardown. A failure is one warning (the verdict is already out)."""
    writer = None
    if image:
        writer = next((lg.experiment for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)
    out_dir = report_file.parent if report_file is not None else None
    step = trainer.global_step
    thread = threading.Thread(
        target=_draw,
        args=(report, phases, out_dir, writer, step),
        name="lightning-bottleneck-picture",
        daemon=True,
    )
    thread.start()
    return thread


def _draw(report: Report, phases: StepPhases | None, out_dir: Path | None, writer: Any, step: int) -> None:
    from lightning_bottleneck.output.picture import write_picture

    try:
        out = write_picture(report, phases, out_dir, writer, step)
        if writer is not None:
            writer.flush()
    except Exception as err:
        rank_zero_warn(f"BottleneckCallback could not draw the window: {type(err).__name__}: {err}")
        return
    for note in out.notes:
        if note not in report.notes:
            report.notes.append(note)
