"""Communication metrics of one rank's trace: what the training thread waits on, and what overlaps.

:func:`lightning_bottleneck.analysis.trace_metrics.summarize_trace` already measures the *wait*
(``cpu_collective`` on CPU traces, ``comm_exposed`` on GPU traces), which is what the breakdown's
``communication`` share uses. This module adds what the verdict's evidence and advice need on top, over the same analysed steps
(:func:`lightning_bottleneck.analysis.steps.analysed_steps`):

* ``collective_ms_per_step``: how long collectives run at all (any thread on CPU: gloo runs DDP's
  all-reduce on its own worker threads; NCCL/RCCL kernels on GPU);
* ``overlap``: the fraction of that time hidden behind the training thread's own work (1 - wait / busy);
* ``wait_in_backward``: the part of the wait inside the backward pass (DDP gradient buckets, FSDP
  reduce-scatter), apart from waits elsewhere (``self.log(..., sync_dist=True)``, barriers, FSDP
  all-gathers in forward);
* per collective kind (all_reduce, all_gather, reduce_scatter, broadcast, barrier, ...): calls and time
  per step;
* ``reducer_copy``: DDP reducer's bucket copies on the training thread (work DDP adds, not a wait).

How a real two-rank gloo DDP trace looks (torch 2.x, CPU): the training thread records
``c10d::allreduce_`` (well under a millisecond: it only enqueues), a gloo worker thread records
``gloo:all_reduce`` spans for the buckets, and the training thread goes idle at the end of backward
until the last bucket is reduced (``torch.distributed.ddp.reducer::copy_bucket_to_grad`` follows).
"""

from __future__ import annotations

import numpy as np

from lightning_bottleneck.analysis.intervals import EMPTY, Intervals, intersect, merge, subtract, union
from lightning_bottleneck.analysis.steps import Steps
from lightning_bottleneck.analysis.summary import CollectiveKindMetrics, CommunicationMetrics
from lightning_bottleneck.trace.model import EventKind, Trace
from lightning_bottleneck.vocabulary import (
    BACKEND_SPAN,
    BACKWARD_LABEL,
    COLLECTIVE,
    DEVICE_COLLECTIVE_ENQUEUE,
    LABEL_PREFIXES,
    REDUCER,
    collective_kind,
    is_comm_kernel,
)

__all__ = ["communication_metrics"]


def _merged(trace: Trace, mask: np.ndarray) -> Intervals:
    return merge(trace.ts[mask], trace.end[mask]) if mask.any() else EMPTY


def communication_metrics(trace: Trace, steps: Steps) -> CommunicationMetrics | None:
    """Communication metrics over ``steps`` (the trace's analysed steps); ``None`` without comms."""
    main = trace.thread == steps.main_thread
    windows = steps.windows
    n_steps = steps.count
    total = steps.total
    if total <= 0 or n_steps == 0:
        return None

    host = np.isin(trace.kind, (EventKind.CPU_OP, EventKind.USER_ANNOTATION))
    device = trace.has_device_events
    coll = host & trace.name_mask(lambda n: bool(COLLECTIVE.search(n)))
    kernel_comm = (trace.kind == EventKind.KERNEL) & trace.name_mask(is_comm_kernel)
    if not coll.any() and not kernel_comm.any():
        return None
    waitable = coll & ~trace.name_mask(lambda n: bool(DEVICE_COLLECTIVE_ENQUEUE.match(n))) if device else coll

    label = trace.name_mask(lambda n: n.startswith(LABEL_PREFIXES))
    work = main & (trace.kind == EventKind.CPU_OP) & ~label & ~coll
    main_idle = subtract(windows, _merged(trace, work))
    blocked = intersect(
        union(_merged(trace, waitable & main), intersect(main_idle, _merged(trace, waitable & ~main))),
        windows,
    )

    if device and kernel_comm.any():
        busy = intersect(_merged(trace, kernel_comm), windows)
    else:
        busy = intersect(_merged(trace, coll), windows)
    backward = _merged(trace, main & host & trace.name_mask(lambda n: n == BACKWARD_LABEL))
    in_backward = intersect(blocked, backward).total
    reducer = intersect(
        _merged(
            trace,
            main & (trace.kind == EventKind.CPU_OP) & trace.name_mask(lambda n: bool(REDUCER.search(n))),
        ),
        windows,
    ).total

    by_kind: dict[str, CollectiveKindMetrics] = {}
    spans = (
        kernel_comm
        if device and kernel_comm.any()
        else host & trace.name_mask(lambda n: bool(BACKEND_SPAN.match(n)))
    )
    if not spans.any():
        spans = coll & main
    span_names = {int(i): collective_kind(trace.names[int(i)]) for i in np.unique(trace.name[spans])}
    in_win = steps.contains(trace.ts)
    for kind in sorted(set(span_names.values())):
        ids = np.array([i for i, k in span_names.items() if k == kind], dtype=np.int64)
        sel = spans & np.isin(trace.name, ids)
        by_kind[kind] = CollectiveKindMetrics(
            calls_per_step=round(float((sel & in_win).sum()) / n_steps, 3),
            ms_per_step=round(intersect(_merged(trace, sel), windows).total / 1000.0 / n_steps, 4),
        )

    wait = blocked.total
    return CommunicationMetrics(
        source="nccl/rccl kernels" if device and kernel_comm.any() else "host collective spans",
        wait_share=round(wait / total, 6),
        wait_ms_per_step=round(wait / 1000.0 / n_steps, 4),
        wait_in_backward_share=round(in_backward / total, 6),
        wait_outside_backward_share=round(max(0.0, wait - in_backward) / total, 6),
        collective_share=round(busy.total / total, 6),
        collective_ms_per_step=round(busy.total / 1000.0 / n_steps, 4),
        overlap=round(max(0.0, 1.0 - wait / busy.total), 4) if busy.total > 0 else None,
        reducer_copy_share=round(reducer / total, 6),
        by_kind=by_kind,
    )
