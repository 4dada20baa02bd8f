"""One trace file in, one :class:`TraceSummary` out: the single path both the callback and the CLI take."""

from __future__ import annotations

from pathlib import Path

from lightning_bottleneck.analysis.communication import communication_metrics
from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.analysis.trace_metrics import summarize_trace
from lightning_bottleneck.trace.reader import load_trace


def summarize_file(path: str | Path) -> TraceSummary:
    """Parse one rank's trace and compute every metric the rules use (the trace's columns are then freed)."""
    trace = load_trace(Path(path))
    summary = summarize_trace(trace)
    comm = communication_metrics(trace)
    if comm is not None:
        summary.extra["communication"] = comm
    return summary
