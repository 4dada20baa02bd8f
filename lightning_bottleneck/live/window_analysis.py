"""Read the profiling window's trace off the training thread: one daemon thread, one result.

When the window closes, :class:`WindowAnalysis` parses its trace file and computes the
:class:`~lightning_bottleneck.analysis.summary.TraceSummary` and the per-step phases in a daemon thread,
so the training loop never waits for the read. The callback checks :meth:`WindowAnalysis.done` at a
batch end (a cheap flag test), takes :meth:`WindowAnalysis.result` when it is ready (or at a fixed step,
joining the thread there, so every DDP rank acts on the same step), and :meth:`WindowAnalysis.join` s it at
the end of fit and on every exception path. Torch-free.

Example::

    analysis = WindowAnalysis.start("traces/host_rank0.123.pt.trace.json.gz", rank=0)
    ...  # training goes on
    if analysis.done:
        summary, phases = analysis.result()
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

from lightning_bottleneck.analysis.step_phases import StepPhases
from lightning_bottleneck.analysis.summary import TraceSummary

__all__ = ["WindowAnalysis", "analyse_trace_file"]


def analyse_trace_file(path: str | Path, rank: int) -> tuple[TraceSummary, StepPhases | None]:
    """Parse one trace once: its per-step phases (for the picture) and its summary (for the rules)."""
    from lightning_bottleneck.analysis.step_phases import analysed_step_windows, step_phases
    from lightning_bottleneck.analysis.trace_file import summarize
    from lightning_bottleneck.trace.reader import load_trace

    trace = load_trace(Path(path))
    phases: StepPhases | None = None
    try:
        found = analysed_step_windows(trace)
        if found is not None:
            starts, ends, main = found
            phases = step_phases(trace, (starts, ends), main_thread=main)
    except Exception as err:  # the picture is optional; the verdict is not
        phases = StepPhases(notes=[f"per-step phases failed: {type(err).__name__}: {err}"])
    summary = summarize(trace)
    summary.rank = rank
    summary.host = socket.gethostname()
    return summary, phases


class WindowAnalysis:
    """One trace analysed in a daemon thread; :meth:`result` re-raises the thread's error, if any."""

    def __init__(self, path: str | Path, rank: int) -> None:
        self.path = str(path)
        self.rank = rank
        self._result: tuple[TraceSummary, StepPhases | None] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="lightning-bottleneck-analysis", daemon=True)

    @classmethod
    def start(cls, path: str | Path, rank: int) -> WindowAnalysis:
        analysis = cls(path, rank)
        analysis._thread.start()
        return analysis

    def _run(self) -> None:
        try:
            self._result = analyse_trace_file(self.path, self.rank)
        except BaseException as err:  # handed to the training thread by result()
            self._error = err

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread (at most ``timeout`` seconds); True when it has finished."""
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def result(self, timeout: float | None = None) -> tuple[TraceSummary, StepPhases | None]:
        if not self.join(timeout):
            raise TimeoutError(f"the analysis of {self.path} took longer than {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def __repr__(self) -> str:
        state: Any = "running" if not self.done else ("failed" if self._error else "done")
        return f"WindowAnalysis({self.path!r}, {state})"
