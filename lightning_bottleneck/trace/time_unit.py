"""Is the trace's clock really in microseconds? Judged from the trace's own evidence, repaired when it can be.

Kineto writes microseconds; the reader already converts epoch-nanosecond timestamps (too large to be
microseconds). A trace scaled some other way - milliseconds or relative nanoseconds written as if they
were microseconds - parses fine and would be read as an 11.7 us training step. :func:`check_time_unit`
looks at the durations of the trace's cheapest ops (metadata ops such as ``aten::view``, which take about a
microsecond with the profiler on; else every ``aten::`` op) and, without enough ops, at its step lengths:

* ops far too short (median under :data:`~lightning_bottleneck.thresholds.TIMING_OP_MEDIAN_MIN_US`):
  the clock is milliseconds; every timestamp and duration is multiplied by 1000, with a note;
* ops far too long (median over ``TIMING_OP_MEDIAN_MAX_US``): nanoseconds; divided by 1000, with a note;
* too few ops to tell, but steps outside [``TIMING_STEP_MIN_US``, ``TIMING_STEP_MAX_US``]: the timing is
  implausible and its unit cannot be inferred; :attr:`TimeUnitCheck.doubt` says so and the verdict becomes
  ``unknown`` (never a confident verdict on such a trace).

A repaired trace has :attr:`~lightning_bottleneck.trace.model.Trace.timing_repaired` set, which caps the verdict's
confidence (rules/ranking.py).
Pure numpy: no torch.

Example::

    trace = load_trace(path)          # calls repair_time_unit(trace) itself
    trace.timing_doubt                # None, or why the timing cannot be trusted
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.trace.model import EventKind, Trace

__all__ = ["METADATA_OPS", "TimeUnitCheck", "check_time_unit", "repair_time_unit"]

#: Ops that only dispatch and record (no math, no copy): about a microsecond each with the profiler on.
METADATA_OPS = frozenset(
    {
        "aten::view", "aten::empty", "aten::empty_strided", "aten::as_strided", "aten::t", "aten::detach",
        "aten::reshape", "aten::_reshape_alias", "aten::expand", "aten::transpose", "aten::slice",
        "aten::select", "aten::unsqueeze", "aten::squeeze", "aten::permute", "aten::alias",
        "aten::resolve_conj", "aten::resolve_neg", "aten::result_type", "aten::lift_fresh", "aten::size",
        "aten::stride", "aten::numel", "aten::detach_", "aten::_unsafe_view",
    }
)  # fmt: skip

_UNITS = {1000.0: "milliseconds", 0.001: "nanoseconds"}


@dataclass(frozen=True)
class TimeUnitCheck:
    """What the trace's own timing says about its clock unit."""

    factor: float  # multiply timestamps and durations by this to get microseconds (1.0: already us)
    evidence: str  # what was judged, in words ("" when nothing was)
    doubt: str | None = None  # implausible timing whose unit cannot be inferred

    @property
    def repaired(self) -> bool:
        return self.factor != 1.0


def _op_median(trace: Trace) -> tuple[float, int, str] | None:
    """(median duration, count, what) of the metadata ops, else of every aten op; None when too few."""
    ops = trace.kind == EventKind.CPU_OP
    if not ops.any():
        return None
    names = trace.names
    aten = np.array([n.startswith("aten::") for n in names], dtype=bool)
    meta = np.array([n in METADATA_OPS for n in names], dtype=bool)
    for table, what in ((meta, "metadata ops (aten::view, aten::empty, ...)"), (aten, "aten ops")):
        if not table.any():
            continue
        picked = trace.dur[ops & table[trace.name]]
        if picked.size >= T.TIMING_MIN_OPS:
            return float(np.median(picked)), int(picked.size), what
    return None


def _step_median(trace: Trace) -> tuple[float, int] | None:
    step_ids = [i for i, n in enumerate(trace.names) if n.startswith("ProfilerStep#")]
    if not step_ids:
        return None
    durs = trace.dur[np.isin(trace.name, step_ids) & (trace.kind != EventKind.GPU_ANNOTATION)]
    return (float(np.median(durs)), int(durs.size)) if durs.size else None


def check_time_unit(trace: Trace) -> TimeUnitCheck:
    """Judge the clock unit of ``trace`` from its ops, else its steps (see the module docstring)."""
    op = _op_median(trace)
    if op is not None:
        median, count, what = op
        seen = f"the median of {count} {what} is {median:.3g} us"
        if median < T.TIMING_OP_MEDIAN_MIN_US:
            return TimeUnitCheck(1000.0, seen)
        if median > T.TIMING_OP_MEDIAN_MAX_US:
            return TimeUnitCheck(0.001, seen)
        return TimeUnitCheck(1.0, seen)
    step = _step_median(trace)
    if step is not None:
        median, count = step
        if not T.TIMING_STEP_MIN_US <= median <= T.TIMING_STEP_MAX_US:
            doubt = (
                f"Implausible timing: the median of {count} profiled step(s) is {median:.3g} us "
                f"(a training step takes {T.TIMING_STEP_MIN_US:g} us to an hour) and the trace has too few "
                f"ops ({T.TIMING_MIN_OPS} needed) to infer its clock unit; the timestamps may be in another "
                "unit than microseconds, so no verdict is given on this trace."
            )
            return TimeUnitCheck(1.0, f"the median step is {median:.3g} us", doubt)
    return TimeUnitCheck(1.0, "")


def repair_time_unit(trace: Trace) -> TimeUnitCheck:
    """Check ``trace`` and, when its unit is inferred, rescale its timestamps and durations in place to
    microseconds; a note says what was done. An implausible trace whose unit cannot be inferred gets
    :attr:`~lightning_bottleneck.trace.model.Trace.timing_doubt` and a note."""
    check = check_time_unit(trace)
    if check.repaired:
        unit = _UNITS.get(check.factor, f"x{check.factor:g}")
        trace.ts *= check.factor
        trace.dur *= check.factor
        trace.timing_repaired = True
        trace.notes.append(
            f"Implausible timing repaired: {check.evidence}, so the timestamps are read as {unit}, not "
            f"microseconds, and were converted (x{check.factor:g})."
        )
    elif check.doubt is not None:
        trace.timing_doubt = check.doubt
        trace.notes.append(check.doubt)
    return check
