"""Communication findings carry the rank's measured communication metrics (the advice reads them)."""

from __future__ import annotations

from lightning_bottleneck.analysis.summary import CommunicationMetrics
from lightning_bottleneck.categories import FindingKind
from lightning_bottleneck.report import Finding

__all__ = ["with_communication_evidence"]


def with_communication_evidence(
    findings: list[Finding], comm: CommunicationMetrics, rank: int
) -> list[Finding]:
    """Attach this rank's communication metrics to its communication finding (advice reads them)."""
    out = []
    for f in findings:
        if f.kind == FindingKind.COMMUNICATION and "collective_ms_per_step" not in f.evidence:
            kinds = ", ".join(
                f"{k} {v.calls_per_step:g}/step {v.ms_per_step:.1f} ms" for k, v in comm.by_kind.items()
            )
            overlap = comm.overlap
            detail = f" Rank {rank} waits {comm.wait_ms_per_step:.1f} ms per step"
            if kinds:
                detail += f" ({kinds})"
            if overlap is not None:
                detail += f"; {overlap:.0%} of collective time overlaps its own work"
            f = Finding(
                f.kind, f.severity, f.summary + detail + ".", dict(f.evidence, **comm.to_dict()), f.location
            )
        out.append(f)
    return out
