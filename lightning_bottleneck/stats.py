"""The summary statistics the package reports over lists of samples (step times, waits), in one place."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["mean", "median", "percentile"]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of an already sorted list (numpy's default method); 0 when empty."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def median(values: Iterable[float]) -> float:
    """The median (mean of the middle two for an even count); 0 when empty."""
    return percentile(sorted(values), 50.0)


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean; 0 when empty."""
    return float(sum(values)) / len(values) if values else 0.0
