"""Vectorised interval arithmetic on ``(starts, ends)`` numpy pairs (µs), as torch-tb-profiler's
``range_utils`` and HTA's ``merge_kernel_intervals`` do it, without Python loops over events."""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np


class Intervals(NamedTuple):
    """Sorted, non-overlapping intervals."""

    starts: np.ndarray
    ends: np.ndarray

    @property
    def total(self) -> float:
        return float((self.ends - self.starts).sum())

    def __len__(self) -> int:
        return int(self.starts.shape[0])


EMPTY = Intervals(np.empty(0), np.empty(0))


def merge(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Union of possibly overlapping intervals."""
    if starts.size == 0:
        return EMPTY
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, dtype=np.float64)[order]
    e = np.asarray(ends, dtype=np.float64)[order]
    run_end = np.maximum.accumulate(e)
    new_group = np.empty(s.shape[0], dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > run_end[:-1]
    group_start = np.flatnonzero(new_group)
    group_last = np.append(group_start[1:] - 1, s.shape[0] - 1)
    return Intervals(s[group_start], run_end[group_last])


def _sweep(a: Intervals, b: Intervals, keep: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Intervals:
    na, nb = len(a), len(b)
    if na + nb == 0:
        return EMPTY
    points = np.concatenate([a.starts, a.ends, b.starts, b.ends])
    da = np.concatenate([np.ones(na), -np.ones(na), np.zeros(2 * nb)])
    db = np.concatenate([np.zeros(2 * na), np.ones(nb), -np.ones(nb)])
    order = np.argsort(points, kind="stable")
    points = points[order]
    in_a = np.cumsum(da[order]) > 0
    in_b = np.cumsum(db[order]) > 0
    mask = keep(in_a, in_b)[:-1]
    s, e = points[:-1][mask], points[1:][mask]
    nonempty = e > s
    return merge(s[nonempty], e[nonempty])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    if len(a) == 0 or len(b) == 0:
        return EMPTY
    return _sweep(a, b, lambda x, y: x & y)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    if len(a) == 0 or len(b) == 0:
        return a
    return _sweep(a, b, lambda x, y: x & ~y)


def union(a: Intervals, b: Intervals) -> Intervals:
    return merge(np.concatenate([a.starts, b.starts]), np.concatenate([a.ends, b.ends]))


def covered_before(a: Intervals, x: np.ndarray) -> np.ndarray:
    """Measure of ``a`` on ``(-inf, x]`` for each point of ``x``."""
    x = np.asarray(x, dtype=np.float64)
    if len(a) == 0:
        return np.zeros(x.shape)
    prefix = np.concatenate([[0.0], np.cumsum(a.ends - a.starts)])
    i = np.searchsorted(a.ends, x, side="right")  # intervals wholly before x
    partial = np.zeros(x.shape)
    inside = i < len(a)
    partial[inside] = np.clip(x[inside] - a.starts[i[inside]], 0.0, None)
    return prefix[i] + partial


def per_window_total(a: Intervals, win_starts: np.ndarray, win_ends: np.ndarray) -> np.ndarray:
    """Length of ``a`` inside each window ``[win_starts[i], win_ends[i]]`` (windows may touch)."""
    return covered_before(a, win_ends) - covered_before(a, win_starts)
