"""``BottleneckCallback(autotune=True)``: apply the loader probe's measured DataLoader setting to the running fit,
time it against the steps before, keep it only when faster beyond noise, else switch back.

The state machine runs at epoch ends (``on_train_epoch_end``), on every rank at the same epoch:

1. *waiting*: once the mid-run verdict exists, global rank zero picks the setting
   (:func:`~lightning_bottleneck.rules.autotune.choose`: the loader plan's measured advice, only ``num_workers`` /
   ``persistent_workers`` / ``prefetch_factor`` / ``pin_memory`` on a GPU, and the training process's intra-op
   threads its workers were timed beside on a CPU step: :mod:`lightning_bottleneck.live.autotune_threads`) and
   broadcasts it (``trainer.strategy.broadcast``); every rank re-creates its train DataLoader(s) with it through
   Lightning's own machinery (the arguments Lightning captured from the user's DataLoader, the same sampler object)
   and puts them in the fit loop's ``CombinedLoader`` (``flattened``): every train loader gets the setting.
   Where the sampler's position can be kept exactly (:func:`~lightning_bottleneck.live.loader_switch.
   can_switch_mid_epoch`) the switch is made mid-epoch instead, :data:`~lightning_bottleneck.rules.autotune.
   CLEAN_BEFORE_STEPS` steps after the verdict (``CLEAN_BEFORE_MIN`` when the advice predicts ``LARGE_GAIN_MIN`` or
   more): those steps are what the setting is judged against, not the fit's warm-up and the profiled window.
2. *trial*: after at least :data:`~lightning_bottleneck.rules.autotune.MIN_CONFIRM_STEPS` steps and one epoch,
   rank zero compares the steps after with the steps before
   (:func:`~lightning_bottleneck.rules.autotune.decide`, the noise-aware comparison of ``compare``) and
   broadcasts keep or undo; undo puts the original loaders back (one whose workers persisted re-created with its
   own settings: :func:`~lightning_bottleneck.live.loader_switch.own_loaders`) and shuts down the workers autotune
   started.
3. *race*: a kept setting with a :attr:`~lightning_bottleneck.rules.autotune.Choice.alternative` (the worker count
   the loader probe left to the run) and at least two epochs left: the alternative runs the next epoch and the
   faster stays (:mod:`lightning_bottleneck.live.autotune_race`). Then *done*.

A fit with too few epochs left for that (one long epoch, or ``max_steps`` inside the first) is switched mid-epoch
where the sampler's position is kept, checked :data:`~lightning_bottleneck.rules.autotune.MIN_CONFIRM_STEPS` steps
later inside the same epoch, and undone there exactly (:mod:`lightning_bottleneck.live.autotune_in_epoch`); where the
position cannot be kept, or the epoch is too short to check and pay back, nothing is applied and the record says why.

Workers that restart every epoch are decided apart (:mod:`lightning_bottleneck.live.autotune_restart`): at each
epoch end before the profiling window's verdict, where they spent most of an epoch starting up (the first epoch's
wait may hide some behind on_train_start: :func:`~lightning_bottleneck.rules.autotune.restart_bound`), and at the
boundary after a verdict that has no measured setting to apply, for a smaller share. Rank zero times a few batches
loaded in the training process (:func:`~lightning_bottleneck.measure.loader_probe.time_in_process`, within a
fiftieth of that start-up) and picks ``num_workers=0`` or ``persistent_workers=True``
(:func:`~lightning_bottleneck.rules.autotune.restart_fix`); the switch, the check and the undo are as above, and the
train loader is not probed again. The same samples: :mod:`lightning_bottleneck.live.loader_switch`; at the fit's end
or exception the workers autotune put in the fit loop stop (:meth:`Autotuner.close`), the user's threads come back.
"""

from __future__ import annotations

import contextlib
from statistics import median
from typing import Any

from lightning.pytorch.utilities import rank_zero_info

from lightning_bottleneck.advice.autotune import keep_line
from lightning_bottleneck.autotune_record import (
    APPLIED,
    BASIS_FIRST_EPOCH,
    BASIS_VERDICT,
    KEPT,
    NOT_APPLIED,
    UNDONE,
    AutotuneRecord,
)
from lightning_bottleneck.live.autotune_in_epoch import undo_in_epoch
from lightning_bottleneck.live.autotune_race import finish_race, start_race
from lightning_bottleneck.live.autotune_restart import restart_choice, restarting_loaders
from lightning_bottleneck.live.autotune_steps import (
    DONE,
    RACE,
    TRIAL,
    WAITING,
    cannot_apply,
    epochs_left,
    in_epoch_only,
    probe_plan,
    spread,
    steps_since,
)
from lightning_bottleneck.live.autotune_threads import HeldThreads
from lightning_bottleneck.live.loader_batches import Drain
from lightning_bottleneck.live.loader_switch import (
    can_switch_mid_epoch,
    continue_epoch,
    draws_every_epoch,
    eligible,
    epoch_batches,
    loader_settings,
    own_loaders,
    recreate,
    rest_of_epoch,
    shutdown_iterator,
    shutdown_workers,
    uncut,
)
from lightning_bottleneck.measure.stage import run_length
from lightning_bottleneck.output.autotune import autotune_line, settings_text
from lightning_bottleneck.rules.autotune import (
    CLEAN_BEFORE_MIN,
    MIN_CONFIRM_STEPS,
    MIN_EPOCHS_LEFT,
    Choice,
    choose,
    decide,
)
from lightning_bottleneck.vocabulary import loader_arguments

#: ``switch_at`` when no mid-epoch switch waits (the fit's own "never" step).
NO_SWITCH = 2**62


class Autotuner:
    """One fit's autotune (see the module docstring); driven by the callback's epoch hooks."""

    def __init__(self, verbose: bool = True) -> None:
        self.verbose = verbose
        self.state = WAITING
        self.record: AutotuneRecord | None = None
        # the timed steps, one entry per epoch (split in two at a mid-epoch switch): (first step, other steps)
        self.entries: list[tuple[float | None, list[float]]] = []
        self.split = 0  # entries[split:] ran with the setting
        self.one_off: set[int] = set()  # entries whose first step paid a start-up kept or left out (_after)
        self.ring_start = 0
        self.starts_seen = 0
        self.pending: Choice | None = None  # rank zero's choice, every rank
        self.originals: list[Any] = []
        self.replaced: list[Any] = []
        self.rest_of_epoch: list[Any] = []  # iterators of the loaders that finish a switched epoch
        self.drains: list[Drain] = []  # the fit loop's iterators since a mid-epoch switch from workers
        # a switch checked within its epoch (Choice.in_epoch): the fit loop's positions and loaders it switched
        self.in_epoch = False
        self.switched: list[tuple[int, Any]] = []
        self.switch_epoch: int | None = None
        self.switch_steps = 0
        self.before: list[float] = []
        # the first-epoch check's figures, for the record: (start-up ms, a batch loaded in-process ms)
        self.first_epoch: tuple[float, float | None] | None = None
        self.per_epoch: int | None = None  # training batches an epoch (trainer.num_training_batches)
        # the mid-run verdict's position in the step ring (the steps from there on are clean: see _clean_before)
        # and the step at which the mid-epoch switch is made (``Choice.clean_steps`` later)
        self.clean_from: int | None = None
        self.switch_at = NO_SWITCH
        # the race (RACE): the setting run for one epoch against the kept one (Choice.alternative), the kept one's
        # steps, the raced loaders and the first entry that ran with them
        self.alternative: dict[str, Any] | None = None
        self.first_steps: list[float] = []
        self.raced: list[Any] = []
        self.race_from, self.threads = 0, HeldThreads()  # threads: the process's, as a setting holds them

    # ------------------------------------------------------------------ timing per epoch
    def epoch_start(self, run: Any) -> None:
        self.ring_start = run.timer.step_ms.n
        self.starts_seen = len(run.timer.epoch_start_wait_ms)

    def _epoch_steps(self, run: Any) -> tuple[float | None, list[float]]:
        """This epoch's step times (profiled ones left out) and its first step (epoch-start wait + a median step)."""
        values = steps_since(run, self.ring_start)
        waits = run.timer.epoch_start_wait_ms
        first = None
        if len(waits) > self.starts_seen:
            first = waits[self.starts_seen] + (median(values) if values else 0.0)
        return first, values

    # ------------------------------------------------------------------ the epoch end
    def epoch_end(self, run: Any, trainer: Any) -> None:
        """Time the epoch; apply, or judge, when due. A failure puts the user's loaders back and ends autotune
        (one reason on the record); the callback and the fit go on."""
        if self.state == DONE:
            self.close()  # the loaders that finished a switched epoch: their workers go
            return
        try:
            self._epoch_end(run, trainer)
        except Exception as err:
            if self.state in (TRIAL, RACE) and self.originals:
                with contextlib.suppress(Exception):
                    trainer.fit_loop._combined_loader.flattened = own_loaders(self.replaced, self.originals)
                for dl, original in zip([*self.replaced, *self.raced], [*self.originals, *self.originals]):
                    if dl is not original:
                        shutdown_workers(dl)
                self.threads.restore()
            self._failed(err)

    def _epoch_end(self, run: Any, trainer: Any) -> None:
        if self.per_epoch is None:
            self.per_epoch = run_length(trainer).steps_per_epoch
        self.entries.append(self._epoch_steps(run))
        self.close()  # the loaders that finished the switched epoch: their workers go
        after_verdict = self.pending is not None and self.pending.settings is None  # it had nothing to apply
        if self.state == WAITING and (after_verdict or self.pending is None):
            # workers restarted every epoch: each epoch's end before any verdict, or once it had nothing
            payload = self._agreed(trainer, lambda: restart_choice(self, run, trainer, after_verdict))
            if payload.settings is not None:
                self._apply(run, trainer, payload, mid_epoch=False)
                return
            if after_verdict and len(self.entries) == 1 and restarting_loaders(trainer):
                return  # the first epoch's wait may hide the start-up (restart_choice); the next one's shows it
        if self.state == WAITING and run.midrun_report is not None:
            self.switch_at = NO_SWITCH  # the boundary comes first: the switch is made here
            if self.pending is None:  # no choice at the mid-run verdict (it did not reach this object)
                self.pending = self._agreed_choice(run, trainer)
            if self.pending.in_epoch:  # its epoch ended before the switch: no boundary left to check it at
                self.state = DONE
                self._not_applied(f"the epoch ended before the switch, and {self.pending.reason}")
                return
            self._apply(run, trainer, self.pending, mid_epoch=False)
        elif self.state == TRIAL and (
            self.in_epoch or run.timer.steps - self.switch_steps >= MIN_CONFIRM_STEPS
        ):
            self.in_epoch, self.switch_at = False, NO_SWITCH  # an in-epoch check the epoch's end came before
            self._decide(run, trainer)
        elif self.state == RACE:  # the raced setting's epoch is over
            finish_race(self, run, trainer)

    def midrun(self, run: Any, trainer: Any) -> None:
        """Right after the mid-run verdict (the same step on every rank): the choice, and, where the position in
        the sampler can be kept exactly, the switch now; else at the next epoch boundary."""
        if self.state != WAITING or self.pending is not None:
            return
        try:
            self.pending = self._agreed_choice(run, trainer)
            self.clean_from = run.timer.step_ms.n
            if self.pending.settings is not None and can_switch_mid_epoch(trainer, self.pending.settings):
                self.switch_at = run.timer.steps + self.pending.clean_steps  # the same step on every rank
            elif self.pending.in_epoch:  # only within this epoch, and not this setting
                self.state = DONE
                what = settings_text(self.pending.settings or {})
                self._not_applied(f"{self.pending.reason}, and {what} cannot be switched mid-epoch")
        except Exception as err:
            self._failed(err)

    def step(self, run: Any, trainer: Any) -> None:
        """A batch end at or after ``switch_at`` (the caller's due work): the mid-epoch switch, once the steps
        after the verdict are timed, or its check within the epoch (:attr:`in_epoch`); the same step on every rank."""
        self.switch_at = NO_SWITCH
        if self.state == TRIAL and self.in_epoch:
            try:
                self._decide(run, trainer)
            except Exception as err:  # nothing taken back: the setting stays, unchecked
                self.state = DONE
                if self.record is not None:
                    self.record.status = APPLIED
                    self.record.reason = f"the check failed ({type(err).__name__}: {err})"
            return
        if self.state != WAITING or self.pending is None or self.pending.settings is None:
            return
        try:
            if can_switch_mid_epoch(trainer, self.pending.settings):
                self._apply(run, trainer, self.pending, mid_epoch=True)
        except Exception as err:
            self._failed(err)

    def _failed(self, err: Exception) -> None:
        self.state = DONE
        self.switch_at = NO_SWITCH
        self.record = AutotuneRecord(
            status=NOT_APPLIED, reason=f"autotune failed ({type(err).__name__}: {err})"
        )

    def _agreed_choice(self, run: Any, trainer: Any) -> Choice:
        return self._agreed(trainer, lambda: self._choose(run, trainer))

    def _agreed(self, trainer: Any, pick: Any) -> Choice:
        """Rank zero's ``pick()``, the same on every rank."""
        payload = Choice(None)
        if trainer.is_global_zero:
            try:  # never raise before the broadcast: the other ranks wait in it
                payload = pick()
            except Exception as err:
                payload = Choice(None, f"autotune could not choose ({type(err).__name__}: {err})")
        if trainer.world_size > 1:
            payload = trainer.strategy.broadcast(payload, src=0)
        return payload

    def _before(self, run: Any, basis: str) -> list[float]:
        """What the setting is judged against: for a verdict's setting the steps since the verdict
        (:meth:`_clean_before`) when there are enough of them, else every timed step before the switch."""
        clean = self._clean_before(run) if basis != BASIS_FIRST_EPOCH else None
        if clean is not None:
            return clean
        out: list[float] = []
        for first, steps in self.entries[: self.split]:
            out += spread(first, steps, self.per_epoch)
        return out

    def _clean_before(self, run: Any) -> list[float] | None:
        """The steps timed since the mid-run verdict, the current epoch's start-up wait spread over them; None
        when fewer than :data:`CLEAN_BEFORE_MIN`. The steps before the verdict are the fit's warm-up, the
        profiled window and the steps beside the window's analysis, slower for reasons the setting does not
        change (rules/autotune.py: CLEAN_BEFORE_STEPS)."""
        if self.clean_from is None or not self.entries[: self.split]:
            return None
        steps = steps_since(run, self.clean_from)
        if len(steps) < CLEAN_BEFORE_MIN:
            return None
        return spread(self.entries[self.split - 1][0], steps, self.per_epoch)

    def after_steps(
        self, start: int | None = None, current: tuple[float | None, list[float]] | None = None
    ) -> list[float]:
        """The steps with the setting (from entry ``start``: the raced one's; ``current``: the running epoch's so
        far); a start-up paid once (persistent workers, the loader that finishes a switched epoch) is left out:
        keeping the setting does not pay it again."""
        start = self.split if start is None else start
        out: list[float] = []
        entries = self.entries[start:] + ([current] if current is not None else [])
        for i, (first, steps) in enumerate(entries, start=start):
            steps = steps[1:] if (first is None and i == self.split) else steps
            out += spread(None if i in self.one_off else first, steps, self.per_epoch)
        return out

    def _apply(self, run: Any, trainer: Any, payload: Choice, mid_epoch: bool) -> None:
        settings, reason, basis = payload.settings, payload.reason, payload.basis
        self.alternative = payload.alternative
        self.state = DONE
        if settings is None:
            self._not_applied(reason)
            return
        combined = trainer.fit_loop._combined_loader
        originals = list(combined.flattened)
        batches = epoch_batches(combined)
        rest: list[tuple[int, Any]] = []
        running: list[Any] = []
        finishing: list[tuple[int, Any]] = []  # (position, the loader that finishes the epoch)
        try:
            # a loader that already has the settings (one without workers, under the restart fix) stays as it is
            replaced = [
                recreate(dl, settings)
                if eligible(dl, batches) and loader_settings(dl, settings) != loader_arguments(settings)
                else dl
                for dl in originals
            ]
            if mid_epoch:
                running = combined._iterator.iterators
                for i, (dl, new) in enumerate(zip(originals, replaced)):
                    if new is not dl:
                        finish = rest_of_epoch(dl, running[i], settings)
                        finishing.append((i, finish))
                        if not draws_every_epoch(finish):  # its workers persist: it is the loader from now on
                            replaced[i] = finish
                        rest.append((i, iter(finish)))
            combined.flattened = replaced
        except Exception as err:
            for _, it in rest:
                shutdown_iterator(it)
            for i, finish in finishing:  # the running iterators get their sampler position back
                with contextlib.suppress(Exception):
                    uncut(running[i], finish)
            self._not_applied(
                f"Lightning could not re-create the train DataLoader ({type(err).__name__}: {err})"
            )
            return
        self.threads.hold(settings)
        for i, it in rest:  # from the next batch on, the rest of this epoch comes from the new setting
            running[i] = continue_epoch(running[i], it, originals[i])
        rest = [(i, running[i]) for i, _ in rest]
        # the loaders that only finish this epoch: their workers end with it (a persistent one goes on); the user's
        self.rest_of_epoch = [it for i, it in rest if draws_every_epoch(replaced[i])]
        self.drains = [it for _, it in rest if isinstance(it, Drain)]  # deliver what they hold, then stop
        self.originals, self.replaced = originals, replaced
        self.switched = finishing
        changed = [dl for dl, new in zip(originals, replaced) if new is not dl]
        for dl in [] if mid_epoch else changed:  # a user's persistent workers: no more epochs to run
            shutdown_workers(dl)
        if mid_epoch:  # this epoch's steps so far are "before"; the rest is a new entry without a first step
            self.entries.append(self._epoch_steps(run))
            self.ring_start, self.starts_seen = run.timer.step_ms.n, len(run.timer.epoch_start_wait_ms) + 1
        self.split = len(self.entries)
        persistent = any(not draws_every_epoch(dl) for dl in replaced)
        if persistent and not mid_epoch:  # the epoch that starts them pays their start-up once
            self.one_off.add(self.split)
        self.switch_epoch = trainer.current_epoch + (0 if mid_epoch else 1)
        self.switch_steps = run.timer.steps
        self.before = self._before(run, basis)
        config = run.config
        self.record = AutotuneRecord(
            status=APPLIED,
            settings=dict(settings),
            previous=loader_settings(changed[0], settings) if changed else {},
            applied_at_step=run.timer.steps,
            applied_at_epoch=self.switch_epoch,
            mid_epoch=mid_epoch,
            steps_before=len(self.before),
            loaders=len(changed),
            keep_line=keep_line(settings, config.batch_size if config is not None else None),
            basis=basis,
        )
        if basis != BASIS_VERDICT and self.first_epoch is not None:
            self.record.startup_ms, self.record.in_process_batch_ms = self.first_epoch
        self.state = TRIAL
        when = "mid-epoch, the sampler's position kept" if mid_epoch else f"from epoch {self.switch_epoch}"
        check = ""
        # checked within this epoch: the fit has no boundary left to do it at; the first step after the switch (the
        # workers starting) is left out of the steps it is judged on
        if mid_epoch and payload.in_epoch:
            self.in_epoch = True
            self.switch_at = run.timer.steps + MIN_CONFIRM_STEPS + 1
            check = f", checked within this epoch after step {self.switch_at}"
        self.say(
            f"autotune applied {settings_text(settings)} to {len(changed)} train DataLoader(s) after step {run.timer.steps}"
            f" ({when}{check}); timing it against the {len(self.before)} steps before."
        )

    def _choose(self, run: Any, trainer: Any) -> Choice:
        length = run.measured.run_length if run.measured is not None else None
        why = cannot_apply(trainer, length)
        if why is not None:
            return Choice(None, why)
        accelerator = run.config.accelerator if run.config is not None else None
        ladder = run.measured.loader_ladder if run.measured is not None else None
        choice = choose(run.midrun_report, accelerator, ladder.left_to_run if ladder is not None else None)
        if choice.settings is not None and in_epoch_only(trainer, length):
            left = epochs_left(trainer, length)
            why = f"the fit has {left} epoch(s) left after epoch {trainer.current_epoch}"
            return choice._replace(in_epoch=True, alternative=None, reason=why)
        return choice

    def probe_kwargs(self, trainer: Any) -> dict[str, Any]:
        """What the measurement stage is told of autotune (:func:`~lightning_bottleneck.live.autotune_steps.
        probe_plan`: ``measure``'s keywords)."""
        return probe_plan(trainer, self.settled_loader(), self.state == WAITING and self.pending is None)

    def _decide(self, run: Any, trainer: Any) -> None:
        after = self.after_steps(current=self._epoch_steps(run) if self.in_epoch else None)
        decision = decide(self.before, after) if trainer.is_global_zero else None
        if trainer.world_size > 1:
            decision = trainer.strategy.broadcast(decision, src=0)
        assert decision is not None and self.record is not None
        self.state = DONE
        record = self.record
        record.decided_at_step = run.timer.steps
        record.steps_after = len(after)
        record.step_ratio, record.ratio_interval, record.outcome = (
            decision.ratio,
            decision.interval,
            decision.outcome,
        )
        if decision.keep:
            record.status = KEPT
            self.say(f"autotune {autotune_line(record)}")
            left = epochs_left(trainer)
            if self.alternative is not None and (left is None or left >= MIN_EPOCHS_LEFT):
                start_race(self, trainer, self.alternative)
            return
        if self.in_epoch:  # back in process where the fit is, the sampler's position kept
            undo_in_epoch(self, trainer)
            record.undone_at_step = run.timer.steps
        combined = trainer.fit_loop._combined_loader
        combined.flattened = own_loaders(self.replaced, self.originals)
        for dl, original in zip(self.replaced, self.originals):
            if dl is not original:
                shutdown_workers(dl)
        self.close()
        self.threads.restore()
        record.status = UNDONE
        record.undone_at_epoch = trainer.current_epoch + (0 if self.in_epoch else 1)
        record.reason = decision.reason
        self.say(f"autotune {autotune_line(record)}")

    def settled_loader(self) -> str | None:
        """Why the measurement stage need not probe the train loader (a switch already made), else None."""
        if self.record is None or self.record.status not in (APPLIED, KEPT):
            return None
        return (
            f"autotune switched the train DataLoader to {settings_text(self.record.settings)} at step "
            f"{self.record.applied_at_step} and times it on the run itself"
        )

    # ------------------------------------------------------------------ the end of fit
    def result(self, run: Any) -> AutotuneRecord:
        """The record for the report: as decided, or what stands when the fit ended."""
        if self.record is not None and self.state == TRIAL:
            after = self.after_steps()
            interim = decide(self.before, after)
            self.record.steps_after = len(after)
            self.record.step_ratio, self.record.ratio_interval = interim.ratio, interim.interval
            self.record.outcome = interim.outcome
        if self.record is not None:
            return self.record
        if self.pending is not None and self.pending.settings is None:  # a restart check was still to come
            return AutotuneRecord(status=NOT_APPLIED, reason=self.pending.reason)
        why = (
            "the fit ended before an epoch boundary after the mid-run verdict, and the switch could not be made "
            "mid-epoch"
            if run.midrun_report is not None
            else "no mid-run verdict was taken (the fit ended first)"
        )
        return AutotuneRecord(status=NOT_APPLIED, reason=why)

    def close(self) -> None:
        """At a switched epoch's end, the fit's end or its exception: the workers of the loaders that finished the
        epoch stop, and the user's (from a mid-epoch switch; Lightning's teardown reaches only the fit loop's)."""
        for it in self.rest_of_epoch:
            shutdown_iterator(it)
        for drain in self.drains:
            drain.stop_old()
        self.rest_of_epoch, self.drains = [], []

    def _not_applied(self, reason: str) -> None:
        self.record = AutotuneRecord(status=NOT_APPLIED, reason=reason)
        self.say(f"autotune {autotune_line(self.record)}")

    def say(self, text: str) -> None:
        if self.verbose:
            rank_zero_info(f"lightning-bottleneck: {text}")
