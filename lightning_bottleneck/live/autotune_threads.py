"""The training process's intra-op threads that an autotuned loader setting holds (``torch_threads``), and the
user's count back when the setting is undone, loses its race, fails, or the fit ends.

Autotune times worker counts for a step on the CPU with the training process at the threads their workers leave
(:mod:`lightning_bottleneck.measure.host_threads`); the setting it applies then carries that count
(:data:`~lightning_bottleneck.vocabulary.TORCH_THREADS`), set with the loaders and taken back with them.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from lightning_bottleneck.vocabulary import TORCH_THREADS

__all__ = ["HeldThreads"]


class HeldThreads:
    """``torch.set_num_threads`` as a setting asks, and the count before the first change back on :meth:`restore`."""

    def __init__(self) -> None:
        self.before: int | None = None  # the user's count while autotune holds another; None: none held

    def hold(self, settings: dict[str, Any]) -> None:
        """The count ``settings`` carries (the user's own where it carries none)."""
        threads = settings.get(TORCH_THREADS)
        if threads is None:
            self.restore()
            return
        if self.before is None:
            self.before = torch.get_num_threads()
        torch.set_num_threads(int(threads))

    def restore(self) -> None:
        """The user's count back (nothing when none is held); never raises."""
        before, self.before = self.before, None
        if before is not None and torch.get_num_threads() != before:
            with contextlib.suppress(Exception):  # teardown goes on: the count is the process's own to set
                torch.set_num_threads(before)
