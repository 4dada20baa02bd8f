"""The torch.distributed side of multi-rank runs: rank zero gathers every rank's summary, never hangs.

Every rank builds a plain-dict payload (its :class:`TraceSummary` as a dict, host, trace files) and
:meth:`RankGather.gather` brings them to global rank zero with ``torch.distributed.gather_object`` on a
**separate gloo group** of the Trainer's process group (``torch.distributed.group.WORLD``, which is what
Lightning's DDP/FSDP strategies initialise):

* gloo, because the payload is a CPU object: no CUDA tensor or NCCL communicator is involved, so the
  same code serves NCCL (GPU) and gloo (CPU) jobs and cannot interfere with in-flight NCCL work;
* created once, at ``on_train_start`` (a point every rank reaches), with the gather's timeout, and
  destroyed at teardown;
* before gathering, ``monitored_barrier(wait_all_ranks=True)`` checks every rank arrived: if one failed
  or is late beyond the timeout, rank zero learns *which* ranks are missing and keeps what it has;
* any error becomes a note and a warning, never an exception into training.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch

from lightning_bottleneck.analysis.ledger import FitLedger
from lightning_bottleneck.analysis.summary import TraceSummary

DEFAULT_TIMEOUT_S = 120.0
GROUP_DESC = "lightning_bottleneck_gather"
_MISSING = re.compile(r"[Rr]anks? ([\d,\s]+?) failed to pass monitoredBarrier")


@dataclass
class GatherResult:
    """What rank zero got: one payload per rank that answered (rank order), and the ranks that did not."""

    payloads: list[dict[str, Any]] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _dist() -> Any:
    if not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return None
    return torch.distributed


class RankGather:
    """Owns the gloo group used to gather per-rank payloads on global rank zero.

    Outside a multi-process run (``torch.distributed`` not initialised, or world size 1) every method
    is a no-op and :meth:`gather` returns this rank's payload alone.
    """

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.timeout_s = float(timeout_s)
        self.rank = 0
        self.world_size = 1
        self._group: Any = None
        self.notes: list[str] = []

    @property
    def active(self) -> bool:
        return self._group is not None

    def setup(self) -> None:
        """Create the gloo group. Collective: every rank must call it (at ``on_train_start``)."""
        dist = _dist()
        if dist is None or self._group is not None:
            return
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        if self.world_size < 2:
            return
        try:
            timeout = timedelta(seconds=self.timeout_s)
            try:  # the description names the group in traces' distributedInfo.pg_config (torch >= 2.3)
                self._group = dist.new_group(backend="gloo", timeout=timeout, group_desc=GROUP_DESC)
            except TypeError:
                self._group = dist.new_group(backend="gloo", timeout=timeout)
        except Exception as err:
            self.notes.append(f"could not create the gloo group for gathering rank summaries: {err}")
            warnings.warn(f"lightning-bottleneck: per-rank gather disabled ({err})", stacklevel=2)
            self._group = None

    def gather(self, payload: dict[str, Any]) -> GatherResult:
        """Send ``payload`` to rank zero. Rank zero returns every rank's payload; other ranks their own.

        Bounded by ``timeout_s`` twice at most (the barrier, then the gather itself).
        """
        result = GatherResult(payloads=[payload], notes=list(self.notes))
        dist = _dist()
        if dist is None or self._group is None:
            return result
        try:
            dist.monitored_barrier(
                group=self._group, timeout=timedelta(seconds=self.timeout_s), wait_all_ranks=True
            )
        except Exception as err:
            result.missing = _missing_from(err, self.world_size, self.rank)
            result.notes.append(
                f"rank {self.rank}: ranks {result.missing} did not reach the end of training within "
                f"{self.timeout_s:.0f} s (failed or late); this report covers the ranks that did."
                if self.rank == 0
                else f"rank {self.rank}: rank zero did not answer the gather barrier ({_first_line(err)})."
            )
            _warn(result.notes[-1])
            return result
        objects: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        try:
            dist.gather_object(payload, objects, dst=0, group=self._group)
        except Exception as err:
            result.missing = [r for r in range(self.world_size) if r != self.rank]
            result.notes.append(
                f"gathering rank summaries failed ({_first_line(err)}); only rank {self.rank}'s is here."
            )
            _warn(result.notes[-1])
            return result
        if objects is not None:
            got = [o for o in objects if isinstance(o, dict)]
            result.payloads = sorted(got, key=lambda o: int(o.get("rank", 0)))
            seen = {int(o.get("rank", -1)) for o in got}
            result.missing = [r for r in range(self.world_size) if r not in seen]
        return result

    def agree(self, flags: list[bool]) -> list[bool]:
        """Each flag set on any rank is set on all (a MAX all-reduce over the gloo group), so that every
        rank runs the same measurement plan; this rank's flags alone when not distributed or on failure.
        Collective: every rank calls it at the same training step."""
        dist = _dist()
        if dist is None or self._group is None:
            return list(flags)
        try:
            t = torch.tensor([int(f) for f in flags], dtype=torch.int64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self._group)
            return [bool(v) for v in t.tolist()]
        except Exception as err:
            self.notes.append(
                f"rank {self.rank}: ranks could not agree on the measurement plan ({_first_line(err)})"
            )
            return list(flags)

    def teardown(self) -> None:
        group, self._group = self._group, None
        dist = _dist()
        if group is None or dist is None:
            return
        with contextlib.suppress(Exception):  # best effort at shutdown
            dist.destroy_process_group(group)


def rank_payload(
    rank: int,
    summary: Any,
    trace_files: list[str],
    busy_note: str | None = None,
    ledger: FitLedger | None = None,
) -> dict[str, Any]:
    """The plain dict one rank sends: its :class:`TraceSummary` (as a dict, or None), its trace files, its fit
    ledger (as a dict, or None) and, when its own busy-machine check said busy, that check's note."""
    return {
        "rank": int(rank),
        "summary": summary.to_dict() if summary is not None else None,
        "trace_files": [str(f) for f in trace_files],
        "busy": busy_note,
        "ledger": ledger.to_dict() if ledger is not None else None,
    }


@dataclass
class MergedRanks:
    """Every rank's summary on global rank zero (this rank's own elsewhere), their trace files, notes."""

    summaries: list[TraceSummary]
    trace_files: list[str] = field(default_factory=list)  # the other ranks' trace files
    notes: list[str] = field(default_factory=list)
    busy_ranks: dict[int, str] = field(default_factory=dict)  # other ranks whose machine was busy: the note
    ledgers: list[FitLedger] = field(default_factory=list)  # every rank's fit ledger (rank order)


def merge_rank_summaries(
    gather: RankGather,
    rank: int,
    own: TraceSummary | None,
    trace_files: list[str],
    busy_note: str | None = None,
    ledger: FitLedger | None = None,
) -> MergedRanks:
    """Every rank sends its summary, its fit ledger and its busy-machine note (if any) to global rank zero
    (a no-op for one process); never raises."""
    mine = [own] if own is not None else []
    my_ledger = [ledger] if ledger is not None else []
    if not gather.active:
        return MergedRanks(mine, ledgers=my_ledger)
    try:
        result = gather.gather(rank_payload(rank, own, trace_files, busy_note, ledger))
    except Exception as err:
        return MergedRanks(
            mine, notes=[f"gathering rank summaries failed: {type(err).__name__}: {err}"], ledgers=my_ledger
        )
    merged = MergedRanks([], notes=list(result.notes))
    if rank != 0:
        merged.summaries, merged.ledgers = mine, my_ledger
        return merged
    for payload in result.payloads:
        if payload.get("rank") == rank:
            merged.summaries += mine
            merged.ledgers += my_ledger
            continue
        if isinstance(payload.get("ledger"), dict):
            merged.ledgers.append(FitLedger.from_dict(payload["ledger"]))
        if isinstance(payload.get("summary"), dict):
            merged.summaries.append(TraceSummary.from_dict(payload["summary"]))
        else:
            merged.notes.append(f"rank {payload.get('rank')} profiled no complete window: no trace summary.")
        merged.trace_files += [str(f) for f in payload.get("trace_files") or []]
        busy = payload.get("busy")
        if isinstance(busy, str) and busy and isinstance(payload.get("rank"), int):
            merged.busy_ranks[int(payload["rank"])] = busy
    return merged


def _missing_from(err: BaseException, world_size: int, rank: int) -> list[int]:
    """Ranks named by a ``monitored_barrier`` failure, else every other rank."""
    match = _MISSING.search(str(err))
    if match:
        ranks = [int(x) for x in re.findall(r"\d+", match.group(1))]
        if ranks:
            return sorted(set(ranks))
    return [r for r in range(world_size) if r != rank]


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200]}" if text else type(err).__name__


def _warn(message: str) -> None:
    warnings.warn(f"lightning-bottleneck: {message}", stacklevel=3)
