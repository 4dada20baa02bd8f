"""The loader rule: which DataLoader setting to change and how much faster the run gets, from the loader probe's
measurement. Pure (no torch, no lightning); it chooses and predicts, :mod:`lightning_bottleneck.advice.loader_plan`
puts the typed result (:class:`LoaderChange`) into words.

Given the :class:`~lightning_bottleneck.evidence.loader_ladder.LoaderLadder` the probe measured, the rate at which
the model consumes samples (its step without data wait), the run's loader settings and the epoch-start
stall, :func:`plan_loader` picks the *smallest* worker count whose measured rate covers consumption with a
margin, adds ``persistent_workers`` when worker start-up is costly against the epoch, and, when no measured
setting covers consumption (CPU-bound loading on too few cores), says so with the measured ceiling and makes
"make samples cheaper" the first advice. It never advises a setting the probe measured (or, for workers that
overlap loading with the step, predicts) no faster than the current one, and gives no loader advice when the
data wait is below its medium threshold and start-up costs little. Every recommendation carries the ladder, the
predicted step time and ``expected_speedup``.

Example::

    plan = plan_loader(ladder, cfg, consumption_samples_per_s=2400.0, data_wait_share=0.6,
                       step_s=0.010, steps_per_epoch=100, epoch_start_stall_s=0.4)
    print(plan)                       # chosen setting, predicted step time, notes
    plan.changes[0].settings          # {"num_workers": 4, "persistent_workers": True}
"""

from __future__ import annotations

from typing import Any

from lightning_bottleneck.evidence import RunConfig, TimingStats
from lightning_bottleneck.evidence.loader_ladder import BOUND_CPU, LoaderLadder, Rung
from lightning_bottleneck.rules.loader_choice import LoaderAdvice, LoaderChange, LoaderPlan
from lightning_bottleneck.rules.loader_pace import (
    MEASURED_GAIN_MIN,
    PERSISTENT_STARTUP_SHARE_MIN,
    consumption_rate,
    covers,
    epoch_s,
    in_process_instead,
    in_process_over,
    loader_evidence,
    per_sample_s,
    persistent_extra_s,
    pick_in_training,
    predicted_step_s,
    shares_cores,
    shares_cores_well,
    timed_with_step,
    usable_cpu_count,
    usable_rungs,
)
from lightning_bottleneck.rules.loader_prediction import (
    LoaderNow,
    in_process_step_s,
    loader_now,
    predicted_range,
)
from lightning_bottleneck.rules.noise_band import not_advised
from lightning_bottleneck.thresholds import INPUT_SHARE_MEDIUM, NO_CHANGE_BAND
from lightning_bottleneck.vocabulary import TORCH_THREADS


def plan_loader(
    ladder: LoaderLadder,
    current: RunConfig,
    *,
    consumption_samples_per_s: float | None,
    data_wait_share: float,
    step_s: float,
    steps_per_epoch: int | None = None,
    epoch_start_stall_s: float | None = None,
    typical_consumption_samples_per_s: float | None = None,
    step_cores: float | None = None,
    back_to_back_samples_per_s: float | None = None,
    epochs: float | None = None,
) -> LoaderPlan:
    """Loader recommendations from a measured ladder.

    Args:
        ladder: what :func:`lightning_bottleneck.measure.loader_probe.probe_loader` measured.
        current: the run's settings (``num_workers``, ``persistent_workers``, ``pin_memory``,
            ``prefetch_factor``, ``batch_size``, ``usable_cpus``, ``accelerator``).
        consumption_samples_per_s: samples/s of the training step *without* data wait
            (``batch_size / (step - data_wait)``, see :func:`consumption_rate`); decides which rungs cover the
            model. None when unknown (no worker count is then chosen).
        data_wait_share: steady-state share of step time spent waiting for the DataLoader.
        step_s: median steady-state step time, data wait included (seconds).
        steps_per_epoch: training batches per epoch (``trainer.num_training_batches``), None if unknown.
        epoch_start_stall_s: median extra wait of an epoch's first batch (worker start-up), from the
            always-on timing; None to use the ladder's start-up of the current worker count.
        typical_consumption_samples_per_s: the consumption rate used to *predict* the step time (e.g. from
            the median step); defaults to ``consumption_samples_per_s``, which decides coverage and may be
            read optimistically (see :data:`CONSUMPTION_QUANTILE`).
        step_cores: cores the training step keeps busy (:func:`step_cores_from_window`); None: not measured,
            :data:`DEFAULT_STEP_CORES`. With a CPU model and CPU-bound loading the workers get only the
            cores the step leaves free while it runs, so the prediction is for the run as it trains.
        back_to_back_samples_per_s: samples/s of the model's step timed back-to-back (forward and backward, no
            loading between steps; by the trials, or by the loader probe when none ran): how fast the step may run once loading leaves it, the high end
            of a range when the run's own steps were slower (see :data:`STEP_SPREAD_MAX`).
        epochs: the fit's epochs, None if unknown: persistent workers start once per fit, so their start-up is
            spread over this many epochs (negligible on a long run, a real cost on a short one: io_wait's 8 new
            workers took 0.32 s to start in a 1 s advised fit); None counts it as nothing.
    """
    plan = LoaderPlan()
    if ladder.skipped or not ladder.rungs:
        plan.notes += ladder.notes or ["The loader was not measured: no loader advice."]
        return plan
    now = loader_now(ladder, current, step_s, steps_per_epoch, epoch_start_stall_s, step_cores, epochs)
    steady_input = data_wait_share >= INPUT_SHARE_MEDIUM
    stall_costly = now.stall_share >= PERSISTENT_STARTUP_SHARE_MIN and steps_per_epoch is not None
    if not steady_input and not stall_costly:
        plan.notes.append(
            f"No loader advice: the data wait is {data_wait_share:.0%} of the step (below "
            f"{INPUT_SHARE_MEDIUM:.0%}) and worker start-up costs {now.stall_share:.0%} of an epoch."
        )
        return plan
    consumption = (
        consumption_samples_per_s if consumption_samples_per_s and consumption_samples_per_s > 0 else None
    )
    typical = typical_consumption_samples_per_s or consumption
    plan.ceiling_samples_per_s = round(ladder.ceiling_samples_per_s, 3)
    chosen, trained_now = _choose(now, plan, consumption, typical, steady_input, stall_costly)
    settings = _settings(now, chosen)
    # the prediction: the new step, and the new epoch with its start-up, against the current epoch
    w_new = chosen.num_workers if chosen is not None else now.workers
    startup_new = chosen.startup_s if chosen is not None else (now.rung.startup_s if now.rung else now.stall)
    inline = in_process_step_s(now, chosen, consumption)
    step_new = (
        inline
        if inline is not None
        else predicted_step_s(
            chosen, now.rung, typical, now.batch, step_s, current, ladder, now.k, trained_now
        )
    )
    if w_new > 0 and not now.persistent:
        epoch_guess = epoch_s(steps_per_epoch, step_new, 0.0)
        # bundled with a worker change on a fit of several epochs (or of unknown length): the same line of the user's
        # code, and Lightning's own advice for workers ("Consider setting `persistent_workers=True`"); the start-up
        # every epoch saves is more than the probe's figure (issue 29's cpu_transform: workers timed 40-70 ms to start
        # with the step, autotune's num_workers=4 without persistent_workers lost 0.46 s over 7 epoch starts against
        # the sweep's best with them, 14.73 s against 14.27 s of later epochs, under the 3% bar on a 1.9 s epoch).
        # Alone, it is advised where the start-up costs an epoch of known length that bar.
        bundled = "num_workers" in settings and (epochs is None or epochs > 1)
        costly = (
            steps_per_epoch is not None
            and epoch_guess > 0
            and startup_new / epoch_guess >= PERSISTENT_STARTUP_SHARE_MIN
        )
        if bundled or costly:
            settings["persistent_workers"] = True
    if settings and w_new > 0 and current.accelerator == "cuda" and not current.pin_memory:
        settings["pin_memory"] = True
    stall_new = 0.0 if (w_new == 0 or now.persistent or settings.get("persistent_workers")) else startup_new
    if w_new > 0 and (now.persistent or settings.get("persistent_workers")):
        # workers that persist start (and stop) once per fit, spread over the fit's epochs, and refill at each epoch's
        # start: against the current one's (when they persist too)
        stall_new = max(0.0, persistent_extra_s(chosen or now.rung, ladder, now.batch, epochs) - now.once)
    epoch_new = epoch_s(steps_per_epoch, step_new, stall_new)
    speedup = now.epoch / epoch_new if epoch_new > 0 and settings else None
    plan.predicted_step_s = round(step_new, 6)
    plan.expected_speedup = None if speedup is None else round(speedup, 3)
    evidence = loader_evidence(ladder, consumption, step_s, step_new, now.stall, steps_per_epoch)
    evidence["step_cores"] = round(now.k, 3)
    evidence["step_cores_measured"] = step_cores is not None
    if inline is not None:
        evidence["in_process_step_ms"] = round(inline * 1e3, 4)
    if trained_now is not None or inline is not None:
        evidence["in_training_samples_per_s"] = {
            str(w): round(r.samples_per_s, 1)
            for w in sorted({r.num_workers for r in ladder.in_training})
            if (r := ladder.in_training_rung(w)) is not None
        }
    spread, uncertainty = (None, "")
    if speedup is not None and chosen is not None and inline is None:
        spread, uncertainty = predicted_range(
            now, chosen, trained_now, speedup, stall_new, consumption, typical, back_to_back_samples_per_s
        )
    change = LoaderChange(
        advice=LoaderAdvice.CHEAPER_SAMPLES,
        settings=settings,
        expected_speedup=plan.expected_speedup,
        evidence=evidence,
        expected_speedup_range=spread,
        uncertainty=uncertainty,
        workers_now=now.workers,
        workers_new=w_new,
        chosen_label=chosen.label if chosen is not None else "",
        chosen_samples_per_s=chosen.samples_per_s if chosen is not None else 0.0,
        current_samples_per_s=trained_now.samples_per_s if trained_now is not None else None,
        consumption_samples_per_s=consumption,
        cpus=usable_cpu_count(current, ladder),
        bound=ladder.bound,
        ceiling_samples_per_s=ladder.ceiling_samples_per_s,
        usable_cpus=ladder.usable_cpus,
        stall_now_s=now.stall,
        epoch_now_s=now.epoch,
        in_process_step_s=inline,
    )
    if plan.covered is False and ladder.bound == BOUND_CPU:
        # no setting covers the model: cheaper samples first, the settings meanwhile, only those predicted to clear
        # the noise band (issue 28: on 2 busy cores, 4 workers predicted 0.95x were printed as the interim)
        if speedup is None or speedup < 1 + NO_CHANGE_BAND:
            if speedup is not None and change.settings:  # say what was left out, as the ranking does
                plan.notes.append(
                    not_advised(change.settings, "meanwhile, before the samples are made cheaper", speedup,
                                "per epoch with the workers' start-up")
                )  # fmt: skip
            change.settings, change.expected_speedup, change.expected_speedup_range = {}, None, None
            change.uncertainty = ""
        plan.changes.append(change)
        return plan
    if settings:
        change.advice = _advice_kind(settings, timed=trained_now is not None and chosen is not None,
                                     short=plan.covered is False)  # fmt: skip
        plan.changes.append(change)
    return plan


def _choose(
    now: LoaderNow,
    plan: LoaderPlan,
    consumption: float | None,
    typical: float | None,
    steady_input: bool,
    stall_costly: bool,
) -> tuple[Rung | None, Rung | None]:
    """The rung to advise (None: leave the worker count) and the current setting's timing with the step (None
    when the choice was not made from timings with the step); sets ``plan.covered``, notes what it rejected."""
    ladder, current, k, w_now, rung_now = now.ladder, now.current, now.k, now.workers, now.rung
    chosen: Rung | None = None
    covers_now = rung_now is not None and consumption is not None and covers(rung_now, consumption)
    # Worker counts timed with the training step (CPU model, CPU-bound loading): what the run gets, measured.
    trained_now = ladder.in_training_rung(w_now) if timed_with_step(current, ladder) else None
    if (
        trained_now is not None
        and not shares_cores(current, ladder)
        and (trained_now.rough or not _timed_others(ladder, w_now))
    ):
        # waiting loads timed too briefly with the step (the current count or the advised one): the loader alone
        # decides
        brief = sorted({r.num_workers for r in ladder.in_training if r.rough or r.num_workers != w_now})
        plan.notes.append(
            "Timed with the training step, but too briefly to count: "
            + ", ".join(f"num_workers={w}" for w in brief)
            + "; the figure is the loader alone's (raise loader_budget_s to time it with the step)."
        )
        trained_now = None
    if steady_input and consumption is not None and not covers_now and trained_now is not None:
        plan.covered = any(covers(r, consumption) for r in ladder.rungs)
        chosen = pick_in_training(ladder, trained_now, plan.notes)
    elif steady_input and consumption is not None and not covers_now:
        chosen = _choose_from_the_loader_alone(now, plan, consumption)
    elif covers_now:
        plan.covered = True
        if steady_input and rung_now is not None and consumption is not None:
            plan.notes.append(
                f"The loader alone delivers {rung_now.samples_per_s:.0f} samples/s at num_workers={w_now}, above "
                f"the model's {consumption:.0f}: the steady data wait comes from elsewhere (start-up, contention)."
            )
    if chosen is None and stall_costly and w_now > 0 and not now.persistent and consumption is not None:
        chosen = in_process_instead(
            ladder, rung_now, typical or consumption, now.batch, now.step_s, current, k,
            now.steps_per_epoch, now.stall, now.epochs, plan.notes,
        )  # fmt: skip
        if chosen is not None:
            # predicted from the loader alone (no worker count timed with the step applies)
            trained_now = None
    elif chosen is not None and chosen.num_workers > 0 and w_now > 0 and consumption is not None:
        zero = in_process_over(
            ladder, chosen, trained_now, rung_now, typical or consumption, now.batch, now.step_s, current, k,
            now.steps_per_epoch, now.epochs, plan.notes,
        )  # fmt: skip
        if zero is not None:
            chosen, trained_now = zero, None
    return chosen, trained_now


def _timed_others(ladder: LoaderLadder, w_now: int) -> bool:
    """Another worker count than the current one was timed with the step long enough to count."""
    return any(r.num_workers != w_now and not r.rough for r in ladder.in_training)


def _choose_from_the_loader_alone(now: LoaderNow, plan: LoaderPlan, consumption: float) -> Rung | None:
    """The smallest rung that covers the model on the cores the step leaves (else the fastest), if it measured
    (and, in training, is predicted) clearly faster than the current one."""
    ladder, current, k, w_now, rung_now = now.ladder, now.current, now.k, now.workers, now.rung
    usable = usable_rungs(ladder, current, w_now, plan.notes, k, now.k_measured)
    covering = sorted(
        (r for r in usable if covers(r, consumption) and shares_cores_well(r, current, ladder, k)),
        key=lambda r: (r.num_workers, r.prefetch_factor or 0),
    )
    plan.covered = bool(covering)
    chosen: Rung | None = (
        covering[0]
        if covering
        else min(usable, key=lambda r: per_sample_s(r, consumption, current, ladder, k))
    )
    assert chosen is not None
    plain = ladder.rung(chosen.num_workers, current.prefetch_factor or 2) if chosen.num_workers else None
    if plain is not None and chosen.samples_per_s < plain.samples_per_s * MEASURED_GAIN_MIN:
        chosen = plain  # a larger prefetch_factor only when it measured clearly faster
    if (
        rung_now is not None
        and chosen is not rung_now
        and (w_now > 0 or shares_cores(current, ladder))  # else judged in training just below
        and chosen.samples_per_s < rung_now.samples_per_s * MEASURED_GAIN_MIN
    ):
        plan.notes.append(
            f"{chosen.label} measured {chosen.samples_per_s:.0f} samples/s, not clearly faster than "
            f"the current {rung_now.samples_per_s:.0f}: not advised."
        )
        return None
    if chosen is rung_now:
        return None
    if rung_now is not None and chosen.num_workers != w_now:
        # the prediction for the run as it trains (the step holds k cores) must clear the same bar
        gain = per_sample_s(rung_now, consumption, current, ladder, k) / per_sample_s(
            chosen, consumption, current, ladder, k
        )
        if gain < MEASURED_GAIN_MIN:
            plan.notes.append(
                f"{chosen.label} measured {chosen.samples_per_s:.0f} samples/s with the loader alone, but "
                f"in training (the step keeps {k:.1f} of {usable_cpu_count(current, ladder)} CPU(s) busy) it is "
                f"predicted at {gain:.2f}x, under {MEASURED_GAIN_MIN:.2f}x: not advised."
            )
            return None
    return chosen


def _settings(now: LoaderNow, chosen: Rung | None) -> dict[str, Any]:
    """The DataLoader arguments that move the current setting to ``chosen`` (persistent workers and pinned
    memory are added by the prediction, which knows what start-up costs)."""
    settings: dict[str, Any] = {}
    if chosen is not None:
        if chosen.num_workers != now.workers:
            settings["num_workers"] = chosen.num_workers
        if chosen.num_workers > 0 and chosen.prefetch_factor not in (None, now.current.prefetch_factor or 2):
            settings["prefetch_factor"] = chosen.prefetch_factor
        if chosen.threads is not None and "num_workers" in settings:
            # timed with the training process at fewer intra-op threads (autotune, a CPU step): its figure holds
            # only with them (measure/host_threads.py)
            settings[TORCH_THREADS] = chosen.threads
    return settings


def _advice_kind(settings: dict[str, Any], *, timed: bool, short: bool) -> LoaderAdvice:
    """Which change ``settings`` is, for the words: timed with the step, short of the model, ..."""
    if "num_workers" in settings and timed:
        return LoaderAdvice.WORKERS_TIMED
    if "num_workers" in settings and short:
        return LoaderAdvice.WORKERS_SHORT
    if settings.get("num_workers") == 0:
        return LoaderAdvice.NO_WORKERS
    if "num_workers" in settings:
        return LoaderAdvice.WORKERS_COVER
    if "persistent_workers" in settings:
        return LoaderAdvice.PERSISTENT
    return LoaderAdvice.PREFETCH


def plan_from_timing(
    ladder: LoaderLadder,
    current: RunConfig,
    timing: TimingStats,
    steps_per_epoch: float | None,
    step_cores: float | None = None,
    back_to_back_samples_per_s: float | None = None,
    epochs: float | None = None,
) -> LoaderPlan:
    """:func:`plan_loader` fed from the callback's always-on timing (the window's steady-state steps).

    This is the call the live callback makes after :func:`~lightning_bottleneck.measure.loader_probe.probe_loader`::

        timing = self._timing.stats()                      # TimingStats
        ladder = probe_loader(loader, budget_s=..., usable_cpus=cfg.usable_cpus,
                              target_samples_per_s=(consumption_rate(timing) or 0) * COVER_MARGIN or None)
        plan = plan_from_timing(ladder, cfg, timing, trainer.num_training_batches)
    """
    steps = sorted(timing.step_ms)
    step_s = steps[len(steps) // 2] / 1e3 if steps else 0.0
    return plan_loader(
        ladder,
        current,
        consumption_samples_per_s=consumption_rate(timing),
        data_wait_share=timing.data_wait_share,
        step_s=step_s,
        # trainer.num_training_batches is inf for a loader without len()
        steps_per_epoch=int(steps_per_epoch) if steps_per_epoch and steps_per_epoch < float("inf") else None,
        epoch_start_stall_s=timing.epoch_start_extra_ms() / 1e3 if timing.epoch_start_wait_ms else None,
        typical_consumption_samples_per_s=consumption_rate(timing, 50.0),
        step_cores=step_cores,
        back_to_back_samples_per_s=back_to_back_samples_per_s,
        epochs=epochs,
    )
