"""One trace file in, one :class:`TraceSummary` out: the single path both the callback and the CLI take."""

from __future__ import annotations

from pathlib import Path

from lightning_bottleneck.analysis.communication import communication_metrics
from lightning_bottleneck.analysis.steps import analysed_steps, launch_times
from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.analysis.trace_metrics import summarize_trace
from lightning_bottleneck.trace.model import Trace
from lightning_bottleneck.trace.reader import load_trace

__all__ = ["summarize", "summarize_file"]


def summarize(trace: Trace, source: str | None = None) -> TraceSummary:
    """Every metric of one rank's trace, all over the same analysed steps."""
    launch = launch_times(trace)
    steps = analysed_steps(trace, launch)
    summary = summarize_trace(trace, source, steps=steps, launch=launch)
    if steps is not None:
        summary.communication = communication_metrics(trace, steps)
    return summary


def summarize_file(path: str | Path) -> TraceSummary:
    """Parse one rank's trace and compute every metric the rules use (the trace's columns are then freed)."""
    return summarize(load_trace(Path(path)))
