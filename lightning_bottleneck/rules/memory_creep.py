"""Memory creep: memory that rises steadily with the training step (a leak: tensors kept in a list,
a growing cache, ``loss`` accumulated with its graph). Pure: a :class:`MemoryTrend` in, findings out.

Example::

    trend = MemoryTrend("rss", steps=[10, 20, 30, ...], mb=[900, 903, 906, ...])
    [f.summary for f in memory_creep_findings(trend)]   # ["memory rises steadily: 300 MB per 1000 steps ..."]
"""

from __future__ import annotations

from lightning_bottleneck.categories import FindingKind, Severity
from lightning_bottleneck.evidence.memory_trend import MemoryTrend
from lightning_bottleneck.report import Finding

__all__ = ["MemoryCreep", "memory_creep_findings"]


class MemoryCreep:
    """A steady rise of process or device memory over the run."""

    #: Fewest samples a slope is judged on (the sampler's default 10-step interval: 80+ steps).
    MIN_SAMPLES = 8
    #: The first samples are warm-up (allocator pools, DataLoader workers' pages, lazy CUDA context,
    #: the profiler's buffers): this share of the samples is left out of the fit.
    WARMUP_SHARE = 0.2
    #: A rise below this many MB over the observed run is allocator noise: glibc's malloc arenas and
    #: torch's CPU caching move RSS by tens of MB on a steady loop (measured here: +-20 MB on the
    #: examples' scenarios); 64 MB is well past that.
    MIN_RISE_MB = 64.0
    #: Slope threshold in MB per 1000 steps: at 10 MB per 1000 steps a 1M-step run gains 10 GB.
    SLOPE_MB_PER_1K_STEPS = 10.0
    #: "Steady": a straight line explains at least this share of the variance (R^2); a step change
    #: (a cache filled once) or noise stays below it.
    MIN_R2 = 0.8
    #: High severity when the projected rise over the whole run reaches this many MB.
    HIGH_PROJECTED_MB = 4096.0

    def __call__(self, trend: MemoryTrend | None, total_steps: int | None = None) -> list[Finding]:
        if trend is None or len(trend.steps) < self.MIN_SAMPLES:
            return []
        skip = int(len(trend.steps) * self.WARMUP_SHARE)
        xs, ys = trend.steps[skip:], trend.mb[skip:]
        if len(xs) < self.MIN_SAMPLES // 2:
            return []
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        syy = sum((y - my) ** 2 for y in ys)
        if sxx <= 0 or syy <= 0:
            return []
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx  # MB per step
        r2 = slope * slope * sxx / syy
        rise = slope * (xs[-1] - xs[0])
        per_1k = slope * 1000.0
        if per_1k < self.SLOPE_MB_PER_1K_STEPS or rise < self.MIN_RISE_MB or r2 < self.MIN_R2:
            return []
        what = "process memory (RSS)" if trend.source == "rss" else f"device memory ({trend.source})"
        projected = per_1k * total_steps / 1000.0 if total_steps else None
        severity = (
            Severity.HIGH
            if projected is not None and projected >= self.HIGH_PROJECTED_MB
            else Severity.MEDIUM
        )
        tail = f"; about {projected:.0f} MB over the whole run" if projected is not None else ""
        return [
            Finding(
                FindingKind.MEMORY,
                severity,
                f"{what} rises steadily: {per_1k:.0f} MB per 1000 steps ({rise:.0f} MB from step "
                f"{xs[0]:.0f} to {xs[-1]:.0f}{tail}); something keeps tensors alive across steps "
                "(a list of outputs or losses, `loss` summed without `.detach()`, a growing cache)",
                {
                    "memory_creep_mb_per_1k_steps": round(per_1k, 2),
                    "rise_mb": round(rise, 1),
                    "r2": round(r2, 3),
                    "source": trend.source,
                    "projected_mb": None if projected is None else round(projected, 1),
                },
            )
        ]


memory_creep_findings = MemoryCreep()
