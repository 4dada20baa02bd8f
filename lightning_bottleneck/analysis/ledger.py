"""The ledger of a whole ``fit``: wall seconds per part (training steps, validation, checkpointing, ...).

Pure data (no torch, no Lightning): the live callback fills it (``live/ledger.py``), the rules read it
through :class:`~lightning_bottleneck.evidence.Evidence`, the report carries it as ``metrics.ledger``
(:meth:`FitLedger.to_dict`) and ``analyze`` reads it back (:meth:`FitLedger.from_dict`).

The parts' seconds sum to ``fit_s``: ``UNACCOUNTED`` is what the timed parts leave (never negative).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lightning_bottleneck.categories import FitPart

#: The parts that are the fit outside the training steps (what the rest-of-fit rules look at).
OUTSIDE_STEP_PARTS = tuple(
    p for p in FitPart if p not in (FitPart.TRAINING_STEPS, FitPart.UNACCOUNTED, FitPart.DIAGNOSIS)
)

#: Short names for the one-line display ("fit 120 s: training steps 38%, validation 55%, ...").
PART_LABELS: dict[FitPart, str] = {
    FitPart.TRAINING_STEPS: "training steps",
    FitPart.VALIDATION: "validation",
    FitPart.SANITY_CHECK: "sanity check",
    FitPart.CHECKPOINTING: "checkpointing",
    FitPart.LOGGING: "logging",
    FitPart.CALLBACKS: "callbacks",
    FitPart.EPOCH_BOUNDARIES: "epoch boundaries",
    FitPart.COMPILE_WARMUP: "compile warm-up",
    FitPart.DIAGNOSIS: "this diagnosis",
    FitPart.SETUP_TEARDOWN: "set-up/teardown",
    FitPart.UNACCOUNTED: "unaccounted",
}


@dataclass
class HookTime:
    """Self time of one callback hook over the fit (time in hooks it calls is not counted here)."""

    seconds: float = 0.0
    calls: int = 0

    @property
    def per_call_s(self) -> float:
        return self.seconds / self.calls if self.calls else 0.0


@dataclass
class FitLedger:
    fit_s: float  # wall seconds of fit (setup .. teardown)
    parts: dict[FitPart, float] = field(default_factory=dict)  # seconds per part (every part present)
    train_steps: int = 0
    epochs: int = 0
    validation_runs: int = 0  # not counting the sanity check
    # wall seconds of the validation runs with everything they trigger (logging, checkpoint saves, callbacks'
    # validation hooks: self time in other parts): what one validation fewer saves (0: unknown, use VALIDATION)
    validation_wall_s: float = 0.0
    # the median validation run's wall seconds (with what it triggers): one run fewer saves this; the first
    # run's one-off costs (the val loader's first iterator, the first checkpoint) stay with the runs left
    validation_typical_s: float = 0.0
    validation_batches: int = 0
    validation_loader_wait_s: float = 0.0  # split of VALIDATION: waiting for the val loader
    validation_compute_s: float = 0.0  # ... and the rest of validation
    sanity_batches: int = 0
    checkpoint_saves: int = 0
    # the fastest and the slowest single save (wall seconds; 0: not recorded): saves of the same checkpoint vary
    # (page cache, fresh buffer pages), which bounds a fewer-saves lever
    save_min_s: float = 0.0
    save_max_s: float = 0.0
    # the saves' own wall seconds, summed (0: not recorded): the CHECKPOINTING part also holds the checkpoint
    # callbacks' per-step hooks, which saving less often does not remove (on a busy machine a 4-save fit's part
    # came to more seconds a save than its slowest save took)
    save_s: float = 0.0
    log_calls: int = 0  # logger.log_metrics calls (the LOGGING part is all logging work)
    self_log_calls: int = 0  # LightningModule.log / log_dict calls (inside the steps, on_step and on_epoch)
    self_log_s: float = 0.0  # split of LOGGING: seconds inside self.log / self.log_dict (incl. sync_dist)
    hooks: dict[str, HookTime] = field(default_factory=dict)  # "<CallbackClass>.<hook>": other callbacks only
    # of DIAGNOSIS: the time of the steps from the profiling window's start until the mid-run picture is drawn
    # (torch.profiler in the steps, the trace's analysis and the picture on the same cores) beyond as many steps
    # outside that span
    profiled_extra_s: float = 0.0

    def __post_init__(self) -> None:
        parts = {FitPart(k): float(v) for k, v in self.parts.items()}
        for part in FitPart:
            parts.setdefault(part, 0.0)
        if FitPart.UNACCOUNTED not in self.parts:
            timed = sum(v for k, v in parts.items() if k is not FitPart.UNACCOUNTED)
            parts[FitPart.UNACCOUNTED] = max(0.0, self.fit_s - timed)
        self.parts = {part: parts[part] for part in FitPart}  # the ledger's order

    def share(self, part: FitPart) -> float:
        """``part``'s share of the fit's wall time (0 for an empty fit)."""
        return self.parts.get(part, 0.0) / self.fit_s if self.fit_s > 0 else 0.0

    def own_fit_s(self) -> float:
        """The fit's wall time without this package's own work (the DIAGNOSIS part: the measurement stage, the
        verdicts): what the run takes without the callback, which every share and speed-up here is of."""
        return max(0.0, self.fit_s - self.parts.get(FitPart.DIAGNOSIS, 0.0))

    def train_step_ms(self) -> float:
        """The mean training step (ms): the training steps' part over their count (0 for a fit without steps)."""
        return self.parts[FitPart.TRAINING_STEPS] * 1e3 / self.train_steps if self.train_steps > 0 else 0.0

    def per_validation_s(self) -> float:
        """Seconds per validation run (the sanity check excluded)."""
        runs = self.validation_runs
        return self.parts[FitPart.VALIDATION] / runs if runs else 0.0

    def per_save_s(self) -> float:
        """Seconds per checkpoint save."""
        saves = self.checkpoint_saves
        if not saves:
            return 0.0
        return (self.save_s or self.parts[FitPart.CHECKPOINTING]) / saves

    def largest_outside_part(self) -> FitPart | None:
        """The part outside the training step with the most seconds (None when none took any time)."""
        part = max(OUTSIDE_STEP_PARTS, key=lambda p: self.parts[p])
        return part if self.parts[part] > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "fit_s": self.fit_s,
            "parts": {str(p): s for p, s in self.parts.items()},
            "shares": {str(p): self.share(p) for p in self.parts},
            "train_steps": self.train_steps,
            "epochs": self.epochs,
            "validation_runs": self.validation_runs,
            "validation_wall_s": self.validation_wall_s,
            "validation_typical_s": self.validation_typical_s,
            "validation_batches": self.validation_batches,
            "validation_loader_wait_s": self.validation_loader_wait_s,
            "validation_compute_s": self.validation_compute_s,
            "sanity_batches": self.sanity_batches,
            "checkpoint_saves": self.checkpoint_saves,
            "save_min_s": self.save_min_s,
            "save_max_s": self.save_max_s,
            "save_s": self.save_s,
            "log_calls": self.log_calls,
            "self_log_calls": self.self_log_calls,
            "self_log_s": self.self_log_s,
            "hooks": {k: {"seconds": h.seconds, "calls": h.calls} for k, h in self.hooks.items()},
            "profiled_extra_s": self.profiled_extra_s,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FitLedger:
        """The inverse of :meth:`to_dict`; keys it does not know (``shares``, ``cause``, ``ranks``) are ignored,
        part names it does not know are dropped (a report from a newer version)."""
        known = {p.value for p in FitPart}
        return cls(
            fit_s=float(d.get("fit_s", 0.0)),
            parts={FitPart(k): float(v) for k, v in (d.get("parts") or {}).items() if k in known},
            train_steps=int(d.get("train_steps", 0)),
            epochs=int(d.get("epochs", 0)),
            validation_runs=int(d.get("validation_runs", 0)),
            validation_wall_s=float(d.get("validation_wall_s", 0.0)),
            validation_typical_s=float(d.get("validation_typical_s", 0.0)),
            validation_batches=int(d.get("validation_batches", 0)),
            validation_loader_wait_s=float(d.get("validation_loader_wait_s", 0.0)),
            validation_compute_s=float(d.get("validation_compute_s", 0.0)),
            sanity_batches=int(d.get("sanity_batches", 0)),
            checkpoint_saves=int(d.get("checkpoint_saves", 0)),
            save_min_s=float(d.get("save_min_s", 0.0)),
            save_max_s=float(d.get("save_max_s", 0.0)),
            save_s=float(d.get("save_s", 0.0)),
            log_calls=int(d.get("log_calls", 0)),
            profiled_extra_s=float(d.get("profiled_extra_s", 0.0)),
            self_log_calls=int(d.get("self_log_calls", 0)),
            self_log_s=float(d.get("self_log_s", 0.0)),
            hooks={
                str(k): HookTime(float(v.get("seconds", 0.0)), int(v.get("calls", 0)))
                for k, v in (d.get("hooks") or {}).items()
            },
        )


def merge_ranks(ledgers: list[FitLedger]) -> FitLedger:
    """One ledger for a distributed run: per part the max over ranks, ``fit_s`` the max, counts the max.

    The slowest rank sets the pace of every part (the others wait for it at the next collective), so the max
    is what the whole run pays. The merged parts may then sum to a little more than ``fit_s``.
    """
    if not ledgers:
        raise ValueError("merge_ranks needs at least one ledger")
    if len(ledgers) == 1:
        return ledgers[0]
    hooks: dict[str, HookTime] = {}
    for ledger in ledgers:
        for name, h in ledger.hooks.items():
            cur = hooks.setdefault(name, HookTime())
            cur.seconds = max(cur.seconds, h.seconds)
            cur.calls = max(cur.calls, h.calls)
    return FitLedger(
        fit_s=max(x.fit_s for x in ledgers),
        parts={p: max(x.parts[p] for x in ledgers) for p in FitPart},
        train_steps=max(x.train_steps for x in ledgers),
        epochs=max(x.epochs for x in ledgers),
        validation_runs=max(x.validation_runs for x in ledgers),
        validation_wall_s=max(x.validation_wall_s for x in ledgers),
        validation_typical_s=max(x.validation_typical_s for x in ledgers),
        validation_batches=max(x.validation_batches for x in ledgers),
        validation_loader_wait_s=max(x.validation_loader_wait_s for x in ledgers),
        validation_compute_s=max(x.validation_compute_s for x in ledgers),
        sanity_batches=max(x.sanity_batches for x in ledgers),
        checkpoint_saves=max(x.checkpoint_saves for x in ledgers),
        save_min_s=min((x.save_min_s for x in ledgers if x.save_min_s > 0), default=0.0),
        save_max_s=max(x.save_max_s for x in ledgers),
        save_s=max(x.save_s for x in ledgers),
        log_calls=max(x.log_calls for x in ledgers),
        self_log_calls=max(x.self_log_calls for x in ledgers),
        self_log_s=max(x.self_log_s for x in ledgers),
        hooks=hooks,
        profiled_extra_s=max(x.profiled_extra_s for x in ledgers),
    )


def ledger_metrics(
    ledger: FitLedger, ranks: list[FitLedger] | tuple[FitLedger, ...] = (), cause: FitPart | str | None = None
) -> dict[str, Any]:
    """The report's ``metrics["ledger"]``: :meth:`FitLedger.to_dict`, the ``cause`` (the part a rest-of-fit
    verdict blames, else None) and, for several ranks, each rank's ledger under ``ranks`` (rank order)."""
    d = ledger.to_dict()
    d["cause"] = str(cause) if cause else None
    if len(ranks) > 1:
        d["ranks"] = [r.to_dict() for r in ranks]
    return d
