"""The measurement stage after the window: measure candidate fixes on the run's own loader and model.

Run once on the training thread, at the same step on every rank (the callback picks it), after the
window's trace has been summarised. Each part is bounded and optional, and none changes the training:

* :func:`run_length` - how long the whole fit is (for whole-run accounting);
* the loader probe (:func:`~lightning_bottleneck.measure.loader_probe.probe_loader`) when data wait or
  epoch-start stalls reach the input medium threshold; IterableDatasets are skipped with a note;
* trials (:func:`~lightning_bottleneck.measure.trials.run_trials`) on a batch of the window when compute or
  overhead is material; manual optimization is skipped with a note;
* the loader probe on the *val* DataLoader when its wait dominated validation so far (the fit's ledger),
  within the same budget as the train probe, and the user's callbacks' frequency arguments
  (:class:`~lightning_bottleneck.evidence.fit_probes.FitProbes`);
* the busy-machine check (:func:`~lightning_bottleneck.measure.contention.assess`) over the window;
* whether the window is representative (:func:`~lightning_bottleneck.analysis.representative.check_window`).

The modules it calls restore what they touch (RNG states, model state, the training loader).

Example::

    evidence = Evidence(summaries=[summary], timing=timing, config=config, ledger=ledger)
    measure(trainer, pl_module, MeasureOptions(), evidence, outside_ms=outside, batch=batch)
    evidence.loader_ladder, evidence.trials      # what the stage measured, beside what it read
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from statistics import median
from typing import Any

import lightning_bottleneck.thresholds as thresholds
from lightning_bottleneck.analysis.breakdown import breakdown_from_summary
from lightning_bottleneck.analysis.ledger import FitLedger
from lightning_bottleneck.analysis.representative import WindowCheck, check_window
from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.categories import FitPart, Share
from lightning_bottleneck.evidence import Evidence, RunConfig, RunLength, TimingStats
from lightning_bottleneck.evidence.contention import Contention, CpuSnapshot
from lightning_bottleneck.evidence.fit_probes import KNOB_NAMES, FitProbes
from lightning_bottleneck.evidence.loader_ladder import LoaderLadder
from lightning_bottleneck.evidence.trial_results import TrialReport
from lightning_bottleneck.measure.batch_fetch import bigger_fetch_budget, time_bigger_fetch
from lightning_bottleneck.measure.contention import assess
from lightning_bottleneck.measure.cpus import PSUTIL_OFF_NOTE, psutil_module, usable_cpus
from lightning_bottleneck.measure.run_length import projected_run_s, run_length

__all__ = [
    "MeasureOptions",
    "input_shares",
    "measure",
    "projected_run_s",
    "run_length",
    "wants_trials",
    "window_check",
]

#: Trials run when compute and overhead together take at least this share of the step: the overhead
#: medium threshold (thresholds.py), the smallest share whose fix the rules would advise.
TRIALS_SHARE_MIN = thresholds.OVERHEAD_SHARE_MEDIUM


#: Automatic budgets (an option left at ``None``): the most each part may take ...
AUTO_LOADER_BUDGET_S = 3.0  # a few rungs of a ladder, each a couple of rounds of batches (loader_probe.py)
AUTO_TRIAL_BUDGET_S = 5.0  # a few A/B pairs per lever (trials.py: DEFAULT_BUDGET_S)
AUTO_COMPILE_BUDGET_S = 120.0  # trials.DEFAULT_COMPILE_BUDGET_S: a few thousand ops compile in 54-92 s
#: ... and all of them together at most this share of the projected fit: the measurement is an investment
#: paid once, and the one part of the callback's cost that grows with the fit. Issue 18's goals are the whole
#: callback within 2% of a 2000-step fit and within noise on a 10000-step one, with a fixed cost near 150 ms
#: (~0.7% of the 2000-step fit on the project's 2-core VM): 1% is what is left for the measurement.
AUTO_SHARE_OF_RUN = 0.01
#: Below this an automatic budget measures nothing useful (one rung, or one A/B pair, takes longer):
#: the part is skipped with a note and its advice is estimated.
AUTO_MIN_BUDGET_S = 0.25
#: ... and the loader probe needs at least this: num_workers=0 and one worker count, each ``MIN_MEASURE_S`` (0.25 s)
#: after its first batch or start-up, plus the step timed alone. Measured on the 2-core VM: io_wait's probe spent
#: 0.91 s on exactly that (num_workers=0 0.31 s, 8 workers 0.44 s and their shutdown, the step 0.06 s); a 0.40 s
#: probe of a loader asleep 8 ms a sample timed num_workers=0 alone (0.33 s) and gave no advice, and cpu_transform's
#: 0.44 s probe did the same (0.29 s): time spent for nothing.
AUTO_LOADER_MIN_BUDGET_S = 0.75
#: The loader probe's automatic budget may also take this share of what loading costs the fit (its data-wait or
#: epoch-start-stall share of the projected fit, the larger): on an input-bound fit of tens of seconds the 1% pool
#: is under the probe's minimum although loading is most of the fit. The share is the stake: a probe that finds
#: nothing costs at most a tenth of what loading costs, and issue 29's goal (an autotuned fit keeps >= 80% of the
#: best setting's saving) leaves 90% to the fix when the best setting hides all of the loading, 10% to the rest of
#: the diagnosis. A fit whose loading costs under AUTO_LOADER_MIN_BUDGET_S / 0.1 = 7.5 s (and whose 1% pool is
#: under it: a fit under 75 s) is not probed.
AUTO_LOADER_STAKE_SHARE = 0.1
#: Workers save all of loading that waits, at most ``1 - 1/cpus`` of CPU-bound loading: a probe that finds it so keeps
#: to that share of the stake (issue 29's cpu_transform, 2 cores: a 1.34 s probe took 28% of a 4.8 s saving).


@dataclass(frozen=True)
class MeasureOptions:
    """The callback's measurement options (validated there); a budget of ``None`` is automatic."""

    probe_loader: bool = True
    loader_budget_s: float | None = None
    trial_budget_s: float | None = None
    compile_budget_s: float | None = None
    #: the loader probe's budget once it finds the loading CPU-bound (None: ``loader_budget_s``; 0: stop there)
    loader_cpu_bound_budget_s: float | None = None

    def resolved(
        self,
        projected_run_s: float | None,
        notes: list[str],
        wanted: tuple[bool, bool, bool] = (True, True, True),
        loading_s: float = 0.0,
    ) -> MeasureOptions:
        """Automatic budgets from one pool of :data:`AUTO_SHARE_OF_RUN` of the projected fit (each part its
        default when the length is unknown), shared in order among the parts that will run: ``wanted`` says
        which of (the loader probes, the trial steps, the compile trial) would run. The loader probe(s)
        come first (measured loader advice is the largest saving when loading waits), then the trial steps,
        then the compile trial with what is left (it skips itself when its estimate does not fit). The loader
        probe may take more than the pool: up to :data:`AUTO_LOADER_STAKE_SHARE` of ``loading_s``, the seconds
        loading is projected to cost the fit. A part whose budget comes out under its minimum is skipped (a note
        says so): :data:`AUTO_MIN_BUDGET_S`, the loader probe :data:`AUTO_LOADER_MIN_BUDGET_S`. An explicit budget
        is used as given and is not taken from the pool."""
        skipped: list[str] = []
        pool = (
            None
            if projected_run_s is None or not math.isfinite(projected_run_s)
            else AUTO_SHARE_OF_RUN * projected_run_s
        )
        stake = AUTO_LOADER_STAKE_SHARE * loading_s if math.isfinite(loading_s) and loading_s > 0 else 0.0

        def auto(
            value: float | None,
            default: float,
            what: str,
            wants: bool,
            own: float = 0.0,
            least: float = AUTO_MIN_BUDGET_S,
        ) -> float:
            nonlocal pool
            if value is not None:
                return value
            if pool is None:
                return default
            if not wants:
                return 0.0
            budget = min(default, max(pool, own))
            if budget < least:
                skipped.append(what)
                return 0.0
            pool = max(0.0, pool - budget)
            return budget

        pool_before = pool
        loader = auto(
            self.loader_budget_s,
            AUTO_LOADER_BUDGET_S,
            "loader probe",
            wanted[0],
            own=stake,
            least=AUTO_LOADER_MIN_BUDGET_S,
        )
        trial = auto(self.trial_budget_s, AUTO_TRIAL_BUDGET_S, "trial steps", wanted[1])
        compile_ = auto(self.compile_budget_s, AUTO_COMPILE_BUDGET_S, "compile trial", wanted[2])
        if skipped:
            notes.append(
                f"Not measured ({', '.join(skipped)}): this fit is projected to take {projected_run_s:.1f} s, too "
                f"short to spend time measuring (automatic budgets take at most {AUTO_SHARE_OF_RUN:.0%} of the "
                f"fit in all, the loader probe up to {AUTO_LOADER_STAKE_SHARE:.0%} of the time loading costs it; a "
                f"part runs from {AUTO_MIN_BUDGET_S:.2f} s, the loader probe from {AUTO_LOADER_MIN_BUDGET_S:.2f} s), "
                "so the advice is estimated; set loader_budget_s / trial_budget_s / compile_budget_s to measure "
                "anyway."
            )
        cpu_bound: float | None = None
        if self.loader_budget_s is None and pool_before is not None and loader > 0:
            cpus = max(1, usable_cpus())
            cpu_bound = min(loader, max(pool_before, stake * (1.0 - 1.0 / cpus)))
            cpu_bound = cpu_bound if cpu_bound >= AUTO_LOADER_MIN_BUDGET_S else 0.0
        return MeasureOptions(self.probe_loader, loader, trial, compile_, cpu_bound)


def input_shares(
    summary: TraceSummary | None,
    timing: TimingStats | None,
    length: RunLength | None,
    num_workers: int | None,
    persistent: bool | None,
) -> tuple[float, float]:
    """(steady-state data-wait share, epoch-start stall share of the whole run's step time).

    An epoch start counts as a stall by the rules' definition (:meth:`TimingStats.epoch_stalls_ms`). Workers that restart
    every epoch (``num_workers > 0`` without ``persistent_workers``) pay the largest observed start-up at
    every epoch of the run; otherwise only the starts observed so far count (the first epoch's one-off
    set-up is not projected onto the others)."""
    wait = summary.data_wait if summary is not None and summary.num_steps else 0.0
    if timing is not None and timing.step_ms:
        wait = max(wait, timing.data_wait_share)
    stall = 0.0
    starts = timing.epoch_stalls_ms() if timing is not None else []
    if timing is not None and starts:
        steps_ms = timing.step_ms or (summary.step_times_ms if summary else [])
        step_ms = median(steps_ms) if steps_ms else 0.0
        restarts = bool(num_workers) and not persistent
        epochs = (length.epochs if length and length.epochs else len(timing.epoch_start_wait_ms)) or 1
        stalls_ms = max(starts) * epochs if restarts else sum(starts)
        steps = length.total_steps if length and length.total_steps else max(timing.steps, 1)
        total_ms = steps * step_ms + stalls_ms
        stall = stalls_ms / total_ms if total_ms > 0 else 0.0
    return wait, stall


def window_check(
    summary: TraceSummary, outside_ms: list[float], contention: Contention | None
) -> WindowCheck:
    """Are the window's steps like the rest of the run's (always-on timing outside the window)?"""
    import torch

    return check_window(
        summary.step_times_ms,
        outside_ms,
        contended=bool(contention and contention.busy),
        intra_op_threads=torch.get_num_threads(),
        free_cores=contention.free_cores if contention else None,
        ops_per_step=summary.cpu_ops_per_step or None,
    )


def wants_trials(summary: TraceSummary | None) -> bool:
    if summary is None or not summary.num_steps:
        return False
    shares = breakdown_from_summary(summary)
    return shares.get(Share.COMPUTE.value, 0.0) + shares.get(Share.OVERHEAD.value, 0.0) >= TRIALS_SHARE_MIN


def wants_bigger_batch(summary: TraceSummary | None) -> bool:
    """Time a bigger batch only where its advice can be given: an overhead share past OVERHEAD_SHARE_MEDIUM (else
    its trial would take budget from the levers that can be advised: bf16 on a compute-bound step)."""
    if summary is None or not summary.num_steps:
        return False
    return breakdown_from_summary(summary).get(Share.OVERHEAD.value, 0.0) >= thresholds.OVERHEAD_SHARE_MEDIUM


def _consumption_rate(
    summary: TraceSummary | None, batch_size: int | None, timing: TimingStats | None = None
) -> float | None:
    """Samples/s the model takes when no batch waits: batch size over the step time without data wait; the
    faster of the profiled window's (its median) and the steps timed outside it (``timing``, the rules' quantile),
    as the rules read it. The window's steps run under the profiler and, on a busy machine, for the descheduled
    cores: issue 29's io_wait_workers beside a busy core read 391 samples/s in the window against 5 114 outside it,
    so the probe stopped at the 2 workers it had (592 samples/s) and the run got no measured worker count to apply
    (1 fit in 4-6 beside `yes`; thirty-eighth session). Under-estimating it under-provisions the ladder, which
    costs the run the setting it needed; over-estimating it costs the probe one more rung."""
    window = None
    if summary is not None and summary.step_times_ms and batch_size:
        compute_ms = median(summary.step_times_ms) * max(0.0, 1.0 - summary.data_wait)
        window = batch_size * 1000.0 / compute_ms if compute_ms > 0 else None
    outside = timing.busy_samples_per_s() if timing is not None else None
    rates = [r for r in (window, outside) if r is not None]
    return max(rates) if rates else None


def measure(
    trainer: Any,
    pl_module: Any,
    options: MeasureOptions,
    out: Evidence,
    *,
    outside_ms: list[float],
    batch: Any = None,
    batch_idx: int = 0,
    cpu_start: CpuSnapshot | None = None,
    cpu_end: CpuSnapshot | None = None,
    agree: Callable[[list[bool]], list[bool]] | None = None,
    train_loader_settled: str | None = None,
    run_confirms: bool = False,
    run_races: bool = True,
) -> None:
    """Run every part of the stage that applies, into ``out``; a part that fails becomes a note.
    ``train_loader_settled``: why the train loader is not probed (autotune already switched it), else None.
    ``run_confirms``: autotune will apply the train loader's measured setting and time it on the run's own steps
    (the probe's ``run_confirms``: one timing of each worker count with the step); ``run_races``: it could then race
    the worker count the probe leaves to it (the probe's ``run_races``).

    It reads the evidence so far (this rank's summary, the always-on timing, the run's configuration, the fit
    ledger) and fills what it measures: ``run_length``, ``contention``, ``window_check``, ``loader_ladder``,
    ``trials``, ``fit_probes`` and ``notes``. ``agree`` makes the plan (probe the loader? run the trials?) the same
    on every rank: a part that one rank wants runs on all of them, so no rank waits long for another at the next
    collective."""
    summary = out.summaries[0] if out.summaries else None
    timing, ledger, cfg = out.timing, out.ledger, out.config or RunConfig()
    try:
        out.run_length = run_length(trainer)
    except Exception as err:
        out.notes.append(f"run length unknown: {type(err).__name__}: {err}")
    if psutil_module() is None:  # the one note for every check that needs psutil
        out.notes.append(PSUTIL_OFF_NOTE)
    if cpu_start is not None and cpu_end is not None:
        out.contention = assess(cpu_start, cpu_end)
    if summary is not None:
        out.window_check = window_check(summary, outside_ms, out.contention)
    wait, stall = input_shares(summary, timing, out.run_length, cfg.num_workers, cfg.persistent_workers)
    wants_probe = options.probe_loader and max(wait, stall) >= thresholds.INPUT_SHARE_MEDIUM
    if wants_probe and train_loader_settled is not None:
        wants_probe = False
        out.notes.append(f"Train loader probe skipped: {train_loader_settled}.")
    wants_val = options.probe_loader and wants_val_probe(ledger)
    wants_trial = batch is not None and wants_trials(summary)
    projected = projected_run_s(out.run_length, timing)
    options = options.resolved(
        projected,
        out.notes,
        (wants_probe or wants_val, wants_trial, wants_trial),
        max(wait, stall) * projected if wants_probe and projected is not None else 0.0,
    )
    plan = [
        wants_probe and (options.loader_budget_s or 0.0) > 0,
        wants_trial and (options.trial_budget_s or 0.0) > 0,
        wants_val and (options.loader_budget_s or 0.0) > 0,
    ]
    probe, trials, val_probe = agree(plan) if agree is not None else plan
    if probe:
        out.loader_ladder = _probe(
            trainer,
            options,
            _consumption_rate(summary, cfg.batch_size, timing),
            out.notes,
            pl_module,
            batch_idx,
            run_confirms,
            run_races,
        )
    if trials and batch is not None:
        out.trials = _trials(
            trainer, pl_module, batch, batch_idx, options, out.notes, wants_bigger_batch(summary)
        )
    out.fit_probes = fit_probes(trainer, options, val_probe)
    out.notes += out.fit_probes.notes


def wants_val_probe(ledger: FitLedger | None) -> bool:
    """Probe the val loader when validation is a material share of the fit so far and its DataLoader wait is
    most of it (thresholds.py: FIT_PART_SHARE_MEDIUM, VAL_LOADER_WAIT_SHARE_MIN)."""
    if ledger is None or ledger.own_fit_s() <= 0 or not ledger.validation_runs:
        return False
    val_s = float(ledger.parts.get(FitPart.VALIDATION, 0.0))
    return (
        val_s >= thresholds.FIT_PART_SHARE_MEDIUM * ledger.own_fit_s()
        and ledger.validation_loader_wait_s >= thresholds.VAL_LOADER_WAIT_SHARE_MIN * val_s
    )


def fit_probes(trainer: Any, options: MeasureOptions, val_probe: bool) -> FitProbes:
    """The val loader's settings (and its ladder when ``val_probe``), and the callbacks' frequency arguments."""
    from torch.utils.data import DataLoader

    out = FitProbes(callback_knobs=callback_knobs(trainer))
    loader = _single_loader(getattr(trainer, "val_dataloaders", None))
    if isinstance(loader, DataLoader):
        out.val_num_workers = loader.num_workers
        out.val_batch_size = loader.batch_size
    if not val_probe:
        return out
    if not isinstance(loader, DataLoader):
        out.notes.append(
            f"val loader probe skipped: the val loader is a {type(loader).__name__}, not one DataLoader"
        )
        return out
    from lightning_bottleneck.measure.loader_probe import probe_loader

    try:
        out.val_ladder = probe_loader(loader, budget_s=options.loader_budget_s or 0.0)
    except Exception as err:
        out.notes.append(f"val loader probe failed: {type(err).__name__}: {err}")
    return out


def callback_knobs(trainer: Any) -> dict[str, dict[str, int]]:
    """For each callback, the constructor arguments in KNOB_NAMES it stores (as ``name`` or ``_name``), as ints."""
    out: dict[str, dict[str, int]] = {}
    for cb in getattr(trainer, "callbacks", None) or []:
        cls = type(cb)
        if cls.__module__.startswith(("lightning.", "pytorch_lightning.", "lightning_bottleneck.")):
            continue
        try:
            params = set(inspect.signature(cls.__init__).parameters)
        except (TypeError, ValueError):
            continue
        knobs: dict[str, int] = {}
        for name in KNOB_NAMES:
            if name not in params:
                continue
            value = getattr(cb, name, getattr(cb, "_" + name, None))
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                knobs[name] = value
        if knobs:
            out[cls.__name__] = knobs
    return out


def _single_loader(loader: Any) -> Any:
    if isinstance(loader, (list, tuple)) and len(loader) == 1:
        return loader[0]
    if isinstance(loader, dict) and len(loader) == 1:
        return next(iter(loader.values()))
    return loader


def _probe(
    trainer: Any,
    options: MeasureOptions,
    target: float | None,
    notes: list[str],
    pl_module: Any = None,
    batch_idx: int = 0,
    run_confirms: bool = False,
    run_races: bool = True,
) -> LoaderLadder | None:
    """The train loader's probe; when the model trains on the CPU, worker counts are also timed with its
    step (:func:`~lightning_bottleneck.measure.trials.restored_trial_step`: nothing of the training changes)."""
    from torch.utils.data import DataLoader

    from lightning_bottleneck.measure.loader_probe import probe_loader
    from lightning_bottleneck.measure.trials import restored_trial_step

    loader = _single_loader(getattr(trainer, "train_dataloader", None))
    if not isinstance(loader, DataLoader):
        notes.append(
            f"loader probe skipped: the train loader is a {type(loader).__name__}, not one DataLoader"
        )
        return None
    module = getattr(trainer, "lightning_module", None) or pl_module
    budget, cpu_bound = options.loader_budget_s or 0.0, options.loader_cpu_bound_budget_s
    probe = partial(
        probe_loader,
        loader,
        budget_s=budget,
        target_samples_per_s=target,
        cpu_bound_budget_s=cpu_bound,
        run_confirms=run_confirms,
        run_races=run_races,
    )
    try:
        if module is None or not _steps_on_cpu(trainer, module):
            return probe()
        per_epoch = getattr(trainer, "num_training_batches", None)
        epoch_batches = per_epoch if isinstance(per_epoch, int) and per_epoch > 0 else None
        with restored_trial_step(module, batch_idx, precision=str(trainer.precision)) as step:
            return probe(train_step=step, epoch_batches=epoch_batches, step_on_cpu=True)
    except Exception as err:
        notes.append(f"loader probe failed: {type(err).__name__}: {err}")
        return None


def _steps_on_cpu(trainer: Any, module: Any) -> bool:
    """The model trains on the CPU with automatic optimization: its step can be timed beside the workers."""
    device = getattr(getattr(trainer, "strategy", None), "root_device", None)
    return (
        getattr(device, "type", None) == "cpu"
        and getattr(module, "automatic_optimization", True) is not False
    )


def _trials(
    trainer: Any,
    pl_module: Any,
    batch: Any,
    batch_idx: int,
    options: MeasureOptions,
    notes: list[str],
    bigger_batch: bool = True,
) -> TrialReport | None:
    from lightning_bottleneck.measure.trials import run_trials

    module = getattr(trainer, "lightning_module", None) or pl_module
    budget = options.trial_budget_s or 0.0
    fetch_budget = bigger_fetch_budget(budget) if bigger_batch else 0.0
    try:
        report = run_trials(
            module,
            batch,
            batch_idx=batch_idx,
            precision=str(trainer.precision),
            budget_s=budget - fetch_budget,
            compile_budget_s=options.compile_budget_s or 0.0,
            bigger_batch=bigger_batch,
        )
    except Exception as err:
        notes.append(f"trials failed: {type(err).__name__}: {err}")
        return None
    if fetch_budget > 0:
        loader = _single_loader(getattr(trainer, "train_dataloader", None))
        time_bigger_fetch(loader, report, fetch_budget, notes)
    return report
