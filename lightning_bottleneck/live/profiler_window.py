"""The profiling window: a ``torch.profiler`` schedule driven step by step, its phase labels, its traces.

:class:`ProfilerWindow` owns everything that exists only while ``torch.profiler`` runs: the profiler,
the ``bottleneck/<phase>`` record_function labels that mark the training-step phases, the optimizer
step post-hook that closes the ``optimizer_step`` label, and the export of each finished cycle to a
gzipped trace TensorBoard's PyTorch Profiler tab reads. The callback tells it when a step starts, a phase
begins and a step ends; :meth:`ProfilerWindow.release` undoes everything on any path. In the spirit of
Lightning's ``ScheduleWrapper`` / ``RegisterRecordFunction`` beside ``PyTorchProfiler``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.profiler import ProfilerAction, ProfilerActivity

from lightning_bottleneck.live.stderr_filter import kineto_lines_dropped
from lightning_bottleneck.trace.tb_compat import write_trace
from lightning_bottleneck.vocabulary import ENV_VAR, PHASE_OPTIMIZER_STEP, label

__all__ = ["ProfilerWindow", "WindowOptions", "profiler_in_use", "worker_name"]


@dataclass(frozen=True)
class WindowOptions:
    """The callback's window options: ``skip_first`` steps, then ``repeat`` x (wait, warmup, active)."""

    skip_first: int
    wait: int
    warmup: int
    active: int
    repeat: int
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False

    @property
    def length(self) -> int:
        """Training steps until the last profiled step of the last cycle."""
        return self.skip_first + self.repeat * (self.wait + self.warmup + self.active)

    def schedule(self) -> Callable[[int], ProfilerAction]:
        return torch.profiler.schedule(
            skip_first=self.skip_first,
            wait=self.wait,
            warmup=self.warmup,
            active=self.active,
            repeat=self.repeat,
        )


class ProfilerWindow:
    """One fit's profiling window. Not started until :meth:`start`; every method is cheap when idle.

    The torch profiler itself starts only when the ``skip_first`` steps are over: a started profile costs
    its ``step()`` every training step even while it skips (a ``ProfilerStep#N`` record_function closed and
    opened through torch's dispatcher: ~15 us in a tight loop, ~160 us a step after a 10 ms CPU step, when
    the caches are cold; issue 18), so the skipped steps are counted here instead, for ~nothing.

    Example::

        window = ProfilerWindow(WindowOptions(0, 1, 1, 3, 1))
        window.start(Path("traces"), worker="host_rank0", cuda=False)
        for batch in loader:
            window.open("training_step")  # labels only while the profiler records
            ...
            window.close_all()
            if window.advance():  # the schedule just ended: traces are written
                break
        window.release()
    """

    def __init__(self, options: WindowOptions) -> None:
        self.options = options
        self._schedule = options.schedule()
        self.prof: torch.profiler.profile | None = None
        self.optimizer_hook: Any = None
        self.step = 0
        self.active = False  # started and not stopped (the torch profiler may not have started yet)
        self.done = False
        self.trace_files: list[str] = []
        self.labels: list[Any] = []  # open record_function labels, innermost last
        self.notes: list[str] = []  # what went wrong while exporting (for the report)
        self._trace_dir: Path | None = None
        self._worker = "rank0"
        self._cuda = False
        self._registered = False  # this window added "ProfilerStep" to torch's step tracker

    # ------------------------------------------------------------------ start / step / stop
    @property
    def running(self) -> bool:
        """The window is under way: started, not yet stopped (the torch profiler may still be waiting)."""
        return self.active

    def start(self, trace_dir: Path, worker: str, cuda: bool) -> None:
        """Start the window: the torch profiler (its schedule decides which steps record) and the optimizer
        hook now, or after the ``skip_first`` steps."""
        self._trace_dir = trace_dir
        self._worker = worker
        self._cuda = cuda
        self.step = 0
        self.active = True
        if self.options.skip_first <= 0:
            self._start_profiler()

    def _start_profiler(self) -> None:
        activities = [ProfilerActivity.CPU]
        if self._cuda:
            activities.append(ProfilerActivity.CUDA)
        # torch.profiler.profile registers "ProfilerStep" with torch's global step tracker and erases it only
        # in __exit__, which a started/stopped session never calls: erased in stop() as __exit__ would, so
        # that the next fit's setup knows no session is left (and skips the object scan).
        self._registered = not _maybe_constructed()
        self.prof = torch.profiler.profile(
            activities=activities,
            schedule=self._schedule,
            on_trace_ready=self._on_trace_ready,
            record_shapes=self.options.record_shapes,
            profile_memory=self.options.profile_memory,
            with_stack=self.options.with_stack,
        )
        # Started after the skipped steps: it goes on from there, so that its ``ProfilerStep#N`` labels (the
        # step numbers TensorBoard shows) are the training steps, as if it had stepped through them.
        action: Any = self._schedule(self.step)
        self.prof.step_num, self.prof.current_action = self.step, action
        if hasattr(self.prof, "_prev_schedule_action"):  # torch >= 2.12 keeps the schedule's raw action too
            self.prof._prev_schedule_action = action
        with kineto_lines_dropped():  # an action other than NONE starts Kineto (its USDT line)
            self.prof.start()
        # Lives only as long as the profiler: closes the optimizer_step label (see open_optimizer_step).
        self.optimizer_hook = register_optimizer_step_post_hook(self._after_optimizer_step)

    def recording(self) -> bool:
        """True while the profiler records (warmup or active) the current step."""
        if self.prof is None:
            return False
        return self._schedule(self.step) != ProfilerAction.NONE

    def advance(self) -> bool:
        """One training step ended: step the profiler. True when this closed the window (traces written)."""
        if not self.active:
            return False
        self.step += 1
        if self.prof is not None:
            starts_or_stops = self._schedule(self.step) != self._schedule(self.step - 1)  # Kineto's USDT line
            with kineto_lines_dropped() if starts_or_stops else contextlib.nullcontext():
                self.prof.step()
        elif self.step >= self.options.skip_first:
            self._start_profiler()  # the skipped steps are over: the schedule's wait starts now
        if self.step >= self.options.length:
            self.stop(save=True)
            self.done = True
            return True
        if self.recording():
            self.open("data_wait")
        return False

    def stop(self, save: bool) -> None:
        """Stop the profiler (``save``: export a partial active window) and remove its optimizer hook."""
        self.active = False
        hook, self.optimizer_hook = self.optimizer_hook, None
        if hook is not None:
            hook.remove()
        prof, self.prof = self.prof, None
        if prof is not None:
            if not save:
                prof.on_trace_ready = None
            try:
                with kineto_lines_dropped():
                    prof.stop()
            finally:
                if self._registered:
                    self._registered = False
                    _erase_step_tracker()

    def release(self) -> None:
        """Undo everything, never raising: close labels, stop the profiler (discarding a partial window)."""
        while self.labels:
            rf = self.labels.pop()
            with contextlib.suppress(Exception):
                rf.__exit__(None, None, None)
        with contextlib.suppress(Exception):
            self.stop(save=False)

    # ------------------------------------------------------------------ labels
    def open(self, phase: str) -> None:
        """Open the ``bottleneck/<phase>`` label if the current step is recorded."""
        if self.prof is not None and self.recording():
            rf = torch.profiler.record_function(label(phase))
            rf.__enter__()
            self.labels.append(rf)

    def close_all(self) -> None:
        while self.labels:
            self.labels.pop().__exit__(None, None, None)

    def enter(self, phase: str | None) -> None:
        """The step moves to ``phase``: every open label closes, then ``phase`` opens if the step is recorded
        (``None``: none). The one place the callback's hooks place labels."""
        if self.labels:
            self.close_all()
        if phase is not None:
            self.open(phase)

    def open_optimizer_step(self) -> None:
        """Lightning calls ``on_before_optimizer_step`` inside torch's ``Optimizer.step#`` span, after the
        closure (forward and backward) ran: the label opened here covers the update alone and is closed
        by the optimizer's step post-hook, still inside that span, so the labels nest."""
        if self.prof is not None and self.recording():
            if self.labels:
                self.close_all()
            self.open(PHASE_OPTIMIZER_STEP)

    def _after_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.labels and self.labels[-1].name == label(PHASE_OPTIMIZER_STEP):
            self.labels.pop().__exit__(None, None, None)

    # ------------------------------------------------------------------ export
    def _on_trace_ready(self, prof: torch.profiler.profile) -> None:
        """Export one finished cycle. A failure to write (a full disk) becomes a note, and no partial
        file stays behind; the report is still made from what else was measured."""
        assert self._trace_dir is not None
        path = self._trace_dir / f"{self._worker}.{time.time_ns() // 1_000_000}.pt.trace.json.gz"
        raw: Path | None = None
        try:
            self._trace_dir.mkdir(parents=True, exist_ok=True)
            # A new file created exclusively: nothing planted at a predictable name is followed.
            fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=self._trace_dir)
            os.close(fd)
            raw = Path(name)
            prof.export_chrome_trace(str(raw))
            if raw.stat().st_size == 0:  # Kineto logs "Failed to write to log file!" and returns
                raise OSError("the profiler wrote no trace; is the disk full?")
            self.trace_files.append(str(write_trace(raw, path)))
        except Exception as err:
            if raw is not None:
                with contextlib.suppress(OSError):
                    raw.unlink(missing_ok=True)
            self.notes.append(
                f"the profiler trace could not be written to {self._trace_dir} ({_reason(err)})."
            )
        finally:
            if raw is not None:  # Kineto writes through <path>.tmp and may leave it behind on failure
                with contextlib.suppress(OSError):
                    raw.with_name(raw.name + ".tmp").unlink(missing_ok=True)


def profiler_in_use(scan: bool = True) -> bool:
    """True while another ``torch.profiler`` session runs in this process: only one can.

    Recording sessions (the user's ``with torch.profiler.profile(): trainer.fit(...)``) show in the
    autograd profiler's state. A scheduled session still in its ``wait`` steps shows nowhere yet, but would
    crash the process when it starts recording next to this window's (torch 2.13 segfaults): it is found
    among the live ``torch.profiler.profile`` objects as one that was started (its ``ProfilerStep#`` label
    is open) and not stopped. Costs one pass of the garbage collector's object list (~50 ms with torch and
    lightning loaded), so it is done at setup only (``scan``) and only when torch's step tracker says a
    ``profile`` was constructed and not exited; train start checks the recording flags.
    """
    if getattr(torch.autograd.profiler, "_is_profiler_enabled", False):
        return True
    enabled = getattr(torch._C._autograd, "_profiler_enabled", None)
    if enabled is not None and enabled():
        return True
    return (
        scan
        and _maybe_constructed()
        and any(getattr(p, "step_rec_fn", None) is not None for p in _profile_objects())
    )


#: The key ``torch.profiler.profile`` registers with ``KinetoStepTracker`` (torch.profiler.profiler's
#: ``PROFILER_STEP_NAME``).
PROFILER_STEP_KEY = "ProfilerStep"


def _step_tracker() -> Any:
    """torch's global ``KinetoStepTracker`` (None where this torch has none)."""
    return getattr(torch.autograd.profiler, "KinetoStepTracker", None)


def _erase_step_tracker() -> None:
    erase = getattr(_step_tracker(), "erase_step_count", None)
    if erase is not None:
        erase(PROFILER_STEP_KEY)


def _maybe_constructed() -> bool:
    """Whether a ``torch.profiler.profile`` may exist: its constructor registers ``"ProfilerStep"`` with
    torch's global ``KinetoStepTracker`` and its ``__exit__`` erases it, so without that key there is none
    to scan for (the usual case: the ~50 ms object scan is skipped). True when torch has no such tracker."""
    steps = getattr(_step_tracker(), "_step_dict", None)
    if not isinstance(steps, dict):
        return True
    return PROFILER_STEP_KEY in steps


def _profile_objects() -> list[torch.profiler.profile]:
    """Live ``torch.profiler.profile`` objects (and of its subclasses): instances refer to their class."""
    classes: list[type] = [torch.profiler.profile]
    for cls in classes:  # grows while iterated: every subclass, however deep
        subclasses: list[type] = cls.__subclasses__()
        classes.extend(c for c in subclasses if c not in classes)
    return [o for o in gc.get_referrers(*classes) if isinstance(o, torch.profiler.profile)]


def _reason(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def worker_name(rank: int) -> str:
    """torch-tb-profiler's worker name: ``<host>_rank<N>`` (its run view lists one worker per rank)."""
    return f"{socket.gethostname()}_rank{rank}"


def stands_down(callback: Any, trainer: Any, duplicates: bool = True) -> bool:
    """Whether ``callback`` must leave this fit alone, saying why once; called at setup and train start.

    - Another ``BottleneckCallback`` comes first in ``trainer.callbacks`` (two in the code, or
      ``LIGHTNING_BOTTLENECK=1`` with one already in the code: the entry point cannot see the Trainer, and
      Lightning appends its callbacks after the user's). The first one runs the analysis with its own
      options and notes it in its report; this one logs one info line.
    - A ``torch.profiler`` session already records (the user's own ``with torch.profiler.profile():
      trainer.fit(...)``, on any rank): only one can run in a process, so the user's session is left
      intact, every rank stands down, and one warning says so.
    """
    from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

    if duplicates:
        first = next((c for c in trainer.callbacks if isinstance(c, type(callback))), callback)
        if first is not callback:
            rank_zero_info(
                "BottleneckCallback: another BottleneckCallback in this Trainer runs the analysis (two in the "
                f"code, or {ENV_VAR} with one in the code); this one stands down."
            )
            first._run.notes.append(
                "A second BottleneckCallback in the Trainer stood down; this one ran the analysis."
            )
            return True
    busy = profiler_in_use(scan=duplicates)  # the object scan at setup; train start: the cheap flags
    strategy = getattr(trainer, "strategy", None)
    if strategy is not None and getattr(trainer, "world_size", 1) > 1:
        # Every rank must take the same road: the callback's set-up has collectives (log_dir, the gather's
        # group), and a user may profile one rank only. One all-reduce, at setup and train start.
        busy = strategy.reduce_boolean_decision(busy, all=False)
    if busy:
        rank_zero_warn(
            "BottleneckCallback stands down for this fit: a torch.profiler session is already recording "
            "(your own `with torch.profiler.profile()`?) and only one can run in a process; that session is "
            "left intact. Remove it, or the callback, to get the analysis."
        )
        return True
    return False
