"""The always-on step timer (live/timing.py) on a fake clock: which gaps it samples as steps and data waits, and
which it leaves out (an epoch's first batch, a gap that held something else than training)."""

from __future__ import annotations

import pytest

from lightning_bottleneck.live import timing
from lightning_bottleneck.live.timing import StepTimer


def test_the_timer_samples_steps_and_waits_and_leaves_out_epoch_starts_and_paused_gaps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [0.0]
    monkeypatch.setattr(timing, "perf_counter", lambda: now[0])
    t = StepTimer()

    def at(ms: float) -> StepTimer:
        now[0] = ms / 1e3
        return t

    at(0).epoch_start()
    at(10).batch_start()  # the epoch's first batch: a 10 ms epoch-start wait, no steady wait
    at(12).batch_end()  # ... and no step (nothing ended before it in this epoch)
    at(15).batch_start()  # waited 3 ms
    at(20).batch_end()  # a step of 8 ms (end to end)
    t.pause()  # a validation run before the next batch
    at(100).batch_start()
    at(105).batch_end()  # the paused gap is neither a wait nor a step
    at(106).batch_start()  # waited 1 ms
    at(110).batch_end()  # a step of 5 ms
    assert not at(111).batch_end()  # no batch started since the last end: nothing counted
    at(200).epoch_start()
    at(250).batch_start()  # the next epoch's start-up
    at(260).batch_end()
    at(270).batch_start()  # waited 10 ms ...
    t.pause()  # ... then paused inside the step: the step is left out
    at(280).batch_end()
    at(281).batch_start()
    at(284).batch_end()  # the next step is sampled again: 4 ms from the paused step's end
    assert t.steps == 7
    assert t.epoch_start_wait_ms == pytest.approx([10.0, 50.0])
    assert t.wait_ms.values() == pytest.approx([3.0, 1.0, 10.0, 1.0])
    assert t.step_ms.values() == pytest.approx([8.0, 5.0, 4.0])
