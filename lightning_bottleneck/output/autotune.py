"""The words for autotune's record: one sentence for the terminal, TensorBoard and the HTML page."""

from __future__ import annotations

from typing import Any

from lightning_bottleneck.autotune_record import (
    APPLIED,
    BASIS_FIRST_EPOCH,
    BASIS_RESTARTS,
    KEPT,
    UNDONE,
    AutotuneRecord,
)
from lightning_bottleneck.vocabulary import settings_words

__all__ = ["autotune_line", "basis_text", "measured_text", "race_line", "race_text", "settings_text"]


def settings_text(settings: dict[str, Any]) -> str:
    return settings_words(settings)


def measured_text(record: AutotuneRecord) -> str:
    """``1.84x (95% interval 1.71x to 1.95x) over 40 steps after against 30 before``; empty when not measured."""
    if record.speedup is None:
        return ""
    text = f"{record.speedup:.2f}x"
    interval = record.speedup_interval
    if interval is not None:
        text += f" (95% interval {interval[0]:.2f}x to {interval[1]:.2f}x)"
    return text + f" over {record.steps_after} steps after against {record.steps_before} before"


def basis_text(record: AutotuneRecord) -> str:
    """`` (chosen after the first epoch: ...)`` for a choice that rests on the workers' start-up (BASIS_FIRST_EPOCH,
    BASIS_RESTARTS); empty for the verdict's measured setting."""
    if record.basis not in (BASIS_FIRST_EPOCH, BASIS_RESTARTS) or record.startup_ms is None:
        return ""
    loading = (
        f"; a batch loads in {record.in_process_batch_ms:.2f} ms in the training process"
        if record.in_process_batch_ms is not None
        else ""
    )
    when = "once the verdict had no measured loader setting to apply"
    if record.basis == BASIS_FIRST_EPOCH:  # at an epoch's end before the verdict (live/autotune_restart.py)
        epochs = record.applied_at_epoch
        when = (
            "after the first epoch" if epochs in (None, 1) else f"after {epochs} epochs, before the verdict"
        )
    return f" (chosen {when}: its workers, restarted every epoch, took {record.startup_ms:.0f} ms to start{loading})"


def race_text(record: AutotuneRecord) -> str:
    """``, then ran num_workers=4 for epoch 1 (0.93x the mean step time of num_workers=2 ...: num_workers=4 stayed)``;
    empty without a race."""
    if not record.raced:
        return ""
    first = settings_text(_differing(record.raced_against, record.raced))
    raced = settings_text(_differing(record.raced, record.raced_against))
    head = f", then ran {raced} for epoch {record.raced_at_epoch}"
    if not record.race_ended:
        return f"{head} (the fit ended during that epoch)"
    if record.race_ratio is None:
        return f"{head} (too few steps to compare: {first} stayed)"
    interval = record.race_interval
    spread = f", 95% interval {interval[0]:.2f}x to {interval[1]:.2f}x" if interval is not None else ""
    stayed = raced if record.race_won else first
    return f"{head} ({record.race_ratio:.2f}x the mean step time of {first}{spread}: {stayed} stayed)"


def race_line(record: AutotuneRecord) -> str:
    """The race's outcome in one sentence (the terminal line when it ends)."""
    return f"{settings_text(record.raced_against)} was kept{race_text(record)}; measured {measured_text(record)}."


def _differing(settings: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if other.get(k) != v} or settings


def autotune_line(record: AutotuneRecord) -> str:
    """One sentence: what autotune applied, at which step, what it measured, and whether it was kept."""
    what = settings_text(record.settings)
    where = (
        f"at step {record.applied_at_step} ("
        + ("mid-epoch " if record.mid_epoch else "")
        + f"epoch {record.applied_at_epoch})"
        if record.applied_at_step is not None
        else ""
    ) + basis_text(record)
    measured = measured_text(record)
    if record.status == KEPT:
        first = settings_text(record.raced_against) if record.raced else what
        return (
            f"applied {first} {where}{race_text(record)}: measured {measured}; kept. To keep it without autotune: "
            f"{record.keep_line}"
        )
    if record.status == UNDONE:
        return (
            f"applied {what} {where}, switched back {_undone_when(record)}: "
            + (f"measured {measured}; " if measured else "")
            + (record.reason or "not faster beyond noise")
            + "."
        )
    if record.status == APPLIED:
        return (
            f"applied {what} {where}; the fit ended before the check"
            + (f" (so far {measured})" if measured else "")
            + f". To keep it without autotune: {record.keep_line}"
        )
    return f"nothing applied: {record.reason or 'no measured DataLoader setting to apply'}"


def _undone_when(record: AutotuneRecord) -> str:
    if record.undone_at_step is not None:
        return f"after step {record.undone_at_step} (mid-epoch, in epoch {record.undone_at_epoch}; the sampler's position kept)"
    return f"from epoch {record.undone_at_epoch}"
