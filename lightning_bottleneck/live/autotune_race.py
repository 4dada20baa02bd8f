"""Autotune's race: once the applied setting is kept, the worker count the loader probe left to the run
(:attr:`~lightning_bottleneck.evidence.loader_ladder.LoaderLadder.left_to_run`, the
:attr:`~lightning_bottleneck.rules.autotune.Choice.alternative`) runs for one epoch, and the faster on the run's own
steps stays (:func:`~lightning_bottleneck.rules.autotune.race`).

Both loaders are re-created from the user's at an epoch boundary (:func:`~lightning_bottleneck.live.loader_switch.
recreate`: the same dataset, sampler object, batch size, collate_fn, generator; the draws a new iterator of the
user's loader would make), so the samples the model sees stay those of the run without autotune; the workers of the
setting that stops are shut down. Under DDP rank zero decides and broadcasts, and every rank switches at the same
boundary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning_bottleneck.advice.autotune import keep_line
from lightning_bottleneck.live.autotune_steps import DONE, RACE
from lightning_bottleneck.live.loader_switch import draws_every_epoch, recreate, shutdown_workers
from lightning_bottleneck.output.autotune import race_line, settings_text
from lightning_bottleneck.rules.autotune import decide, race

if TYPE_CHECKING:  # the state machine that calls these (live/autotune.py imports this module)
    from lightning_bottleneck.live.autotune import Autotuner

__all__ = ["finish_race", "start_race"]


def start_race(tuner: Autotuner, trainer: Any, settings: dict[str, Any]) -> None:
    """At the boundary after the kept setting's check: the loaders re-created from the user's with ``settings`` for
    one epoch; the kept setting's workers stop. Failing, the kept setting stays and nothing is raced."""
    try:
        raced = [
            recreate(original, settings) if dl is not original else dl
            for dl, original in zip(tuner.replaced, tuner.originals)
        ]
    except Exception as err:
        tuner.say(f"autotune could not race {settings_text(settings)} ({type(err).__name__}: {err}).")
        return
    record = tuner.record
    assert record is not None  # set by the switch the race follows
    tuner.first_steps = tuner.after_steps()
    trainer.fit_loop._combined_loader.flattened = raced
    for dl, original in zip(tuner.replaced, tuner.originals):
        if dl is not original:
            shutdown_workers(dl)
    tuner.raced, tuner.race_from = raced, len(tuner.entries)
    tuner.threads.hold(settings)
    if any(not draws_every_epoch(dl) for dl, o in zip(raced, tuner.originals) if dl is not o):
        # persistent workers start once: keeping them does not pay it again
        tuner.one_off.add(tuner.race_from)
    record.raced, record.raced_against = dict(settings), dict(record.settings)
    record.raced_at_epoch = trainer.current_epoch + 1
    tuner.state = RACE
    tuner.say(
        f"autotune races {settings_text(settings)} against {settings_text(record.settings)} for epoch "
        f"{record.raced_at_epoch} on the run's own steps; the faster stays."
    )


def finish_race(tuner: Autotuner, run: Any, trainer: Any) -> None:
    """At the end of the raced epoch: rank zero's :func:`~lightning_bottleneck.rules.autotune.race`, the same on every
    rank; the raced setting stays if its steps were faster, else the kept one is re-created from the user's loader."""
    second = tuner.after_steps(tuner.race_from)
    payload = None
    if trainer.is_global_zero:
        result = race(tuner.first_steps, second)
        # the setting that stays, against the steps before any switch (the record's speed-up): rank zero's figures
        payload = (result, decide(tuner.before, second) if result.second_wins else None, len(second))
    if trainer.world_size > 1:
        payload = trainer.strategy.broadcast(payload, src=0)
    assert payload is not None
    result, decision, steps = payload
    tuner.state = DONE
    record = tuner.record
    assert record is not None
    record.race_ratio, record.race_interval = result.ratio, result.interval
    record.race_won, record.race_ended = result.second_wins, True
    if decision is not None:
        record.settings = dict(record.raced)
        config = run.config
        record.keep_line = keep_line(record.settings, config.batch_size if config is not None else None)
        record.step_ratio, record.ratio_interval = decision.ratio, decision.interval
        record.outcome, record.steps_after = decision.outcome, steps
        tuner.replaced = tuner.raced
    else:
        back = [
            recreate(original, record.settings) if dl is not original else dl
            for dl, original in zip(tuner.raced, tuner.originals)
        ]
        trainer.fit_loop._combined_loader.flattened = back
        for dl, original in zip(tuner.raced, tuner.originals):
            if dl is not original:
                shutdown_workers(dl)
        tuner.replaced = back
        tuner.threads.hold(record.settings)
    tuner.raced = []
    tuner.say(f"autotune {race_line(record)}")
