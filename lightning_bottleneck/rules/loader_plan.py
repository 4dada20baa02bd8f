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

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from lightning_bottleneck.evidence import RunConfig, TimingStats
from lightning_bottleneck.evidence.loader_ladder import BOUND_CPU, LoaderLadder, Rung
from lightning_bottleneck.stats import percentile
from lightning_bottleneck.thresholds import INPUT_SHARE_MEDIUM

# A loader "covers" the model when its measured rate is at least this multiple of the consumption rate.
# The probe timed the loader alone; during training the workers share CPUs with the training process (and,
# on a shared machine, with others), and repeated loader timings on this project's 2-core machine varied by
# 10-20% run to run (benchmarks/advice_payoff.py). 1.25x leaves room for both, so that a covering loader
# still hides behind the step.
COVER_MARGIN = 1.25
# A setting must measure at least this much faster than the current one to be advised: the probe's own
# rung-to-rung spread on a shared machine (the same 10% as the probe's LADDER_GAIN_MIN). Loading alone, that
# is; from in-process loading (num_workers=0) to workers whose loading does not take the step's cores (loading
# that waits on I/O, or a model off the CPU), the gain is the overlap of loading with the step, which a rate
# of the loader alone cannot show (a sleeping __getitem__ loads no faster in one worker than in-process): the
# prediction for the run as it trains must then clear the same bar. Issue 19: a 1-second probe ran out of
# budget after num_workers=1 (405 against 459 samples/s in-process, both asleep 2 ms a sample), no worker
# count was advised for a step 61% in data wait, and an estimated compile fix made the verdict overhead.
MEASURED_GAIN_MIN = 1.10
# persistent_workers keeps every worker (a process holding a copy of the dataset object) alive between
# epochs; it is worth that memory once re-starting workers costs more than the 3% noise band that
# `lightning-bottleneck compare` uses for "no change" -- 2% of an epoch stays under it.
PERSISTENT_STARTUP_SHARE_MIN = 0.03
# Cores the training process keeps busy during its step when they were not measured (no CPU snapshots of
# the window, or a busy machine): one, a Python training loop (issue 8's assumption). Measured, they are the
# process's own CPU time over the window's wall time with the in-process loading taken out (step_cores).
DEFAULT_STEP_CORES = 1.0
# When the model trains on the CPU and loading is CPU-bound, workers and the step share the cores, and the
# scheduler does not keep workers off the step's cores: a worker count that needs more cores than the step
# leaves free cannot be predicted within 20% (issue 19 measured num_workers=2 at 0.93x and 1 at 0.74-0.99x on
# 2 cores, against 1.2-2x from the loader alone). Its range's low end assumes the step loses this many
# cores' worth of time to the workers (half a core: the step's threads wait at barriers for a descheduled
# thread; a whole core would be the workers taking every cycle they want).
CONTENDED_STEP_CORES = 0.5
# The current worker count is timed with the step before and after the others; when those two timings differ
# by more than this ratio the machine's speed moved while it was measured, and the in-training speed-up is
# given as a range (half the 20% the predictions are held to, since either timing may be the off one).
IN_TRAINING_NOISE_MAX = 1.10
# The model's consumption rate is read at this percentile of (step - data wait) over the timed steps, not
# the median: profiled steps and steps slowed by other processes on a shared machine make the busy time
# look longer than the model needs (issue 9 measured 26x slower window steps under contention), and
# under-estimating consumption under-provisions workers, which costs more than one idle worker does.
CONSUMPTION_QUANTILE = 25.0
# Without a timing with the step, the new step time is predicted from the step's own time (data wait taken out)
# at its median. When the same prediction at CONSUMPTION_QUANTILE is faster by more than this ratio, the run's
# own steps disagree about what the step costs, and the speed-up is a range between the two (the same half of
# the 20% allowance as IN_TRAINING_NOISE_MAX). Measured (issue 19, io_wait: 3 ms sleeps per sample, 2 intra-op
# threads): the step took 4 ms or 13 ms, bimodal, while loading ran in the training process (its thread pool
# slept through the loading: 2.6 ms per nn.Linear call under cProfile), 1.6 ms once 8 workers loaded; the
# median-based 6.4x point met 8.5x applied.
STEP_SPREAD_MAX = 1.10


class LoaderAdvice(str, Enum):
    """Which loader change the rule chose: each is worded once, in :mod:`lightning_bottleneck.advice.loader_plan`."""

    CHEAPER_SAMPLES = (
        "cheaper_samples"  # no setting covers the model: make samples cheaper (settings: interim)
    )
    WORKERS_TIMED = "workers_timed_with_step"  # a worker count timed with the training step beat the current
    WORKERS_SHORT = "workers_short_of_model"  # the fastest worker count measured, still short of the model
    NO_WORKERS = "no_workers"  # in-process loading beats workers that restart every epoch
    WORKERS_COVER = "workers_cover"  # the smallest worker count that covers the model
    PERSISTENT = "persistent_workers"  # keep the workers alive between epochs
    PREFETCH = "prefetch_factor"  # a larger prefetch measured faster

    @property
    def lever(self) -> str:
        """The stable id the ranking's candidate and the advice's recommendation are joined by."""
        return f"loader:{self.value}"


@dataclass
class LoaderChange:
    """One loader change the rule chose, with its predicted whole-epoch speed-up and the measured facts that the
    advice words (names as on :class:`~lightning_bottleneck.report.Recommendation` where they mean the same)."""

    advice: LoaderAdvice
    settings: dict[str, Any]
    expected_speedup: float | None
    evidence: dict[str, Any]
    expected_speedup_range: tuple[float, float] | None = None
    uncertainty: str = ""
    workers_now: int = 0
    workers_new: int = 0
    chosen_label: str = ""  # the chosen rung ("num_workers=4, prefetch_factor=2")
    chosen_samples_per_s: float = 0.0
    # the current setting's rate timed with the step (None: not timed with the step)
    current_samples_per_s: float | None = None
    consumption_samples_per_s: float | None = None
    cpus: int = 1
    bound: str = ""
    ceiling_samples_per_s: float = 0.0
    usable_cpus: int | None = None
    stall_now_s: float = 0.0
    epoch_now_s: float = 0.0

    @property
    def lever(self) -> str:
        return self.advice.lever


@dataclass
class LoaderPlan:
    """What :func:`plan_loader` decided and why (changes first; empty means: leave the loader)."""

    changes: list[LoaderChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    covered: bool | None = None  # some measured setting covers consumption (None: not judged)
    ceiling_samples_per_s: float | None = None
    predicted_step_s: float | None = None
    expected_speedup: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "changes": [
                {
                    "advice": c.advice.value,
                    "settings": dict(c.settings),
                    "expected_speedup": c.expected_speedup,
                }
                for c in self.changes
            ],
            "notes": list(self.notes),
            "covered": self.covered,
            "ceiling_samples_per_s": self.ceiling_samples_per_s,
            "predicted_step_s": self.predicted_step_s,
            "expected_speedup": self.expected_speedup,
        }

    def __str__(self) -> str:
        if not self.changes:
            head = "LoaderPlan: leave the DataLoader as it is"
        else:
            c = self.changes[0]
            speed = f", expected {c.expected_speedup:.2f}x" if c.expected_speedup else ""
            head = f"LoaderPlan: {c.advice.value} {c.settings}{speed}"
        return "\n".join([head] + [f"  note: {n}" for n in self.notes])


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
    k = DEFAULT_STEP_CORES if step_cores is None else max(0.0, step_cores)
    if ladder.skipped or not ladder.rungs:
        plan.notes += ladder.notes or ["The loader was not measured: no loader advice."]
        return plan
    bs = ladder.batch_size or current.batch_size or 1
    w_now = current.num_workers or 0
    persistent_now = bool(current.persistent_workers) and w_now > 0
    rung_now = _rung_for(ladder, w_now, current.prefetch_factor)

    stall_now = 0.0
    if w_now > 0 and not persistent_now:
        if epoch_start_stall_s is not None:
            stall_now = max(0.0, epoch_start_stall_s)
        elif rung_now is not None:
            stall_now = rung_now.startup_s
    once_now = _once_per_fit(rung_now.startup_s if persistent_now and rung_now else 0.0, epochs)
    epoch_now = _epoch_s(steps_per_epoch, step_s, stall_now)
    stall_share = stall_now / epoch_now if epoch_now > 0 else 0.0
    steady_input = data_wait_share >= INPUT_SHARE_MEDIUM
    stall_costly = stall_share >= PERSISTENT_STARTUP_SHARE_MIN and steps_per_epoch is not None
    if not steady_input and not stall_costly:
        plan.notes.append(
            f"No loader advice: the data wait is {data_wait_share:.0%} of the step (below "
            f"{INPUT_SHARE_MEDIUM:.0%}) and worker start-up costs {stall_share:.0%} of an epoch."
        )
        return plan

    consumption = (
        consumption_samples_per_s if consumption_samples_per_s and consumption_samples_per_s > 0 else None
    )
    plan.ceiling_samples_per_s = round(ladder.ceiling_samples_per_s, 3)
    chosen: Rung | None = None
    covers_now = rung_now is not None and consumption is not None and _covers(rung_now, consumption)
    # Worker counts timed with the training step (CPU model, CPU-bound loading): what the run gets, measured.
    trained_now = ladder.in_training_rung(w_now) if _shares_cores(current, ladder) else None
    if steady_input and consumption is not None and not covers_now and trained_now is not None:
        plan.covered = any(_covers(r, consumption) for r in ladder.rungs)
        chosen = _pick_in_training(ladder, trained_now, plan.notes)
    elif steady_input and consumption is not None and not covers_now:
        usable = _usable_rungs(ladder, current, w_now, plan.notes, k, step_cores is not None)
        covering = sorted(
            (r for r in usable if _covers(r, consumption) and _shares_cores_well(r, current, ladder, k)),
            key=lambda r: (r.num_workers, r.prefetch_factor or 0),
        )
        plan.covered = bool(covering)
        if covering:
            chosen = covering[0]
        else:
            chosen = min(usable, key=lambda r: _per_sample_s(r, consumption, current, ladder, k))
        plain = ladder.rung(chosen.num_workers, current.prefetch_factor or 2) if chosen.num_workers else None
        if plain is not None and chosen.samples_per_s < plain.samples_per_s * MEASURED_GAIN_MIN:
            chosen = plain  # a larger prefetch_factor only when it measured clearly faster
        if (
            chosen is not None
            and rung_now is not None
            and chosen is not rung_now
            and (w_now > 0 or _shares_cores(current, ladder))  # else judged in training just below
            and chosen.samples_per_s < rung_now.samples_per_s * MEASURED_GAIN_MIN
        ):
            plan.notes.append(
                f"{chosen.label} measured {chosen.samples_per_s:.0f} samples/s, not clearly faster than "
                f"the current {rung_now.samples_per_s:.0f}: not advised."
            )
            chosen = None
        if chosen is rung_now:
            chosen = None
        if chosen is not None and rung_now is not None and chosen.num_workers != w_now:
            # the prediction for the run as it trains (the step holds k cores) must clear the same bar
            gain = _per_sample_s(rung_now, consumption, current, ladder, k) / _per_sample_s(
                chosen, consumption, current, ladder, k
            )
            if gain < MEASURED_GAIN_MIN:
                plan.notes.append(
                    f"{chosen.label} measured {chosen.samples_per_s:.0f} samples/s with the loader alone, but "
                    f"in training (the step keeps {k:.1f} of {_cpus(current, ladder)} CPU(s) busy) it is "
                    f"predicted at {gain:.2f}x, under {MEASURED_GAIN_MIN:.2f}x: not advised."
                )
                chosen = None
    elif covers_now:
        plan.covered = True
        if steady_input and rung_now is not None and consumption is not None:
            plan.notes.append(
                f"The loader alone delivers {rung_now.samples_per_s:.0f} samples/s at num_workers={w_now}, above "
                f"the model's {consumption:.0f}: the steady data wait comes from elsewhere (start-up, contention)."
            )

    if chosen is None and stall_costly and w_now > 0 and not persistent_now and consumption is not None:
        chosen = _in_process_instead(
            ladder, rung_now, typical_consumption_samples_per_s or consumption, bs, step_s, current, k,
            steps_per_epoch, stall_now, epochs, plan.notes,
        )  # fmt: skip
        if chosen is not None:
            # predicted from the loader alone (no worker count timed with the step applies)
            trained_now = None

    settings: dict[str, Any] = {}
    if chosen is not None:
        if chosen.num_workers != w_now:
            settings["num_workers"] = chosen.num_workers
        if chosen.num_workers > 0 and chosen.prefetch_factor not in (None, current.prefetch_factor or 2):
            settings["prefetch_factor"] = chosen.prefetch_factor
    w_new = chosen.num_workers if chosen is not None else w_now
    startup_new = chosen.startup_s if chosen is not None else (rung_now.startup_s if rung_now else stall_now)
    typical = typical_consumption_samples_per_s or consumption
    if trained_now is not None and chosen is not None:  # measured with the step: the rates' ratio
        step_new = step_s * trained_now.samples_per_s / chosen.samples_per_s
    else:
        step_new = _predicted_step_s(chosen, rung_now, typical, bs, step_s, current, ladder, k)
    if w_new > 0 and not persistent_now:
        epoch_guess = _epoch_s(steps_per_epoch, step_new, 0.0)
        if steps_per_epoch is None:
            # epoch length unknown: bundle it with a worker change (free), never advise it alone
            if "num_workers" in settings:
                settings["persistent_workers"] = True
        elif epoch_guess > 0 and startup_new / epoch_guess >= PERSISTENT_STARTUP_SHARE_MIN:
            settings["persistent_workers"] = True
    if settings and w_new > 0 and current.accelerator == "cuda" and not current.pin_memory:
        settings["pin_memory"] = True

    stall_new = 0.0 if (w_new == 0 or persistent_now or settings.get("persistent_workers")) else startup_new
    if w_new > 0 and (persistent_now or settings.get("persistent_workers")):
        # workers that persist start once per fit: that start-up, spread over the fit's epochs, against the
        # current one's (when they persist too)
        stall_new = max(0.0, _once_per_fit(startup_new, epochs) - once_now)
    epoch_new = _epoch_s(steps_per_epoch, step_new, stall_new)
    speedup = epoch_now / epoch_new if epoch_new > 0 and settings else None
    plan.predicted_step_s = round(step_new, 6)
    plan.expected_speedup = None if speedup is None else round(speedup, 3)
    evidence = _evidence(ladder, consumption, step_s, step_new, stall_now, steps_per_epoch)
    evidence["step_cores"] = round(k, 3)
    evidence["step_cores_measured"] = step_cores is not None
    if trained_now is not None:
        evidence["in_training_samples_per_s"] = {
            str(w): round(r.samples_per_s, 1)
            for w in sorted({r.num_workers for r in ladder.in_training})
            if (r := ladder.in_training_rung(w)) is not None
        }
    spread: tuple[float, float] | None = None
    uncertainty = ""
    if speedup is not None and chosen is not None and trained_now is not None:
        lo, hi = _current_spread(ladder, trained_now)
        new_lo, new_hi = _current_spread(ladder, chosen)
        if (
            lo > 0
            and new_lo > 0
            and (hi > lo * IN_TRAINING_NOISE_MAX or new_hi > new_lo * IN_TRAINING_NOISE_MAX)
        ):
            # a setting's two timings moved more than a 20% prediction allows: the speed-up is given as the
            # range between the chosen's slower timing against the current's faster, and the other way round
            ends = [
                epoch_now / _epoch_s(steps_per_epoch, step_s * rate / new, stall_new)
                for rate, new in ((hi, new_lo), (lo, new_hi))
            ]
            spread = (round(min(ends[0], speedup), 3), round(max(ends[1], speedup), 3))
            moved = [
                f"num_workers={w} {b / a - 1:.0%}"
                for w, a, b in ((w_now, lo, hi), (chosen.num_workers, new_lo, new_hi))
                if b > a * IN_TRAINING_NOISE_MAX
            ]
            uncertainty = (
                f"the two timings with the step of {' and '.join(moved)} apart "
                "(the machine's speed moved while it was measured)"
            )
    elif (
        speedup is not None
        and chosen is not None
        and trained_now is None
        and _contended(chosen, current, ladder, k)
    ):
        # workers need cores the step holds: the low end has the step lose CONTENDED_STEP_CORES to them
        worst = _predicted_step_s(
            chosen, rung_now, typical, bs, step_s, current, ladder, k + CONTENDED_STEP_CORES
        )
        low = epoch_now / _epoch_s(steps_per_epoch, worst, stall_new) if worst > 0 else speedup
        spread = (round(min(low, speedup), 3), round(speedup, 3))
        uncertainty = (
            f"{chosen.num_workers} worker(s) and a step that keeps {k:.1f} core(s) busy share "
            f"{_cpus(current, ladder)} CPU(s)"
        )

    fastest = max(consumption or 0.0, back_to_back_samples_per_s or 0.0)
    if (
        spread is None
        and speedup is not None
        and chosen is not None
        and trained_now is None
        and typical is not None
        and fastest > typical
    ):
        fast = _predicted_step_s(chosen, rung_now, fastest, bs, step_s, current, ladder, k)
        high = epoch_now / _epoch_s(steps_per_epoch, fast, stall_new) if fast > 0 else speedup
        if high > speedup * STEP_SPREAD_MAX:
            spread = (round(speedup, 3), round(high, 3))
            quick = (
                f"{bs / consumption * 1e3:.1f} ms (the fastest quarter)"
                if consumption and consumption >= fastest
                else f"{bs / fastest * 1e3:.1f} ms (the same step timed back-to-back, no loading between)"
            )
            uncertainty = (
                f"this run's own steps took {bs / typical * 1e3:.1f} ms (median) but {quick} without the data "
                f"wait; which of them the step runs at once {chosen.label} does the loading was not measured"
            )
    change = LoaderChange(
        advice=LoaderAdvice.CHEAPER_SAMPLES,
        settings=settings,
        expected_speedup=plan.expected_speedup,
        evidence=evidence,
        expected_speedup_range=spread,
        uncertainty=uncertainty,
        workers_now=w_now,
        workers_new=w_new,
        chosen_label=chosen.label if chosen is not None else "",
        chosen_samples_per_s=chosen.samples_per_s if chosen is not None else 0.0,
        current_samples_per_s=trained_now.samples_per_s if trained_now is not None else None,
        consumption_samples_per_s=consumption,
        cpus=_cpus(current, ladder),
        bound=ladder.bound,
        ceiling_samples_per_s=ladder.ceiling_samples_per_s,
        usable_cpus=ladder.usable_cpus,
        stall_now_s=stall_now,
        epoch_now_s=epoch_now,
    )
    if plan.covered is False and ladder.bound == BOUND_CPU:
        plan.changes.append(change)
        return plan
    if not settings:
        return plan
    if "num_workers" in settings and trained_now is not None and chosen is not None:
        change.advice = LoaderAdvice.WORKERS_TIMED
    elif "num_workers" in settings and plan.covered is False:
        change.advice = LoaderAdvice.WORKERS_SHORT
    elif settings.get("num_workers") == 0:
        change.advice = LoaderAdvice.NO_WORKERS
    elif "num_workers" in settings:
        change.advice = LoaderAdvice.WORKERS_COVER
    elif "persistent_workers" in settings:
        change.advice = LoaderAdvice.PERSISTENT
    else:
        change.advice = LoaderAdvice.PREFETCH
    plan.changes.append(change)
    return plan


def consumption_rate(timing: TimingStats, quantile: float = CONSUMPTION_QUANTILE) -> float | None:
    """Samples/s the model takes when it never waits: ``samples_per_step / quantile(step - data wait)``."""
    if not timing.samples_per_step or not timing.step_ms:
        return None
    waits = (
        timing.data_wait_ms
        if len(timing.data_wait_ms) == len(timing.step_ms)
        else [0.0] * len(timing.step_ms)
    )
    busy = sorted(max(0.0, s - w) for s, w in zip(timing.step_ms, waits))
    busy_ms = percentile(busy, quantile)
    return timing.samples_per_step / (busy_ms / 1e3) if busy_ms > 0 else None


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


def step_cores_from_window(
    self_cores: float | None, data_wait_share: float, ladder: LoaderLadder, current: RunConfig
) -> float | None:
    """Cores the training step keeps busy, measured: the training process's own CPU time over the
    profiled window's wall time (:attr:`~lightning_bottleneck.measure.contention.Contention.self_cores`,
    workers excluded), with the in-process loading taken out (``num_workers=0``: the data wait is the
    process loading at the probe's measured CPU share), spread over the non-waiting part of the step.
    None when not measured or when the step is nearly all data wait (too little left to measure)."""
    busy = 1.0 - data_wait_share
    if self_cores is None or busy < 0.05:
        return None
    loading = 0.0
    if not current.num_workers:
        rung0 = ladder.rung(0)
        loading = rung0.cpu_share if rung0 is not None and rung0.cpu_share is not None else 1.0
    cpus = float(_cpus(current, ladder))
    return min(cpus, max(0.0, (self_cores - data_wait_share * loading) / busy))


def _pick_in_training(ladder: LoaderLadder, now: Rung, notes: list[str]) -> Rung | None:
    """The worker count that trained fastest with the step, if it beat the current one by
    :data:`MEASURED_GAIN_MIN`; else None, with a note giving the figures."""
    others = [
        r
        for w in sorted({r.num_workers for r in ladder.in_training} - {now.num_workers})
        if (r := ladder.in_training_rung(w)) is not None
    ]
    rough = [r for r in others if r.rough]
    if rough:  # its window closed before the workers' queue drained and two rounds were timed: not evidence
        notes.append(
            "Timed with the training step, but too briefly to count (the probe's budget ran out): "
            + ", ".join(f"num_workers={r.num_workers}" for r in rough)
            + "; raise loader_budget_s to time them."
        )
        others = [r for r in others if not r.rough]
    if not others or now.rough:
        return None
    best = max(others, key=lambda r: r.samples_per_s)
    gain = best.samples_per_s / now.samples_per_s if now.samples_per_s > 0 else 0.0
    figures = (
        ", ".join(f"num_workers={r.num_workers} {r.samples_per_s / now.samples_per_s:.2f}x" for r in others)
        if now.samples_per_s > 0
        else ""
    )
    lo, hi = _current_spread(ladder, now)
    best_lo, _ = _current_spread(ladder, best)
    if gain >= MEASURED_GAIN_MIN and best_lo >= hi:
        notes.append(
            f"Timed with the training step (workers and the step share the CPUs): {figures} of the current "
            f"num_workers={now.num_workers}."
        )
        return best
    if gain >= MEASURED_GAIN_MIN:  # faster on the mean, but not in every timing of both settings
        twice = best_lo < best.samples_per_s
        notes.append(
            f"Timed with the training step (workers and the step share the CPUs): {figures} of the current "
            f"num_workers={now.num_workers}, whose own two timings ({lo:.0f} and {hi:.0f} samples/s) "
            + (
                f"overlap num_workers={best.num_workers}'s slower one ({best_lo:.0f}, timed again)"
                if twice
                else "differ by as much"
            )
            + ": the machine's noise, not a measured gain; no worker count advised."
        )
        return None
    notes.append(
        f"Timed with the training step (workers and the step share the CPUs): {figures} of the current "
        f"num_workers={now.num_workers}; none is {MEASURED_GAIN_MIN:.2f}x faster: no worker count advised."
    )
    return None


def _current_spread(ladder: LoaderLadder, now: Rung) -> tuple[float, float]:
    """The lowest and highest timing of a worker count with the step (the current one is timed twice, before and
    after the others, the fastest other again when it beat both: how much the machine's speed moved)."""
    rates = [r.samples_per_s for r in ladder.in_training if r.num_workers == now.num_workers] or [
        now.samples_per_s
    ]
    return min(rates), max(rates)


def _usable_rungs(
    ladder: LoaderLadder, cfg: RunConfig, w_now: int, notes: list[str], k: float, measured: bool
) -> list[Rung]:
    """Rungs that can pay off during training, not only in the probe.

    The probe timed the loader alone. When loading is CPU-bound and the model also trains on the CPU, the
    training process needs a core of its own while workers load: worker counts beyond ``usable CPUs - 1``
    compete with the step itself (issue 8 measured ``num_workers=1`` at 0.84x on 2 cores, and this
    project's benchmark measured 1 to 4 workers at 0.2-0.5x of ``num_workers=0`` on a busy 2-core machine).
    """
    cpus = ladder.usable_cpus or cfg.usable_cpus
    if cfg.accelerator != "cpu" or ladder.bound != BOUND_CPU or not cpus:
        return list(ladder.rungs)
    cap = max(0, round(cpus - k))
    kept = [r for r in ladder.rungs if r.num_workers <= cap or r.num_workers == w_now]
    if len(kept) < len(ladder.rungs):
        how = "measured" if measured else "assumed"
        notes.append(
            f"Loading is CPU-bound and the model trains on the CPU: its step keeps {k:.1f} core(s) busy "
            f"({how}), so worker counts above {cap} would take the training process's cores ({cpus} usable) "
            "and are not advised."
        )
    return kept


def _cpus(cfg: RunConfig, ladder: LoaderLadder) -> int:
    return max(1, ladder.usable_cpus or cfg.usable_cpus or 1)


def _shares_cores(cfg: RunConfig, ladder: LoaderLadder) -> bool:
    """The model trains on the CPU and loading is CPU-bound: workers and the step compete for cores."""
    return cfg.accelerator == "cpu" and ladder.bound == BOUND_CPU


def _contended(rung: Rung, cfg: RunConfig, ladder: LoaderLadder, k: float) -> bool:
    """Workers that want more cores than the step leaves free while it runs."""
    return (
        rung.num_workers > 0
        and _shares_cores(cfg, ladder)
        and rung.num_workers > _cpus(cfg, ladder) - k + 1e-9
    )


def _shares_cores_well(rung: Rung, cfg: RunConfig, ladder: LoaderLadder, k: float) -> bool:
    """A rung "covers" the model only if it does so on the cores the step leaves (always, off the CPU)."""
    if rung.num_workers == 0 or not _shares_cores(cfg, ladder):
        return True
    return not _contended(rung, cfg, ladder, k)


def _rung_for(ladder: LoaderLadder, workers: int, prefetch: int | None) -> Rung | None:
    if workers == 0:
        return ladder.rung(0)
    return ladder.rung(workers, prefetch or 2) or ladder.rung(workers)


def _covers(rung: Rung, consumption: float) -> bool:
    return rung.samples_per_s >= consumption * COVER_MARGIN


def _per_sample_s(
    rung: Rung, consumption: float | None, cfg: RunConfig, ladder: LoaderLadder, k: float = DEFAULT_STEP_CORES
) -> float:
    """Predicted seconds per sample of training with this loader setting, the run as it trains.

    Without workers, loading and the step run one after the other. With workers they overlap, so the slower
    one sets the pace. When the model also trains on the CPU and loading is CPU-bound, the workers get, while
    the step runs, only the cores it leaves free (``usable - k``, ``k`` the cores the step keeps busy) and all
    of them (up to one per worker) while the step waits for data: the CPU time a sample needs
    (``cpu_per_sample_s``) that does not fit beside the step lengthens it.
    """
    step = 1.0 / consumption if consumption else 0.0
    load = 1.0 / rung.samples_per_s if rung.samples_per_s > 0 else float("inf")
    if rung.num_workers == 0:
        return step + load
    pace = max(step, load)
    if _shares_cores(cfg, ladder) and rung.cpu_per_sample_s is not None:
        cpus = _cpus(cfg, ladder)
        beside = min(float(rung.num_workers), max(0.0, cpus - k)) * step  # loaded while the step runs
        rest = max(0.0, rung.cpu_per_sample_s - beside)
        pace = max(pace, step + rest / min(rung.num_workers, cpus))
    return pace


def _in_process_instead(
    ladder: LoaderLadder,
    rung_now: Rung | None,
    consumption: float,
    bs: int,
    step_s: float,
    cfg: RunConfig,
    k: float,
    steps_per_epoch: int | None,
    stall_now: float,
    epochs: float | None,
    notes: list[str],
) -> Rung | None:
    """``num_workers=0`` when workers that restart every epoch cost more than loading in the training process:
    its epoch (the step, then the loading, one after the other, no start-up) must beat the epoch with the workers
    kept alive (their start-up once per fit) by MEASURED_GAIN_MIN. issue 19's worker_restart: 2 workers with a
    0.4 s start-up over an in-memory dataset the process loads at 90 000 samples/s; persistent workers made its
    6-epoch fit 3.6x faster, no workers 21.6x."""
    zero = ladder.rung(0)
    if zero is None or rung_now is None or not steps_per_epoch or zero.rough:
        return None
    kept = _epoch_s(steps_per_epoch, step_s, _once_per_fit(rung_now.startup_s, epochs))
    alone = _epoch_s(steps_per_epoch, bs * _per_sample_s(zero, consumption, cfg, ladder, k), 0.0)
    if alone <= 0 or kept / alone < MEASURED_GAIN_MIN:
        return None
    notes.append(
        f"num_workers=0 loads {zero.samples_per_s:.0f} samples/s in the training process: an epoch without "
        f"workers is predicted at {alone:.3f} s against {kept:.3f} s with them kept alive ({stall_now * 1e3:.0f} ms "
        "start-up an epoch now)."
    )
    return zero


def _predicted_step_s(
    chosen: Rung | None,
    rung_now: Rung | None,
    consumption: float | None,
    bs: int,
    step_s: float,
    cfg: RunConfig,
    ladder: LoaderLadder,
    k: float = DEFAULT_STEP_CORES,
) -> float:
    if chosen is None or consumption is None:
        return step_s
    return bs * _per_sample_s(chosen, consumption, cfg, ladder, k)


def _once_per_fit(startup_s: float, epochs: float | None) -> float:
    """A start-up paid once per fit, per epoch (0 when the fit's epochs are unknown)."""
    return startup_s / epochs if epochs and epochs > 0 else 0.0


def _epoch_s(steps_per_epoch: int | None, step_s: float, stall_s: float) -> float:
    """Seconds per epoch; with an unknown epoch length, per step (start-up stalls then cannot be weighed)."""
    if not steps_per_epoch:
        return step_s
    return steps_per_epoch * step_s + stall_s


def _evidence(
    ladder: LoaderLadder,
    consumption: float | None,
    step_s: float,
    step_new: float,
    stall_s: float,
    steps_per_epoch: int | None,
) -> dict[str, Any]:
    return {
        "ladder": [
            {
                "num_workers": r.num_workers,
                "prefetch_factor": r.prefetch_factor,
                "samples_per_s": round(r.samples_per_s, 1),
                "startup_ms": round(r.startup_s * 1e3, 1),
            }
            for r in ladder.rungs
        ],
        "bound": ladder.bound,
        "ceiling_samples_per_s": round(ladder.ceiling_samples_per_s, 1),
        "consumption_samples_per_s": None if consumption is None else round(consumption, 1),
        "step_ms": round(step_s * 1e3, 3),
        "predicted_step_ms": round(step_new * 1e3, 3),
        "epoch_start_stall_ms": round(stall_s * 1e3, 1),
        "steps_per_epoch": steps_per_epoch,
    }
