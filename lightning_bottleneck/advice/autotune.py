"""The line a user puts in their code to keep what autotune applied, without autotune."""

from __future__ import annotations

from typing import Any

__all__ = ["keep_line"]


def keep_line(settings: dict[str, Any], batch_size: int | None = None) -> str:
    """The line for the user's code: ``DataLoader(dataset, batch_size=32, num_workers=4, persistent_workers=True)``
    (their own arguments stay as they are; these are the ones to add or change)."""
    args = ["dataset"] + ([f"batch_size={batch_size}"] if batch_size else []) + ["..."]
    args += [f"{k}={v!r}" for k, v in settings.items()]
    return f"DataLoader({', '.join(args)})"
