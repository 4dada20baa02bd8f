"""Rules: from evidence to findings and a verdict.

Each bucket's rule is data (:class:`ShareRule`): which breakdown share it reads and the named
thresholds (see :mod:`lightning_bottleneck.thresholds` for their sources). :func:`classify` gives
the findings and a share-based verdict (``share x RECOVERABLE[bucket]``); the reported primary bucket and
confidence come from :mod:`lightning_bottleneck.rules.ranking`, which weighs every candidate fix, measured or
estimated, by the time it saves over the whole run (the same order as ``share x RECOVERABLE`` when nothing
was measured and the run's length is unknown).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.categories import Category, FindingKind, Severity, Share
from lightning_bottleneck.evidence import Evidence
from lightning_bottleneck.report import Finding, StepTime


@dataclass(frozen=True)
class ShareRule:
    """A bucket is a finding when its share of step time reaches ``medium`` (``high`` for severity high)."""

    category: Category
    share: Share
    medium: float
    high: float
    what: str  # "... of step time is <what>"


SHARE_RULES: tuple[ShareRule, ...] = (
    ShareRule(
        Category.INPUT,
        Share.DATA_WAIT,
        T.INPUT_SHARE_MEDIUM,
        T.INPUT_SHARE_HIGH,
        "spent waiting for the DataLoader",
    ),
    ShareRule(
        Category.SYNC,
        Share.SYNC,
        T.SYNC_SHARE_MEDIUM,
        T.SYNC_SHARE_HIGH,
        "spent with the host blocked on the device (synchronisations)",
    ),
    ShareRule(
        Category.COMMUNICATION,
        Share.COMMUNICATION,
        T.COMM_SHARE_MEDIUM,
        T.COMM_SHARE_HIGH,
        "spent waiting on collectives (communication not hidden behind compute)",
    ),
    ShareRule(
        Category.OVERHEAD,
        Share.OVERHEAD,
        T.OVERHEAD_SHARE_MEDIUM,
        T.OVERHEAD_SHARE_HIGH,
        "lost to per-op overhead (Python, dispatch, kernel launches, tiny ops)",
    ),
    ShareRule(
        Category.COMPUTE,
        Share.COMPUTE,
        T.COMPUTE_SHARE_MEDIUM,
        T.COMPUTE_SHARE_HIGH,
        "spent in real compute (the device is busy)",
    ),
)


@dataclass
class Verdict:
    primary: Category
    confidence: float
    breakdown: dict[str, float]
    findings: list[Finding] = field(default_factory=list)
    savings: dict[str, float] = field(default_factory=dict)  # bucket -> estimated recoverable share


def share_findings(breakdown: dict[str, float], step_ms: float | None = None) -> list[Finding]:
    out = []
    for rule in SHARE_RULES:
        share = breakdown.get(str(rule.share), 0.0)
        if share < rule.medium:
            continue
        sev = Severity.HIGH if share >= rule.high else Severity.MEDIUM
        evidence: dict[str, float] = {
            "share": round(share, 4),
            "threshold_medium": rule.medium,
            "threshold_high": rule.high,
        }
        amount = ""
        if step_ms:
            evidence["ms_per_step"] = round(share * step_ms, 3)
            amount = f" ({share * step_ms:.1f} ms of a {step_ms:.1f} ms step)"
        out.append(
            Finding(
                kind=FindingKind.of(rule.category),
                severity=sev,
                summary=f"{share:.0%} of step time{amount} is {rule.what}.",
                evidence=evidence,
            )
        )
    return out


def median_step_ms(evidence: Evidence) -> float | None:
    """Median step time from the always-on timing, else from the trace's steps."""
    samples = list(evidence.timing.step_ms) if evidence.timing and evidence.timing.step_ms else []
    if not samples and evidence.summaries:
        samples = list(evidence.summaries[0].step_times_ms)
    step = StepTime.from_samples(samples)
    return step.median if step else None


def mixed_precision_open(evidence: Evidence) -> bool:
    """Would switching to bf16/fp16 still speed compute up? (Drives how much of compute is recoverable.)"""
    cfg = evidence.config
    if cfg is not None and cfg.precision and "16" in cfg.precision:
        return False
    for s in evidence.summaries[:1]:
        if s.tensor_core_eligible_share is not None and s.tensor_core_share is not None:
            return s.tensor_core_share < s.tensor_core_eligible_share / 2
        if s.device in ("cuda", "rocm"):
            return True
    if cfg is not None:
        return cfg.accelerator == "cuda" or bool(cfg.bf16_supported)
    return True


def best_bucket(savings: dict[str, float]) -> Category:
    """The verdict, defined once: the bucket whose fix saves the most (``savings``: bucket -> saving, any unit);
    ``unknown`` when nothing saves anything. :func:`choose_primary` feeds it the share rules' estimates, the
    ranking (:attr:`~lightning_bottleneck.rules.ranking.Ranking.primary`) every candidate's time saved."""
    positive = {k: v for k, v in savings.items() if v > 0}
    return Category(max(positive, key=lambda k: positive[k])) if positive else Category.UNKNOWN


def margin(savings: dict[str, float]) -> float:
    """How far the best bucket's saving stands above the second's: ``top / (top + second)``, 0.5 (a tie) to 1.0
    (alone); the base of every confidence."""
    ordered = sorted((v for v in savings.values() if v > 0), reverse=True)
    if not ordered:
        return 0.5
    top, second = ordered[0], (ordered[1] if len(ordered) > 1 else 0.0)
    return top / (top + second)


def choose_primary(
    breakdown: dict[str, float], evidence: Evidence | None = None
) -> tuple[Category, dict[str, float]]:
    """The bucket whose fix saves the most, among buckets past their medium threshold."""
    recoverable = dict(T.RECOVERABLE)
    if evidence is not None and not mixed_precision_open(evidence):
        recoverable["compute"] = T.COMPUTE_RECOVERABLE_NO_AMP
    savings: dict[str, float] = {}
    for rule in SHARE_RULES:
        share = breakdown.get(str(rule.share), 0.0)
        if share >= rule.medium:
            savings[rule.category.value] = share * recoverable[rule.category.value]
    return best_bucket(savings), savings


def confidence_of(savings: dict[str, float], steps_profiled: int, from_trace: bool) -> float:
    if not savings:
        return T.UNKNOWN_CONFIDENCE_MAX
    window = min(1.0, steps_profiled / T.CONFIDENT_STEPS) if from_trace else 0.6
    return round(max(0.05, min(0.99, margin(savings) * window)), 3)


def summary_findings(summary: TraceSummary) -> list[Finding]:
    """Narrower findings read off the trace (tensor cores, short kernels, sync APIs)."""
    out: list[Finding] = []
    eligible = summary.tensor_core_eligible_share
    used = summary.tensor_core_share
    if (
        eligible is not None
        and used is not None
        and eligible >= T.TENSOR_CORE_ELIGIBLE_MIN
        and used < eligible / 2
    ):
        out.append(
            Finding(
                kind=FindingKind.COMPUTE,
                severity=Severity.MEDIUM,
                summary=(
                    f"{eligible:.0%} of kernel time is in tensor-core-eligible ops (matmul/conv/attention) "
                    f"but only {used:.0%} runs on tensor cores."
                ),
                evidence={
                    "tensor_core_eligible_share": eligible,
                    "tensor_core_share": used,
                    "fp32_gemm_share": summary.fp32_gemm_share,
                },
            )
        )
    softmax, sdpa = summary.softmax_per_step, summary.sdpa_per_step
    if softmax > 0 and sdpa == 0:
        out.append(
            Finding(
                kind=FindingKind.COMPUTE,
                severity=Severity.LOW,
                summary=(
                    f"{softmax:.0f} softmax op(s) per step and no fused attention: "
                    "hand-written attention materialises the full score matrix."
                ),
                evidence={
                    "softmax_per_step": softmax,
                    "sdpa_per_step": sdpa,
                    "signature": "manual_attention",
                },
            )
        )
    short = summary.short_kernel_share
    if short is not None and summary.kernels_per_step and short >= T.SHORT_KERNEL_SHARE_MEDIUM:
        out.append(
            Finding(
                kind=FindingKind.OVERHEAD,
                severity=Severity.MEDIUM,
                summary=(
                    f"{summary.kernels_per_step:.0f} kernels per step; {summary.short_kernel_share:.0%} of "
                    "kernel time is in very short kernels (launch-bound signature)."
                ),
                evidence={
                    "kernels_per_step": summary.kernels_per_step,
                    "short_kernel_share": summary.short_kernel_share,
                },
            )
        )
    return out


def memory_findings(evidence: Evidence) -> list[Finding]:
    out: list[Finding] = []
    if evidence.oom:
        out.append(
            Finding(
                kind=FindingKind.MEMORY,
                severity=Severity.HIGH,
                summary="Training stopped with an out-of-memory error.",
                evidence={"error": evidence.oom[:300]},
            )
        )
    mem = evidence.memory
    if mem is not None:
        share = mem.peak_reserved_share
        ev = {
            "peak_allocated_bytes": mem.peak_allocated,
            "peak_reserved_bytes": mem.peak_reserved,
            "device_total_bytes": mem.device_total,
            "num_alloc_retries": mem.num_alloc_retries,
        }
        if share is not None and share >= T.MEMORY_PEAK_SHARE_HIGH:
            out.append(
                Finding(
                    FindingKind.MEMORY,
                    Severity.HIGH,
                    f"Peak reserved memory is {share:.0%} of the device's capacity.",
                    ev,
                )
            )
        elif mem.num_alloc_retries >= T.MEMORY_ALLOC_RETRIES_MEDIUM:
            out.append(
                Finding(
                    FindingKind.MEMORY,
                    Severity.MEDIUM,
                    f"The caching allocator had to free and retry {mem.num_alloc_retries} time(s).",
                    ev,
                )
            )
    return out


def input_timing_findings(evidence: Evidence) -> list[Finding]:
    """Epoch-start stalls (worker start-up) seen by the always-on timing, apart from steady-state waits."""
    timing = evidence.timing
    if timing is None or not timing.epoch_start_wait_ms:
        return []
    median_wait = timing.steady_wait_ms()
    stalls = timing.epoch_stalls_ms()
    if not stalls:
        return []
    mean = sum(stalls) / len(stalls)
    return [
        Finding(
            kind=FindingKind.EPOCH_START_STALL,
            severity=Severity.MEDIUM if len(stalls) > 1 else Severity.LOW,
            summary=(
                f"Each epoch starts with a {mean:.0f} ms wait for the first batch (DataLoader worker "
                f"start-up), {len(stalls)} time(s); steady-state waits are {median_wait:.1f} ms."
            ),
            evidence={
                "epoch_start_wait_ms": [round(w, 2) for w in timing.epoch_start_wait_ms],
                "median_steady_wait_ms": round(median_wait, 3),
            },
        )
    ]


def classify(
    breakdown: dict[str, float], evidence: Evidence, steps_profiled: int, from_trace: bool
) -> Verdict:
    """The verdict for one rank: findings from every rule, and the primary bucket."""
    findings = share_findings(breakdown, median_step_ms(evidence))
    for summary in evidence.summaries[:1]:
        findings += summary_findings(summary)
    findings += memory_findings(evidence)
    findings += input_timing_findings(evidence)
    if evidence.oom:
        primary, savings = Category.MEMORY, {"memory": 1.0}
        confidence = 0.95
    else:
        primary, savings = choose_primary(breakdown, evidence)
        confidence = confidence_of(savings, steps_profiled, from_trace)
    findings.sort(key=lambda f: (f.kind != primary.value, f.severity.rank))
    return Verdict(primary, confidence, breakdown, findings, savings)


def final_verdict(verdict: Verdict, evidence: Evidence, from_trace: bool) -> tuple[Category, float]:
    """The reported primary bucket and confidence: what the evidence at hand can support.

    Without a profiled window, timing alone cannot tell compute from overhead, and too few timed steps
    support no verdict at all: both are ``unknown`` (an out-of-memory error always stands). An unknown
    verdict's confidence is capped at :data:`~lightning_bottleneck.thresholds.UNKNOWN_CONFIDENCE_MAX`.
    """
    primary = verdict.primary
    timing = evidence.timing
    if not evidence.oom and not from_trace:
        if primary in (Category.COMPUTE, Category.OVERHEAD):
            primary = Category.UNKNOWN
        if timing is None or timing.steps < T.TIMED_STEPS_MIN:
            primary = Category.UNKNOWN
    confidence = verdict.confidence
    if primary == Category.UNKNOWN:
        confidence = min(confidence, T.UNKNOWN_CONFIDENCE_MAX)
    return primary, confidence
