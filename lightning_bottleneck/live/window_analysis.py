"""Read the profiling window's trace off the training process: one child process, one result.

When the window closes, :class:`WindowAnalysis` has a torch-free child process
(:mod:`~lightning_bottleneck.output.child_process`, lower priority) parse its trace file and compute the
:class:`~lightning_bottleneck.analysis.summary.TraceSummary` and the per-step phases; a daemon thread of
the training process waits for the answer without holding the GIL, so the training steps after the window
do not stall. If the child fails (cannot start, crashes, times out) the thread does the work in-process,
as before, and :attr:`WindowAnalysis.notes` says why. The callback checks :meth:`WindowAnalysis.done` at a
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

import threading
from pathlib import Path
from typing import Any

from lightning_bottleneck.analysis.step_phases import StepPhases
from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.live.offload import ChildFailed, ChildJob, ChildWorker
from lightning_bottleneck.output.child_process import analyse_trace_file

__all__ = ["WindowAnalysis", "analyse_trace_file"]


class WindowAnalysis:
    """One trace analysed in a child process watched by a daemon thread; :meth:`result` re-raises the
    error, if any; :meth:`close` kills the child (teardown, exception paths)."""

    def __init__(self, path: str | Path, rank: int, worker: ChildWorker | None = None) -> None:
        self.path = str(path)
        self.rank = rank
        self.notes: list[str] = []  # why the child was not used, if it was not
        self._request = {"job": "analyse", "path": self.path, "rank": rank}
        self._worker = worker
        self._job = ChildJob(self._request) if worker is None else None
        self._closed = False
        self._result: tuple[TraceSummary, StepPhases | None] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="lightning-bottleneck-analysis", daemon=True)

    @classmethod
    def start(cls, path: str | Path, rank: int, worker: ChildWorker | None = None) -> WindowAnalysis:
        """Analyse ``path`` in ``worker`` (the fit's warm child) or, without one, in a child of its own."""
        analysis = cls(path, rank, worker)
        analysis._thread.start()
        return analysis

    def _run(self) -> None:
        try:
            self._result = self._in_child()
        except BaseException as err:  # handed to the training thread by result()
            self._error = err

    def _in_child(self) -> tuple[TraceSummary, StepPhases | None]:
        try:
            answer = self._job.run() if self._job is not None else self._worker.request(self._request)  # type: ignore[union-attr]
            return answer["summary"], answer["phases"]
        except ChildFailed as err:
            if self._closed:
                raise
            self.notes.append(f"the window's trace was analysed in the training process ({err})")
        return analyse_trace_file(self.path, self.rank)

    def close(self) -> None:
        """Kill the child if it still runs (no fallback after that) and wait briefly for the thread.
        A shared worker is killed only while this analysis still waits for it."""
        self._closed = True
        if self._job is not None:
            self._job.kill()
        elif self._worker is not None and not self.done:
            self._worker.close()
        self.join(5.0)

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
