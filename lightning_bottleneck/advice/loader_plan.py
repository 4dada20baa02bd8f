"""The loader rule's choice in words: one :class:`~lightning_bottleneck.report.Recommendation` per
:class:`~lightning_bottleneck.rules.loader_choice.LoaderChange`, with its title, detail and a copy-pasteable
``DataLoader(...)`` line. Pure; it decides nothing: the settings and the speed-up are the rule's.

Example::

    plan = plan_loader(ladder, cfg, consumption_samples_per_s=2400.0, data_wait_share=0.6, step_s=0.010)
    for rec in loader_recommendations(plan, cfg):
        print(rec.title, rec.settings, rec.expected_speedup)
"""

from __future__ import annotations

from typing import Any

from lightning_bottleneck.evidence import RunConfig
from lightning_bottleneck.report import Recommendation
from lightning_bottleneck.rules.loader_choice import LoaderAdvice, LoaderChange, LoaderPlan
from lightning_bottleneck.rules.loader_pace import COVER_MARGIN
from lightning_bottleneck.vocabulary import code_line, settings_words

__all__ = ["loader_recommendation", "loader_recommendations"]


def loader_recommendations(plan: LoaderPlan, current: RunConfig) -> list[Recommendation]:
    """The plan's changes, in order, as recommendations."""
    return [loader_recommendation(c, current) for c in plan.changes]


def loader_recommendation(change: LoaderChange, current: RunConfig) -> Recommendation:
    title, detail = _words(change)
    snippet = (
        "def on_after_batch_transfer(self, batch, dataloader_idx):\n    return gpu_augment(batch)"
        if change.advice == LoaderAdvice.CHEAPER_SAMPLES
        else _snippet(change.settings, current, change.workers_new)
    )
    return Recommendation(
        kind="input",
        title=title,
        detail=detail,
        settings=dict(change.settings),
        snippet=snippet,
        expected_speedup=change.expected_speedup,
        evidence=change.evidence,
        expected_speedup_range=change.expected_speedup_range,
        uncertainty=change.uncertainty,
        lever=change.lever,
    )


def _words(c: LoaderChange) -> tuple[str, str]:
    """The title and the detail of one change, from its measured facts."""
    rate, consumption = c.chosen_samples_per_s, c.consumption_samples_per_s or 0.0
    workers = (
        f"Load batches in {c.workers_new} background worker(s)"
        if c.workers_new
        else "Load batches in the training process (num_workers=0)"
    )
    if c.advice == LoaderAdvice.CHEAPER_SAMPLES:
        interim = f" Until then, {_describe(c.settings)} gets closest to the ceiling." if c.settings else ""
        if c.settings and c.current_samples_per_s:
            interim = (
                f" Until then, {_describe(c.settings)}: timed with this run's training step it trains at "
                f"{rate:.0f} samples/s against {c.current_samples_per_s:.0f} now "
                f"({rate / c.current_samples_per_s:.2f}x)."
            )
        where = f"on {c.usable_cpus} usable CPU(s)" if c.usable_cpus else ""
        return "Make each sample cheaper to produce", (
            f"The loader tops out at {c.ceiling_samples_per_s:.0f} samples/s {where} (loading is {c.bound}-bound) "
            f"while the model consumes {consumption:.0f} samples/s: no worker count covers it. Cache "
            "decoded samples, do augmentations batched or on the device (`on_after_batch_transfer`), "
            f"and avoid per-sample Python loops in `__getitem__`.{interim}"
        )
    if c.advice == LoaderAdvice.WORKERS_TIMED:
        return workers, (
            f"Timed with this run's own training step (workers and the step share {c.cpus} "
            f"CPU(s)): {c.chosen_label} trains at {rate:.0f} samples/s against "
            f"{c.current_samples_per_s or 0.0:.0f} now, the fastest worker count tried."
        )
    if c.advice == LoaderAdvice.WORKERS_SHORT:
        return workers, (
            f"Measured on this run's own loader: {c.chosen_label} delivers {rate:.0f} samples/s, "
            f"the fastest setting tried, still short of the model's {consumption:.0f} samples/s. Loading "
            f"is {c.bound}-bound: more workers or faster storage help further, and so do cheaper samples "
            "(cached, decoded once)."
        )
    if c.advice == LoaderAdvice.NO_WORKERS:
        return "Load batches in the training process (num_workers=0)", (
            f"Measured on this run's own loader: without workers it delivers {rate:.0f} samples/s, enough for the "
            f"model's {consumption:.0f}; the {c.workers_now} worker(s) cost start-up every epoch "
            f"({c.stall_now_s * 1e3:.0f} ms) and a copy of every batch between processes."
        )
    if c.advice == LoaderAdvice.WORKERS_COVER:
        return workers, (
            f"Measured on this run's own loader: {c.chosen_label} delivers {rate:.0f} samples/s, "
            f"the smallest setting that covers the model's {consumption:.0f} samples/s with a "
            f"{COVER_MARGIN:.2f}x margin (loading is {c.bound}-bound)."
        )
    if c.advice == LoaderAdvice.PERSISTENT:
        share = c.stall_now_s / c.epoch_now_s if c.epoch_now_s > 0 else 0.0
        return "Keep DataLoader workers alive between epochs", (
            f"Workers are re-created every epoch; their start-up costs {c.stall_now_s * 1e3:.0f} ms of a "
            f"{c.epoch_now_s:.2f} s epoch ({share:.0%})."
        )
    return (
        f"Prefetch {c.settings.get('prefetch_factor')} batches per worker",
        "Measured faster on this run's own loader.",
    )


def _describe(settings: dict[str, Any]) -> str:
    return settings_words(settings)


def _snippet(settings: dict[str, Any], cfg: RunConfig, workers: int) -> str:
    args = ["dataset"]
    if cfg.batch_size is not None:
        args.append(f"batch_size={cfg.batch_size}")
    if "num_workers" not in settings and workers:
        args.append(f"num_workers={workers}")
    return code_line(settings, args)
