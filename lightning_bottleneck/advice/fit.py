"""Advice for the rest of the fit, in Lightning's own words.

Each lever of :mod:`lightning_bottleneck.rules.fit` becomes one :class:`Recommendation`: ``settings`` are
Lightning argument names, ``where`` says where they go (``Trainer``, ``ModelCheckpoint``, ``val DataLoader``,
``self.log`` or a callback's class), the detail says how the saving was obtained and what the user trades.
The saving and the whole-fit ``expected_speedup`` are attached by the ranking
(:func:`lightning_bottleneck.advice.ranked.ranked_recommendations`), which joins a recommendation to its
candidate by the lever's stable id (:attr:`FitLever.lever`).

Example::

    for rec in fit_advice(cfg, findings):
        print(rec.where, rec.settings, rec.snippet)
"""

from __future__ import annotations

from typing import Any

from lightning_bottleneck.categories import Category, FindingKind
from lightning_bottleneck.evidence import RunConfig
from lightning_bottleneck.report import Finding, Recommendation
from lightning_bottleneck.rules.fit_lever import (
    MODEL_CHECKPOINT,
    SELF_LOG,
    TRAINER,
    VAL_LOADER,
    FitLever,
)

__all__ = ["fit_advice", "recommendation", "snippet", "title"]


def title(lever: FitLever) -> str:
    """The recommendation's title."""
    s = lever.settings
    if lever.where == TRAINER:
        if "val_check_interval" in s:
            return f"Validate every {s['val_check_interval']} training batches (val_check_interval)"
        if "check_val_every_n_epoch" in s:
            return f"Validate every {s['check_val_every_n_epoch']} epochs (check_val_every_n_epoch)"
        if "limit_val_batches" in s:
            return f"Validate on {s['limit_val_batches']:.0%} of the val batches (limit_val_batches)"
        if "num_sanity_val_steps" in s:
            return "Skip the sanity check (num_sanity_val_steps=0)"
        if "log_every_n_steps" in s:
            return f"Log every {s['log_every_n_steps']} steps (log_every_n_steps)"
        if s.get("plugins") == "AsyncCheckpointIO":
            return "Save checkpoints on a background thread (AsyncCheckpointIO)"
    if lever.where == MODEL_CHECKPOINT and "every_n_train_steps" in s:
        return f"Save a checkpoint every {s['every_n_train_steps']} training steps (ModelCheckpoint)"
    if lever.where == VAL_LOADER and "num_workers" in s:
        return f"Load validation batches in {s['num_workers']} worker(s) (val DataLoader num_workers)"
    if lever.where == SELF_LOG:
        return "Reduce per-step metrics once per epoch (self.log on_step=False)"
    if s:
        knob, value = next(iter(s.items()))
        return f"Run {lever.where} less often ({knob}={value})"
    hook = lever.evidence.get("hook", "its hook")
    return f"Make {lever.where}.{hook} cheaper or call it less often"


def snippet(lever: FitLever) -> str:
    """Copy-pasteable code applying the lever."""
    s = lever.settings
    args = ", ".join(f"{k}={v!r}" for k, v in s.items())
    if lever.where == TRAINER:
        if s.get("plugins") == "AsyncCheckpointIO":
            return (
                "from lightning.pytorch.plugins.io import AsyncCheckpointIO\n"
                "Trainer(plugins=[AsyncCheckpointIO()])"
            )
        return f"Trainer({args})"
    if lever.where == MODEL_CHECKPOINT:
        minutes = lever.evidence.get("train_time_interval_minutes")
        alt = (
            f"\n# or by wall time: ModelCheckpoint(train_time_interval=timedelta(minutes={minutes}))"
            if minutes
            else ""
        )
        return (
            f"ModelCheckpoint({args}){alt}\n"
            "# save_weights_only=True also skips the optimizer state (smaller, faster saves; no exact resume)"
        )
    if lever.where == VAL_LOADER:
        return f"def val_dataloader(self):\n    return DataLoader(val_set, batch_size=..., {args})"
    if lever.where == SELF_LOG:
        return 'self.log("name", value, on_step=False, on_epoch=True)'
    if s:
        return f"{lever.where}(..., {args})"
    hook = lever.evidence.get("hook", "hook")
    return f"class {lever.where}(Callback):\n    def {hook}(self, trainer, pl_module, *args):\n        if trainer.global_step % 10:\n            return\n        ..."


def recommendation(lever: FitLever) -> Recommendation:
    detail = lever.basis[:1].upper() + lever.basis[1:] + "."
    if lever.trade:
        detail += f" What it changes: {lever.trade}."
    if not lever.settings:
        detail += " No Lightning setting does this: it is a change to the callback's code."
    evidence: dict[str, Any] = {"part": lever.part.value, "where": lever.where, **lever.evidence}
    rec = Recommendation(
        kind=Category.REST_OF_FIT.value,
        title=title(lever),
        detail=detail,
        settings=dict(lever.settings),
        snippet=snippet(lever),
        evidence=evidence,
        where=lever.where,
        lever=lever.lever,
    )
    return rec


def fit_advice(cfg: RunConfig, findings: list[Finding]) -> list[Recommendation]:
    """One recommendation per lever of every rest-of-fit finding (the ranking orders them)."""
    out: list[Recommendation] = []
    for f in findings:
        if f.kind != FindingKind.REST_OF_FIT:
            continue
        out += [recommendation(FitLever.from_dict(d)) for d in f.evidence.get("levers", [])]
    return out
