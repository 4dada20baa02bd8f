"""Closed vocabularies shared by analysis, rules, advice and rendering."""

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


class FindingKind(str, Enum):
    """What a finding is about: a bucket (a :class:`Category` value) or a narrower pattern."""

    INPUT = "input"
    SYNC = "sync"
    OVERHEAD = "overhead"
    COMPUTE = "compute"
    MEMORY = "memory"
    COMMUNICATION = "communication"
    STRAGGLER = "straggler"  # one rank holds the others back
    EPOCH_START_STALL = "epoch_start_stall"  # DataLoader worker start-up at each epoch

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, category: Category) -> FindingKind:
        return cls(category.value)


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


#: The categories that are a share of step time, and their breakdown key. ``memory`` is not one (it is
#: judged on the allocator's figures and out-of-memory errors), nor is ``unknown``.
BUCKET_SHARES: dict[Category, Share] = {
    Category.INPUT: Share.DATA_WAIT,
    Category.SYNC: Share.SYNC,
    Category.COMMUNICATION: Share.COMMUNICATION,
    Category.COMPUTE: Share.COMPUTE,
    Category.OVERHEAD: Share.OVERHEAD,
}


class Phase(str, Enum):
    """The stacked segments of one step, in drawing order (bottom to top)."""

    DATA_WAIT = "data_wait"
    FORWARD = "forward"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"
    SYNC = "sync"
    COMMUNICATION = "communication"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value
