"""Rules for the rest of the fit: validation, the sanity check, checkpointing, logging, other callbacks.

The ledger (:class:`~lightning_bottleneck.analysis.ledger.FitLedger`) says how many wall seconds of ``fit``
each part took. Each part's rule is data (:class:`PartRule`): the part, its named thresholds (shares of the
whole fit, :mod:`lightning_bottleneck.thresholds`) and the function that lists its **levers**: the
Lightning settings that make the part cheaper, each with the seconds it saves over the fit the ledger saw and
how that figure was obtained:

* ``computed``: arithmetic on the ledger's measured seconds (validations avoided x seconds per validation,
  saves avoided x seconds per save, the sanity check's own seconds);
* ``measured``: the loader probe's ladder on the val DataLoader;
* ``estimated``: a named fraction (asynchronous saving, a callback called less often).

:func:`fit_findings` gives one finding per material part (its levers in ``evidence["levers"]``);
:func:`fit_candidates` turns the levers into ranking candidates (:mod:`lightning_bottleneck.rules.ranking`), so
that every fix, in the step and outside it, competes on seconds saved over the whole fit.

Example::

    for f in fit_findings(evidence):
        print(f.summary, [lever["settings"] for lever in f.evidence["levers"]])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.analysis.ledger import FitLedger
from lightning_bottleneck.categories import FindingKind, FitPart, Provenance, Severity
from lightning_bottleneck.evidence import Evidence
from lightning_bottleneck.evidence.fit_probes import KNOB_NAMES, FitProbes
from lightning_bottleneck.report import Finding

__all__ = [
    "PART_RULES",
    "FitLever",
    "PartRule",
    "fit_findings",
    "fit_levers",
    "growth_factor",
]


#: Where a setting goes (``Recommendation.where``).
TRAINER = "Trainer"
MODEL_CHECKPOINT = "ModelCheckpoint"
VAL_LOADER = "val DataLoader"
SELF_LOG = "self.log"
#: A val loader setting counts as faster when the probe measured it this much faster: the loader probe's
#: own LADDER_GAIN_MIN (10%, the run-to-run spread of a loader timing on a shared machine).
VAL_LOADER_GAIN_MIN = 1.10


@dataclass(frozen=True)
class FitLever:
    """One change to a part of the fit and the seconds it saves over the fit the ledger saw."""

    part: FitPart
    settings: dict[str, Any]
    where: str  # Trainer | ModelCheckpoint | val DataLoader | self.log | a callback's class
    saved_s: float
    method: Provenance  # how saved_s was obtained
    basis: str  # how saved_s was obtained, in words
    trade: str  # what the user gives up ("" when nothing)
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return next(iter(self.settings), "")

    @property
    def lever(self) -> str:
        """The stable id its candidate and its recommendation are joined by (``fit:<where>:<setting>``)."""
        return f"fit:{self.where}:{self.key or 'hook:' + str(self.evidence.get('hook', ''))}"

    @property
    def name(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.settings.items())
        return f"{self.where}({args})" if self.where not in (SELF_LOG,) else f"self.log(..., {args})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "part": self.part.value,
            "settings": dict(self.settings),
            "where": self.where,
            "saved_s": round(self.saved_s, 4),
            "method": self.method.value,
            "basis": self.basis,
            "trade": self.trade,
            "evidence": dict(self.evidence),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FitLever:
        return cls(
            FitPart(d["part"]),
            dict(d.get("settings") or {}),
            str(d.get("where") or TRAINER),
            float(d.get("saved_s") or 0.0),
            Provenance(d.get("method") or Provenance.ESTIMATED),
            str(d.get("basis") or ""),
            str(d.get("trade") or ""),
            dict(d.get("evidence") or {}),
        )


LeverFn = Callable[[FitLedger, Evidence], list[FitLever]]


@dataclass(frozen=True)
class PartRule:
    """A part of the fit is a finding when its share of fit reaches ``medium`` (``high``: severity high)."""

    part: FitPart
    medium: float
    high: float
    what: str  # "<share> of the fit (<s>) is <what>"
    levers: LeverFn


# ------------------------------------------------------------------------------------------- arithmetic


def growth_factor(part_s: float, fit_s: float) -> int:
    """How many times less often a part must run to take at most FIT_PART_TARGET_SHARE of the fit.

    With ``p`` seconds of the part and ``r = fit - p`` of everything else, ``p / k`` must satisfy
    ``(p / k) / (r + p / k) <= target``, i.e. ``k >= p (1 - target) / (target r)``; capped at
    FIT_INTERVAL_GROWTH_MAX (an order of magnitude per piece of advice), at least 1.
    """
    rest = max(fit_s - part_s, 1e-9)
    target = T.FIT_PART_TARGET_SHARE
    k = part_s * (1.0 - target) / (target * rest)
    return int(max(1, min(T.FIT_INTERVAL_GROWTH_MAX, math.ceil(k - 1e-9))))


def _steps_per_epoch(ledger: FitLedger, evidence: Evidence) -> int | None:
    rl = evidence.run_length
    if rl is not None and rl.steps_per_epoch:
        return rl.steps_per_epoch
    if ledger.epochs and ledger.train_steps:
        return max(1, round(ledger.train_steps / ledger.epochs))
    return None


def _s(x: float) -> str:
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.1f} s"


# ------------------------------------------------------------------------------------------- validation


def validation_levers(ledger: FitLedger, evidence: Evidence) -> list[FitLever]:
    """val_check_interval (or check_val_every_n_epoch), limit_val_batches, the val loader's num_workers."""
    runs = ledger.validation_runs
    val_s = ledger.parts.get(FitPart.VALIDATION, 0.0)
    steps = ledger.train_steps
    if runs <= 0 or val_s <= 0 or steps <= 0:
        return []
    # one validation fewer also saves the logging, checkpoint saves and callbacks' hooks it triggers (booked
    # to their own parts as self time): its wall time, where the ledger has it; the median run's, so that
    # one-off costs of the first run (which the runs left still pay) do not count as saved
    per = ledger.validation_typical_s or max(val_s, ledger.validation_wall_s) / runs
    k = growth_factor(per * runs, ledger.own_fit_s())
    out: list[FitLever] = []
    spe = _steps_per_epoch(ledger, evidence)
    interval = max(1, round(steps / runs))  # training batches between validations today
    per_epoch = spe is not None and interval >= spe  # validating once per epoch (or less often)
    if k > 1:
        if per_epoch and spe is not None:
            now_every = max(1, round(interval / spe))
            every = min(now_every * k, max(now_every, ledger.epochs))  # at least one validation left
            new_runs = steps // (every * spe)
            settings: dict[str, Any] = {"check_val_every_n_epoch": every}
            how = f"every {every} epochs instead of every {now_every}"
        else:
            new = min(interval * k, max(interval, steps))  # at least one validation left in the fit
            new_runs = steps // new
            settings = {"val_check_interval": new}
            if spe is not None and new > spe:
                # Lightning counts an int val_check_interval within an epoch unless check_val_every_n_epoch=None
                settings["check_val_every_n_epoch"] = None
            how = f"every {new} training batches instead of every {interval}"
        avoided = max(0, runs - new_runs)
        if avoided > 0:
            ev: dict[str, Any] = {
                "validations": runs,
                "validations_after": new_runs,
                "per_validation_s": round(per, 6),
            }
            # the steps between validations may also run faster without them: up to the avoided runs' share of
            # the steps' excess over back-to-back, at most VALIDATION_INDIRECT_MAX_SHARE of the time saved
            indirect = min(
                _step_excess_s(ledger, evidence) * steps * avoided / runs,
                T.VALIDATION_INDIRECT_MAX_SHARE * avoided * per,
            )
            if indirect > 0:
                ev["saved_high_s"] = round(avoided * per + indirect, 6)
                ev["range_why"] = (
                    "the training steps between validations may run faster without them (caches, memory, the "
                    "metrics they collect); how much was bounded by this run's step against the same step timed "
                    "back-to-back, not measured"
                )
            out.append(
                FitLever(
                    FitPart.VALIDATION,
                    settings,
                    TRAINER,
                    avoided * per,
                    Provenance.COMPUTED,
                    f"{runs} validations took {_s(per * runs)} ({_s(per)} each"
                    + (", with the logging and saves they trigger" if per * runs > val_s * 1.01 else "")
                    + f"); validating {how} avoids "
                    f"{avoided} of them: {avoided} x {_s(per)}",
                    "the validation metrics (and anything monitoring them: early stopping, the best "
                    f"checkpoint) update {k}x less often",
                    ev,
                )
            )
        batches = ledger.validation_batches / runs if runs else 0.0
        if batches >= 2:
            frac = max(1.0 / k, 1.0 / batches)
            out.append(
                FitLever(
                    FitPart.VALIDATION,
                    {"limit_val_batches": round(frac, 3)},
                    TRAINER,
                    val_s * (1.0 - frac),
                    Provenance.COMPUTED,
                    f"each validation runs {batches:.0f} batches ({_s(per)}); {frac:.0%} of them saves "
                    f"{1 - frac:.0%} of the {_s(val_s)} of validation",
                    f"each validation sees {frac:.0%} of the validation set: noisier validation metrics",
                    {"validation_batches_per_run": round(batches, 1)},
                )
            )
    out += _val_loader_levers(ledger, evidence.fit_probes)
    return out


def _val_loader_levers(ledger: FitLedger, probes: FitProbes | None) -> list[FitLever]:
    """The val loader's num_workers, measured by the loader probe on the val loader."""
    if probes is None or probes.val_ladder is None or probes.val_ladder.skipped:
        return []
    ladder = probes.val_ladder
    current = probes.val_num_workers or 0
    now = ladder.rung(current)
    best = ladder.best
    wait = ledger.validation_loader_wait_s
    if now is None or best is None or best.num_workers == current or wait <= 0:
        return []
    # the probe's steady state, but a validation of B batches keeps at most B workers busy at once: the
    # fewest workers within the noise band of the best gain so capped
    per_run = ledger.validation_batches / ledger.validation_runs if ledger.validation_runs else 1.0

    def capped(rate: float) -> float:
        return min(rate / now.samples_per_s if now.samples_per_s > 0 else 1.0, max(1.0, per_run))

    top = capped(best.samples_per_s)
    best = min(
        (r for r in ladder.rungs if capped(r.samples_per_s) * VAL_LOADER_GAIN_MIN >= top),
        key=lambda r: (r.num_workers, -r.samples_per_s),
    )
    gain = capped(best.samples_per_s)
    if gain < VAL_LOADER_GAIN_MIN or best.num_workers == current:  # not faster beyond the noise band
        return []
    ratio = 1.0 / gain
    saved = wait * (1.0 - ratio)
    settings: dict[str, Any] = {"num_workers": best.num_workers}
    if best.num_workers > 0:
        settings["persistent_workers"] = True
    return [
        FitLever(
            FitPart.VALIDATION,
            settings,
            VAL_LOADER,
            saved,
            Provenance.MEASURED,
            f"validation waited {_s(wait)} for its DataLoader; the loader probe measured the val loader at "
            f"{now.samples_per_s:.0f} samples/s with num_workers={current} and {best.samples_per_s:.0f} with "
            f"num_workers={best.num_workers} ({per_run:.0f} batches per validation): the wait shrinks to {ratio:.0%}",
            "",
            {"val_ladder": ladder.to_dict()},
        )
    ]


def sanity_levers(ledger: FitLedger, evidence: Evidence) -> list[FitLever]:
    sanity = ledger.parts.get(FitPart.SANITY_CHECK, 0.0)
    if sanity <= 0:
        return []
    return [
        FitLever(
            FitPart.SANITY_CHECK,
            {"num_sanity_val_steps": 0},
            TRAINER,
            sanity,
            Provenance.COMPUTED,
            f"the sanity check ran {ledger.sanity_batches} validation batch(es) before training: {_s(sanity)}",
            "a bug in validation_step shows up at the first validation instead of before training",
        )
    ]


# ------------------------------------------------------------------------------------------- checkpoints


def checkpoint_levers(ledger: FitLedger, evidence: Evidence) -> list[FitLever]:
    saves = ledger.checkpoint_saves
    ckpt = ledger.parts.get(FitPart.CHECKPOINTING, 0.0)
    steps = ledger.train_steps
    if saves <= 0 or ckpt <= 0 or steps <= 0:
        return []
    per = ckpt / saves
    out: list[FitLever] = []
    k = growth_factor(ckpt, ledger.own_fit_s())
    interval = max(1, round(steps / saves))
    if k > 1 and saves > 1:
        new = min(interval * k, max(interval, steps))  # at least one save left in the fit
        new_saves = max(1, steps // new)
        avoided = max(0, saves - new_saves)
        step_s = ledger.parts.get(FitPart.TRAINING_STEPS, 0.0) / steps
        minutes = max(1, round(new * step_s / 60))
        if avoided > 0:
            spread: dict[str, Any] = {}
            lo, hi = ledger.save_min_s, ledger.save_max_s
            if lo > 0 and hi >= lo * T.SAVE_SPREAD_RANGE_MIN:
                # the saves left may be of the slow kind or the fast: bound both ways (SAVE_SPREAD_RANGE_MIN)
                spread = {
                    "saved_low_s": round(max(0.0, ckpt - new_saves * hi), 6),
                    "saved_high_s": round(max(avoided * per, ckpt - new_saves * lo), 6),
                    "save_min_s": round(lo, 6),
                    "save_max_s": round(hi, 6),
                    "range_why": (
                        f"single saves took {_s(lo)}-{_s(hi)} on this run: the {new_saves} save(s) left may cost "
                        "anything in that spread"
                    ),
                }
            out.append(
                FitLever(
                    FitPart.CHECKPOINTING,
                    {"every_n_train_steps": new},
                    MODEL_CHECKPOINT,
                    avoided * per,
                    Provenance.COMPUTED,
                    f"{saves} checkpoint saves took {_s(ckpt)} ({_s(per)} each); saving every {new} steps "
                    f"instead of every {interval} avoids {avoided}: {avoided} x {_s(per)}",
                    f"a crash loses up to {new} training steps instead of {interval}",
                    {
                        "saves": saves,
                        "saves_after": new_saves,
                        "per_save_s": round(per, 6),
                        "train_time_interval_minutes": minutes,
                        **spread,
                    },
                )
            )
    out.append(
        FitLever(
            FitPart.CHECKPOINTING,
            {"plugins": "AsyncCheckpointIO"},
            TRAINER,
            ckpt * T.ASYNC_CHECKPOINT_RECOVERABLE,
            Provenance.ESTIMATED,
            f"{saves} saves took {_s(ckpt)} on the training thread; writing them on a background thread "
            f"hides about {T.ASYNC_CHECKPOINT_RECOVERABLE:.0%} of that (not measured on this run)",
            "the latest checkpoint file is complete a moment after the step that saved it",
            {"per_save_s": round(per, 6)},
        )
    )
    return out


# ------------------------------------------------------------------------------------------- logging


def logging_levers(ledger: FitLedger, evidence: Evidence) -> list[FitLever]:
    """log_every_n_steps for the logger writes (and the metric computation they trigger); sync_dist=False
    for ``self.log`` calls that sync across ranks every step."""
    log_s = ledger.parts.get(FitPart.LOGGING, 0.0)
    calls = ledger.log_calls
    steps = ledger.train_steps
    if log_s <= 0 or steps <= 0:
        return []
    out: list[FitLever] = []
    writes_s = max(0.0, log_s - ledger.self_log_s)  # logger writes and the metric computation at log time
    if calls > 0 and writes_s > 0:
        interval = max(1, round(steps / calls))
        new = max(interval * growth_factor(writes_s, ledger.own_fit_s()), T.LIGHTNING_LOG_EVERY_N_STEPS)
        new = min(new, interval * T.FIT_INTERVAL_GROWTH_MAX)
        if new > interval:
            frac = 1.0 - interval / new
            out.append(
                FitLever(
                    FitPart.LOGGING,
                    {"log_every_n_steps": new},
                    TRAINER,
                    writes_s * frac,
                    Provenance.COMPUTED,
                    f"{calls} logger writes took {_s(writes_s)} with the metric computation they trigger "
                    f"({_s(writes_s / calls)} each); logging every {new} steps instead of every {interval} "
                    f"leaves {interval}/{new} of them",
                    f"the logged curves have a point every {new} steps instead of every {interval}",
                    {"log_calls": calls, "per_log_s": round(writes_s / calls, 6)},
                )
            )
    world = evidence.config.world_size if evidence.config is not None else 1
    if world > 1 and ledger.self_log_s > 0 and ledger.self_log_calls > 0:
        out.append(
            FitLever(
                FitPart.LOGGING,
                {"sync_dist": False},
                SELF_LOG,
                ledger.self_log_s * T.SELF_LOG_SYNC_RECOVERABLE,
                Provenance.ESTIMATED,
                f"{ledger.self_log_calls} self.log calls took {_s(ledger.self_log_s)} "
                f"({_s(ledger.self_log_s / ledger.self_log_calls)} each) on {world} ranks; without sync_dist "
                f"a call does not wait for the other ranks (about {T.SELF_LOG_SYNC_RECOVERABLE:.0%} of it)",
                "the per-step value logged is rank zero's; keep sync_dist=True for on_epoch metrics (synced once)",
            )
        )
    return out


# ------------------------------------------------------------------------------------------- callbacks


def callback_levers(ledger: FitLedger, evidence: Evidence) -> list[FitLever]:
    if not ledger.hooks:
        return []
    name, hook = max(ledger.hooks.items(), key=lambda kv: kv[1].seconds)
    if hook.seconds <= 0 or hook.calls <= 0:
        return []
    cls, _, method = name.partition(".")
    per_call = hook.seconds / hook.calls
    probes = evidence.fit_probes
    knobs = (probes.callback_knobs.get(cls) if probes is not None else None) or {}
    knob = next((n for n in KNOB_NAMES if n in knobs), None)
    ev = {"callback": cls, "hook": method, "calls": hook.calls, "per_call_s": round(per_call, 6)}
    if knob is not None:
        cur = max(1, int(knobs[knob]))
        k = growth_factor(hook.seconds, ledger.own_fit_s())
        if k > 1:
            new = cur * k
            avoided = hook.calls * (1.0 - 1.0 / k)
            basis = (
                f"{name} ran {hook.calls} times, {_s(per_call)} each ({_s(hook.seconds)}); with {knob}={new} "
                f"instead of {cur} it runs {k}x less often"
            )
            extra = {"knob": knob, "current": cur}
            indirect = _hook_indirect_max_s(ledger, evidence, per_call)
            if indirect > 0:
                extra["saved_high_s"] = round((per_call + indirect) * avoided, 6)
                extra["indirect_max_s_per_call"] = round(indirect, 6)
                extra["range_why"] = (
                    "the step after each call of the hook may run slower because of it (its caches, its memory); "
                    "how much was bounded by this run's step against the same step timed back-to-back, not measured"
                )
                basis += (
                    f"; the step after each call may also run up to {_s(indirect)} slower (this run's step over "
                    "the same step timed back-to-back)"
                )
            return [
                FitLever(
                    FitPart.CALLBACKS,
                    {knob: new},
                    cls,
                    per_call * avoided,
                    Provenance.COMPUTED,
                    basis,
                    f"{cls} does its work {k}x less often",
                    {**ev, **extra},
                )
            ]
    return [
        FitLever(
            FitPart.CALLBACKS,
            {},
            cls,
            hook.seconds * T.CALLBACK_RECOVERABLE,
            Provenance.ESTIMATED,
            f"{name} ran {hook.calls} times, {_s(per_call)} each ({_s(hook.seconds)}); calling it "
            f"{T.FIT_INTERVAL_GROWTH_MAX}x less often (or making it cheaper) gives back about "
            f"{T.CALLBACK_RECOVERABLE:.0%} of that",
            f"{cls} does its work less often",
            ev,
        )
    ]


def _step_excess_s(ledger: FitLedger, evidence: Evidence) -> float:
    """Seconds per training step the run's own step (the ledger's training steps without the data wait) took
    beyond the same step timed back-to-back (:attr:`Evidence.back_to_back_step_ms`: the trials, else the loader
    probe); 0 when neither timed it. Work interleaved with the steps (a hook, a validation run) can slow the steps
    around it (caches, the allocator), which no timing of that work sees: this bounds it. An upper bound:
    Lightning's loop and the optimizer step are in the excess too."""
    back_to_back = evidence.back_to_back_step_ms
    if back_to_back is None or ledger.train_steps <= 0:
        return 0.0
    waits = sorted(evidence.timing.data_wait_ms) if evidence.timing is not None else []
    wait_ms = waits[len(waits) // 2] if waits else 0.0
    step_ms = ledger.train_step_ms() - wait_ms
    return max(0.0, step_ms - back_to_back) / 1e3


def _hook_indirect_max_s(ledger: FitLedger, evidence: Evidence, per_call_s: float) -> float:
    """How much slower, at most, the training step after a hook call may run because of it (seconds): the
    step's excess (:func:`_step_excess_s`), capped at HOOK_INDIRECT_MAX_SHARE of the hook's own time."""
    return min(_step_excess_s(ledger, evidence), T.HOOK_INDIRECT_MAX_SHARE * per_call_s)


# ------------------------------------------------------------------------------------------- the rules

PART_RULES: tuple[PartRule, ...] = (
    PartRule(
        FitPart.VALIDATION, T.FIT_PART_SHARE_MEDIUM, T.FIT_PART_SHARE_HIGH, "validation", validation_levers
    ),
    PartRule(
        FitPart.SANITY_CHECK,
        T.FIT_PART_SHARE_MEDIUM,
        T.FIT_PART_SHARE_HIGH,
        "the sanity check before training",
        sanity_levers,
    ),
    PartRule(
        FitPart.CHECKPOINTING,
        T.FIT_PART_SHARE_MEDIUM,
        T.FIT_PART_SHARE_HIGH,
        "checkpoint saving",
        checkpoint_levers,
    ),
    PartRule(
        FitPart.LOGGING,
        T.FIT_PART_SHARE_MEDIUM,
        T.FIT_PART_SHARE_HIGH,
        "logging (metric computation, syncing, logger writes)",
        logging_levers,
    ),
    PartRule(
        FitPart.CALLBACKS,
        T.FIT_PART_SHARE_MEDIUM,
        T.FIT_PART_SHARE_HIGH,
        "other callbacks' hooks",
        callback_levers,
    ),
    PartRule(
        FitPart.EPOCH_BOUNDARIES,
        T.FIT_PART_SHARE_MEDIUM,
        T.FIT_PART_SHARE_HIGH,
        "epoch boundaries (DataLoader iterator and worker start-up, on_*_epoch_* hooks)",
        lambda ledger, evidence: [],  # the input rule's epoch-start stall advises persistent_workers
    ),
)


def _detail(ledger: FitLedger, part: FitPart) -> str:
    if part == FitPart.VALIDATION and ledger.validation_runs:
        wait, compute = ledger.validation_loader_wait_s, ledger.validation_compute_s
        return (
            f": {ledger.validation_runs} validation(s) of {ledger.validation_batches / ledger.validation_runs:.0f} "
            f"batches, {_s(wait)} waiting for the val DataLoader and {_s(compute)} computing"
        )
    if part == FitPart.CHECKPOINTING and ledger.checkpoint_saves:
        return f": {ledger.checkpoint_saves} save(s), {_s(ledger.per_save_s())} each"
    if part == FitPart.LOGGING and ledger.log_calls:
        return f": {ledger.log_calls} logger write(s)"
    if part == FitPart.CALLBACKS and ledger.hooks:
        name, hook = max(ledger.hooks.items(), key=lambda kv: kv[1].seconds)
        return f": mostly {name} ({hook.calls} calls, {_s(hook.seconds / max(1, hook.calls))} each)"
    return ""


def fit_levers(evidence: Evidence) -> list[FitLever]:
    """Every lever of every material part, best first (seconds saved over the fit the ledger saw)."""
    out: list[FitLever] = []
    for f in fit_findings(evidence):
        out += [FitLever.from_dict(d) for d in f.evidence.get("levers", [])]
    return sorted(out, key=lambda lv: -lv.saved_s)


def fit_findings(evidence: Evidence) -> list[Finding]:
    """One finding per part of the fit past its medium threshold, with its levers as evidence."""
    ledger = evidence.ledger
    fit_s = ledger.own_fit_s() if ledger is not None else 0.0
    if ledger is None or fit_s <= 0:
        return []
    out: list[Finding] = []
    for rule in PART_RULES:
        seconds = ledger.parts.get(rule.part, 0.0)
        share = seconds / fit_s
        if share < rule.medium:
            continue
        levers = [lv for lv in rule.levers(ledger, evidence) if lv.saved_s > 0]
        out.append(
            Finding(
                kind=FindingKind.REST_OF_FIT,
                severity=Severity.HIGH if share >= rule.high else Severity.MEDIUM,
                summary=(
                    f"{share:.0%} of the fit ({_s(seconds)} of {_s(fit_s)}) is {rule.what}"
                    f"{_detail(ledger, rule.part)}."
                ),
                evidence={
                    "part": rule.part.value,
                    "share_of_fit": round(share, 4),
                    "seconds": round(seconds, 4),
                    "fit_s": round(fit_s, 4),
                    "threshold_medium": rule.medium,
                    "threshold_high": rule.high,
                    "levers": [lv.to_dict() for lv in levers],
                },
            )
        )
    return out
