"""How sure the verdict is: the margin of the best bucket over the second, the window, the steps' spread, and the
caps (an estimated verdict, two close fixes, a busy machine, a window unlike the run, repaired timing)."""

from __future__ import annotations

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.categories import (
    Category,
    Provenance,
)
from lightning_bottleneck.evidence import Evidence
from lightning_bottleneck.rules.candidates import Ranking
from lightning_bottleneck.rules.shares import margin


def confidence(
    ranking: Ranking,
    evidence: Evidence,
    steps_profiled: int,
    from_trace: bool,
    step_samples_ms: list[float] | None = None,
) -> tuple[float, list[str]]:
    """How sure the verdict is, and the notes that explain a cap.

    The base is today's margin x window (``top / (top + second)`` over the buckets' best fixes, scaled down
    for a short window); the step-time spread scales it down; an estimated verdict stays below
    :data:`~.thresholds.ESTIMATED_CONFIDENCE_MAX`; and it is capped at
    :data:`~.thresholds.UNCERTAIN_CONFIDENCE_MAX` when the top two fixes are within
    :data:`~.thresholds.TOP_TWO_RATIO_MIN`, the machine was busy, the window was not representative, or the
    trace's timing had to be repaired.
    """
    savings = ranking.bucket_savings()
    if not any(v > 0 for v in savings.values()):
        return T.UNKNOWN_CONFIDENCE_MAX, []
    window = min(1.0, steps_profiled / T.CONFIDENT_STEPS) if from_trace else 0.6
    if ranking.primary == Category.REST_OF_FIT:
        window = 1.0  # its evidence is the ledger of the whole fit, not the profiled window
    conf = margin(savings) * window
    notes: list[str] = []
    if step_samples_ms and len(step_samples_ms) >= 3:
        s = sorted(step_samples_ms)
        med = s[len(s) // 2]
        p90 = s[min(len(s) - 1, round(0.9 * (len(s) - 1)))]
        spread = p90 / med if med > 0 else 1.0
        if spread > T.SPREAD_RATIO_OK:
            conf *= max(T.SPREAD_FACTOR_MIN, T.SPREAD_RATIO_OK / spread)
    # arithmetic on the ledger's measured seconds is as sure as a measurement
    cap = (
        0.99
        if ranking.top_method() in (Provenance.MEASURED, Provenance.COMPUTED)
        else T.ESTIMATED_CONFIDENCE_MAX
    )
    reasons = []
    ratio = ranking.top_two_ratio()
    if ratio is not None and ratio < T.TOP_TWO_RATIO_MIN:
        reasons.append(f"the two best fixes are within {T.TOP_TWO_RATIO_MIN}x of each other ({ratio:.2f}x)")
    busy = busy_machine_notes(evidence)
    if busy:
        reasons.append("the machine was busy")
        notes += busy
    wc = evidence.window_check
    if wc is not None and not wc.representative:
        reasons.append(f"the window is not representative ({wc.likely_cause or 'unknown cause'})")
        notes.append(f"Window not representative: {wc.note}")
    if any(s.timing_repaired for s in evidence.summaries[:1]):
        reasons.append("the trace's timing had to be repaired")
    if reasons:
        cap = min(cap, T.UNCERTAIN_CONFIDENCE_MAX)
        if conf > cap:
            notes.append(f"Confidence capped at {cap:.0%}: {'; '.join(reasons)}.")
    return round(max(0.05, min(cap, conf)), 3), notes


def busy_machine_notes(evidence: Evidence) -> list[str]:
    """One note per rank whose busy-machine check said busy (this rank's first); empty on a quiet machine."""
    notes = []
    if evidence.contention is not None and evidence.contention.busy:
        notes.append(f"Busy machine while profiling: {evidence.contention.note}")
    for rank, note in sorted(evidence.busy_ranks.items()):
        notes.append(f"Busy machine on rank {rank} while profiling: {note}")
    return notes
