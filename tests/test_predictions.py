"""The number next to the advice is what the user gets (issue 19): the loader plan predicts for the run as
it trains (the step's measured CPU use leaves the workers only the other cores), a worker count predicted
under 1.10x in training is not advised, and where the package cannot predict within 20% the
recommendation gives a range and says why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_contention import _snap

from lightning_bottleneck.advice.loader_plan import loader_recommendations
from lightning_bottleneck.diagnose import diagnose
from lightning_bottleneck.evidence import Evidence, RunConfig, RunLength, TimingStats
from lightning_bottleneck.evidence.loader_ladder import BOUND_CPU, BOUND_WAIT, LoaderLadder, Rung
from lightning_bottleneck.evidence.trial_results import TrialReport, TrialResult
from lightning_bottleneck.measure.contention import assess
from lightning_bottleneck.report import Recommendation
from lightning_bottleneck.rules.loader_pace import MEASURED_GAIN_MIN, STEP_SPREAD_MAX, step_cores_from_window
from lightning_bottleneck.rules.loader_plan import plan_from_timing, plan_loader

from conftest import fit_scenario

CPU = RunConfig(num_workers=0, batch_size=16, usable_cpus=2, accelerator="cpu")


def _ladder() -> LoaderLadder:
    """CPU-bound loading on 2 cores, 4 ms of CPU a sample: one worker measured 1.3x the in-process rate
    with the loader alone (the probe's own figures: no training step beside it)."""
    return LoaderLadder(
        [Rung(0, None, 250.0, 0.0, 4e-3, 1.0, 20, 0.5), Rung(1, 2, 325.0, 0.05, 3e-3, 1.0, 20, 0.5),
         Rung(2, 2, 500.0, 0.08, 4e-3, 1.0, 20, 0.5)],
        BOUND_CPU, 16, 2,
    )  # fmt: skip


def _plan(step_cores: float | None, consumption: float = 1000.0, wait: float = 0.8) -> object:
    # loading takes 4 ms of CPU a sample; the model 1 ms (consumption 1000/s: 80% of the step is data wait)
    return plan_loader(_ladder(), CPU, consumption_samples_per_s=consumption, data_wait_share=wait,
                       step_s=16 / consumption / (1 - wait), steps_per_epoch=50, step_cores=step_cores)  # fmt: skip


def test_a_step_that_keeps_both_cores_busy_leaves_no_core_for_a_worker() -> None:
    """The known failure (cpu_transform on 2 cores): the probe measured num_workers=1 at 1.3x alone, but the
    step uses the cores too; measured at 2 cores, no worker count is predicted to reach 1.10x in training."""
    plan = _plan(step_cores=2.0)
    assert all("num_workers" not in r.settings for r in plan.changes), plan  # type: ignore[attr-defined]
    assert any("not advised" in n for n in plan.notes), plan.notes  # type: ignore[attr-defined]


def test_a_light_step_leaves_a_core_and_the_worker_is_advised_with_a_point() -> None:
    # a 4 ms step (250 samples/s) using 0.2 cores: one worker loads beside it, on the core it leaves free
    plan = _plan(step_cores=0.2, consumption=250.0, wait=0.5)
    rec = plan.changes[0]  # type: ignore[attr-defined]
    assert rec.settings.get("num_workers") == 1
    assert rec.expected_speedup >= MEASURED_GAIN_MIN
    assert rec.expected_speedup_range is None  # the worker fits beside the step: a point prediction
    assert rec.evidence["step_cores"] == 0.2 and rec.evidence["step_cores_measured"] is True


def test_workers_that_need_the_steps_cores_get_a_range() -> None:
    # nothing covers the 1 ms step: two workers get closest, but the second needs the core the step uses
    plan = _plan(step_cores=0.2)
    rec = loader_recommendations(plan, CPU)[0]  # type: ignore[arg-type]
    assert rec.settings.get("num_workers") == 2
    lo, hi = rec.expected_speedup_range
    assert lo < hi == pytest.approx(rec.expected_speedup)
    assert "share 2 CPU(s)" in rec.uncertainty
    assert f"{lo:.2f}x to {hi:.2f}x" in rec.speedup_text


#: A new epoch's first batch with 8 persistent workers of the sleepy ladder: one worker makes a batch of 16 at the
#: 8 workers' 2410 samples/s over 8 (rules/loader_pace.persistent_extra_s)
REFILL_8 = 8 * 16 / 2410


def _sleepy_ladder() -> LoaderLadder:
    """Wait-bound loading (3 ms sleeps a sample, batch 16), as the probe measured it for issue 19's io_wait."""
    return LoaderLadder(
        [Rung(0, None, 310.0, 0.05, 1.5e-4, 0.05, 6, 0.25), Rung(2, 2, 624.0, 0.11, 1.5e-4, 0.05, 12, 0.25),
         Rung(4, 2, 1208.0, 0.17, 1.3e-4, 0.04, 23, 0.25), Rung(8, 2, 2410.0, 0.18, 1e-4, 0.03, 46, 0.25)],
        BOUND_WAIT, 16, 2,
    )  # fmt: skip


def _sleepy_timing(busy_ms: list[float]) -> TimingStats:
    waits = [52.0] * len(busy_ms)
    return TimingStats(len(busy_ms), [w + b for w, b in zip(waits, busy_ms)], waits, [], 16.0)


def test_a_step_whose_own_time_spreads_gives_a_range_that_reaches_the_fast_steps() -> None:
    """io_wait on this VM: without workers the step (data wait taken out) took 4 ms or 13 ms, bimodal; with 8
    workers it took 1.6 ms and the run got 8.5x against the median-based 6.4x point. The run's own steps
    disagree about the step's cost: the speed-up is a range from the median step to the fastest quarter's."""
    bimodal = [4.0] * 12 + [13.0] * 20
    plan = plan_from_timing(_sleepy_ladder(), RunConfig(num_workers=0, batch_size=16, usable_cpus=2,
                            accelerator="cpu"), _sleepy_timing(bimodal), 32)  # fmt: skip
    rec = loader_recommendations(plan, CPU)[0]
    assert rec.settings["num_workers"] == 8
    lo, hi = rec.expected_speedup_range
    assert lo == pytest.approx(rec.expected_speedup)  # the point stays the median step's (the low end)
    assert hi > lo * STEP_SPREAD_MAX
    # the high end: the step paced by 8 workers' loading at its most, 8 x the in-process 310 samples/s (waiting loads
    # scale with the workers at best; 8 workers measured 2410 alone), not by its own 4 ms
    # (each epoch's first batch waits for a persistent worker to refill: REFILL_8 a 32-step epoch)
    assert hi == pytest.approx(32 * (52.0 + 13.0) / 1e3 / (32 * 16 / 2480 + REFILL_8), rel=0.005)
    assert "the workers at 2480 samples/s" in rec.uncertainty
    assert "13.0 ms (median)" in rec.uncertainty and "4.0 ms (the fastest quarter)" in rec.uncertainty
    assert f"{lo:.2f}x to {hi:.2f}x" in rec.speedup_text
    # steps that agree (every one 4 ms) keep a point
    steady = plan_from_timing(_sleepy_ladder(), RunConfig(num_workers=0, batch_size=16, usable_cpus=2,
                              accelerator="cpu"), _sleepy_timing([4.0] * 32), 32)  # fmt: skip
    assert steady.changes[0].expected_speedup_range is None
    assert steady.changes[0].expected_speedup == pytest.approx(
        32 * 56e-3 / (32 * 6.639e-3 + REFILL_8), rel=0.02
    )


def test_steps_all_slowed_by_in_process_loading_reach_the_back_to_back_step_in_the_range() -> None:
    """io_wait in the scoreboard's 2026-12-02 full run: every step of the window took 13 ms without its data wait
    (the thread pool asleep through the loading), so median and fastest quarter agreed on a 4.31x point, and the
    run got 9.31x with 8 workers. The trials' step timed back-to-back (no loading between) is the fastest the
    step may run once the loading leaves: the high end of the range."""
    cfg = RunConfig(num_workers=0, batch_size=16, usable_cpus=2, accelerator="cpu")
    slow = _sleepy_timing([13.0] * 32)
    alone = plan_from_timing(_sleepy_ladder(), cfg, slow, 32).changes[0]
    assert alone.expected_speedup_range is None  # the run's own steps agree: a point
    rec = plan_from_timing(_sleepy_ladder(), cfg, slow, 32, back_to_back_samples_per_s=16 / 1.6e-3).changes[0]
    assert rec.settings["num_workers"] == 8 and rec.expected_speedup == pytest.approx(alone.expected_speedup)
    lo, hi = rec.expected_speedup_range
    assert lo == pytest.approx(alone.expected_speedup)
    assert hi == pytest.approx(
        32 * (52.0 + 13.0) / 1e3 / (32 * 16 / 2480 + REFILL_8), rel=0.005
    )  # paced by the 8 workers at their most
    assert "1.6 ms (the same step timed back-to-back" in rec.uncertainty
    # a back-to-back step no faster than the run's own: still a point
    same = plan_from_timing(_sleepy_ladder(), cfg, slow, 32, back_to_back_samples_per_s=16 / 13e-3)
    assert same.changes[0].expected_speedup_range is None


def test_an_input_bound_run_without_trials_reads_the_back_to_back_step_from_the_loader_probe() -> None:
    """io_wait in the scoreboard's second 2026-12-02 full run: no trial runs on an input-bound run, so the trials'
    back-to-back step was absent and the range stopped at 5.33x (applied 9.90x). The loader probe now times the
    step back-to-back itself (``LoaderLadder.step_ms``): the ranking reads it when no trial ran."""
    cfg = RunConfig(num_workers=0, batch_size=16, usable_cpus=2, accelerator="cpu")
    slow = _sleepy_timing([13.0] * 32)

    def first(ladder: LoaderLadder) -> Any:
        ev = Evidence(timing=slow, config=cfg, loader_ladder=ladder,
                      run_length=RunLength(total_steps=64, steps_per_epoch=32, epochs=2))  # fmt: skip
        assert ev.trials is None
        return next(r for r in diagnose(ev).recommendations if "num_workers" in r.settings)

    assert first(_sleepy_ladder()).expected_speedup_range is None  # nothing timed back-to-back: a point
    timed = _sleepy_ladder()
    timed.step_ms = 1.6
    rec = first(timed)
    lo, hi = rec.expected_speedup_range
    assert lo == pytest.approx(rec.expected_speedup) and hi > lo * STEP_SPREAD_MAX
    assert "1.6 ms (the same step timed back-to-back" in rec.uncertainty
    # the trials' median baseline, when they ran, is the step's back-to-back time
    trials = TrialReport(results=[TrialResult("x", {}, baseline_ms=b) for b in (2.0, 1.2, 5.0)])
    assert Evidence(trials=trials, loader_ladder=timed).back_to_back_step_ms == 2.0
    assert Evidence(trials=TrialReport(), loader_ladder=timed).back_to_back_step_ms == 1.6
    assert Evidence().back_to_back_step_ms is None


def test_persistent_workers_start_once_per_fit_and_a_short_fit_pays_that_start_up() -> None:
    """io_wait, 2 epochs: 8 new persistent workers took 0.32 s to start in an advised fit of about 1 s, which the
    plan counted as nothing (predicted 5.24x, the fit got 4.2x). Persistent workers start once per fit: that
    start-up, spread over the fit's epochs, is in the prediction; on a long fit it vanishes."""
    cfg = RunConfig(num_workers=0, batch_size=16, usable_cpus=2, accelerator="cpu")
    timing = _sleepy_timing([4.0] * 32)
    unknown = plan_from_timing(_sleepy_ladder(), cfg, timing, 32).changes[0]
    short = plan_from_timing(_sleepy_ladder(), cfg, timing, 32, epochs=2).changes[0]
    long = plan_from_timing(_sleepy_ladder(), cfg, timing, 32, epochs=1000).changes[0]
    assert short.settings == unknown.settings == {"num_workers": 8, "persistent_workers": True}
    step_new = 16 / 2410  # paced by 8 workers' loading
    epoch_now = 32 * 56e-3
    # each epoch's first batch waits for one of the persistent workers to make it (REFILL_8)
    assert unknown.expected_speedup == pytest.approx(epoch_now / (32 * step_new + REFILL_8), rel=0.02)
    # 8 workers' 0.18 s start-up, once in 2 epochs; the first epoch's first batch comes with it, the second
    # epoch's waits for a refill (seventeenth session: a refill every epoch overstated io_wait's fit)
    assert short.expected_speedup == pytest.approx(
        epoch_now / (32 * step_new + REFILL_8 / 2 + 0.18 / 2), rel=0.02
    )
    assert long.expected_speedup == pytest.approx(unknown.expected_speedup, rel=0.01)


def _restarting(in_process_samples_per_s: float) -> tuple[LoaderLadder, RunConfig, TimingStats]:
    """worker_restart: 2 workers re-created every epoch (0.45 s start-up), 10 batches of 16 an epoch, little
    steady wait; the dataset loads in the training process at the given rate."""
    ladder = LoaderLadder(
        [Rung(0, None, in_process_samples_per_s, 0.0006, 1e-5, 1.0, 40, 0.25),
         Rung(2, 2, 950.0, 0.45, 1e-5, 0.5, 12, 0.25)],
        BOUND_CPU, 16, 2,
    )  # fmt: skip
    cfg = RunConfig(num_workers=2, persistent_workers=False, batch_size=16, usable_cpus=2, accelerator="cpu")
    timing = TimingStats(60, [6.0] * 54, [0.2] * 54, [460.0] * 6, 16.0)
    return ladder, cfg, timing


def test_workers_restarting_every_epoch_over_a_dataset_loaded_fast_in_process_are_dropped() -> None:
    """worker_restart measured over its whole 6-epoch fit: persistent workers 3.6x, no workers 21.6x (the dataset
    loads at ~90 000 samples/s in the training process). When an epoch without workers (the step, then the loading)
    beats one with them kept alive (their start-up once per fit), num_workers=0 is advised; when in-process loading
    is slow, keeping them alive still is."""
    ladder, cfg, timing = _restarting(90_000.0)
    plan = plan_from_timing(ladder, cfg, timing, 10, epochs=6)
    rec = loader_recommendations(plan, cfg)[0]
    assert rec.settings == {"num_workers": 0}, plan
    assert rec.title == "Load batches in the training process (num_workers=0)"
    epoch_now = 10 * 6.0e-3 + 0.46 - 0.2e-3  # the stall over the steady wait
    epoch_new = (
        10 * 16 * (1 / (16 / 5.8e-3) + 1 / 90_000.0)
    )  # the step without its wait, then in-process loading
    assert rec.expected_speedup == pytest.approx(epoch_now / epoch_new, rel=0.02)
    assert any("without workers is predicted" in n for n in plan.notes)
    slow, cfg, timing = _restarting(1_000.0)  # 16 ms a batch in process: workers kept alive are faster
    kept = plan_from_timing(slow, cfg, timing, 10, epochs=6).changes[0]
    assert kept.settings == {"persistent_workers": True}


def test_a_slow_tail_of_training_steps_widens_a_loader_range_to_its_speed_up() -> None:
    """worker_restart: with 2 workers the steps averaged 7.9 ms in the ledger against a 6.1 ms median, and without
    workers the fit ran 23x faster, past a 17x high end computed from the median step alone. The high end of a
    worker change has the slow tail speed up like the median step; without a tail, no change."""
    from lightning_bottleneck.analysis.ledger import FitLedger
    from lightning_bottleneck.categories import FitPart

    ladder, cfg, timing = _restarting(90_000.0)

    def rec_for(mean_step_ms: float) -> Recommendation:
        ledger = FitLedger(fit_s=60 * mean_step_ms / 1e3 + 2.76, train_steps=60, epochs=6,
                           parts={FitPart.TRAINING_STEPS: 60 * mean_step_ms / 1e3, FitPart.EPOCH_BOUNDARIES: 2.76})  # fmt: skip
        ev = Evidence(timing=timing, config=cfg, loader_ladder=ladder, ledger=ledger,
                      run_length=RunLength(total_steps=60, steps_per_epoch=10, epochs=6))  # fmt: skip
        return next(r for r in diagnose(ev).recommendations if "num_workers" in r.settings)

    plain, tail = rec_for(6.0), rec_for(8.0)
    assert plain.expected_speedup_range is None and "averaged" not in plain.uncertainty
    assert (
        tail.expected_speedup_range is not None
        and "averaged 8.0 ms against a 6.0 ms median" in tail.uncertainty
    )
    lo, hi = tail.expected_speedup_range
    assert lo == pytest.approx(tail.expected_speedup) and hi > lo * 1.2
    # the tail's 2 ms a step is real time of the fit: sped up like the rest, the fit gains what a tail-free one does
    assert hi == pytest.approx(plain.expected_speedup, rel=0.02)


def _timed_with_the_step(rates: dict[int, float]) -> LoaderLadder:
    """The ladder above, with worker counts also timed with the training step (samples/s of loading and
    stepping together): the current count twice (drift), as the probe times it."""
    ladder = _ladder()
    order = [0, *sorted(w for w in rates if w), 0]
    ladder.in_training = [Rung(w, 2 if w else None, rates[w], 0.05, None, None, 10, 0.3) for w in order]
    return ladder


def test_worker_counts_timed_with_the_step_overrule_the_core_estimate() -> None:
    """cpu_transform on 2 cores: the window's CPU estimate said the step keeps both cores busy (no worker
    advised), but timed with the model's own step, four workers trained 1.25x faster: that is advised, with
    a point prediction from the measured rates (no range: nothing is assumed about the cores)."""
    ladder = _timed_with_the_step({0: 200.0, 2: 210.0, 4: 250.0})
    plan = plan_loader(ladder, CPU, consumption_samples_per_s=1000.0, data_wait_share=0.8, step_s=0.08,
                       steps_per_epoch=50, step_cores=2.0)  # fmt: skip
    rec = loader_recommendations(plan, CPU)[0]
    assert rec.settings.get("num_workers") == 4, plan
    assert rec.expected_speedup == pytest.approx(1.25, rel=0.05)  # persistent workers: no restart cost
    assert rec.expected_speedup_range is None
    assert rec.evidence["in_training_samples_per_s"] == {"0": 200.0, "2": 210.0, "4": 250.0}
    assert "250 samples/s against 200 now (1.25x)" in rec.detail
    assert any("num_workers=2 1.05x, num_workers=4 1.25x" in n for n in plan.notes), plan.notes


def test_a_worker_count_comes_with_persistent_workers_on_a_fit_of_several_epochs() -> None:
    """Issue 29 (cpu_transform autotuned: num_workers=4 without persistent_workers, its workers' start-up with the step
    timed at 40-70 ms, under 3% of a 1.9 s epoch, lost 0.46 s over 7 epoch starts against the sweep's best with them):
    a worker count raised from 0 brings persistent_workers=True on a fit of several epochs (or of unknown length); a
    fit of one epoch never restarts its workers and gets the count alone."""
    ladder = _timed_with_the_step(
        {0: 200.0, 2: 210.0, 4: 250.0}
    )  # start-ups of 0.05 s: 1.6% of a 3.2 s epoch

    def settings(epochs: int | None) -> dict[str, object]:
        plan = plan_loader(ladder, CPU, consumption_samples_per_s=1000.0, data_wait_share=0.8, step_s=0.08,
                           steps_per_epoch=50, step_cores=2.0, epochs=epochs)  # fmt: skip
        return loader_recommendations(plan, CPU)[0].settings

    assert settings(8) == settings(None) == {"num_workers": 4, "persistent_workers": True}
    assert settings(1) == {"num_workers": 4}


def test_no_worker_count_is_advised_when_none_trains_clearly_faster_with_the_step() -> None:
    """The issue's case: the loader alone measured one and two workers at 1.3x and 2x, but with the step
    they trained at 0.74x and 0.93x: nothing is advised, and the note gives the measured figures."""
    ladder = _timed_with_the_step({0: 200.0, 1: 148.0, 2: 186.0})
    plan = plan_loader(ladder, CPU, consumption_samples_per_s=1000.0, data_wait_share=0.8, step_s=0.08,
                       steps_per_epoch=50, step_cores=0.2)  # fmt: skip
    assert all("num_workers" not in r.settings for r in plan.changes), plan
    assert any("num_workers=1 0.74x, num_workers=2 0.93x" in n and "none is 1.10x faster" in n
               for n in plan.notes), plan.notes  # fmt: skip
    again = LoaderLadder.from_dict(ladder.to_dict())
    assert again.in_training_rung(0).samples_per_s == 200.0 and len(again.in_training) == 4
    assert "with the training step" in str(again)


def test_no_workers_timed_beside_the_step_is_a_measured_point_over_the_ledgers_steps_and_boundaries() -> None:
    """Issue 28: worker_restart's num_workers=0 was printed "up to 52.64x" (a range between the run's median step and
    the back-to-back one) for an applied 35.30x, though the probe had timed in-process loading beside the model's
    step. With that timing the step without workers is the run's fastest-quarter step without its wait plus the
    loading the timing adds over the step alone; the saving replaces the ledger's training steps and epoch
    boundaries (waits, start-ups, shutdowns, the slow tail) with it: a point, no range, the tail in it."""
    from lightning_bottleneck.analysis.ledger import FitLedger
    from lightning_bottleneck.categories import FitPart, PredictionKind

    ladder, cfg, timing = _restarting(90_000.0)
    ladder.step_ms = 0.3
    ladder.in_training = [Rung(2, 2, 900.0, 0.45, None, None, 4, 0.3, rough=True),
                          Rung(0, None, 16 / 0.5e-3, 0.0, None, None, 400, 0.25)]  # fmt: skip
    plan = plan_from_timing(ladder, cfg, timing, 10, epochs=6)
    change = plan.changes[0]
    assert change.settings == {"num_workers": 0} and change.expected_speedup_range is None
    step_without_wait = 16 / (16 / 5.8e-3)  # the fastest quarter of (step - wait): 5.8 ms
    assert change.in_process_step_s == pytest.approx(step_without_wait + (0.5e-3 - 0.3e-3))

    ledger = FitLedger(fit_s=60 * 8.0e-3 + 2.76 + 0.06, train_steps=60, epochs=6,
                       parts={FitPart.TRAINING_STEPS: 60 * 8.0e-3, FitPart.EPOCH_BOUNDARIES: 2.76,
                              FitPart.LOGGING: 0.06})  # fmt: skip
    ev = Evidence(timing=timing, config=cfg, loader_ladder=ladder, ledger=ledger,
                  run_length=RunLength(total_steps=60, steps_per_epoch=10, epochs=6))  # fmt: skip
    rec = next(r for r in diagnose(ev).recommendations if "num_workers" in r.settings)
    assert rec.prediction_kind == PredictionKind.MEASURED and rec.expected_speedup_range is None, rec
    fit_ms = ledger.own_fit_s() * 1e3 / 60
    new_ms = fit_ms - (8.0 + 2760 / 60) + change.in_process_step_s * 1e3  # logging stays
    assert rec.expected_speedup == pytest.approx(fit_ms / new_ms, rel=0.01)
    assert "timed beside the model's own training step" in rec.basis


def test_timings_with_the_step_on_a_drifting_machine_give_a_range_or_no_advice() -> None:
    """The current worker count is timed before and after the others: when its two timings differ, a gain
    inside that spread is the machine's noise (not advised), and a gain beyond it gets a range, not a point."""

    def plan(first: float, last: float, four: float) -> object:
        ladder = _ladder()
        ladder.in_training = [Rung(w, 2 if w else None, r, 0.05, None, None, 10, 0.3)
                              for w, r in ((0, first), (2, 150.0), (4, four), (0, last))]  # fmt: skip
        return plan_loader(ladder, CPU, consumption_samples_per_s=1000.0, data_wait_share=0.8, step_s=0.08,
                           steps_per_epoch=50, step_cores=2.0)  # fmt: skip

    noisy = plan(200.0, 300.0, 290.0)  # 1.16x the mean, but under the faster timing of the current setting
    assert all("num_workers" not in r.settings for r in noisy.changes), noisy  # type: ignore[attr-defined]
    assert any("the machine's noise" in n for n in noisy.notes), noisy.notes  # type: ignore[attr-defined]
    ranged = plan(200.0, 230.0, 280.0)  # beyond both timings, which differ by 15%
    rec = ranged.changes[0]  # type: ignore[attr-defined]
    assert rec.settings.get("num_workers") == 4
    lo, hi = rec.expected_speedup_range
    assert lo == pytest.approx(280 / 230, rel=0.03) and hi == pytest.approx(280 / 200, rel=0.03)
    assert lo <= rec.expected_speedup <= hi and "num_workers=0 15% apart" in rec.uncertainty


def test_a_worker_count_timed_again_must_beat_the_current_in_both_timings() -> None:
    """Issue 19 (cpu_transform: num_workers=2 timed once at 1.36x with the step, applied 0.90x): the count that
    beat both timings of the current one is timed again; advised only if its slower timing still beats the
    current's faster, with a range when its own two timings are far apart."""

    def plan(first: float, again: float) -> object:
        ladder = _ladder()
        ladder.in_training = [Rung(w, 2 if w else None, r, 0.05, None, None, 10, 0.3)
                              for w, r in ((0, 200.0), (2, 150.0), (4, first), (0, 210.0), (4, again))]  # fmt: skip
        return plan_loader(ladder, CPU, consumption_samples_per_s=1000.0, data_wait_share=0.8, step_s=0.08,
                           steps_per_epoch=50, step_cores=2.0)  # fmt: skip

    lucky = plan(290.0, 205.0)  # 1.21x on the mean of its timings, but its second under the current's faster
    assert all("num_workers" not in r.settings for r in lucky.changes), lucky  # type: ignore[attr-defined]
    assert any("overlap num_workers=4's slower one (205, timed again)" in n
               for n in lucky.notes), lucky.notes  # type: ignore[attr-defined]  # fmt: skip
    held = plan(290.0, 280.0)  # both timings beat both of the current: a point from the means
    rec = held.changes[0]  # type: ignore[attr-defined]
    assert rec.settings.get("num_workers") == 4 and rec.expected_speedup_range is None
    assert rec.expected_speedup == pytest.approx(285 / 205, rel=0.03)
    apart = plan(330.0, 250.0)  # both beat the current, 32% apart: a range from the slower to the faster
    rec = apart.changes[0]  # type: ignore[attr-defined]
    lo, hi = rec.expected_speedup_range
    assert lo == pytest.approx(250 / 210, rel=0.03) and hi == pytest.approx(330 / 200, rel=0.03)
    assert "num_workers=4 32% apart" in rec.uncertainty


def test_a_cpu_bound_loader_is_timed_with_the_real_step_and_the_advice_follows_the_measurement(
    tmp_path: Path,
) -> None:
    """End to end: numpy FFTs per sample, num_workers=0, a CPU model. The callback's probe times worker counts
    with the model's own step, and the first input advice agrees with those figures: a worker count only if
    it trained 1.10x faster (its expected speed-up from the measured rates), else none and a note."""
    _, cb = fit_scenario(
        "input_numpy", tmp_path, max_steps=24, callback_kwargs={"probe_loader": True, "loader_budget_s": 3.0}
    )
    report = cb.report
    assert report is not None
    ladder = LoaderLadder.from_dict(report.metrics["loader_ladder"])
    assert ladder.bound == BOUND_CPU, ladder
    now = ladder.in_training_rung(0)
    assert now is not None and {r.num_workers for r in ladder.in_training} >= {0, 2}, ladder
    timed = [r for w in {r.num_workers for r in ladder.in_training} - {0}
             if (r := ladder.in_training_rung(w)) is not None and not r.rough]  # fmt: skip
    best = max(timed, key=lambda r: r.samples_per_s) if timed else None
    highest_now = max(r.samples_per_s for r in ladder.in_training if r.num_workers == 0)
    clear = (
        best is not None
        and best.samples_per_s >= MEASURED_GAIN_MIN * now.samples_per_s
        # beyond the current setting's own spread, in every timing of the best (timed again when it beat both)
        and min(r.samples_per_s for r in ladder.in_training if r.num_workers == best.num_workers)
        >= highest_now
    )
    advised = [r for r in report.recommendations if r.kind == "input" and "num_workers" in r.settings]
    # left out under the noise band: by the ranking (the whole run) or by the loader plan (its interim setting)
    under_band = [n for n in report.notes if "Not advised: num_workers=" in n and "noise band" in n]
    if clear and under_band:  # trained 1.10x faster, but the whole run's figure is within the noise band
        assert not advised, (advised, under_band)
    elif clear:
        assert best is not None and advised and advised[0].settings["num_workers"] == best.num_workers
        assert advised[0].evidence["in_training_samples_per_s"]["0"] == pytest.approx(
            now.samples_per_s, abs=0.1
        )
    else:
        assert not advised, (ladder, advised)
        assert any("no worker count advised" in n or "too briefly" in n for n in report.notes), report.notes


def test_step_cores_come_from_the_windows_own_cpu_time() -> None:
    # the training process ran 1.5 cores over the window; 80% of it was data wait at 1 core (no workers)
    c = assess(_snap(), _snap(wall_s=1.0, cpu_s=1.5, cpus_busy_s=1.6, cpus_total_s=2.0))
    assert c.self_cores == pytest.approx(1.5)
    k = step_cores_from_window(c.self_cores, 0.5, _ladder(), CPU)
    assert k == pytest.approx((1.5 - 0.5 * 1.0) / 0.5)
    # with workers the process's own time is all step (the workers' time is theirs)
    workers = RunConfig(num_workers=2, batch_size=16, usable_cpus=2, accelerator="cpu")
    assert step_cores_from_window(0.9, 0.5, _ladder(), workers) == pytest.approx(1.8)
    assert step_cores_from_window(None, 0.5, _ladder(), CPU) is None
    assert step_cores_from_window(1.0, 0.99, _ladder(), CPU) is None  # nearly all wait: not measurable


def test_busy_window_falls_back_and_measured_cores_reach_the_report() -> None:
    """diagnose(): the window's self CPU (a quiet machine) sets the step's cores the plan uses."""
    timing = TimingStats(steps=60, step_ms=[80.0] * 40, data_wait_ms=[64.0] * 40, samples_per_step=16.0)
    ev = Evidence(timing=timing, config=CPU, run_length=RunLength(total_steps=500, steps_per_epoch=50, epochs=10),
                  loader_ladder=_ladder(),
                  contention=assess(_snap(), _snap(wall_s=1.0, cpu_s=1.2, cpus_busy_s=1.25, cpus_total_s=2.0)))  # fmt: skip
    report = diagnose(ev)
    recs = [r for r in report.recommendations if "step_cores" in r.evidence]
    assert recs and recs[0].evidence["step_cores_measured"] is True
    assert recs[0].evidence["step_cores"] == pytest.approx(2.0)  # (1.2 - 0.8 x 1.0) / 0.2, capped at 2 CPUs
    assert all("num_workers" not in r.settings for r in report.recommendations)


def test_a_loader_range_is_rescaled_to_the_whole_fit_with_its_point() -> None:
    """The loader plan's range is on the step's scale; the report's point is the whole fit's (the ledger's other
    parts do not speed up). Both ends are rescaled the same way, so the point always lies inside the range (a
    report once said 4.99x with a range of 5.72-17.76x). The run's epochs unknown here: with them, the ledger weighs
    the change itself and its figure is a point (tests/test_ranking.py)."""
    from lightning_bottleneck.analysis.ledger import FitLedger
    from lightning_bottleneck.categories import FitPart

    bimodal = [4.0] * 12 + [13.0] * 20
    timing = _sleepy_timing(bimodal)
    step_plan = plan_from_timing(_sleepy_ladder(), RunConfig(num_workers=0, batch_size=16, usable_cpus=2,
                                 accelerator="cpu"), timing, None).changes[0]  # fmt: skip
    steps = 64
    step_s = sorted(timing.step_ms)[len(timing.step_ms) // 2] / 1e3
    ledger = FitLedger(fit_s=steps * step_s + 2.0, train_steps=steps, epochs=2,
                       parts={FitPart.TRAINING_STEPS: steps * step_s, FitPart.VALIDATION: 2.0})  # fmt: skip
    ev = Evidence(timing=timing, config=RunConfig(num_workers=0, batch_size=16, usable_cpus=2, accelerator="cpu"),
                  run_length=RunLength(total_steps=steps), loader_ladder=_sleepy_ladder(),
                  ledger=ledger)  # fmt: skip
    rec = next(r for r in diagnose(ev).recommendations if "num_workers" in r.settings)
    assert rec.expected_speedup is not None and rec.expected_speedup < step_plan.expected_speedup  # whole fit
    lo, hi = rec.expected_speedup_range
    assert lo <= rec.expected_speedup <= hi
    fit = ledger.fit_s
    for whole, per_step in (
        (lo, step_plan.expected_speedup_range[0]),
        (hi, step_plan.expected_speedup_range[1]),
    ):
        saved = steps * step_s * (1 - 1 / per_step)  # the step's saving at that end, over the fit
        assert whole == pytest.approx(fit / (fit - saved), rel=0.03)


def test_range_round_trips_and_renders_instead_of_the_point() -> None:
    r = Recommendation("input", "t", "d", {"num_workers": 2}, expected_speedup=1.5,
                       expected_speedup_range=(1.05, 1.5), uncertainty="why")  # fmt: skip
    again = Recommendation.from_dict(r.to_dict())
    assert again.expected_speedup_range == (1.05, 1.5) and again.uncertainty == "why"
    assert "1.05x to 1.50x" in again.speedup_text and "expected 1.50x" not in again.speedup_text
    assert (
        Recommendation.from_dict({"kind": "input", "title": "t", "detail": "d"}).expected_speedup_range
        is None
    )


def test_cpu_without_native_bf16_says_why_bf16_is_not_tried() -> None:
    """Kept from issue 19: on an AVX2-only CPU bf16 autocast ran a wide MLP at 0.03x; it is neither tried
    nor advised there, and the report's text says why."""
    from lightning_bottleneck.analysis.summary import TraceSummary
    from lightning_bottleneck.output.text import render_text

    summary = TraceSummary(num_steps=5, step_times_ms=[10.0] * 5, host_op_long=0.9)
    timing = TimingStats(steps=60, step_ms=[10.0] * 40, data_wait_ms=[0.1] * 40, samples_per_step=32.0)
    for native, said in ((False, True), (True, False)):
        cfg = RunConfig(accelerator="cpu", precision="32-true", usable_cpus=2, bf16_supported=native)
        report = diagnose(Evidence(summaries=[summary], timing=timing, config=cfg,
                                   run_length=RunLength(total_steps=1000)))  # fmt: skip
        assert any("no native bf16" in n for n in report.notes) is said, report.notes
        assert any(r.settings.get("precision") == "bf16-mixed" for r in report.recommendations) is not said
        if said:
            assert "no native bf16" in render_text(report)


def test_waiting_loads_are_predicted_from_the_count_timed_with_the_step_unless_it_was_timed_too_briefly() -> (
    None
):
    """Issue 28 item 2: with loading that waits, the advised count is timed feeding the model's own step; the
    point is then those rates' ratio (io_wait: 4.48x from the loader alone and the median step, 6.69x applied).
    A count timed too briefly (its prefetch queue not drained) is no evidence: the loader alone decides, said so."""
    bimodal = [4.0] * 12 + [13.0] * 20  # the step's own time spreads: from the loader alone, a range
    cfg = RunConfig(num_workers=0, batch_size=16, usable_cpus=2, accelerator="cpu")

    def plan(rough: bool, current_rough: bool = False) -> Any:
        ladder = _sleepy_ladder()
        ladder.in_training = [Rung(0, None, 300.0, 0.05, None, None, 6, 0.25),
                              Rung(8, 2, 2250.0, 0.2, None, None, 40, 0.3, rough),
                              Rung(0, None, 310.0, 0.05, None, None, 6, 0.25, current_rough)]  # fmt: skip
        return plan_from_timing(ladder, cfg, _sleepy_timing(bimodal), 32)

    timed = plan(rough=False)
    (rec,) = [r for r in loader_recommendations(timed, cfg) if "num_workers" in r.settings]
    assert rec.settings["num_workers"] == 8 and rec.expected_speedup_range is None, rec  # a point
    assert rec.evidence["in_training_samples_per_s"] == {"0": 305.0, "8": 2250.0}
    assert "feeding the model's own step" in " ".join(timed.notes)
    steps = 32
    step_s = sorted(_sleepy_timing(bimodal).step_ms)[16] / 1e3
    assert rec.expected_speedup == pytest.approx(
        steps * step_s / (steps * step_s * 305.0 / 2250.0 + REFILL_8), rel=0.05
    )
    brief = plan(rough=True)
    (rec,) = [r for r in loader_recommendations(brief, cfg) if "num_workers" in r.settings]
    assert "in_training_samples_per_s" not in rec.evidence and rec.expected_speedup_range is not None, rec
    assert any("too briefly to count" in n and "the loader alone's" in n for n in brief.notes), brief.notes
    # the current count's second timing squeezed by the budget: the same fallback, never no advice at all (a
    # scoreboard run once printed no advice for io_wait)
    squeezed = plan(rough=False, current_rough=True)
    (rec,) = [r for r in loader_recommendations(squeezed, cfg) if "num_workers" in r.settings]
    assert "in_training_samples_per_s" not in rec.evidence, rec
    assert any("num_workers=0" in n and "too briefly to count" in n for n in squeezed.notes), squeezed.notes
