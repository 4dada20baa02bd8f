"""Publishing a finished report on global rank zero: baseline comparison, JSON file, TensorBoard text, log.

Called by the callback once the report exists; every function here is safe to call again later (a
mid-run verdict and the end-of-fit verdict go through the same path).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_info

from lightning_bottleneck.render import render_markdown, render_text
from lightning_bottleneck.report import Report
from lightning_bottleneck.vocabulary import NAMESPACE

__all__ = ["TEXT_TAG", "compare_with_baseline", "publish", "write_tensorboard_text"]

#: The TensorBoard Text-tab tag of the report.
TEXT_TAG = NAMESPACE + "report"


def publish(
    trainer: Any,
    report: Report,
    *,
    report_file: Path | None,
    trace_dir: Path | None,
    baseline: str | None = None,
    verbose: bool = True,
) -> None:
    """Compare with ``baseline`` (if any), write the JSON report, the TensorBoard text, and log the summary."""
    if baseline is not None:
        compare_with_baseline(report, baseline)
    if report_file is not None:
        report.write(report_file)
    write_tensorboard_text(trainer, report, trace_dir)
    if verbose:
        rank_zero_info(render_text(report) + (f"\n  report: {report_file}" if report_file else ""))


def compare_with_baseline(report: Report, baseline: str) -> None:
    """Put the before/after comparison with a previous run's report in ``report`` (metrics and notes)."""
    from lightning_bottleneck.compare import compare_runs

    try:
        before = Report.read(str(baseline))
    except (OSError, ValueError, KeyError) as err:
        report.notes.append(f"baseline {baseline!s} could not be read ({type(err).__name__}: {err}).")
        return
    comparison = compare_runs(before, report)
    report.metrics["comparison"] = comparison
    report.notes.insert(0, f"Compared with {baseline!s}: {comparison['verdict']}")


def write_tensorboard_text(trainer: Any, report: Report, trace_dir: Path | None) -> None:
    """The report in TensorBoard's Text tab: the run's TensorBoard logger, else a writer next to the traces."""
    markdown = render_markdown(report)
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_text(TEXT_TAG, markdown, global_step=trainer.global_step)
            logger.experiment.flush()
            return
    # No TensorBoard logger: still put the verdict next to the traces for TensorBoard to show.
    if trace_dir is None:
        return
    from torch.utils.tensorboard import SummaryWriter

    trace_dir.mkdir(parents=True, exist_ok=True)
    writer = SummaryWriter(log_dir=str(trace_dir))
    try:
        writer.add_text(TEXT_TAG, markdown, global_step=trainer.global_step)
    finally:
        writer.close()
