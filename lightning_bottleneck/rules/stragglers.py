"""Straggler rule: which rank holds the others back, and why.

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

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.categories import BUCKET_SHARES, Category, FindingKind, Severity, Share
from lightning_bottleneck.report import Finding
from lightning_bottleneck.rules.shares import choose_primary
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
# ... and when the extra own work explains at least this share of the fastest rank's wait on collectives.
# Otherwise the collectives themselves cost more than the straggler does: removing the straggler's excess
# saves less than the communication levers would (ranking by time saved, rules/ranking.py: accumulation
# alone recovers half of the exposed wait). On a shared 2-core machine a descheduled rank shows 15-20% of
# extra "overhead" while both ranks wait ~90% of the step on a gloo all-reduce (tests/test_distributed.py
# run with a busy core): that is not a straggler.
STRAGGLER_EXPLAINS_WAIT_MIN = 0.5
# The straggler finding is high severity when the others' wait for it would make communication a high
# finding on its own (thresholds.py COMM_SHARE_HIGH, 3x the trigger above).
STRAGGLER_EXCESS_SHARE_HIGH = T.COMM_SHARE_HIGH


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


#: The buckets a rank's own work is made of: every time bucket but communication (the wait itself).
OWN_WORK_BUCKETS = {str(share): cat for cat, share in BUCKET_SHARES.items() if cat != Category.COMMUNICATION}


def own_cause(breakdown: dict[str, float]) -> tuple[Category, float]:
    """The rank's primary bucket with communication taken out, and that bucket's share of its own work.

    The usual rules pick it (the bucket whose fix saves the most); when no bucket passes its threshold
    the largest bucket is named.
    """
    rest = max(1e-9, 1.0 - float(breakdown.get(str(Share.COMMUNICATION), 0.0)))
    own = {k: float(breakdown.get(k, 0.0)) / rest for k in OWN_WORK_BUCKETS}
    primary, _ = choose_primary(own)
    if primary == Category.UNKNOWN:
        key = max(own, key=lambda k: own[k])
        return (OWN_WORK_BUCKETS[key], own[key]) if own[key] > 0 else (Category.UNKNOWN, 0.0)
    key = next(k for k, c in OWN_WORK_BUCKETS.items() if c == primary)
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
        fastest_wait_ms = fastest.step_ms * fastest.wait_share
        explains = (r.own_ms - fastest.own_ms) >= STRAGGLER_EXPLAINS_WAIT_MIN * fastest_wait_ms
        if relative < STRAGGLER_RELATIVE_PERF_THRESHOLD and excess >= STRAGGLER_EXCESS_SHARE_MIN and explains:
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


def straggler_confidence(top: Straggler, steps_profiled: int) -> float:
    """How sure the job-level verdict taken from the straggler is: how much slower it is, scaled down for
    a short window (never below half)."""
    window = min(1.0, steps_profiled / T.CONFIDENT_STEPS)
    return round(max(0.05, min(0.95, (1.0 - top.relative_perf) * max(window, 0.5))), 3)


def straggler_finding(st: Straggler, waits: dict[int, float]) -> Finding:
    """The straggler finding; ``waits``: every rank's communication share (the others wait for it)."""
    waiting = ", ".join(f"rank {r} {w:.0%}" for r, w in sorted(waits.items()) if r != st.rank)
    cause = st.cause.value
    return Finding(
        kind=FindingKind.STRAGGLER,
        severity=Severity.HIGH if st.excess_share >= STRAGGLER_EXCESS_SHARE_HIGH else Severity.MEDIUM,
        summary=(
            f"Rank {st.rank} is a straggler: its own work takes {st.own_ms:.1f} ms per step against "
            f"{st.fastest_own_ms:.1f} ms on rank {st.fastest_rank}, so the other ranks wait for it in "
            f"collectives (communication share: {waiting}). Its own cause is {cause} "
            f"({st.cause_share:.0%} of its own work)."
        ),
        evidence={
            "rank": st.rank,
            "cause": cause,
            "cause_share": round(st.cause_share, 4),
            "own_work_ms": round(st.own_ms, 3),
            "fastest_rank": st.fastest_rank,
            "fastest_own_work_ms": round(st.fastest_own_ms, 3),
            "relative_perf": round(st.relative_perf, 4),
            "excess_share": round(st.excess_share, 4),
            "threshold_relative_perf": STRAGGLER_RELATIVE_PERF_THRESHOLD,
            "threshold_excess_share": STRAGGLER_EXCESS_SHARE_MIN,
        },
    )


def explained_by_straggler(finding: Finding, straggler: int) -> Finding:
    """A communication finding on a waiting rank: the wait is for the straggler, not the network."""
    return Finding(
        kind=finding.kind,
        severity=Severity.LOW,
        summary=finding.summary + f" Most of it is waiting for rank {straggler} (the straggler).",
        evidence=dict(finding.evidence, explained_by_straggler=straggler),
        location=finding.location,
    )
