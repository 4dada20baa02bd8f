"""Closed vocabularies shared by analysis, rules, advice and rendering (no torch import)."""

from __future__ import annotations

from enum import Enum


class Category(str, Enum):
    """The bottleneck buckets. ``value`` is what the JSON report carries."""

    INPUT = "input"
    SYNC = "sync"
    OVERHEAD = "overhead"
    COMPUTE = "compute"
    MEMORY = "memory"
    COMMUNICATION = "communication"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


class Severity(str, Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    def __str__(self) -> str:
        return self.value

    @property
    def rank(self) -> int:
        return {"high": 0, "medium": 1, "low": 2}[self.value]


class Share(str, Enum):
    """Keys of the report's ``breakdown``: shares of step time. They sum to 1 (``other`` takes the rest)."""

    DATA_WAIT = "data_wait"
    SYNC = "sync"
    COMMUNICATION = "communication"
    COMPUTE = "compute"
    OVERHEAD = "overhead"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value
