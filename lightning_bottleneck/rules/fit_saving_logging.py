"""Levers for checkpoint saving (fewer saves, asynchronous saving), logging (fewer logger writes, no per-step
sync_dist) and other callbacks' hooks (called less often)."""

from __future__ import annotations

from typing import Any

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.analysis.ledger import FitLedger
from lightning_bottleneck.categories import FitPart, Provenance
from lightning_bottleneck.evidence import Evidence
from lightning_bottleneck.evidence.fit_probes import KNOB_NAMES
from lightning_bottleneck.rules.fit_lever import (
    MODEL_CHECKPOINT,
    SELF_LOG,
    TRAINER,
    FitLever,
    after_effect,
    growth_factor,
    seconds_text,
)


def checkpoint_levers(ledger: FitLedger, evidence: Evidence) -> list[FitLever]:
    saves = ledger.checkpoint_saves
    ckpt = ledger.parts.get(FitPart.CHECKPOINTING, 0.0)
    steps = ledger.train_steps
    if saves <= 0 or ckpt <= 0 or steps <= 0:
        return []
    # the saves themselves: fewer saves or a background writer leave the checkpoint callbacks' per-step hooks
    per = ledger.per_save_s()
    saves_s = per * saves
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
            # the checkpoint callbacks' time outside the saves themselves (ModelCheckpoint removing the file its
            # new save replaced, its top-k bookkeeping) may go with the saves too: at most once per save after the
            # first, so up to avoided / (saves - 1) of it. checkpoint_heavy (issue 28): 8 saves of 128 MB took
            # 2.59 s and the callback's hooks 0.27 s more; every 40 steps (one save) the fit took 0.31 s, where
            # the saves alone left 0.60 s ("up to 5.78x" for 7.87x applied). 0 when the saves were not timed apart
            residual = max(0.0, ckpt - saves_s) * avoided / (saves - 1)
            residual_why = (
                f"the checkpoint callbacks' {seconds_text(ckpt - saves_s)} outside the saves themselves (removing the "
                "files new saves replaced) may go with the saves avoided"
            )
            if lo > 0 and hi >= lo * T.SAVE_SPREAD_RANGE_MIN:
                # the saves left may be of the slow kind or the fast: bound both ways (SAVE_SPREAD_RANGE_MIN)
                spread = {
                    "saved_low_s": round(max(0.0, saves_s - new_saves * hi), 6),
                    "saved_high_s": round(max(avoided * per, saves_s - new_saves * lo) + residual, 6),
                    "save_min_s": round(lo, 6),
                    "save_max_s": round(hi, 6),
                    "range_why": (
                        f"single saves took {seconds_text(lo)}-{seconds_text(hi)} on this run: the {new_saves} save(s) left may cost "
                        "anything in that spread" + (f"; {residual_why}" if residual > 0 else "")
                    ),
                }
            elif residual > 0:
                spread = {"saved_high_s": round(avoided * per + residual, 6), "range_why": residual_why}
            out.append(
                FitLever(
                    FitPart.CHECKPOINTING,
                    {"every_n_train_steps": new},
                    MODEL_CHECKPOINT,
                    avoided * per,
                    Provenance.COMPUTED,
                    f"{saves} checkpoint saves took {seconds_text(saves_s)} ({seconds_text(per)} each); saving every {new} steps "
                    f"instead of every {interval} avoids {avoided}: {avoided} x {seconds_text(per)}",
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
            saves_s * T.ASYNC_CHECKPOINT_RECOVERABLE,
            Provenance.ESTIMATED,
            f"{saves} saves took {seconds_text(saves_s)} on the training thread; writing them on a background thread "
            f"hides about {T.ASYNC_CHECKPOINT_RECOVERABLE:.0%} of that (not measured on this run)",
            "the latest checkpoint file is complete a moment after the step that saved it",
            {"per_save_s": round(per, 6)},
        )
    )
    return out


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
            # the steps between the writes ran faster with fewer of them (logging_heavy: 1 ms a step less with a
            # write every 10 steps; 1.29-1.31x predicted from the writes alone, 1.35x and 1.62x applied): the high end
            spread, more = after_effect(ledger, evidence, writes_s / calls, calls * frac, "logger write")
            out.append(
                FitLever(
                    FitPart.LOGGING,
                    {"log_every_n_steps": new},
                    TRAINER,
                    writes_s * frac,
                    Provenance.COMPUTED,
                    f"{calls} logger writes took {seconds_text(writes_s)} with the metric computation they trigger "
                    f"({seconds_text(writes_s / calls)} each); logging every {new} steps instead of every {interval} "
                    f"leaves {interval}/{new} of them{more}",
                    f"the logged curves have a point every {new} steps instead of every {interval}",
                    {"log_calls": calls, "per_log_s": round(writes_s / calls, 6), **spread},
                    high_is_ceiling=bool(spread),
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
                f"{ledger.self_log_calls} self.log calls took {seconds_text(ledger.self_log_s)} "
                f"({seconds_text(ledger.self_log_s / ledger.self_log_calls)} each) on {world} ranks; without sync_dist "
                f"a call does not wait for the other ranks (about {T.SELF_LOG_SYNC_RECOVERABLE:.0%} of it)",
                "the per-step value logged is rank zero's; keep sync_dist=True for on_epoch metrics (synced once)",
            )
        )
    return out


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
                f"{name} ran {hook.calls} times, {seconds_text(per_call)} each ({seconds_text(hook.seconds)}); with {knob}={new} "
                f"instead of {cur} it runs {k}x less often"
            )
            spread, more = after_effect(ledger, evidence, per_call, avoided, "call of the hook")
            extra = {"knob": knob, "current": cur, **spread}
            basis += more
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
                    high_is_ceiling=bool(spread),
                )
            ]
    return [
        FitLever(
            FitPart.CALLBACKS,
            {},
            cls,
            hook.seconds * T.CALLBACK_RECOVERABLE,
            Provenance.ESTIMATED,
            f"{name} ran {hook.calls} times, {seconds_text(per_call)} each ({seconds_text(hook.seconds)}); calling it "
            f"{T.FIT_INTERVAL_GROWTH_MAX}x less often (or making it cheaper) gives back about "
            f"{T.CALLBACK_RECOVERABLE:.0%} of that",
            f"{cls} does its work less often",
            ev,
        )
    ]
