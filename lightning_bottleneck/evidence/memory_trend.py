"""Memory over the whole run: samples of process RSS or device memory against the training step (typed,
torch-free). Sampled by :class:`lightning_bottleneck.measure.memory_trend.MemorySampler`; read by the rule
:mod:`lightning_bottleneck.rules.memory_creep`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["DEFAULT_EVERY", "MemoryTrend"]

#: Steps between samples at the start of a run: an RSS read every 10 steps is a few us per step on
#: average, under the callback's always-on budget; the interval doubles as the buffer fills.
DEFAULT_EVERY = 10


@dataclass
class MemoryTrend:
    """Samples of memory in MB against the training step, oldest first."""

    source: str = "rss"  # "rss" (process resident memory) | "cuda_allocated"
    steps: list[float] = field(default_factory=list)
    mb: list[float] = field(default_factory=list)
    every: int = DEFAULT_EVERY  # the sampling interval in steps at the end of the run

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["mb"] = [round(x, 3) for x in self.mb]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MemoryTrend:
        return cls(str(d.get("source", "rss")), list(d.get("steps", [])), list(d.get("mb", [])),
                   int(d.get("every", DEFAULT_EVERY)))  # fmt: skip
