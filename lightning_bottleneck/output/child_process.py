"""The torch-free child process that does the callback's heavy work off the training process.

Reading and analysing the profiling window's trace (~0.03-0.3 s of numpy and JSON) and drawing the
picture (Pillow, ~0.05 s) hold the GIL; done in a thread of the training process they stall the training
steps after the window. The live callback runs them here instead, in a child started as
``python -m lightning_bottleneck.output.child_process`` (a pure module: the child never imports torch or
lightning, so it starts in ~0.2 s), at a lower scheduling priority. It answers requests one after the
other until its stdin closes (the callback starts one at ``setup`` and keeps it for the fit; with
:data:`WARM_TEXT_FLAG` when it will write TensorBoard's Text tab):

* ``{"job": "ready"}`` -> ``{}`` once the child has started and imported what it needs (the Text-tab writer
  too, with :data:`WARM_TEXT_FLAG`): the parent waits for it where the child's start would take the training
  step's cores (:meth:`~lightning_bottleneck.live.offload.ChildWorker.wait_ready`)
* ``{"job": "analyse", "path": ..., "rank": ...}`` -> ``{"summary": TraceSummary, "phases": StepPhases}``
* ``{"job": "picture", "report": Report, "phases": StepPhases, "out_dir": ..., "image": bool}`` ->
  ``{"html": path or None, "png": bytes or None, "notes": [...]}`` (the HTML page written here; the PNG
  handed back for the TensorBoard writer, which lives in the training process); with ``"text": {"dir": ...,
  "tag": ..., "step": ...}`` also the report in TensorBoard's Text tab, in an event file of that directory
  (:mod:`~lightning_bottleneck.output.tb_text`: for a fit without a TensorBoard logger, whose training process
  would otherwise import torch's writer for it)

Each request is pickled on stdin, each answer pickled on stdout (``{"ok": True, ...}`` or ``{"ok": False,
"error": ...}``). The child refuses to import torch or lightning (an import hook raises ImportError, so a
request that would drag them in fails and the parent falls back; the parent sends a torch object, such as
``torch.__version__`` in a report's environment, as its string);
``"forbidden_modules"`` lists any it found imported all the same (the tests check it is empty). Torch-free.

Example::

    $ python -m lightning_bottleneck.output.child_process < request.pickle > answer.pickle
"""

from __future__ import annotations

import contextlib
import importlib.abc
import os
import pickle
import socket
import sys
from pathlib import Path
from typing import Any, BinaryIO

from lightning_bottleneck.analysis.step_phases import StepPhases
from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.output.tb_text import WRITER_MODULE

__all__ = [
    "NICE_INCREMENT",
    "READY_JOB",
    "WARM_TEXT_FLAG",
    "analyse_trace_file",
    "handle",
    "main",
    "render_picture",
]

#: How much the child lowers its own scheduling priority (``os.nice``): when it competes with a training
#: process for a core it gets about a third of the CPU (Linux CFS weights 335 against 1024). Not ``nice``'s
#: default 10 (weight 110): on a loaded 2-core box that starved the child, and the step that takes the
#: mid-run verdict (where every rank waits for the analysis) waited seconds for it.
NICE_INCREMENT = 5
#: The child's argument for a fit without a TensorBoard logger: it will write the Text-tab event, so it imports
#: that writer (~0.1 s of protobuf and ``tensorboard.summary``) while idle before the window closes. Imported
#: after the window's analysis instead, a fit that ends right after its window (worker_restart once autotune
#: switched it: 1 ms steps) had its teardown wait ~0.1 s for it, in one run of three.
WARM_TEXT_FLAG = "--warm-text"
#: The request answered once the child is warm (its imports done, the Text-tab writer's too when it will write it).
READY_JOB = "ready"
_FORBIDDEN = ("torch", "lightning", "pytorch_lightning")
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


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


def render_picture(request: dict[str, Any]) -> dict[str, Any]:
    """The HTML page written beside the report (``out_dir``) and the PNG as bytes (``image``)."""
    from lightning_bottleneck.output.image import MISSING_NOTE, image_available, render_png
    from lightning_bottleneck.output.picture import HTML_FILENAME, write_html

    report = request["report"]
    phases = request.get("phases")
    out_dir = request.get("out_dir")
    answer: dict[str, Any] = {"html": None, "png": None, "notes": []}
    text = request.get("text")
    if text is not None:
        from lightning_bottleneck.output.tb_text import write_text_event
        from lightning_bottleneck.output.text import render_markdown

        write_text_event(text["dir"], text["tag"], render_markdown(report), int(text["step"]))
    if out_dir is not None:
        answer["html"] = str(write_html(report, phases, Path(out_dir) / HTML_FILENAME))
    if request.get("image"):
        if image_available():
            answer["png"] = render_png(report, phases)
        else:
            answer["notes"].append(MISSING_NOTE)
    return answer


def handle(request: dict[str, Any]) -> dict[str, Any]:
    """One job's answer (raises for an unknown job or a failed one)."""
    job = request.get("job")
    if job == READY_JOB:
        return {}
    if job == "analyse":
        summary, phases = analyse_trace_file(request["path"], int(request["rank"]))
        return {"summary": summary, "phases": phases}
    if job == "picture":
        return render_picture(request)
    raise ValueError(f"unknown job {job!r}; the child does {READY_JOB!r}, 'analyse' and 'picture'")


def _lower_priority() -> None:
    """Yield the CPU to the training process; die with the parent (Linux), never outlive it."""
    if hasattr(os, "nice"):
        with contextlib.suppress(OSError):
            os.nice(NICE_INCREMENT)
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except Exception:  # no libc prctl: the parent's timeout and teardown still kill the child
            pass
    try:
        import psutil  # optional: Windows/macOS priority classes

        if not hasattr(os, "nice"):
            psutil.Process().nice(psutil.BELOW_NORMAL_PRIORITY_CLASS)
    except Exception:
        pass


class _NoFrameworks(importlib.abc.MetaPathFinder):
    """Importing torch or lightning in the child is an error, not a silent multi-second import."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] in _FORBIDDEN:
            raise ImportError(f"the analysis child process does not import {name}")
        return None


def main(stdin: BinaryIO | None = None, stdout: BinaryIO | None = None, warm_text: bool | None = None) -> int:
    """Answer pickled requests on ``stdin`` until it closes. ``warm_text`` (default: :data:`WARM_TEXT_FLAG` among
    the arguments): the Text-tab writer is imported (~0.1 s) at the first moment no request waits, so that the
    end-of-fit picture job, which a short fit's teardown waits for, does not pay it."""
    if warm_text is None:
        warm_text = WARM_TEXT_FLAG in sys.argv[1:]
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing printed by a library may corrupt the pickled answer
    parent = os.getppid()
    _lower_priority()
    sys.meta_path.insert(0, _NoFrameworks())
    if os.getppid() != parent:  # the parent died before the death signal was armed
        return 1
    _warm_up()
    answered = False
    while True:  # one answer per request, until the parent closes the pipe
        failed: BaseException | None = None
        waiting = _waiting(stdin)
        if warm_text and (waiting is False or (waiting is None and answered)):  # idle: ready the writer now
            _warm_text()
            warm_text = False
        try:
            request = pickle.load(stdin)
        except EOFError:
            return 0
        except BaseException as err:  # an unreadable request: answer it, the stream may be lost
            request, failed = None, err
        if warm_text and isinstance(request, dict) and request.get("job") == READY_JOB:
            _warm_text()  # "ready" means warm: the writer is not imported later, beside the training steps
            warm_text = False
        try:
            if failed is not None:
                raise failed
            answer = {"ok": True, **handle(request)}
        except BaseException as err:
            answer = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        answer["forbidden_modules"] = sorted(m for m in sys.modules if m.split(".")[0] in _FORBIDDEN)
        answer["text_writer_ready"] = WRITER_MODULE in sys.modules  # tb_text.warm ran (every answer says)
        pickle.dump(answer, stdout, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.flush()
        answered = True
        if failed is not None:
            return 2


def _warm_text() -> None:
    with contextlib.suppress(Exception):  # not warm: the picture job imports it, as it would have
        from lightning_bottleneck.output.tb_text import warm

        warm()


def _waiting(stream: BinaryIO) -> bool | None:
    """Whether a request is already there; None when there is no telling (a test's BytesIO has no file
    descriptor; on Windows ``select`` cannot poll a pipe): the writer is then readied after the first answer."""
    try:
        import select

        return bool(select.select([stream.fileno()], [], [], 0)[0])
    except Exception:
        return None


def _warm_up() -> None:
    """Import the trace reader and the analysis while the parent pickles the first request."""
    from lightning_bottleneck.analysis import step_phases, trace_file  # noqa: F401
    from lightning_bottleneck.trace import reader  # noqa: F401


if __name__ == "__main__":
    raise SystemExit(main())
