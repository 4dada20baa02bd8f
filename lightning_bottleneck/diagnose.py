"""The one analysis entry point: :class:`Evidence` in, :class:`Report` out. Pure (no torch, no lightning).

Both the live callback and ``lightning-bottleneck analyze`` call :func:`diagnose`, so the same trace
yields the same verdict either way; the callback merely adds live-only evidence (timing, sync sites,
memory, configuration).
"""

from __future__ import annotations

from typing import Any

from lightning_bottleneck.advice import advise
from lightning_bottleneck.advice.sync import sync_site_recommendations
from lightning_bottleneck.analysis.breakdown import breakdown_from_summary, breakdown_from_timing
from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.categories import Category
from lightning_bottleneck.evidence import Evidence
from lightning_bottleneck.report import RankSummary, Report, StepTime
from lightning_bottleneck.rules import classify, thresholds
from lightning_bottleneck.rules.sync_sites import sync_share, sync_site_findings


def own_summary(evidence: Evidence) -> TraceSummary | None:
    for s in evidence.summaries:
        if s.rank == evidence.rank:
            return s
    return evidence.summaries[0] if evidence.summaries else None


def rank_breakdown(summary: TraceSummary, extra_sync_share: float = 0.0) -> tuple[dict[str, float], Category]:
    breakdown = breakdown_from_summary(summary, extra_sync_share)
    verdict = classify(breakdown, Evidence(summaries=[summary]), summary.num_steps, from_trace=True)
    return breakdown, verdict.primary


def diagnose(evidence: Evidence) -> Report:
    summary = own_summary(evidence)
    timing = evidence.timing
    notes = list(evidence.notes)

    step_samples = list(timing.step_ms) if timing and timing.step_ms else (summary.step_times_ms if summary else [])
    step_time = StepTime.from_samples(step_samples)
    median_ms = step_time.median if step_time else None
    steps_profiled = summary.num_steps if summary else 0
    if evidence.steps_observed is not None:
        steps_observed = evidence.steps_observed
    elif timing is not None:
        steps_observed = timing.steps
    else:
        steps_observed = steps_profiled

    device = (summary.device if summary else None) or (evidence.config.accelerator if evidence.config else "cpu")
    live_sync = sync_share(evidence.sync_sites, median_ms, steps_observed) if evidence.sync_sites else 0.0

    from_trace = summary is not None and summary.num_steps >= thresholds.PROFILED_STEPS_MIN
    if summary is not None and from_trace:
        breakdown = breakdown_from_summary(summary, live_sync)
    elif timing is not None and timing.steps >= thresholds.TIMED_STEPS_MIN:
        breakdown = breakdown_from_timing(timing.data_wait_share, live_sync)
        notes.append(
            "No profiled window: the breakdown comes from always-on step timing only "
            "(data wait vs the rest); compute/overhead cannot be told apart without a trace."
        )
    else:
        breakdown = breakdown_from_timing(0.0)
        notes.append("Too few training steps were observed to judge the run.")

    verdict = classify(breakdown, evidence, steps_profiled, from_trace)
    primary = verdict.primary
    if not from_trace and not evidence.oom and primary in (Category.COMPUTE, Category.OVERHEAD):
        primary = Category.UNKNOWN
    if not from_trace and (timing is None or timing.steps < thresholds.TIMED_STEPS_MIN) and not evidence.oom:
        primary = Category.UNKNOWN

    findings = verdict.findings + sync_site_findings(evidence.sync_sites, median_ms, device)
    findings.sort(key=lambda f: (f.kind != primary.value, f.severity.rank))
    recommendations = advise(primary, findings, evidence)
    if evidence.sync_sites:
        site_recs = sync_site_recommendations(evidence.sync_sites)
        generic = [r for r in recommendations if r.kind == "sync"]
        recommendations = [r for r in recommendations if r.kind != "sync"]
        insert_at = 0 if primary == Category.SYNC else len(recommendations)
        recommendations[insert_at:insert_at] = site_recs or generic

    ranks = []
    for s in evidence.summaries:
        if s is summary:
            rb, rp = breakdown, primary
        else:
            rb, rp = rank_breakdown(s)
        ranks.append(
            RankSummary(
                rank=s.rank if s.rank is not None else 0,
                primary=rp,
                breakdown=rb,
                step_time_ms=StepTime.from_samples(s.step_times_ms),
            )
        )
    if summary is not None and summary.step_source != "ProfilerStep":
        notes.append(f"Steps: {summary.step_source}")

    return Report(
        primary=primary,
        confidence=verdict.confidence if primary != Category.UNKNOWN else min(verdict.confidence, 0.2),
        steps_observed=steps_observed,
        steps_profiled=steps_profiled,
        step_time_ms=step_time,
        breakdown=breakdown,
        findings=findings,
        recommendations=recommendations,
        ranks=ranks,
        stragglers=[],
        environment=dict(evidence.environment),
        trace_files=list(evidence.trace_files),
        notes=notes,
        metrics=_metrics(evidence, summary, verdict.savings),
    )


def _metrics(evidence: Evidence, summary: TraceSummary | None, savings: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = {"estimated_savings": {k: round(v, 4) for k, v in savings.items()}}
    if summary is not None:
        trace = summary.to_dict()
        trace.pop("step_times_ms", None)
        out["trace"] = trace
    if evidence.timing is not None:
        t = evidence.timing
        out["timing"] = {
            "steps": t.steps,
            "data_wait_share": round(t.data_wait_share, 4),
            "epoch_start_wait_ms": [round(x, 3) for x in t.epoch_start_wait_ms],
            "samples_per_step": t.samples_per_step,
        }
    if evidence.sync_sites:
        out["sync_sites"] = [s.to_dict() for s in evidence.sync_sites]
    return out
