"""Rank candidate fixes by the time they save over the whole run; the verdict is the best fix's bucket.

Every kind of lost time competes on one scale, milliseconds saved per training step *amortised over the
whole fit*:

* steady-state data wait (window share x step), worker start-up stalls (stall x epochs / total steps),
  sync, exposed communication, compute and overhead shares (share x step);
* each candidate fix is one :class:`Candidate`: what to set, how much it saves, and whether that saving was
  **measured** (the loader probe's ladder through :mod:`lightning_bottleneck.rules.loader_plan`, trial
  steps on the live model in :class:`~lightning_bottleneck.evidence.trial_results.TrialReport`) or **estimated**
  (the named fractions in :mod:`lightning_bottleneck.thresholds`);
* a lever measured no faster than the noise band is kept as evidence and never advised; a one-off cost
  (compile time) is charged against the run.

Without the run's length (offline, an endless loader) the per-step savings compete alone, which is
``share x recoverable`` as before, so trace-only verdicts are unchanged.

Example::

    ranking = rank(evidence, breakdown, step_ms=12.0)
    ranking.primary, ranking.confidence(steps_profiled=5, from_trace=True)
    for c in ranking.candidates: print(c)   # best first; ``recommended`` False: tried, not advised
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.categories import (
    BUCKET_SHARES,
    Category,
    FindingKind,
    FitPart,
    Provenance,
    Severity,
    Share,
)
from lightning_bottleneck.evidence import Evidence, RunConfig
from lightning_bottleneck.evidence.trial_results import TrialResult
from lightning_bottleneck.report import Finding
from lightning_bottleneck.rules.fit import fit_levers
from lightning_bottleneck.rules.loader_plan import (
    LoaderPlan,
    plan_from_timing,
    plan_loader,
    step_cores_from_window,
)
from lightning_bottleneck.rules.shares import Verdict, best_bucket, margin, mixed_precision_open
from lightning_bottleneck.stats import median

__all__ = [
    "COMPUTE_LEVERS",
    "Candidate",
    "Ranking",
    "RunAccount",
    "confidence",
    "rank",
    "ranked_verdict",
    "tried_findings",
]


#: Trial levers, by the setting they change (the first key of ``TrialResult.settings``), and the bucket
#: they count for; ``None``: the larger of compute and overhead (torch.compile removes dispatch and fuses
#: kernels alike). Every setting :mod:`lightning_bottleneck.measure.trials` can try is here (tests/test_ranking.py).
COMPUTE_LEVERS: dict[str, Category | None] = {
    "precision": Category.COMPUTE,
    "float32_matmul_precision": Category.COMPUTE,
    "channels_last": Category.COMPUTE,
    "compile": None,
}


@dataclass(frozen=True)
class Candidate:
    """One fix and the time it saves (like ``torch.utils.benchmark.Measurement``, it prints itself).

    ``key`` is the setting it is matched on in the advice (``"num_workers"``, ``"precision"``, ...; ``None``:
    the bucket's first recommendation). ``saved_ms_per_step`` is amortised over the whole run (one-off costs
    included) when its length is known, else per steady-state step; ``saved_s`` is over the whole run
    (``None`` when the run's length is unknown). ``speedup`` is the whole-step speed-up it predicts;
    ``measured_speedup`` the trial's own figure on the part it timed.
    """

    category: Category
    name: str
    key: str | None
    settings: dict[str, Any]
    saved_ms_per_step: float
    saved_s: float | None
    method: Provenance  # how saved_ms_per_step was obtained
    speedup: float | None
    basis: str
    measured_speedup: float | None = None
    recommended: bool = True
    evidence: dict[str, Any] = field(default_factory=dict)
    # False: an estimate that only sizes its advice (its expected speed-up and range) without competing in
    # the ranking or the verdict (a bigger batch: a trade-off, estimated, never above a measured fix)
    competes: bool = True
    # the stable id a recommendation carries for this fix (``Recommendation.lever``): the loader rule's
    # ``loader:<advice>``, a fit lever's ``fit:<where>:<setting>``; None: matched on ``key`` and bucket
    lever: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category.value,
            "name": self.name,
            "settings": dict(self.settings),
            "saved_ms_per_step": round(self.saved_ms_per_step, 4),
            "saved_s": None if self.saved_s is None else round(self.saved_s, 3),
            "method": self.method.value,
            "speedup": None if self.speedup is None else round(self.speedup, 3),
            "measured_speedup": None if self.measured_speedup is None else round(self.measured_speedup, 3),
            "recommended": self.recommended,
            "basis": self.basis,
        }

    def __str__(self) -> str:
        if not self.recommended:
            ms = f"{self.measured_speedup:.2f}x" if self.measured_speedup is not None else "not measured"
            return f"tried {self.name}: {ms}, not recommended ({self.basis})"
        run = f", {self.saved_s:.1f} s over the run" if self.saved_s is not None else ""
        sp = f" ({self.speedup:.2f}x)" if self.speedup else ""
        return (
            f"{self.name}: saves {self.saved_ms_per_step:.2f} ms/step{run}{sp}, {self.method}: {self.basis}"
        )


@dataclass
class RunAccount:
    """The run's length and where its time goes (seconds over the whole fit when the length is known)."""

    step_ms: float
    total_steps: int | None
    epochs: float | None
    stall_ms: float  # extra wait of an epoch's first batch (0 when none was seen)
    lost_s: dict[str, float] = field(default_factory=dict)  # bucket -> seconds lost over the run
    # the whole fit's wall time per training step (the ledger's fit_s without this package's own work, over
    # train_steps): validation, checkpoints, logging ... included; None without a ledger (offline, a trace alone)
    fit_ms_per_step: float | None = None

    @property
    def known(self) -> bool:
        return bool(self.total_steps)

    @property
    def run_s(self) -> float | None:
        if not self.total_steps:
            return None
        return (self.total_steps * self.step_ms + (self.epochs or 0.0) * self.stall_ms) / 1e3

    @property
    def effective_step_ms(self) -> float:
        """Wall time per training step over the run, stalls included."""
        run = self.run_s
        return run * 1e3 / self.total_steps if run and self.total_steps else self.step_ms

    def per_step(self, saved_run_s: float) -> float:
        return saved_run_s * 1e3 / self.total_steps if self.total_steps else 0.0

    def over_run(self, saved_ms_per_step: float) -> float | None:
        return saved_ms_per_step * self.total_steps / 1e3 if self.total_steps else None

    @property
    def whole_ms_per_step(self) -> float:
        """Wall time per training step over the whole fit (the ledger's when known, else the steps')."""
        return max(self.effective_step_ms, self.fit_ms_per_step or 0.0)

    def speedup(self, saved_ms_per_step: float) -> float | None:
        """The whole fit's speed-up: fit / (fit - saved) (the training steps' when no ledger was kept)."""
        eff = self.whole_ms_per_step
        return eff / (eff - saved_ms_per_step) if 0 < saved_ms_per_step < eff else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_ms": round(self.step_ms, 4),
            "total_steps": self.total_steps,
            "epochs": self.epochs,
            "epoch_start_stall_ms": round(self.stall_ms, 3),
            "run_s": None if self.run_s is None else round(self.run_s, 3),
            "fit_ms_per_step": None if self.fit_ms_per_step is None else round(self.fit_ms_per_step, 4),
            "lost_s": {k: round(v, 3) for k, v in self.lost_s.items()},
        }


@dataclass
class Ranking:
    """The candidates, best first, and what the verdict and advice read off them."""

    account: RunAccount
    candidates: list[Candidate] = field(default_factory=list)  # recommended ones, best first
    tried: list[Candidate] = field(default_factory=list)  # measured, not advised
    sizing: list[Candidate] = field(default_factory=list)  # estimates that size advice, not ranked
    loader_plan: LoaderPlan | None = None  # set when the loader probe measured a ladder
    notes: list[str] = field(default_factory=list)

    def bucket_savings(self) -> dict[str, float]:
        """Best saving per bucket (ms per step); the input bucket adds its steady wait and its stalls."""
        out: dict[str, float] = {}
        input_parts: dict[str, float] = {}
        for c in self.candidates:
            if c.category == Category.INPUT and self.loader_plan is None:
                part = "stall" if c.key == "persistent_workers" else "steady"
                input_parts[part] = max(input_parts.get(part, 0.0), c.saved_ms_per_step)
                continue
            out[c.category.value] = max(out.get(c.category.value, 0.0), c.saved_ms_per_step)
        if input_parts:
            out[Category.INPUT.value] = sum(input_parts.values())
        return out

    @property
    def primary(self) -> Category:
        """The verdict (:func:`~lightning_bottleneck.rules.shares.best_bucket`) over the best fix of each bucket."""
        return best_bucket(self.bucket_savings())

    def top_two_ratio(self) -> float | None:
        ordered = sorted(self.bucket_savings().values(), reverse=True)
        if len(ordered) < 2 or ordered[1] <= 0:
            return None
        return ordered[0] / ordered[1]

    def top_method(self) -> str | None:
        primary = self.primary
        best = [c for c in self.candidates if c.category == primary]
        return best[0].method if best else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "account": self.account.to_dict(),
            "candidates": [c.to_dict() for c in self.candidates],
            "tried": [c.to_dict() for c in self.tried],
            "sizing": [c.to_dict() for c in self.sizing],
            "bucket_savings_ms_per_step": {k: round(v, 4) for k, v in self.bucket_savings().items()},
        }


# ------------------------------------------------------------------------------------------- building


def rank(evidence: Evidence, breakdown: dict[str, float], step_ms: float | None) -> Ranking:
    """Every candidate fix for this run with the time it saves, best first."""
    account = run_account(evidence, breakdown, step_ms)
    ranking = Ranking(account)
    cands: list[Candidate] = []
    cands += _input_candidates(evidence, breakdown, account, ranking)
    cands += _sync_candidates(breakdown, account)
    cands += _communication_candidates(evidence, breakdown, account)
    cands += _model_candidates(evidence, breakdown, account, ranking)
    cands += _fit_candidates(evidence, account)
    ranking.candidates = sorted(
        (c for c in cands if c.recommended and c.competes and c.saved_ms_per_step > 0),
        key=lambda c: -c.saved_ms_per_step,
    )
    ranking.tried = [c for c in cands if not c.recommended]
    ranking.sizing = [c for c in cands if c.recommended and not c.competes and c.saved_ms_per_step > 0]
    return ranking


def run_account(evidence: Evidence, breakdown: dict[str, float], step_ms: float | None) -> RunAccount:
    """The run's length (from ``evidence.run_length``) and the seconds each bucket loses over it."""
    rl = evidence.run_length
    total = rl.total_steps if rl is not None and rl.total_steps and rl.total_steps > 0 else None
    epochs: float | None = None
    if rl is not None and rl.epochs:
        epochs = float(rl.epochs)
    elif total and rl is not None and rl.steps_per_epoch:
        epochs = total / rl.steps_per_epoch
    stall_ms = _stall_ms(evidence)
    ledger = evidence.ledger
    fit_ms: float | None = None
    if ledger is not None and ledger.train_steps > 0 and ledger.own_fit_s() > 0:
        fit_ms = ledger.own_fit_s() * 1e3 / ledger.train_steps
        # The step timer (and a profiled step) spans the loop from batch to batch, so it also holds what runs
        # between two steps: logger writes, other callbacks' batch hooks. The ledger books those to their own
        # parts; the in-step fixes work on the training step alone, at most the ledger's mean step.
        ledger_step_ms = ledger.train_step_ms()
        if step_ms and 0 < ledger_step_ms < step_ms:
            step_ms = ledger_step_ms
        if not total:  # the ledger saw the whole fit (offline, from a report)
            total = ledger.train_steps
            epochs = epochs or float(ledger.epochs or 0) or None
    account = RunAccount(
        step_ms=step_ms or 1.0, total_steps=total, epochs=epochs, stall_ms=stall_ms, fit_ms_per_step=fit_ms
    )
    if total:
        for cat, share in BUCKET_SHARES.items():
            account.lost_s[cat.value] = breakdown.get(str(share), 0.0) * account.step_ms * total / 1e3
        account.lost_s["epoch_start_stall"] = (epochs or 0.0) * stall_ms / 1e3
    return account


def _stall_ms(evidence: Evidence) -> float:
    """Median extra wait of an epoch's first batch, when it passes the epoch-stall rule's thresholds."""
    return evidence.timing.epoch_start_stall_ms() if evidence.timing is not None else 0.0


def _boundary_ms_per_epoch(evidence: Evidence) -> float:
    """What an epoch boundary costs beyond a steady batch fetch, from the fit ledger (0 without one): its
    epoch-boundary part (the epoch's start, the first fetch with the workers' start-up, the loop between
    epochs with the old workers' shutdown) per epoch. The first batch's extra wait alone (``stall_ms``)
    misses the shutdown and the iterator's set-up, which persistent workers also remove: on the scoreboard's
    worker_restart workload it predicted 3.45x for an applied 6.69x."""
    ledger = evidence.ledger
    if ledger is None or ledger.epochs < 2:
        return 0.0
    boundary_s = ledger.parts.get(FitPart.EPOCH_BOUNDARIES, 0.0)
    timing = evidence.timing
    steady = median(timing.data_wait_ms) if timing is not None and timing.data_wait_ms else 0.0
    return max(0.0, boundary_s * 1e3 / ledger.epochs - steady)


def _share(breakdown: dict[str, float], share: Share) -> float:
    return float(breakdown.get(str(share), 0.0))


def _estimate(
    category: Category,
    name: str,
    key: str | None,
    settings: dict[str, Any],
    saved_ms: float,
    account: RunAccount,
    basis: str,
) -> Candidate:
    return Candidate(
        category,
        name,
        key,
        settings,
        saved_ms,
        account.over_run(saved_ms),
        Provenance.ESTIMATED,
        account.speedup(saved_ms),
        basis,
    )


def _input_candidates(
    evidence: Evidence, breakdown: dict[str, float], account: RunAccount, ranking: Ranking
) -> list[Candidate]:
    wait = _share(breakdown, Share.DATA_WAIT)
    cfg = evidence.config
    ladder = evidence.loader_ladder
    if ladder is not None and not ladder.skipped and ladder.rungs and cfg is not None:
        return _measured_loader(evidence, cfg, wait, account, ranking)
    if ladder is not None and ladder.notes:
        ranking.notes += [f"Loader probe: {n}" for n in ladder.notes]
    out: list[Candidate] = []
    if wait >= T.INPUT_SHARE_MEDIUM:
        saved = wait * T.RECOVERABLE["input"] * account.step_ms
        out.append(
            _estimate(
                Category.INPUT,
                "hide the data wait",
                "num_workers",
                {},
                saved,
                account,
                f"{wait:.0%} of the step waits for the DataLoader; enough workers hide it all",
            )
        )
    workers = cfg.num_workers if cfg is not None else None
    persistent = cfg.persistent_workers if cfg is not None else None
    if account.known and account.stall_ms > 0 and (workers or 0) > 0 and not persistent and account.epochs:
        restarts = max(0.0, account.epochs - 1.0)  # persistent workers still start once
        stall_ms = max(account.stall_ms, _boundary_ms_per_epoch(evidence))
        saved_s = restarts * stall_ms / 1e3
        saved = account.per_step(saved_s)
        if saved >= T.INPUT_SHARE_MEDIUM * account.step_ms:
            out.append(
                Candidate(
                    Category.INPUT,
                    "persistent_workers=True",
                    "persistent_workers",
                    {"persistent_workers": True},
                    saved,
                    saved_s,
                    Provenance.ESTIMATED,
                    account.speedup(saved),
                    f"workers restart {restarts:.0f} time(s), {stall_ms:.0f} ms each",
                )
            )
    return out


def _measured_loader(
    evidence: Evidence, cfg: RunConfig, wait: float, account: RunAccount, ranking: Ranking
) -> list[Candidate]:
    ladder = evidence.loader_ladder
    assert ladder is not None
    rl = evidence.run_length
    spe = rl.steps_per_epoch if rl is not None else None
    timing = evidence.timing
    steady = timing is not None and bool(timing.step_ms) and bool(timing.samples_per_step)
    c = evidence.contention
    # the step's own CPU use over the profiled window (not on a busy machine: others' load would hide in it)
    self_cores = c.self_cores if c is not None and c.checked and not c.busy else None
    k = step_cores_from_window(self_cores, timing.data_wait_share if steady else wait, ladder, cfg)  # type: ignore[union-attr]
    bs = ladder.batch_size or cfg.batch_size or 1
    # the step timed back-to-back (the trials, or the probe; no loading between steps): the fastest it may run
    # once loading leaves the training process (a thread pool idle through in-process loading wakes slowly)
    step_ms = evidence.back_to_back_step_ms
    back_to_back = bs / (step_ms / 1e3) if step_ms else None
    if steady:
        assert timing is not None
        plan = plan_from_timing(
            ladder,
            cfg,
            timing,
            spe,
            step_cores=k,
            back_to_back_samples_per_s=back_to_back,
            epochs=account.epochs,
        )
    else:
        busy_s = account.step_ms * (1 - wait) / 1e3
        plan = plan_loader(
            ladder,
            cfg,
            consumption_samples_per_s=bs / busy_s if busy_s > 0 else None,
            data_wait_share=wait,
            step_s=account.step_ms / 1e3,
            steps_per_epoch=spe,
            epoch_start_stall_s=account.stall_ms / 1e3 if account.stall_ms else None,
            step_cores=k,
            back_to_back_samples_per_s=back_to_back,
            epochs=account.epochs,
        )
    ranking.loader_plan = plan
    ranking.notes += [f"Loader probe: {n}" for n in plan.notes]
    out = []
    tail = _slow_tail_ms(evidence, account)
    eff = account.effective_step_ms
    for i, rec in enumerate(plan.changes):
        key = next(iter(rec.settings), None) if rec.settings else None
        if rec.expected_speedup and rec.expected_speedup > 1.0:
            saved = eff * (1 - 1 / rec.expected_speedup)
            method, basis = Provenance.MEASURED, "the loader probe's ladder on this run's own DataLoader"
            if plan.covered is False:
                basis += (
                    f" (its settings alone; the loader tops out at {ladder.ceiling_samples_per_s:.0f} "
                    f"samples/s, so cheaper samples can save up to the whole {wait:.0%} data wait)"
                )
        elif not rec.settings:  # "make samples cheaper": at best, all of the data wait
            saved = wait * account.step_ms
            method = Provenance.ESTIMATED
            basis = (
                f"all of the {wait:.0%} data wait if samples cost nothing; the loader measured at most "
                f"{ladder.ceiling_samples_per_s:.0f} samples/s"
            )
        else:
            continue
        if i == 0 and not rec.settings:
            key = "cheaper_samples"
        extra: dict[str, Any] = {"plan_index": i}
        high = (rec.expected_speedup_range or (0.0, rec.expected_speedup or 0.0))[1]
        if method == Provenance.MEASURED and tail > 0 and high > 1.0 and _changes_workers(rec.settings):
            # the run's steps averaged more than their median (slow steps waiting on the workers): the high end has
            # that tail speed up like the median step (worker_restart: 7.9 ms mean, 6.1 ms median with 2 workers;
            # without workers the whole fit ran 23x faster against a 17x high end without the tail)
            extra["saved_high_ms_per_step"] = (eff + tail) * (1 - 1 / high)
            extra["range_why"] = (
                f"the run's training steps averaged {account.step_ms + tail:.1f} ms against a "
                f"{account.step_ms:.1f} ms median; the high end has the slow ones speed up like the rest"
            )
        out.append(
            Candidate(
                Category.INPUT,
                _describe_change(rec.settings),
                key,
                dict(rec.settings),
                saved,
                account.over_run(saved),
                method,
                # the plan's figure is the training steps'; with a ledger the speed-up is the whole fit's
                rec.expected_speedup
                if method == Provenance.MEASURED and account.fit_ms_per_step is None
                else account.speedup(saved),
                basis,
                evidence=extra,
                lever=rec.lever,
            )
        )
    return out


def _describe_change(settings: dict[str, Any]) -> str:
    """A loader change named by its settings (the advice gives it a title)."""
    return ", ".join(f"{k}={v!r}" for k, v in settings.items()) or "cheaper samples"


def _changes_workers(settings: dict[str, Any]) -> bool:
    return "num_workers" in settings or "persistent_workers" in settings


def _slow_tail_ms(evidence: Evidence, account: RunAccount) -> float:
    """How much the ledger's mean training step (ms) exceeds the account's median step: slow steps the median
    leaves out; 0 without a ledger, or when under SLOW_TAIL_MIN of the median (noise)."""
    ledger = evidence.ledger
    if ledger is None or ledger.train_steps <= 0:
        return 0.0
    tail = ledger.train_step_ms() - account.step_ms
    return tail if tail > T.SLOW_TAIL_MIN * account.step_ms else 0.0


def _sync_candidates(breakdown: dict[str, float], account: RunAccount) -> list[Candidate]:
    share = _share(breakdown, Share.SYNC)
    if share < T.SYNC_SHARE_MEDIUM:
        return []
    saved = share * T.RECOVERABLE["sync"] * account.step_ms
    return [
        _estimate(
            Category.SYNC,
            "remove the synchronisations",
            None,
            {},
            saved,
            account,
            f"{share:.0%} of the step blocks on the device; removing the calls removes the wait",
        )
    ]


def _communication_candidates(
    evidence: Evidence, breakdown: dict[str, float], account: RunAccount
) -> list[Candidate]:
    share = _share(breakdown, Share.COMMUNICATION)
    cfg = evidence.config or RunConfig()
    if share < T.COMM_SHARE_MEDIUM:
        return []
    exposed = share * account.step_ms
    out = []
    if not cfg.manual_optimization:
        acc = max(1, cfg.accumulate_grad_batches)
        new = acc * 2
        frac = 1.0 - acc / new  # all-reduces per batch: 1/acc -> 1/new; (k-1)/k from acc=1
        # the optimizer step (and its zero_grad) runs once per accumulation too: its phase of the step, measured
        # on the host thread apart from backward (where DDP waits for the all-reduce), is saved in the same
        # proportion (issue 19: ddp_comm's 16M-parameter step applied 1.97x against a 1.58x high end without it)
        phases = evidence.summaries[0].phases if evidence.summaries else {}
        opt_ms = phases.get("optimizer_step", 0.0) * account.step_ms
        opt_text = f" and {opt_ms:.1f} ms/step of optimizer step" if opt_ms >= 0.05 else ""
        accumulate = _estimate(
            Category.COMMUNICATION,
            f"accumulate_grad_batches={new}",
            "accumulate_grad_batches",
            {"accumulate_grad_batches": new},
            (exposed + opt_ms) * frac,
            account,
            f"{exposed:.1f} ms/step of exposed collectives{opt_text}, run once per {new} batches instead of "
            f"{acc}: saves {frac:.0%} of it; the effective batch grows {new // acc}x (retune the learning "
            "rate), memory per batch is unchanged",
        )
        # the high end: under no_sync DDP also skips the reducer's host work around the all-reduce (bucket
        # copies, zero-filled unused gradients), which the trace counts as per-op overhead; at most all of it
        # goes in the same proportion (ddp_comm: 83% collectives, 17% overhead, applied 1.88-1.97x: 47-49% saved)
        overhead_ms = _share(breakdown, Share.OVERHEAD) * account.step_ms
        accumulate.evidence["saved_high_ms_per_step"] = (exposed + opt_ms + overhead_ms) * frac
        out.append(accumulate)
    if "fsdp" not in (cfg.strategy or "").lower():
        out.append(
            _estimate(
                Category.COMMUNICATION,
                "DDP bucket settings",
                "static_graph",
                {},
                exposed * T.COMM_BUCKETS_RECOVERABLE,
                account,
                f"{T.COMM_BUCKETS_RECOVERABLE:.0%} of {exposed:.1f} ms/step exposed collectives (fewer, larger buckets)",
            )
        )
        out.append(
            _estimate(
                Category.COMMUNICATION,
                "gradient compression hook",
                "ddp_comm_hook",
                {},
                exposed * T.COMM_COMPRESS_RECOVERABLE,
                account,
                f"{T.COMM_COMPRESS_RECOVERABLE:.0%} of {exposed:.1f} ms/step exposed collectives (half the bytes)",
            )
        )
    else:
        out.append(
            _estimate(
                Category.COMMUNICATION,
                "FSDP prefetch",
                "backward_prefetch",
                {},
                exposed * T.RECOVERABLE["communication"],
                account,
                f"{T.RECOVERABLE['communication']:.0%} of {exposed:.1f} ms/step exposed all-gathers overlapped",
            )
        )
    return out


def _model_candidates(
    evidence: Evidence, breakdown: dict[str, float], account: RunAccount, ranking: Ranking
) -> list[Candidate]:
    """Compute and overhead: measured trials where they ran, the RECOVERABLE estimates otherwise."""
    compute = _share(breakdown, Share.COMPUTE)
    overhead = _share(breakdown, Share.OVERHEAD)
    out: list[Candidate] = []
    measured_keys: set[str] = set()
    trials = evidence.trials
    if trials is not None and trials.skipped:
        ranking.notes.append(f"Trials on the live model skipped: {trials.skipped}")
    if trials is not None and not trials.skipped:
        model_ms = account.step_ms * max(
            0.0, 1.0 - sum(_share(breakdown, s) for s in (Share.DATA_WAIT, Share.SYNC, Share.COMMUNICATION))
        )
        unconfirmed = [r for r in trials.results if r.unconfirmed and r.measured_speedup is not None]
        if unconfirmed:
            ranking.notes.append(
                "Trials ran while other processes took the CPUs, so their figures ("
                + ", ".join(f"{r.name} {r.measured_speedup:.2f}x" for r in unconfirmed)
                + ") are kept as evidence but not used: the compute advice is estimated from the trace."
            )
        for r in trials.results:
            if r.measured_speedup is None or r.unconfirmed:
                continue
            measured_keys |= set(r.settings)
            out.append(_trial_candidate(r, compute, overhead, model_ms, account))
    amp_open = mixed_precision_open(evidence)
    cfg = evidence.config
    if compute >= T.COMPUTE_SHARE_MEDIUM and cfg is not None and cfg.accelerator == "cpu" \
            and cfg.bf16_supported is False and str(cfg.precision) in ("32-true", "32"):  # fmt: skip
        ranking.notes.append(
            "Mixed precision (bf16) was neither tried nor advised: this CPU has no native bf16 instructions "
            "(AVX512-BF16/AMX), where bf16 autocast runs slower than fp32 (0.03x measured on a wide MLP)."
        )
    if compute >= T.COMPUTE_SHARE_MEDIUM:
        # mixed precision while it is open and untried; once it measured no faster (or is on), compile
        key = "precision" if amp_open and "precision" not in measured_keys else "compile"
        compiled = evidence.config is not None and bool(evidence.config.compiled)
        if key not in measured_keys and not (key == "compile" and compiled):
            frac = T.RECOVERABLE["compute"] if key == "precision" else T.COMPUTE_RECOVERABLE_NO_AMP
            lever = "mixed precision" if key == "precision" else "torch.compile"
            out.append(
                _estimate(
                    Category.COMPUTE,
                    lever,
                    key,
                    {},
                    compute * frac * account.step_ms,
                    account,
                    f"{compute:.0%} of the step is compute; {lever} recovers about {frac:.0%} of it "
                    "(not measured on this model)",
                )
            )
    if overhead >= T.OVERHEAD_SHARE_MEDIUM and cfg is not None and cfg.batch_size:
        out.append(_bigger_batch(breakdown, account, cfg.batch_size))
    if overhead >= T.OVERHEAD_SHARE_MEDIUM and "compile" not in measured_keys:
        frac = T.RECOVERABLE["overhead"]
        estimate = _estimate(
            Category.OVERHEAD,
            "torch.compile",
            "compile",
            {},
            overhead * frac * account.step_ms,
            account,
            f"{overhead:.0%} of the step is per-op overhead; compile removes about {frac:.0%} of it "
            "(not measured on this model)",
        )
        estimate.evidence["saved_high_ms_per_step"] = overhead * T.OVERHEAD_RECOVERABLE_MAX * account.step_ms
        out.append(estimate)
    return out


def _bigger_batch(breakdown: dict[str, float], account: RunAccount, batch_size: int) -> Candidate:
    """A batch BATCH_GROWTH times bigger, estimated from the step's composition: the data wait and the compute
    grow with the batch, the rest (per-op overhead, syncs, collectives over the parameters, other) is paid once
    per step. Per sample, the step keeps ``s + (1 - s) / G`` of its time (``s`` the per-sample share), so it
    saves ``(1 - s)(1 - 1/G)`` of each step's worth of samples: the low end, since per-sample work rarely grows
    faster than the batch; the high end (``evidence["speedup_max"]``, G) has nothing grow with it (the
    scoreboard measured 1.71-1.92x for a small MLP whose trace put 45% of the step in per-sample work).
    It sizes the bigger-batch advice only (``competes=False``): a trade-off, estimated, that never outranks a
    measured fix nor moves the verdict."""
    g = T.BATCH_GROWTH
    per_sample = min(1.0, _share(breakdown, Share.DATA_WAIT) + _share(breakdown, Share.COMPUTE))
    frac = (1.0 - per_sample) * (1.0 - 1.0 / g)
    estimate = _estimate(
        Category.OVERHEAD,
        f"batch size {batch_size} -> {batch_size * g}",
        "batch_size",
        {"batch_size": batch_size * g},
        frac * account.step_ms,
        account,
        f"{per_sample:.0%} of the step grows with the batch (data wait and compute), the other "
        f"{1 - per_sample:.0%} is paid once per step: a {g}x batch saves {frac:.0%} of the time per sample "
        "(not measured on this model; the learning rate may need retuning)",
    )
    # the other bound: nothing grows with the batch, the step nor Lightning's loop around it (logging, hooks):
    # G times the samples per second (a bigger matmul often costs little more than a small one)
    return replace(estimate, competes=False, evidence={"speedup_max": float(g)})


def _fit_candidates(evidence: Evidence, account: RunAccount) -> list[Candidate]:
    """The rest of the fit's levers (rules/fit.py), on the same scale: seconds saved per training step over
    the fit the ledger saw, projected onto the whole run."""
    ledger = evidence.ledger
    if ledger is None or ledger.train_steps <= 0:
        return []
    out = []
    for lever in fit_levers(evidence):
        per_step = lever.saved_s * 1e3 / ledger.train_steps
        more: dict[str, Any] = {}
        for bound in ("low", "high"):  # a range: the lever may save less or more than its computed part
            if f"saved_{bound}_s" in lever.evidence:
                more[f"saved_{bound}_ms_per_step"] = (
                    float(lever.evidence[f"saved_{bound}_s"]) * 1e3 / ledger.train_steps
                )
                more["range_why"] = lever.evidence.get("range_why", "")
        out.append(
            Candidate(
                Category.REST_OF_FIT,
                lever.name,
                lever.key or None,
                dict(lever.settings),
                per_step,
                account.over_run(per_step),
                lever.method,
                account.speedup(per_step),
                lever.basis,
                evidence={"part": lever.part.value, "where": lever.where, "trade": lever.trade, **more},
                lever=lever.lever,
            )
        )
    return out


def _trial_candidate(
    r: TrialResult, compute: float, overhead: float, model_ms: float, account: RunAccount
) -> Candidate:
    key = next(iter(r.settings), None)
    cat = COMPUTE_LEVERS.get(key or "", Category.COMPUTE)
    if cat is None:
        cat = Category.OVERHEAD if overhead > compute else Category.COMPUTE
    speedup = float(r.measured_speedup or 0.0)
    part = min(r.baseline_ms, model_ms) if r.baseline_ms else model_ms
    per_step = part * (1.0 - 1.0 / speedup) if speedup > 0 else 0.0
    saved_s = account.over_run(per_step)
    amortised = per_step
    basis = f"forward+backward measured {speedup:.2f}x on this model ({r.repetitions} A/B pairs)"
    recommended = r.recommended and per_step > 0
    if r.compile_s is not None:
        basis += f"; {r.compile_s:.1f} s compile time counted against the run"
        if saved_s is not None:
            saved_s -= r.compile_s
            amortised = account.per_step(saved_s)
            if saved_s <= 0:
                recommended = False
                basis += " (it costs more than the run would save)"
    if not r.recommended:
        basis = r.note or "not faster than the noise band"
    return Candidate(
        cat,
        r.name,
        key,
        dict(r.settings),
        amortised,
        saved_s,
        Provenance.MEASURED,
        account.speedup(amortised) if recommended else None,
        basis,
        r.measured_speedup,
        recommended,
        {"trial": r.to_dict()},
    )


# ------------------------------------------------------------------------------------------- confidence


def confidence(
    ranking: Ranking,
    evidence: Evidence,
    steps_profiled: int,
    from_trace: bool,
    step_samples_ms: list[float] | None = None,
) -> tuple[float, list[str]]:
    """How sure the verdict is, and the notes that explain a cap.

    The base is today's margin x window (``top / (top + second)`` over the buckets' best fixes, scaled down
    for a short window); the step-time spread scales it down; an estimated verdict stays below
    :data:`~.thresholds.ESTIMATED_CONFIDENCE_MAX`; and it is capped at
    :data:`~.thresholds.UNCERTAIN_CONFIDENCE_MAX` when the top two fixes are within
    :data:`~.thresholds.TOP_TWO_RATIO_MIN`, the machine was busy, the window was not representative, or the
    trace's timing had to be repaired.
    """
    savings = ranking.bucket_savings()
    if not any(v > 0 for v in savings.values()):
        return T.UNKNOWN_CONFIDENCE_MAX, []
    window = min(1.0, steps_profiled / T.CONFIDENT_STEPS) if from_trace else 0.6
    if ranking.primary == Category.REST_OF_FIT:
        window = 1.0  # its evidence is the ledger of the whole fit, not the profiled window
    conf = margin(savings) * window
    notes: list[str] = []
    if step_samples_ms and len(step_samples_ms) >= 3:
        s = sorted(step_samples_ms)
        med = s[len(s) // 2]
        p90 = s[min(len(s) - 1, round(0.9 * (len(s) - 1)))]
        spread = p90 / med if med > 0 else 1.0
        if spread > T.SPREAD_RATIO_OK:
            conf *= max(T.SPREAD_FACTOR_MIN, T.SPREAD_RATIO_OK / spread)
    # arithmetic on the ledger's measured seconds is as sure as a measurement
    cap = (
        0.99
        if ranking.top_method() in (Provenance.MEASURED, Provenance.COMPUTED)
        else T.ESTIMATED_CONFIDENCE_MAX
    )
    reasons = []
    ratio = ranking.top_two_ratio()
    if ratio is not None and ratio < T.TOP_TWO_RATIO_MIN:
        reasons.append(f"the two best fixes are within {T.TOP_TWO_RATIO_MIN}x of each other ({ratio:.2f}x)")
    busy = busy_machine_notes(evidence)
    if busy:
        reasons.append("the machine was busy")
        notes += busy
    wc = evidence.window_check
    if wc is not None and not wc.representative:
        reasons.append(f"the window is not representative ({wc.likely_cause or 'unknown cause'})")
        notes.append(f"Window not representative: {wc.note}")
    if any(s.timing_repaired for s in evidence.summaries[:1]):
        reasons.append("the trace's timing had to be repaired")
    if reasons:
        cap = min(cap, T.UNCERTAIN_CONFIDENCE_MAX)
        if conf > cap:
            notes.append(f"Confidence capped at {cap:.0%}: {'; '.join(reasons)}.")
    return round(max(0.05, min(cap, conf)), 3), notes


def busy_machine_notes(evidence: Evidence) -> list[str]:
    """One note per rank whose busy-machine check said busy (this rank's first); empty on a quiet machine."""
    notes = []
    if evidence.contention is not None and evidence.contention.busy:
        notes.append(f"Busy machine while profiling: {evidence.contention.note}")
    for rank, note in sorted(evidence.busy_ranks.items()):
        notes.append(f"Busy machine on rank {rank} while profiling: {note}")
    return notes


def ranked_verdict(
    verdict: Verdict,
    ranking: Ranking,
    evidence: Evidence,
    steps_profiled: int,
    from_trace: bool,
    step_samples_ms: list[float] | None = None,
) -> tuple[Verdict, list[str]]:
    """The rules' verdict with its primary bucket and confidence taken from the ranking.

    An out-of-memory error keeps its verdict. When no fix is left (every lever measured no faster), the
    share-based verdict stands, capped at :data:`~.thresholds.UNCERTAIN_CONFIDENCE_MAX` with a note.
    """
    if evidence.oom:
        return verdict, []
    step = ranking.account.step_ms
    savings = {k: v / step for k, v in ranking.bucket_savings().items()} if step > 0 else {}
    primary = ranking.primary
    if primary == Category.UNKNOWN:
        notes = []
        conf = verdict.confidence
        if verdict.primary != Category.UNKNOWN and ranking.tried:
            conf = min(conf, T.UNCERTAIN_CONFIDENCE_MAX)
            notes.append(
                f"No measured fix pays off for {verdict.primary.value}: "
                + "; ".join(str(c) for c in ranking.tried)
                + "."
            )
        return replace(verdict, confidence=conf), notes
    top = savings.get(primary.value, 0.0)
    if top < T.VERDICT_SAVING_MIN and verdict.primary not in (Category.UNKNOWN, primary):
        best = next(c for c in ranking.candidates if c.category == primary)
        return replace(
            verdict, confidence=min(verdict.confidence, T.UNCERTAIN_CONFIDENCE_MAX), savings=savings
        ), [
            f"The best fix found ({best.name}) saves {top:.1%} of the step, under the {T.VERDICT_SAVING_MIN:.0%} "
            f"that can be told from no change: the verdict follows where the time goes ({verdict.primary.value})."
        ]
    conf, notes = confidence(ranking, evidence, steps_profiled, from_trace, step_samples_ms)
    findings = sorted(verdict.findings, key=lambda f: (f.kind != primary.value, f.severity.rank))
    return replace(verdict, primary=primary, confidence=conf, savings=savings, findings=findings), notes


def tried_findings(ranking: Ranking) -> list[Finding]:
    """One low-severity finding per lever that was measured and is not advised (kept as evidence)."""
    out = []
    for c in ranking.tried:
        ms = f"{c.measured_speedup:.2f}x" if c.measured_speedup is not None else "not measured"
        out.append(
            Finding(
                kind=FindingKind.of(c.category),
                severity=Severity.LOW,
                summary=f"Tried {c.name} on this model: {ms}, not recommended ({c.basis}).",
                evidence={"trial": c.evidence.get("trial", {}), "settings": dict(c.settings)},
            )
        )
    return out
