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
import tempfile
import threading
from pathlib import Path
from typing import Any

from lightning_bottleneck.output.child_process import READY_JOB, WARM_TEXT_FLAG

__all__ = [
    "CHILD_TIMEOUT_S",
    "ENTRY_MODULE",
    "IN_PROCESS_ENV",
    "ONE_THREAD_ENV",
    "READY_TIMEOUT_S",
    "ChildFailed",
    "ChildJob",
    "ChildWorker",
    "kill_all",
    "live_children",
    "run_child",
    "waits_for_child",
]

#: The pure module the child runs (``python -m``); tests point it elsewhere to make the child fail.
ENTRY_MODULE = "lightning_bottleneck.output.child_process"
#: Environment variable that keeps the work in the training process (a platform that forbids children).
IN_PROCESS_ENV = "LIGHTNING_BOTTLENECK_IN_PROCESS"
#: Seconds a child may take before it is killed and the work done in-process: a 15-step window's trace
#: analyses in well under a second and a picture draws in ~0.2 s; 60 s covers a huge trace on a busy box.
CHILD_TIMEOUT_S = 60.0
#: Seconds a fit whose step runs on the CPU waits for the child to be warm before its first step (it starts in
#: ~0.2 s; a child not ready by then is killed and the work done in-process).
READY_TIMEOUT_S = 10.0

_FRAMEWORKS = ("torch", "lightning", "pytorch_lightning")
#: Thread pools of numpy's BLAS / OpenMP runtimes, each held to one thread in the child: it never takes more
#: than one core beside training (OpenBLAS otherwise starts a thread per core at ``import numpy``).
ONE_THREAD_ENV = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
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
    env.update(dict.fromkeys(ONE_THREAD_ENV, "1"))
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
        proc = _spawn(stderr=subprocess.PIPE)
        with _lock:
            self._proc = proc
            killed = self.killed
        if killed:
            _kill(proc)
            raise ChildFailed("the child process was stopped")
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


def waits_for_child(device_type: str) -> bool:
    """Whether the fit waits for its child to be warm before the steps (:meth:`ChildWorker.wait_ready`): the model
    trains on the CPU and its intra-op threads take every usable core, so the child's start could only run on a core
    an OpenMP thread of the step waits on (with a core to spare, or a GPU step, it starts beside the steps)."""
    if device_type != "cpu":
        return False
    import torch

    from lightning_bottleneck.measure.cpus import usable_cpus

    return usable_cpus() <= torch.get_num_threads()


class ChildWorker:
    """One child for the whole fit, started at the callback's ``setup`` (its interpreter start and imports
    overlap Lightning's own start-up, so it is warm when the window closes; its CPU is this process tree's in
    the busy-machine check), answering the fit's requests one after the other (the window's analysis, the mid-run and end-of-fit pictures). A request that fails in the child is a :class:`ChildFailed` for that
    request only; a child that dies or runs past its time is killed and every later request fails at once
    (the caller then works in-process). :meth:`close` kills it (teardown, every exception path).

    Start it from the training thread: the Linux parent-death signal follows the thread that started it.
    """

    def __init__(self) -> None:
        self.failed: str | None = None
        self.ready = False  # it answered :meth:`wait_ready`
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()  # one request at a time
        self._stderr: Any = None

    @classmethod
    def start(cls, warm_text: bool = False) -> ChildWorker:
        """``warm_text``: the child will write TensorBoard's Text-tab event (a fit without a TensorBoard
        logger), so it imports that writer at its first idle moment (:func:`~lightning_bottleneck.output.
        child_process.main`), not when the end-of-fit picture waits for it."""
        worker = cls()
        if not enabled():
            worker.failed = f"{IN_PROCESS_ENV} is set"
            return worker
        try:
            # a file, not a pipe: a pipe nobody reads could fill and block the child; closed in close()
            worker._stderr = tempfile.TemporaryFile()  # noqa: SIM115
            worker._proc = _spawn(stderr=worker._stderr.fileno(), args=[WARM_TEXT_FLAG] if warm_text else [])
        except (ChildFailed, OSError) as err:
            worker.failed = str(err)
        return worker

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def request(self, request: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """The child's answer to ``request`` (blocks the calling thread, not the GIL)."""
        try:
            payload = plain_pickle(request)
        except Exception as err:
            raise ChildFailed(f"the request could not be pickled: {type(err).__name__}: {err}") from err
        with self._lock:
            proc = self._proc
            if self.failed is not None or proc is None or proc.stdin is None or proc.stdout is None:
                raise ChildFailed(self.failed or "the child process is not running")
            timeout = CHILD_TIMEOUT_S if timeout_s is None else timeout_s
            timer = threading.Timer(timeout, self._expire, args=(timeout,))
            timer.daemon = True
            timer.start()
            try:
                proc.stdin.write(payload)
                proc.stdin.flush()
                answer = pickle.load(proc.stdout)
            except Exception as err:
                why = (
                    self.failed or f"the child process died: {type(err).__name__}: {err}{self._last_words()}"
                )
                self.failed = why
                _kill(proc)
                raise ChildFailed(why) from err
            finally:
                timer.cancel()
        if not isinstance(answer, dict) or not answer.get("ok"):
            error = answer.get("error") if isinstance(answer, dict) else repr(answer)[:200]
            raise ChildFailed(f"the child process failed: {error}")
        return answer

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> bool:
        """Block until the child has started and imported what it needs (:data:`~lightning_bottleneck.output.
        child_process.READY_JOB`); False when it failed (later requests then fail at once and the work is done
        in-process). Where :func:`waits_for_child`, the fit waits for this before the loader's workers and its first
        step: the child's start (~0.2-0.3 s of CPU) beside the first steps took the cores their intra-op threads run on.
        cpu_transform_light on the 2-core VM (``python benchmarks/payoff_workloads.py --workload
        cpu_transform_light --mode callback``): steps of 1.3 ms took 50-130 ms while it started, 0.55-0.59 s of
        training steps against 0.40 s with ``LIGHTNING_BOTTLENECK_IN_PROCESS=1``, and the ledger, which books
        them as training, read the loader advice at 1.63-1.78x for an applied 1.27-1.45x."""
        try:
            self.request({"job": READY_JOB}, timeout_s)
        except ChildFailed:
            return False
        self.ready = True
        return True

    def _last_words(self) -> str:
        """The last line the child wrote to stderr (why it died), if any."""
        try:
            self._stderr.seek(0)
            lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
            return f" ({lines[-1][:200]})" if lines else ""
        except Exception:
            return ""

    def _expire(self, timeout: float) -> None:
        self.failed = self.failed or f"the child process took longer than {timeout:g} s"
        if self._proc is not None:
            _kill(self._proc)

    def close(self) -> None:
        """Kill the child (a request in flight fails with :class:`ChildFailed`); never raises."""
        self.failed = self.failed or "the child process was stopped"
        if self._proc is not None:
            _kill(self._proc)
        if self._stderr is not None:
            with contextlib.suppress(Exception):
                self._stderr.close()


def _spawn(stderr: int = subprocess.DEVNULL, args: list[str] | None = None) -> subprocess.Popen[bytes]:
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", ENTRY_MODULE, *(args or [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=_env(),
            close_fds=True,
        )
    except Exception as err:
        raise ChildFailed(f"the child process could not start: {type(err).__name__}: {err}") from err
    with _lock:
        _children.add(proc)
    return proc


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(Exception):
        if proc.poll() is None:
            proc.kill()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()
    if proc.poll() is None:
        # SIGKILL is sent and the kernel ends the child within milliseconds; a daemon thread reaps it, so
        # that teardown does not sleep in ``wait`` (~15 ms of polling) nor block on a child that lingers
        threading.Thread(target=_reap, args=(proc,), name="lightning-bottleneck-reap", daemon=True).start()
        return
    with _lock:
        _children.discard(proc)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(Exception):
        proc.wait(timeout=5)
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
