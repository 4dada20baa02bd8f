"""Run one job of :mod:`~lightning_bottleneck.output.child_process` in a torch-free child process.

The training process only starts the child, pipes it the pickled request and waits for the answer in a
daemon thread that sleeps in ``communicate`` (no GIL held): the trace's reading and analysis and the
picture's drawing no longer stall training steps. Any failure (the child cannot start, crashes, runs past
``timeout_s``, answers garbage) raises :class:`ChildFailed`, and the caller falls back to doing the work
in-process with one note. Every child is killed when it runs past its time, by :func:`kill_all` (called
at interpreter exit), and by the Linux parent-death signal the child arms itself: none outlives the fit.

``LIGHTNING_BOTTLENECK_IN_PROCESS=1`` turns the child off (the work then runs in a thread as before).

Example::

    answer = run_child({"job": "analyse", "path": trace_file, "rank": 0}, timeout_s=60)
    summary, phases = answer["summary"], answer["phases"]
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = [
    "CHILD_TIMEOUT_S",
    "ENTRY_MODULE",
    "IN_PROCESS_ENV",
    "ChildFailed",
    "ChildJob",
    "kill_all",
    "live_children",
    "run_child",
]

#: The pure module the child runs (``python -m``); tests point it elsewhere to make the child fail.
ENTRY_MODULE = "lightning_bottleneck.output.child_process"
#: Environment variable that keeps the work in the training process (a platform that forbids children).
IN_PROCESS_ENV = "LIGHTNING_BOTTLENECK_IN_PROCESS"
#: Seconds a child may take before it is killed and the work done in-process: a 15-step window's trace
#: analyses in well under a second and a picture draws in ~0.2 s; 60 s covers a huge trace on a busy box.
CHILD_TIMEOUT_S = 60.0

_FRAMEWORKS = ("torch", "lightning", "pytorch_lightning")
_children: set[subprocess.Popen[bytes]] = set()
_lock = threading.Lock()


class ChildFailed(RuntimeError):
    """The child could not do the job; the message says why (for the note)."""


def enabled() -> bool:
    return os.environ.get(IN_PROCESS_ENV, "").strip().lower() not in ("1", "true", "yes")


def _env() -> dict[str, str]:
    """The parent's environment, with this package importable wherever it was imported from."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("MPLBACKEND", "Agg")
    return env


class _PlainPickler(pickle.Pickler):
    """Pickles a framework object (``torch.__version__`` is a ``TorchVersion``) as its string, so that the
    child, which does not import torch, can read every request."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj).__module__.split(".")[0] in _FRAMEWORKS:
            return str, (str(obj),)
        return NotImplemented


def plain_pickle(obj: Any) -> bytes:
    buf = io.BytesIO()
    _PlainPickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def run_child(request: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
    """Run one job in a fresh child and return its answer; :class:`ChildFailed` on any failure."""
    return ChildJob(request, timeout_s).run()


class ChildJob:
    """One job in one child; :meth:`kill` (from any thread) ends it and makes :meth:`run` fail."""

    def __init__(self, request: dict[str, Any], timeout_s: float | None = None) -> None:
        self.request = request
        self.timeout_s = CHILD_TIMEOUT_S if timeout_s is None else timeout_s
        self.killed = False
        self._proc: subprocess.Popen[bytes] | None = None

    def run(self) -> dict[str, Any]:
        if not enabled():
            raise ChildFailed(f"{IN_PROCESS_ENV} is set")
        try:
            payload = plain_pickle(self.request)
        except Exception as err:
            raise ChildFailed(f"the request could not be pickled: {type(err).__name__}: {err}") from err
        with _lock:  # a kill() from another thread sees the process, or stops it from starting
            if self.killed:
                raise ChildFailed("the child process was stopped")
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", ENTRY_MODULE],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=_env(),
                    close_fds=True,
                )
            except Exception as err:
                raise ChildFailed(f"the child process could not start: {type(err).__name__}: {err}") from err
            self._proc = proc
            _children.add(proc)
        try:
            return self._answer(proc, payload)
        finally:
            _kill(proc)

    def _answer(self, proc: subprocess.Popen[bytes], payload: bytes) -> dict[str, Any]:
        try:
            out, err_text = proc.communicate(payload, timeout=self.timeout_s)
        except subprocess.TimeoutExpired as err:
            raise ChildFailed(f"the child process took longer than {self.timeout_s:g} s") from err
        except Exception as err:  # a broken pipe: the child died before reading
            raise ChildFailed(f"the child process died: {type(err).__name__}: {err}") from err
        if self.killed:
            raise ChildFailed("the child process was stopped")
        try:
            answer = pickle.loads(out)
        except Exception as err:
            tail = err_text.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            raise ChildFailed(f"the child process exited with {proc.returncode}: {tail[0][:200]}") from err
        if not isinstance(answer, dict) or not answer.get("ok"):
            why = answer.get("error") if isinstance(answer, dict) else repr(answer)[:200]
            raise ChildFailed(f"the child process failed: {why}")
        return answer

    def kill(self) -> None:
        with _lock:
            self.killed = True
            proc = self._proc
        if proc is not None:
            _kill(proc)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(Exception):
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=5)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()
    with _lock:
        _children.discard(proc)


def live_children() -> list[int]:
    """Pids of children still running (the tests' orphan check)."""
    with _lock:
        return [p.pid for p in _children if p.poll() is None]


def kill_all() -> None:
    """Kill every child still running (teardown and interpreter exit)."""
    with _lock:
        procs = list(_children)
    for proc in procs:
        _kill(proc)


atexit.register(kill_all)
