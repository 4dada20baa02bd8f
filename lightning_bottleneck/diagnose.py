"""The one analysis entry point: :class:`Evidence` in, :class:`Report` out.

Both the live callback and ``lightning-bottleneck analyze`` call :func:`diagnose`, so the same trace
yields the same verdict either way; the callback merely adds live-only evidence (timing, sync sites,
memory, configuration).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import lightning_bottleneck.thresholds as thresholds
from lightning_bottleneck.advice.autotune import settled_note
from lightning_bottleneck.advice.recommend import advise
from lightning_bottleneck.advice.sync import sync_site_recommendations
from lightning_bottleneck.analysis.breakdown import breakdown_from_summary, breakdown_from_timing
from lightning_bottleneck.analysis.ledger import ledger_metrics
from lightning_bottleneck.analysis.summary import LEGACY_EXTRA_KEYS, TraceSummary
from lightning_bottleneck.categories import Category, FindingKind, Share
from lightning_bottleneck.evidence import Evidence
from lightning_bottleneck.report import Finding, RankSummary, Recommendation, Report, StepTime, ledger_cause
from lightning_bottleneck.rules.autotune import settled
from lightning_bottleneck.rules.communication import with_communication_evidence
from lightning_bottleneck.rules.fit import fit_findings
from lightning_bottleneck.rules.memory_creep import memory_creep_findings
from lightning_bottleneck.rules.ranking import (
    Ranking,
    busy_machine_notes,
    rank,
    ranked_verdict,
    tried_findings,
)
from lightning_bottleneck.rules.shares import classify, final_verdict
from lightning_bottleneck.rules.stragglers import (
    RankWork,
    Straggler,
    explained_by_straggler,
    find_stragglers,
    straggler_confidence,
    straggler_finding,
)
from lightning_bottleneck.rules.sync_sites import sync_share, sync_site_findings
from lightning_bottleneck.stats import mean
from lightning_bottleneck.vocabulary import VIA_SCALAR_READS


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
    """Judge one run from its evidence: the pipeline both the live callback and the offline CLI run.

    1. the step time (always-on timing, else the trace's steps) and this rank's breakdown (from its trace
       summary, else from timing alone);
    2. the rules (:func:`~lightning_bottleneck.rules.shares.classify`, :func:`~lightning_bottleneck.rules.shares.final_verdict`)
       give findings; the ranking (:func:`~lightning_bottleneck.rules.ranking.rank`) weighs every candidate
       fix by the time it saves over the run and gives the primary bucket and a confidence; sync-site,
       communication and tried-but-not-faster evidence join the findings;
    3. the advice (:func:`~lightning_bottleneck.advice.advise`) turns them into recommendations, ordered by
       time saved, each with its measured or estimated speed-up;
    4. with several ranks, the straggler rule decides whose view the job-level verdict takes.

    Example::

        from lightning_bottleneck.analysis.trace_file import summarize_file
        report = diagnose(Evidence(summaries=[summarize_file("rank0.pt.trace.json.gz")]))
        print(report.primary, report.recommendations[0].title)
    """
    summary = own_summary(evidence)
    notes = list(evidence.notes)
    step_time = _step_time(evidence, summary)
    median_ms = step_time.median if step_time else None
    steps_profiled = summary.num_steps if summary else 0
    steps_observed = _steps_observed(evidence, steps_profiled)

    breakdown, from_trace = _breakdown(evidence, summary, median_ms, steps_observed, notes)
    verdict = classify(breakdown, evidence, steps_profiled, from_trace)
    verdict.findings += fit_findings(evidence)  # the rest of the fit (validation, checkpoints, logging, ...)
    ranking = rank(evidence, breakdown, median_ms)
    samples = step_time.samples if step_time else None
    verdict, ranking_notes = ranked_verdict(verdict, ranking, evidence, steps_profiled, from_trace, samples)
    primary, confidence = final_verdict(verdict, evidence, from_trace)
    cause = fit_cause(ranking) if primary == Category.REST_OF_FIT else None
    findings = _findings(
        evidence, summary, verdict.findings + tried_findings(ranking), primary, median_ms, cause
    )
    recommendations = _recommendations(evidence, primary, findings, ranking)
    notes += ranking.notes + ranking_notes  # after the advice: it notes what it left out under the noise band

    ranks = _rank_entries(evidence.summaries, summary, breakdown, primary)
    job = _job_verdict(ranks, summary, evidence, findings, recommendations, primary, breakdown, confidence)
    if summary is not None and summary.step_source != "ProfilerStep":
        notes.append(f"Steps: {summary.step_source}")
    notes += job.notes
    if evidence.autotune is not None:  # what the run's own switch answered is not advised again
        kept = [r for r in job.recommendations if not settled(evidence.autotune, r)]
        if len(kept) < len(job.recommendations):
            notes.append(settled_note(evidence.autotune, len(job.recommendations) - len(kept)))
            job.recommendations = kept

    doubt = next((s.timing_doubt for s in evidence.summaries if s.timing_doubt), None)
    if doubt is not None:  # implausible timing of unknown unit: no verdict, no advice resting on it
        job.primary, job.recommendations = Category.UNKNOWN, []
        job.confidence = min(job.confidence, thresholds.UNKNOWN_CONFIDENCE_MAX)
        if doubt not in notes:
            notes.append(doubt)
    metrics = _metrics(evidence, summary, verdict.savings)
    metrics["ranking"] = ranking.to_dict()
    _measured_metrics(evidence, metrics)
    if job.distributed:
        metrics["distributed"] = job.distributed
    if evidence.memory_trend is not None:  # memory over the whole run (the live callback's sampler)
        metrics["memory_trend"] = evidence.memory_trend.to_dict()
        total = evidence.run_length.total_steps if evidence.run_length is not None else None
        job.findings += memory_creep_findings(evidence.memory_trend, total)
    report = Report(
        primary=job.primary,
        confidence=job.confidence,
        steps_observed=steps_observed,
        steps_profiled=steps_profiled,
        step_time_ms=step_time,
        breakdown=job.breakdown,
        findings=job.findings,
        recommendations=job.recommendations,
        ranks=ranks,
        stragglers=[st.rank for st in job.stragglers],
        environment=dict(evidence.environment),
        trace_files=list(evidence.trace_files),
        notes=notes,
        metrics=metrics,
        autotune=evidence.autotune,
    )
    if evidence.ledger is not None:  # the whole fit by part, and the part a rest-of-fit verdict blames
        cause = ledger_cause(report, evidence.ledger)
        metrics["ledger"] = ledger_metrics(evidence.ledger, evidence.ledger_ranks, cause)
    return report


# ---------------------------------------------------------------------------------------------- stages


def _step_time(evidence: Evidence, summary: TraceSummary | None) -> StepTime | None:
    """From the always-on timing (every step), else from the trace's analysed steps."""
    timing = evidence.timing
    samples = (
        list(timing.step_ms) if timing and timing.step_ms else (summary.step_times_ms if summary else [])
    )
    return StepTime.from_samples(samples)


def _steps_observed(evidence: Evidence, steps_profiled: int) -> int:
    if evidence.steps_observed is not None:
        return evidence.steps_observed
    if evidence.timing is not None:
        return evidence.timing.steps
    return steps_profiled


def _breakdown(
    evidence: Evidence,
    summary: TraceSummary | None,
    median_ms: float | None,
    steps_observed: int,
    notes: list[str],
) -> tuple[dict[str, float], bool]:
    """This rank's shares of step time (from its trace, else from timing) and whether a trace gave them."""
    timing = evidence.timing
    live_sync = sync_share(evidence.sync_sites, median_ms, steps_observed) if evidence.sync_sites else 0.0
    if summary is not None and summary.num_steps >= thresholds.PROFILED_STEPS_MIN:
        return breakdown_from_summary(summary, live_sync), True
    if timing is not None and timing.steps >= thresholds.TIMED_STEPS_MIN:
        notes.append(
            "No profiled window: the breakdown comes from always-on step timing only "
            "(data wait vs the rest); compute/overhead cannot be told apart without a trace."
        )
        return breakdown_from_timing(timing.data_wait_share, live_sync), False
    notes.append("Too few training steps were observed to judge the run.")
    return breakdown_from_timing(0.0), False


def _findings(
    evidence: Evidence,
    summary: TraceSummary | None,
    rule_findings: list[Finding],
    primary: Category,
    median_ms: float | None,
    cause: str | None = None,
) -> list[Finding]:
    """The rules' findings plus one per sync site, the primary bucket's first (for the rest of the fit, the
    cause's part first), with communication metrics."""
    device = (summary.device if summary else None) or (
        evidence.config.accelerator if evidence.config else "cpu"
    )
    findings = rule_findings + sync_site_findings(evidence.sync_sites, median_ms, device)
    findings.sort(
        key=lambda f: (
            _bucket_of(f) != primary.value,
            cause is not None and f.evidence.get("part") != cause,
            f.severity.rank,
        )
    )
    if summary is not None and summary.communication is not None:
        rank = summary.rank if summary.rank is not None else 0
        findings = with_communication_evidence(findings, summary.communication, rank)
    return findings


def fit_cause(ranking: Ranking) -> str | None:
    """The part of the fit (a FitPart value) whose lever saves the most: the rest-of-fit verdict's cause."""
    best = next((c for c in ranking.candidates if c.category == Category.REST_OF_FIT), None)
    return str(best.evidence.get("part")) if best is not None else None


def _bucket_of(finding: Finding) -> str:
    """The bucket a finding counts for (an epoch-start stall is input time)."""
    return Category.INPUT.value if finding.kind == FindingKind.EPOCH_START_STALL else finding.kind.value


def _recommendations(
    evidence: Evidence, primary: Category, findings: list[Finding], ranking: Ranking | None = None
) -> list[Recommendation]:
    """The advice; one recommendation per sync site replaces the generic sync advice (first when sync-bound)."""
    recommendations = advise(primary, findings, evidence, ranking)
    if evidence.sync_sites:
        site_recs = sync_site_recommendations(evidence.sync_sites)
        generic = [r for r in recommendations if r.kind == "sync"]
        if generic and site_recs and generic[0].method is not None:
            g = generic[0]
            site_recs[0].method, site_recs[0].basis = g.method, g.basis
            site_recs[0].saved_ms_per_step, site_recs[0].saved_s = g.saved_ms_per_step, g.saved_s
            site_recs[0].expected_speedup = g.expected_speedup
        recommendations = [r for r in recommendations if r.kind != "sync"]
        insert_at = 0 if primary == Category.SYNC else len(recommendations)
        recommendations[insert_at:insert_at] = site_recs or generic
    return recommendations


def _metrics(evidence: Evidence, summary: TraceSummary | None, savings: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = {"estimated_savings": {k: round(v, 4) for k, v in savings.items()}}
    if summary is not None:
        trace = summary.to_dict()
        trace.pop("step_times_ms", None)
        # schema_version 1 carried these under ``extra``: mirrored there for readers of older reports
        trace["extra"] = {**trace["extra"], **{k: trace[k] for k in LEGACY_EXTRA_KEYS}}
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
        if summary is not None:
            out["sync_cross_check"] = sync_cross_check(evidence, summary)
    return out


def _measured_metrics(evidence: Evidence, out: dict[str, Any]) -> None:
    """What the live callback measured after the window, as the report's raw evidence."""
    if evidence.run_length is not None:
        out["run_length"] = asdict(evidence.run_length)
    if evidence.loader_ladder is not None:
        out["loader_ladder"] = evidence.loader_ladder.to_dict()
    if evidence.trials is not None:
        out["trials"] = evidence.trials.to_dict()
    if evidence.contention is not None:
        out["contention"] = evidence.contention.to_dict()
    if evidence.window_check is not None:
        out["window_check"] = evidence.window_check.to_dict()
    if evidence.fit_probes is not None:
        out["fit_probes"] = evidence.fit_probes.to_dict()


def sync_cross_check(evidence: Evidence, summary: TraceSummary) -> dict[str, Any]:
    """The live hooks' counts beside what the profiled window's trace saw of the same syncs.

    Every ``.item()``-like read runs ``aten::_local_scalar_dense``; on CUDA each blocking call also shows
    as a ``cuda*Synchronize`` or device-to-host copy. A trace count well above the hooks' means syncs the
    hooks cannot see (C++ extensions, libraries calling the runtime directly).
    """
    sites = evidence.sync_sites
    scalar_reads = [s for s in sites if s.via in VIA_SCALAR_READS]
    return {
        "hooks_calls_per_step": round(sum(s.calls_per_step for s in sites), 3),
        "hooks_scalar_reads_per_step": round(sum(s.calls_per_step for s in scalar_reads), 3),
        "hooks_blocked_ms_per_step": round(sum(s.total_ms / s.steps for s in sites if s.steps), 4),
        "trace_local_scalar_dense_per_step": round(summary.local_scalar_dense_per_step, 3),
        "trace_sync_api_calls_per_step": round(summary.sync_api_calls_per_step, 3),
        "trace_sync_api_share": round(summary.sync_api, 4),
    }


# ---------------------------------------------------------------------------------------------- many ranks


@dataclass
class JobVerdict:
    """The report's job-level fields once every rank's summary is in (unchanged for one rank)."""

    primary: Category
    confidence: float
    breakdown: dict[str, float]
    findings: list[Finding]
    recommendations: list[Any]
    stragglers: list[Straggler]
    notes: list[str]
    distributed: dict[str, Any]


def _rank_entries(
    summaries: list[TraceSummary],
    own: TraceSummary | None,
    own_breakdown: dict[str, float],
    own_primary: Category,
) -> list[RankSummary]:
    """One entry per rank summary (rank order); this rank's uses its own, live-corrected breakdown."""
    out: list[RankSummary] = []
    for s in sorted(summaries, key=lambda x: x.rank if x.rank is not None else 0):
        if s is own:
            rb, rp = own_breakdown, own_primary
        elif s.num_steps >= thresholds.PROFILED_STEPS_MIN:
            rb, rp = rank_breakdown(s)
        else:
            rb, rp = breakdown_from_timing(0.0), Category.UNKNOWN
        step = StepTime.from_samples(s.step_times_ms)
        extra: dict[str, Any] = {}
        if len(summaries) > 1 and s.step_times_ms:
            extra["own_work_ms"] = round(RankWork(0, mean(s.step_times_ms), rb).own_ms, 3)
        if s.communication is not None:
            extra["communication"] = s.communication.to_dict()
        if s.host:
            extra["host"] = s.host
        out.append(
            RankSummary(
                rank=s.rank if s.rank is not None else 0,
                primary=rp,
                breakdown=rb,
                step_time_ms=step,
                extra=extra,
            )
        )
    return out


def _job_verdict(
    ranks: list[RankSummary],
    own: TraceSummary | None,
    evidence: Evidence,
    findings: list[Finding],
    recommendations: list[Any],
    primary: Category,
    breakdown: dict[str, float],
    confidence: float,
) -> JobVerdict:
    """Stragglers, the communication evidence, and which rank's view the job-level verdict takes."""
    job = JobVerdict(primary, confidence, breakdown, list(findings), list(recommendations), [], [], {})
    world = (
        evidence.config.world_size
        if evidence.config
        else max([s.world_size or 1 for s in evidence.summaries] or [1])
    )
    if world > 1 or len(ranks) > 1:
        reported = sorted(r.rank for r in ranks)
        missing = [r for r in range(world) if r not in reported]
        job.distributed = {"world_size": world, "ranks_reported": reported, "missing_ranks": missing}
        if missing and world > 1:
            why = (
                "no summary reached rank zero"
                if evidence.config is not None
                else f"no trace of theirs among the inputs, world size {world}"
            )
            job.notes.append(
                f"Ranks {missing} are missing from this report ({why}); "
                "stragglers and per-rank verdicts cover the other ranks only."
            )
    # Shares are window aggregates, so own work uses the window's mean step (not the median).
    means = {
        x.rank: mean(x.step_times_ms) for x in evidence.summaries if x.rank is not None and x.step_times_ms
    }
    work = [RankWork(r.rank, means[r.rank], r.breakdown) for r in ranks if r.rank in means]
    job.stragglers = find_stragglers(work)
    if not job.stragglers or evidence.oom:
        return job
    top = job.stragglers[0]
    top_entry = next(r for r in ranks if r.rank == top.rank)
    waiting = [r for r in ranks if r.rank != top.rank]
    waits = {r.rank: r.breakdown.get(str(Share.COMMUNICATION), 0.0) for r in ranks}
    job.findings = [straggler_finding(st, waits) for st in job.stragglers] + [
        explained_by_straggler(f, top.rank) if f.kind == FindingKind.COMMUNICATION else f
        for f in job.findings
    ]
    if top.cause != Category.UNKNOWN:
        job.primary = top.cause
        job.breakdown = dict(top_entry.breakdown)
        job.confidence = straggler_confidence(top, own.num_steps if own else 0)
        busy = busy_machine_notes(evidence)
        if busy and job.confidence > thresholds.UNCERTAIN_CONFIDENCE_MAX:
            # a descheduled rank looks like a straggler: on a busy machine never a confident one
            job.confidence = thresholds.UNCERTAIN_CONFIDENCE_MAX
            job.notes.append(
                f"Straggler confidence capped at {thresholds.UNCERTAIN_CONFIDENCE_MAX:.0%}: the machine was busy."
            )
        job.notes.append(
            f"Job-level verdict and breakdown are rank {top.rank}'s (the straggler); the other ranks' own "
            f"views are under `ranks` ({', '.join(f'rank {r.rank}: {r.primary.value}' for r in waiting)})."
        )
        recs = advise(
            top.cause, [f for f in job.findings if f.kind != Category.COMMUNICATION.value], evidence
        )
        job.recommendations = [r for r in recs if r.kind != Category.COMMUNICATION.value]
    return job
