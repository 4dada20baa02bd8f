"""Turn a per-rank :class:`TraceSummary` into the report's ``breakdown``: shares of step time per bucket.

One function serves the live callback and the offline CLI, so the same trace gives the same shares.
The buckets do not overlap and sum to 1 (``other`` takes the rest).

On a GPU trace the device timeline is the ground truth: device idle time is attributed to the host
reason that explains it (DataLoader wait, then blocking syncs); idle time nothing explains is launch /
Python overhead. On a CPU-only trace the host *is* the device: long ops are compute, short ops and the
gaps between them (Python, dispatch) are overhead.
"""

from __future__ import annotations

from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.categories import Share


def breakdown_from_summary(summary: TraceSummary, extra_sync_share: float = 0.0) -> dict[str, float]:
    """Shares of step time per :class:`Share` key.

    ``extra_sync_share`` is host time blocked in syncs measured live by the sync hooks (not visible in
    a trace on CPU); the larger of it and the trace's sync-API time is used.
    """
    data_wait = _clamp(summary.data_wait)
    sync = _clamp(max(summary.sync_api, extra_sync_share))
    if summary.device_busy is not None:
        idle = _clamp(summary.device_idle if summary.device_idle is not None else 1.0 - summary.device_busy)
        # Host reasons only count while the device has nothing to do, and a blocked host can only explain
        # idle time the device spent waiting for the host to enqueue work (HTA's "host wait" idle).
        host_wait = idle if summary.idle_host_wait is None else min(idle, _clamp(summary.idle_host_wait))
        data_wait = min(data_wait, idle)
        sync = min(sync, max(0.0, host_wait - data_wait))
        comm = _clamp(summary.comm_exposed or 0.0)
        compute = _clamp(
            summary.device_compute if summary.device_compute is not None else summary.device_busy
        )
        compute = min(compute, 1.0 - comm)
        overhead = max(0.0, idle - data_wait - sync)
        shares = {
            Share.DATA_WAIT: data_wait,
            Share.SYNC: sync,
            Share.COMMUNICATION: comm,
            Share.COMPUTE: compute,
            Share.OVERHEAD: overhead,
        }
    else:
        comm = _clamp(summary.cpu_collective)
        rest = max(0.0, 1.0 - data_wait - comm - sync)
        compute = min(_clamp(summary.host_op_long), rest)
        overhead = max(0.0, rest - compute)
        shares = {
            Share.DATA_WAIT: data_wait,
            Share.SYNC: sync,
            Share.COMMUNICATION: comm,
            Share.COMPUTE: compute,
            Share.OVERHEAD: overhead,
        }
    return _normalise(shares)


def breakdown_from_timing(data_wait_share: float, sync_share: float = 0.0) -> dict[str, float]:
    """Best effort when no trace window exists (e.g. ``max_steps`` shorter than the schedule)."""
    data_wait = _clamp(data_wait_share)
    sync = min(_clamp(sync_share), 1.0 - data_wait)
    return _normalise({Share.DATA_WAIT: data_wait, Share.SYNC: sync})


def _normalise(shares: dict[Share, float]) -> dict[str, float]:
    total = sum(shares.values())
    if total > 1.0:
        shares = {k: v / total for k, v in shares.items()}
        total = 1.0
    out = {str(k): 0.0 for k in Share}
    for k, v in shares.items():
        out[str(k)] = float(v)
    out[str(Share.OTHER)] = max(0.0, 1.0 - total)
    return out


def _clamp(x: float | None) -> float:
    if x is None:
        return 0.0
    return min(1.0, max(0.0, float(x)))
