"""Compact, columnar in-memory form of one Kineto / Chrome trace (one rank).

Events are stored as parallel numpy columns with names interned to integer ids, never as a list of
dicts, so a trace costs a few dozen bytes per duration event whatever its JSON looked like (numpy only,
no pandas: cheap to import).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np


class EventKind(IntEnum):
    """What a complete (``ph == "X"``) event is, across both Kineto category schemas."""

    CPU_OP = 0  # "cpu_op" (PyTorch >= 1.10) / "Operator" (1.8-1.9)
    USER_ANNOTATION = 1  # "user_annotation": record_function labels, ProfilerStep#N, DataLoader spans
    RUNTIME = 2  # "cuda_runtime" / "Runtime" / "cuda_driver" (also hip* calls on ROCm)
    KERNEL = 3  # "kernel" / "Kernel"
    MEMCPY = 4  # "gpu_memcpy" / "Memcpy"
    MEMSET = 5  # "gpu_memset" / "Memset"
    GPU_ANNOTATION = 6  # "gpu_user_annotation": record_function ranges projected onto a stream
    CUDA_SYNC = 7  # "cuda_sync": a host wait drawn on the device timeline (not device work)
    PYTHON = 8  # "python_function" (with_stack=True)


#: Kineto category name -> kind. Anything else (``Trace``, flow events, counters) is skipped.
CATEGORY_KINDS: dict[str, EventKind] = {
    "cpu_op": EventKind.CPU_OP,
    "Operator": EventKind.CPU_OP,
    "operator": EventKind.CPU_OP,
    "user_annotation": EventKind.USER_ANNOTATION,
    "cuda_runtime": EventKind.RUNTIME,
    "Runtime": EventKind.RUNTIME,
    "runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.RUNTIME,
    "kernel": EventKind.KERNEL,
    "Kernel": EventKind.KERNEL,
    "gpu_memcpy": EventKind.MEMCPY,
    "Memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET,
    "Memset": EventKind.MEMSET,
    "gpu_user_annotation": EventKind.GPU_ANNOTATION,
    "cuda_sync": EventKind.CUDA_SYNC,
    "python_function": EventKind.PYTHON,
}

#: Kinds that are real work on the device (what "busy" means).
DEVICE_WORK_KINDS = (EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)

_RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE)


@dataclass
class Trace:
    """One trace file, parsed. Timestamps and durations are float microseconds.

    Columns (one entry per kept duration event, in file order):
      ``kind`` (int8, :class:`EventKind`), ``name`` (int32 id into :attr:`names`), ``thread`` (int32 id
      into :attr:`threads`, the interned ``(pid, tid)``), ``ts``/``dur`` (float64 µs), ``correlation``
      (int64, -1 if none: links a runtime call to the device work it launched), ``external_id`` (int64,
      -1 if none: links device work to the CPU op that issued it), ``stream`` and ``device`` (int64, -1 on
      host events).
    """

    path: Path
    metadata: dict[str, Any]
    names: list[str]
    threads: list[tuple[Any, Any]]
    kind: np.ndarray
    name: np.ndarray
    thread: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    correlation: np.ndarray
    external_id: np.ndarray
    stream: np.ndarray
    device: np.ndarray
    notes: list[str] = field(default_factory=list)  # things the reader had to assume
    timing_doubt: str | None = None  # implausible timing whose unit could not be inferred (time_unit.py)
    # the timing had to be repaired: the clock rescaled to microseconds (time_unit.py) or events with impossible
    # timing dropped (reader.py); a verdict on it is never reported as sure as on clean timing
    timing_repaired: bool = False

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    @property
    def end(self) -> np.ndarray:
        return self.ts + self.dur

    def name_ids(self, predicate: Any) -> np.ndarray:
        """Ids of interned names for which ``predicate(name)`` is true (evaluated once per distinct name)."""
        return np.fromiter((i for i, n in enumerate(self.names) if predicate(n)), dtype=np.int32)

    def name_mask(self, predicate: Any) -> np.ndarray:
        """Boolean column: events whose name satisfies ``predicate``."""
        table = np.zeros(len(self.names) + 1, dtype=bool)
        ids = self.name_ids(predicate)
        table[ids] = True
        return table[self.name]

    # ---- metadata -------------------------------------------------------------------------------
    @property
    def distributed_info(self) -> dict[str, Any]:
        info = self.metadata.get("distributedInfo")
        return info if isinstance(info, dict) else {}

    @property
    def rank(self) -> int | None:
        """``distributedInfo.rank``, else a ``rank<N>`` in the file name, else None."""
        rank = self.distributed_info.get("rank")
        if isinstance(rank, int):
            return rank
        match = _RANK_IN_NAME.search(self.path.name)
        return int(match.group(1)) if match else None

    @property
    def world_size(self) -> int | None:
        ws = self.distributed_info.get("world_size")
        return ws if isinstance(ws, int) else None

    @property
    def backend(self) -> str | None:
        backend = self.distributed_info.get("backend")
        return backend if isinstance(backend, str) else None

    @property
    def device_properties(self) -> list[dict[str, Any]]:
        props = self.metadata.get("deviceProperties")
        return [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []

    @property
    def has_device_events(self) -> bool:
        return bool(np.isin(self.kind, DEVICE_WORK_KINDS).any())

    @property
    def is_rocm(self) -> bool:
        names = (p.get("name", "") for p in self.device_properties)
        if any("AMD" in str(n) or "Radeon" in str(n) or "Instinct" in str(n) for n in names):
            return True
        runtime = self.kind == EventKind.RUNTIME
        if not runtime.any():
            return False
        first = self.names[int(self.name[np.flatnonzero(runtime)[0]])]
        return first.startswith("hip")

    @property
    def device_type(self) -> str:
        if not self.has_device_events:
            return "cpu"
        return "rocm" if self.is_rocm else "cuda"
