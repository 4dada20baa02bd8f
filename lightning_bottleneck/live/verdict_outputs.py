"""What a verdict adds beside :func:`~lightning_bottleneck.live.publishing.publish` (global rank zero):
``bottleneck/*`` scalars for every logger, and the picture (``bottleneck_report.html`` next to the JSON
report and the Images tab of the TensorBoard logger). Called for the mid-run and the end-of-fit verdict,
so even a run shorter than ``log_every_n_steps`` gets its scalars.

Example::

    publish_scalars(trainer, report)   # bottleneck/step_time_ms, bottleneck/share/data_wait, ...
    publish_picture(trainer, report, step_phases, report_file)
"""

from __future__ import annotations

import io
import struct
import threading
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_warn

from lightning_bottleneck.analysis.step_phases import StepPhases
from lightning_bottleneck.live.offload import ChildFailed, ChildJob, ChildWorker
from lightning_bottleneck.live.publishing import TEXT_TAG, has_tensorboard_logger, write_text_beside_traces
from lightning_bottleneck.output.picture import IMAGE_TAG
from lightning_bottleneck.report import Report
from lightning_bottleneck.vocabulary import NAMESPACE

__all__ = [
    "log_png",
    "publish_picture",
    "publish_scalars",
    "step_scalars",
    "text_to_child",
    "verdict_scalars",
]


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


def step_scalars(run: Any, trainer: Any) -> None:
    """The rolling step time, data-wait share and throughput to the loggers (every ``log_every_n_steps``)."""
    median_ms, wait_share = run.timer.rolling(max(1, run.scalar_every))
    if median_ms <= 0:
        return
    metrics = {NAMESPACE + "step_time_ms": median_ms, NAMESPACE + "data_wait_share": wait_share}
    bs = run.config.batch_size if run.config else None
    if bs:
        metrics[NAMESPACE + "samples_per_sec"] = bs * 1000.0 / median_ms
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=trainer.global_step)


def text_to_child(
    trainer: Any, trace_dir: Path | None, worker: ChildWorker | None, analysed: bool
) -> Path | None:
    """Where the child process writes the report for TensorBoard's Text tab, or None (this process writes it).

    Without a TensorBoard logger the event goes with the picture to the child, which readied its writer after
    the window's analysis (``analysed``): torch's writer would cost the training process ~70 ms of imports
    at the mid-run verdict. With a logger, its writer is already there."""
    if trace_dir is None or not analysed or worker is None or worker.failed is not None:
        return None
    return None if has_tensorboard_logger(trainer) else trace_dir


def publish_picture(
    trainer: Any,
    report: Report,
    phases: StepPhases | None,
    report_file: Path | None,
    image: bool = True,
    worker: ChildWorker | None = None,
    text_dir: Path | None = None,
) -> threading.Thread:
    """``bottleneck_report.html`` beside the JSON report and (``image``) the PNG in the TensorBoard logger's
    Images tab, drawn by a torch-free child process (:mod:`~lightning_bottleneck.output.child_process`:
    drawing takes ~0.05 s of GIL a picture, which would stall training steps) that a daemon thread
    waits for; the thread only hands the finished PNG to TensorBoard's writer (thread-safe). If the child
    fails, the thread draws in-process, with a note. ``worker``: the fit's warm child (without one, a
    child of its own). ``text_dir``: the child also writes the report in TensorBoard's Text tab there (a fit
    without a TensorBoard logger; in-process if the child fails). The caller joins the thread before the next
    picture and at teardown. A failure is one warning (the verdict is already out)."""
    writer = None
    if image:
        writer = next((lg.experiment for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)), None)
    out_dir = report_file.parent if report_file is not None else None
    step = trainer.global_step
    thread = threading.Thread(
        target=_draw_in_child,
        args=(report, phases, out_dir, writer, step, worker, text_dir),
        name="lightning-bottleneck-picture",
        daemon=True,
    )
    thread.start()
    return thread


def _draw_in_child(
    report: Report,
    phases: StepPhases | None,
    out_dir: Path | None,
    writer: Any,
    step: int,
    worker: ChildWorker | None,
    text_dir: Path | None = None,
) -> None:
    request: dict[str, Any] = {
        "job": "picture",
        "report": report,
        "phases": phases,  # pure (made by the analysis): pickled exactly
        "out_dir": str(out_dir) if out_dir is not None else None,
        "image": writer is not None,
    }
    if text_dir is not None:
        request["text"] = {"dir": str(text_dir), "tag": TEXT_TAG, "step": step}
    try:
        answer = worker.request(request) if worker is not None else ChildJob(request).run()
        notes = list(answer["notes"])
        if writer is not None and answer["png"]:
            log_png(writer, IMAGE_TAG, answer["png"], step)
            writer.flush()
    except ChildFailed as err:
        _note(report, f"the picture was drawn in the training process ({err})")
        if text_dir is not None:
            _text_in_process(report, text_dir, step)
        _draw(report, phases, out_dir, writer, step)
        return
    except Exception as err:
        rank_zero_warn(f"BottleneckCallback could not draw the window: {type(err).__name__}: {err}")
        return
    for note in notes:
        _note(report, note)


def log_png(writer: Any, tag: str, png: bytes, step: int) -> None:
    """Put an encoded PNG in a TensorBoard writer's Images tab as it is (no decode, no re-encode): the
    event protobuf of ``torch.utils.tensorboard``'s writer; another writer gets the decoded array."""
    file_writer = getattr(writer, "_get_file_writer", None)
    if file_writer is not None and type(writer).__module__.startswith("torch.utils.tensorboard"):
        from tensorboard.compat.proto.summary_pb2 import Summary

        width, height = struct.unpack(">II", png[16:24])  # the PNG's IHDR chunk
        value = Summary.Value(
            tag=tag,
            image=Summary.Image(height=height, width=width, colorspace=4, encoded_image_string=png),
        )
        file_writer().add_summary(Summary(value=[value]), step)
        return
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(png)) as img:
        rgb = np.asarray(img.convert("RGB"))
    writer.add_image(tag, rgb, step, dataformats="HWC")


def _text_in_process(report: Report, text_dir: Path, step: int) -> None:
    from lightning_bottleneck.output.text import render_markdown

    try:
        write_text_beside_traces(text_dir, render_markdown(report), step)
    except Exception as err:
        rank_zero_warn(
            f"BottleneckCallback could not write its report to TensorBoard: {type(err).__name__}: {err}"
        )


def _note(report: Report, note: str) -> None:
    if note not in report.notes:
        report.notes.append(note)


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
