"""Around the verdict the callback takes (:meth:`~lightning_bottleneck.live.fit_run.FitRun.verdict`: the run's
:class:`Evidence`, diagnosed): the mid-run verdict against the end-of-fit one, and the helpers around them (the
memory sampler's source, OOM recognition, the step times outside the window). Nothing here runs per step."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch

from lightning_bottleneck.live.profiler_window import WindowOptions
from lightning_bottleneck.measure.memory_trend import MemorySampler
from lightning_bottleneck.report import Report


def midrun_note(steps: int, global_step: int) -> str:
    """The mid-run report's note: when it was taken, and that the end of fit refreshes it."""
    return (
        f"Mid-run verdict at step {steps} (global step {global_step}); "
        "training goes on and this report is refreshed with the whole run's timing at the end of fit."
    )


def unfinished_window_note(steps: int, options: WindowOptions) -> str:
    """Training stopped before the profiling schedule completed."""
    return (
        f"Training stopped after {steps} step(s), before the profiling schedule "
        f"(skip_first={options.skip_first}, wait={options.wait}, warmup={options.warmup}, "
        f"active={options.active}) completed; lower wait/warmup for short runs."
    )


def against_midrun(midrun: Report | None, report: Report) -> None:
    """The end-of-fit report says what changed since the mid-run verdict, and keeps that verdict."""
    if midrun is not None:
        report.notes.append(since_midrun(midrun, report))
        report.metrics["midrun"] = verdict_summary(midrun)


def picture_changed(midrun: Report | None, report: Report) -> bool:
    """Whether ``report`` needs the picture drawn (again): the first verdict, or the verdict or the first
    advice changed since the mid-run one."""
    return midrun is None or report is midrun or changed(midrun, report)


def verdict_summary(report: Report) -> dict[str, Any]:
    first = report.recommendations[0].title if report.recommendations else None
    return {"primary": report.primary.value, "confidence": report.confidence, "first_advice": first}


def changed(before: Report, after: Report) -> bool:
    b, a = verdict_summary(before), verdict_summary(after)
    return bool(b["primary"] != a["primary"] or b["first_advice"] != a["first_advice"])


def since_midrun(before: Report, after: Report) -> str:
    """One note: what changed between the mid-run verdict and the end-of-fit one."""
    b, a = verdict_summary(before), verdict_summary(after)
    verdict = (
        f"the same verdict ({a['primary']})"
        if b["primary"] == a["primary"]
        else f"a different verdict: {b['primary']} mid-run, {a['primary']} over the whole run"
    )
    advice = (
        "the same first advice"
        if b["first_advice"] == a["first_advice"]
        else f"first advice changed from {b['first_advice']!r} to {a['first_advice']!r}"
    )
    return f"Since the mid-run verdict: {verdict}, {advice} (now with the whole run's step timing)."


def outside_steps(values: list[float], first: int, window: tuple[int, int] | None) -> list[float]:
    """Always-on step times outside the profiled window: ``values`` start at ring position ``first``; the
    window's steps (positions ``[lo, hi)``) are cut out."""
    if window is None:
        return values
    lo, hi = window
    return [v for i, v in enumerate(values, start=first) if not lo <= i < hi]


def memory_sampler(trainer: pl.Trainer) -> MemorySampler:
    """CUDA allocated memory on a CUDA run (a counter read, no sync), else the process RSS."""
    if trainer.strategy.root_device.type == "cuda" and torch.cuda.is_available():
        device = trainer.strategy.root_device
        return MemorySampler(
            reader=lambda: torch.cuda.memory_allocated(device) / 2**20, source="cuda_allocated"
        )
    return MemorySampler()


def is_oom(exception: BaseException) -> bool:
    oom_types: tuple[type[BaseException], ...] = (torch.cuda.OutOfMemoryError,)
    if hasattr(torch, "OutOfMemoryError"):
        oom_types += (torch.OutOfMemoryError,)
    return isinstance(exception, oom_types) or "out of memory" in str(exception).lower()
