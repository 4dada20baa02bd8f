"""Autotune in the advice: the line that keeps its setting without autotune, and why loader advice it settled is left out."""

from __future__ import annotations

from typing import Any

from lightning_bottleneck.autotune_record import UNDONE, AutotuneRecord
from lightning_bottleneck.vocabulary import code_line, settings_words

__all__ = ["keep_line", "settled_note"]


def keep_line(settings: dict[str, Any], batch_size: int | None = None) -> str:
    """The line for the user's code: ``DataLoader(dataset, batch_size=32, num_workers=4, persistent_workers=True)``
    (their own arguments stay as they are; these are the ones to add or change)."""
    return code_line(settings, ["dataset"] + ([f"batch_size={batch_size}"] if batch_size else []) + ["..."])


def settled_note(record: AutotuneRecord, left_out: int) -> str:
    """The note saying which DataLoader advice autotune's switch settled (``left_out`` recommendations)."""
    what = settings_words(record.settings)
    if record.status == UNDONE:
        return (
            f"Not advised: {what}. Autotune applied it on this run and switched back "
            f"({record.reason or 'not faster beyond noise'})."
        )
    return (
        f"{left_out} DataLoader advice left out: autotune applied {what} on this run "
        f"({record.status}); the verdict and the loader probe describe the steps before that switch."
    )
