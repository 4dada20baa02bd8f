"""The callback's options one fit needs, taken from its validated attributes (:class:`RunOptions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lightning_bottleneck.live.profiler_window import WindowOptions
from lightning_bottleneck.measure.stage import MeasureOptions

__all__ = ["RunOptions"]


@dataclass(frozen=True)
class RunOptions:
    """The callback's options one fit needs (validated by the callback)."""

    window: WindowOptions
    measure: MeasureOptions
    track_syncs: bool = True
    log_every_n_steps: int | None = None
    output_dir: str | None = None
    report_path: str | None = None
    baseline: str | None = None
    verbose: bool | None = None  # None: the short answer; True: the full detail; False: nothing
    gather_timeout: float = 120.0
    autotune: bool = False

    @classmethod
    def of(cls, cb: Any) -> RunOptions:
        """The options of a ``BottleneckCallback`` (its validated attributes)."""
        window = WindowOptions(
            cb.skip_first, cb.wait, cb.warmup, cb.active, cb.repeat,
            cb.record_shapes, cb.profile_memory, cb.with_stack,
        )  # fmt: skip
        budgets = MeasureOptions(cb.probe_loader, cb.loader_budget_s, cb.trial_budget_s, cb.compile_budget_s)
        return cls(
            window, budgets, cb.track_syncs, cb.log_every_n_steps, cb.output_dir, cb.report_path,
            cb.baseline, cb.verbose, cb.gather_timeout, cb.autotune,
        )  # fmt: skip
