"""What the measurement stage found about the rest of the fit (torch-free, typed, JSON-able).

* ``val_ladder``: the loader probe (:mod:`lightning_bottleneck.measure.loader_probe`) run on the *val*
  DataLoader when its wait dominated validation so far, with the loader's own settings beside it;
* ``callback_knobs``: for each of the user's callbacks, the constructor arguments that set how often it works
  (``every_n_steps``, ``log_every_n_steps``, ...) with their current values, so the advice can name one.

Example::

    probes = FitProbes(val_num_workers=0, val_batch_size=32, callback_knobs={"Heavy": {"every_n_steps": 1}})
    FitProbes.from_dict(probes.to_dict()) == probes
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lightning_bottleneck.evidence.loader_ladder import LoaderLadder

__all__ = ["KNOB_NAMES", "FitProbes"]

#: Constructor arguments that say how often a callback works, in the order the advice prefers them. These are
#: the names Lightning's own callbacks and the common third-party ones use (ModelCheckpoint's
#: ``every_n_train_steps``, LearningRateMonitor/DeviceStatsMonitor following ``log_every_n_steps``, ...).
KNOB_NAMES = (
    "every_n_train_steps",
    "every_n_steps",
    "log_every_n_steps",
    "every_n_batches",
    "every_n_epochs",
    "log_every_n",
    "frequency",
    "interval",
)


@dataclass
class FitProbes:
    val_ladder: LoaderLadder | None = None
    val_num_workers: int | None = None
    val_batch_size: int | None = None
    callback_knobs: dict[str, dict[str, int]] = field(default_factory=dict)  # class -> knob -> value
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "val_ladder": self.val_ladder.to_dict() if self.val_ladder is not None else None,
            "val_num_workers": self.val_num_workers,
            "val_batch_size": self.val_batch_size,
            "callback_knobs": {k: dict(v) for k, v in self.callback_knobs.items()},
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FitProbes:
        ladder = d.get("val_ladder")
        return cls(
            val_ladder=LoaderLadder.from_dict(ladder) if ladder else None,
            val_num_workers=d.get("val_num_workers"),
            val_batch_size=d.get("val_batch_size"),
            callback_knobs={
                str(k): {str(a): int(b) for a, b in v.items()}
                for k, v in (d.get("callback_knobs") or {}).items()
            },
            notes=list(d.get("notes") or []),
        )
