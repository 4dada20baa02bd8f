"""lightning-bottleneck: why is this PyTorch Lightning run slow, and which one change makes it faster.

``from lightning_bottleneck import BottleneckCallback`` imports torch and lightning; everything else here
(the report types, the analysis core, the offline CLI) does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning_bottleneck.categories import Category, Severity
from lightning_bottleneck.report import Finding, Recommendation, Report

__version__ = "0.1.0"

__all__ = ["BottleneckCallback", "Category", "Finding", "Recommendation", "Report", "Severity", "__version__"]

if TYPE_CHECKING:
    from lightning_bottleneck.live.callback import BottleneckCallback


def __getattr__(name: str) -> Any:
    if name == "BottleneckCallback":
        from lightning_bottleneck.live.callback import BottleneckCallback

        return BottleneckCallback
    raise AttributeError(f"module 'lightning_bottleneck' has no attribute {name!r}")
