"""Findings for individual host-device sync call sites (from the live sync hooks).

One finding of kind ``sync`` per call site, worst first, with ``location`` set to the user's line.
"""

from __future__ import annotations

from typing import Any

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.categories import FindingKind, Severity
from lightning_bottleneck.evidence import SyncSite
from lightning_bottleneck.report import Finding

# A single call site is judged like the whole sync bucket: host time blocked on the device is device
# time lost the same way DataLoader waits are, so the input thresholds apply (torch-tb-profiler's
# ``dataloader_ratio > 0.05``; TensorFlow's profiler: "highly input-bound" above 20%), see
# thresholds.py SYNC_SHARE_MEDIUM / SYNC_SHARE_HIGH.
SYNC_SITE_SHARE_MEDIUM = T.SYNC_SHARE_MEDIUM
SYNC_SITE_SHARE_HIGH = T.SYNC_SHARE_HIGH
# Without a step time the share is unknown; on a GPU a site that syncs at least once per step still
# drains the launch queue every step (CUDA C++ Best Practices Guide, "Asynchronous and Overlapping
# Transfers with Computation": any blocking call stops the host from queuing more work).
SYNC_SITE_EVERY_STEP = 1.0

CPU_NOTE = "costs nothing on CPU; each call will stall a GPU run"


def sync_share(sites: list[SyncSite], step_time_ms: float | None, steps: int | None = None) -> float:
    """Host time blocked in the sites as a share of step time (0 when unknown), capped at 1."""
    if not sites or not step_time_ms or step_time_ms <= 0:
        return 0.0
    n = steps or max((s.steps for s in sites), default=0)
    if n <= 0:
        return 0.0
    blocked = sum(s.total_ms for s in sites)
    return max(0.0, min(1.0, blocked / (n * step_time_ms)))


def site_share(site: SyncSite, step_time_ms: float | None) -> float | None:
    """Blocked time per step at this site as a share of the step time (None when unknown)."""
    if not step_time_ms or step_time_ms <= 0 or site.steps <= 0:
        return None
    return min(1.0, site.total_ms / site.steps / step_time_ms)


def _severity(site: SyncSite, share: float | None, on_device: bool) -> Severity:
    if share is not None and share >= SYNC_SITE_SHARE_HIGH:
        return Severity.HIGH
    if share is not None and share >= SYNC_SITE_SHARE_MEDIUM:
        return Severity.MEDIUM
    if on_device and share is None and site.calls_per_step >= SYNC_SITE_EVERY_STEP:
        return Severity.MEDIUM
    return Severity.LOW


def _what(site: SyncSite) -> str:
    if site.lightning_log:
        metric = site.extra.get("metric")
        name = f"{metric!r}" if metric else "a metric"
        avoid = site.extra.get("avoid", "prog_bar=False")
        return (
            f"Lightning turns the tensor logged as {name} by `self.log` at {site.location} into a Python "
            f"number ({site.via}); `self.log(..., {avoid})` avoids it"
        )
    if site.extra.get("origin") == "lightning":
        return f"Lightning itself syncs at {site.location} ({site.via})"
    return f"{site.location} calls {site.via}"


def _summary(site: SyncSite, share: float | None, on_device: bool, material: bool) -> str:
    rate = f"{site.calls_per_step:.3g}x per step" if site.steps else f"{site.calls} time(s)"
    cost = f"{site.total_ms / site.steps if site.steps else site.total_ms:.3f} ms blocked per step"
    if share is not None:
        cost += f" ({share:.1%} of step time)"
    text = f"{_what(site)}: {rate}, {cost}."
    if not on_device and not material:
        text += f" It {CPU_NOTE}."
    return text


def _evidence(site: SyncSite, share: float | None) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "calls": site.calls,
        "steps": site.steps,
        "calls_per_step": round(site.calls_per_step, 3),
        "total_ms": round(site.total_ms, 4),
        "mean_ms": round(site.mean_ms, 5),
        "share_of_step": round(share, 4) if share is not None else None,
        "via": site.via,
        "lightning_log": site.lightning_log,
    }
    for key in ("vias", "metric", "avoid", "alternatives", "options", "lightning_paths", "origin"):
        if key in site.extra:
            ev[key] = site.extra[key]
    return ev


def sync_site_findings(sites: list[SyncSite], step_time_ms: float | None, device: str) -> list[Finding]:
    """One ``sync`` finding per call site, worst first (severity, then blocked time, then calls).

    On the CPU the calls cost nothing, so a site is low severity with a note that it will stall a GPU
    run, unless its measured share of the step is material (at least ``SYNC_SITE_SHARE_MEDIUM``).
    """
    on_device = device not in ("cpu", "", None)
    out: list[tuple[Severity, SyncSite, Finding]] = []
    for site in sites:
        if site.calls <= 0:
            continue
        share = site_share(site, step_time_ms)
        material = share is not None and share >= SYNC_SITE_SHARE_MEDIUM
        severity = _severity(site, share, on_device) if on_device or material else Severity.LOW
        finding = Finding(
            kind=FindingKind.SYNC,
            severity=severity,
            summary=_summary(site, share, on_device, material),
            evidence=_evidence(site, share),
            location=site.location,
        )
        out.append((severity, site, finding))
    out.sort(key=lambda t: (t[0].rank, -t[1].total_ms, -t[1].calls))
    return [f for _, _, f in out]
