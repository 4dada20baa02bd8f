"""Straggler rule: which rank holds the others back, and why. Pure (no torch, no lightning).

In synchronous data-parallel training every rank's step lasts as long as the slowest rank's: a rank
that finishes its own work early waits for the others inside the next collective. So a rank's step time
says nothing; its **own work per step** does:

    own_ms = step_ms x (1 - communication share)

that is, the step minus the time the training thread waited on collectives. Its own data loading,
compute, overhead and syncs count (they are what keeps the others waiting). The straggler is the rank
with the most own work; its **own cause** is its primary bucket once communication is taken out (the
communication it shows is other ranks waiting, or it waiting on nobody).
"""

from __future__ import annotations

from dataclasses import dataclass

from lightning_bottleneck.categories import Category, Share
from lightning_bottleneck.rules import choose_primary
from lightning_bottleneck.stats import median

# A rank is a straggler when its relative performance score, the fastest rank's own work divided by
# this rank's own work, is below this value. Source: NVIDIA Resiliency Extension straggler detection
# (nvidia_resiliency_ext.straggler: "relative performance score: the best-performing rank is the
# reference", 0.5 = twice as slow as the fastest); 0.7 is the default ``gpu_relative_perf_threshold``
# of its PyTorch Lightning StragglerDetectionCallback and NeMo's StragglerDetectionConfig.
STRAGGLER_RELATIVE_PERF_THRESHOLD = 0.7
# ... and when the extra own work it costs the fastest rank is at least this share of the step time,
# i.e. that rank then waits on collectives at least this much. Same trigger as the communication
# finding (torch-tb-profiler recommends acting on communication above 10% of step time,
# torch_tb_profiler/profiler/data.py ``communication_ratio > 0.1``); below it the difference is noise
# that no one would fix.
STRAGGLER_EXCESS_SHARE_MIN = 0.10


@dataclass(frozen=True)
class RankWork:
    """What the rule needs from one rank: its mean step time over the profiled window and its breakdown.

    The mean, not the median: the breakdown's shares are aggregates over the same window.
    """

    rank: int
    step_ms: float
    breakdown: dict[str, float]

    @property
    def wait_share(self) -> float:
        return float(self.breakdown.get(str(Share.COMMUNICATION), 0.0))

    @property
    def own_ms(self) -> float:
        return self.step_ms * max(0.0, 1.0 - self.wait_share)


@dataclass(frozen=True)
class Straggler:
    rank: int
    own_ms: float
    fastest_rank: int
    fastest_own_ms: float
    relative_perf: float  # fastest own work / this rank's own work (1.0 = as fast as the fastest)
    excess_share: float  # (own - fastest own) / the job's median step time
    cause: Category  # the straggler's own primary bucket, communication excluded
    cause_share: float  # that bucket's share of the straggler's step


_BUCKETS = {
    str(Share.DATA_WAIT): Category.INPUT,
    str(Share.SYNC): Category.SYNC,
    str(Share.OVERHEAD): Category.OVERHEAD,
    str(Share.COMPUTE): Category.COMPUTE,
}


def own_cause(breakdown: dict[str, float]) -> tuple[Category, float]:
    """The rank's primary bucket with communication taken out, and that bucket's share of its own work.

    The usual rules pick it (the bucket whose fix saves the most); when no bucket passes its threshold
    the largest bucket is named.
    """
    rest = max(1e-9, 1.0 - float(breakdown.get(str(Share.COMMUNICATION), 0.0)))
    own = {k: float(breakdown.get(k, 0.0)) / rest for k in _BUCKETS}
    primary, _ = choose_primary(own)
    if primary == Category.UNKNOWN:
        key = max(own, key=lambda k: own[k])
        return (_BUCKETS[key], own[key]) if own[key] > 0 else (Category.UNKNOWN, 0.0)
    key = next(k for k, c in _BUCKETS.items() if c == primary)
    return primary, own[key]


def find_stragglers(ranks: list[RankWork]) -> list[Straggler]:
    """Ranks that hold the others back, slowest first. Needs two or more ranks with a step time."""
    usable = [r for r in ranks if r.step_ms > 0]
    if len(usable) < 2:
        return []
    fastest = min(usable, key=lambda r: r.own_ms)
    job_step = median(r.step_ms for r in usable)
    out: list[Straggler] = []
    for r in usable:
        if r is fastest or r.own_ms <= 0:
            continue
        relative = fastest.own_ms / r.own_ms
        excess = (r.own_ms - fastest.own_ms) / job_step if job_step > 0 else 0.0
        if relative < STRAGGLER_RELATIVE_PERF_THRESHOLD and excess >= STRAGGLER_EXCESS_SHARE_MIN:
            cause, share = own_cause(r.breakdown)
            out.append(
                Straggler(
                    rank=r.rank,
                    own_ms=r.own_ms,
                    fastest_rank=fastest.rank,
                    fastest_own_ms=fastest.own_ms,
                    relative_perf=relative,
                    excess_share=excess,
                    cause=cause,
                    cause_share=share,
                )
            )
    out.sort(key=lambda s: -s.own_ms)
    return out
