"""The always-on step timing after the profiling window, without the callback's batch hooks.

Lightning calls each callback hook through ``_call_callback_hooks``: the hook's profiler action with its name
built from ``state_key``, then the call. On a CPU step that has just evicted the interpreter's caches that is
what two *empty* batch hooks cost: 22.7 us a step of 0.93 ms (``benchmarks/tiny_steps.py``, 7 rounds; 8-24 us
in single probes), 2.4% of the fit for nothing. After the window the callback's batch hooks only
time the step and look whether work is due (a memory sample, the mid-run verdict, autotune's switch), and the
fit ledger's profiler already sees every step's ``LightningModule`` hooks ``on_train_batch_start`` and
``on_train_batch_end``: Lightning calls them whether the module overrides them or not, right after the
callbacks' own. So once the ledger has seen both, :func:`go_hookless` gives it a :class:`StepFeed` and takes
the callback's two batch hooks out of Lightning's hook calls (:mod:`.phase_hooks`); :func:`back_to_hooks`
(teardown, every exception path) undoes both.

What the step timing measures does not change: a step still runs from one step's end to the next one's,
its data wait from the last end to its start; both marks move past the callbacks' batch hooks (the other
callbacks' hooks were already inside the step or its wait, by their order in ``trainer.callbacks``).
"""

from __future__ import annotations

import contextlib
from time import perf_counter
from typing import Any

from lightning_bottleneck.live.phase_hooks import STEP_HOOKS, set_hooks
from lightning_bottleneck.live.verdict_outputs import step_scalars

__all__ = ["SCALARS_MIN_GAP_S", "StepFeed", "after_step", "back_to_hooks", "go_hookless"]

#: The ledger's classifier has seen both LightningModule batch hooks (live/ledger_actions.py).
_BOTH_MARKS = 3
#: Seconds between two writes of the ``bottleneck/*`` scalars when they follow the Trainer's
#: ``log_every_n_steps``: a write (three scalars to every logger) took ~0.2 ms, and at the default 50 steps
#: of a 0.5 ms step that was 0.2 s of a 26 s fit (its diagnosis part fell from 0.59-0.62 s to 0.41 s without
#: them, benchmarks/autotune_payoff.py's tiny_linear); a chart needs no more than two points a second.
SCALARS_MIN_GAP_S = 0.5


class StepFeed:
    """The callback's batch-hook work, told by the ledger (one frame each: ``step_started`` is the timer's own
    method); an internal error disables the callback (one warning, training goes on) as the hooks' own guard
    does, through :meth:`failed`, which the ledger's contexts call."""

    __slots__ = ("batch_end", "diagnosis", "owner", "run", "step_started")

    def __init__(self, owner: Any, run: Any) -> None:
        self.owner = owner
        self.run = run
        self.step_started = run.timer.batch_start
        self.batch_end = run.timer.batch_end
        self.diagnosis = run.ledger.diagnosis if run.ledger is not None else None

    def step_ended(self) -> None:
        """:meth:`FitRun.batch_end` outside the window; the work due in the ledger's diagnosis slot (this
        package's time, not the step's, as in the callback's own hook)."""
        if self.batch_end():
            run = self.run
            after_step(run, run.trainer, run.pl_module, self.diagnosis)

    def failed(self, where: str, err: Exception) -> None:
        if not self.owner._disabled:
            self.owner._disable(f"{where} (ledger): {type(err).__name__}: {err}")


def after_step(run: Any, trainer: Any, pl_module: Any, diagnosis: Any = None) -> None:
    """Every step's end, hooked or fed: the sync tracker's step count, then what is due (rarely: a memory
    sample, the mid-run verdict, autotune's switch, the scalars every ``log_every_n_steps``), inside
    ``diagnosis`` when given."""
    if run.tracker is not None:
        run.tracker.step()
    steps = run.timer.steps
    scalars = run.scalar_every and steps % run.scalar_every == 0
    if scalars and run.scalar_gap_s:  # following the Trainer's cadence: at most one write per gap
        now = perf_counter()
        scalars = now >= run.scalar_next_t
        if scalars:
            run.scalar_next_t = now + run.scalar_gap_s
    if steps >= run.next_work or scalars:
        with diagnosis if diagnosis is not None else contextlib.nullcontext():
            if steps >= run.next_work:
                run.due(trainer, pl_module)
            if scalars:
                step_scalars(run, trainer)


def go_hookless(run: Any) -> bool:
    """The ledger times the steps from now on and the callback's batch hooks leave Lightning's hook calls;
    False (nothing changed) without a ledger, an owner, or both LightningModule batch hooks seen."""
    ledger, owner = run.ledger, run.owner
    if ledger is None or owner is None or ledger.actions.step_marks != _BOTH_MARKS:
        return False
    ledger.feed = StepFeed(owner, run)
    set_hooks(owner, STEP_HOOKS, False)
    return True


def back_to_hooks(run: Any) -> None:
    """The callback's batch hooks back in Lightning's hook calls, the ledger's feed gone (never raises)."""
    ledger = run.ledger
    if ledger is not None:
        ledger.feed = None
    if run.owner is not None:
        with contextlib.suppress(Exception):
            set_hooks(run.owner, STEP_HOOKS, True)
