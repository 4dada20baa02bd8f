"""Decoded trace events folded into growable typed columns (the reader's hot path).

Two entry points fill the same columns with the same values: :meth:`Columns.add` takes events as the
stdlib ``json`` module decodes them (dicts of anything), :meth:`Columns.add_events` takes the typed
events of :mod:`~lightning_bottleneck.trace.fast_events` (only the fields read here, each of the one type
a well-formed trace gives it). Whatever a typed event holds, a dict of the same JSON holds the same Python
values, so both give the same columns; the stdlib path also copes with every odd type (a name that is a
number, a timestamp that is a string, a pid that is a list).
"""

from __future__ import annotations

import contextlib
import json
from array import array
from collections import defaultdict
from collections.abc import Sequence
from itertools import compress
from operator import attrgetter
from typing import Any

import numpy as np

from lightning_bottleneck.trace.model import CATEGORY_KINDS, EventKind

__all__ = ["MAX_DEVICE_ID", "MAX_DURATION", "MAX_TIMESTAMP", "Columns"]

#: A duration above this (in the file's unit, before any ns -> µs conversion) is not real timing: 1e15 ns
#: is 11.6 days and 1e15 µs 31 years, longer than any profiled window.
MAX_DURATION = 1e15

#: A timestamp beyond this (either unit) is not real timing: epoch nanoseconds are ~1.7e18 today.
MAX_TIMESTAMP = 1e20

#: Device ordinals above this are not real devices (a node has at most a few dozen; 4096 leaves room):
#: larger values would make per-device tables (``np.bincount``) allocate without bound.
MAX_DEVICE_ID = 4096


class Columns:
    """Growable typed columns plus the name/thread intern tables."""

    def __init__(self) -> None:
        self.kind = array("b")
        self.name = array("i")
        self.thread = array("i")
        self.ts = array("d")
        self.dur = array("d")
        self.correlation = array("q")
        self.external_id = array("q")
        self.stream = array("q")
        self.device = array("q")
        self.names: dict[str, int] = _id_table()
        self.threads: dict[tuple[Any, Any], int] = _id_table()
        self.invalid_timing = 0  # complete events dropped for timing that cannot be real
        self.nonzero_duration = False

    def add(self, events: Sequence[Any]) -> None:
        """Fold a slice of events decoded by ``json`` into the columns (list comprehensions: the hot path)."""
        kinds = CATEGORY_KINDS
        try:
            xs = [e for e in events if type(e) is dict and e.get("ph") == "X" and e.get("cat") in kinds]
        except TypeError:  # an unhashable "cat" (a list or an object) somewhere in the slice
            xs = [
                e
                for e in events
                if type(e) is dict and e.get("ph") == "X" and type(e.get("cat")) is str and e["cat"] in kinds
            ]
        if not xs:
            return
        kind = np.array([kinds[e["cat"]] for e in xs], dtype=np.int8)
        ts = _floats([e.get("ts") for e in xs])
        dur = _floats([e.get("dur") for e in xs])
        names = self.names
        name_ids = [
            names.setdefault(n if type(n) is str else str(n), len(names))
            for n in (e.get("name", "") for e in xs)
        ]
        threads = self.threads
        keys = [(e.get("pid"), e.get("tid")) for e in xs]
        try:
            thread_ids = [threads.setdefault(k, len(threads)) for k in keys]
        except TypeError:  # a pid or tid that is a list or an object
            keys = [(_hashable(p), _hashable(t)) for p, t in keys]
            thread_ids = [threads.setdefault(k, len(threads)) for k in keys]
        args = [a if type(a := e.get("args")) is dict else _NO_ARGS for e in xs]
        corr = _ints([a.get("correlation", -1) for a in args])
        ext = _ints([a.get("External id", a.get("external id", -1)) for a in args])
        dev_kind = kind >= EventKind.KERNEL
        stream = _ints([a.get("stream", -1) if d else -1 for a, d in zip(args, dev_kind)])
        device = _ints([a.get("device", -1) if d else -1 for a, d in zip(args, dev_kind)])
        self._append(kind, ts, dur, name_ids, thread_ids, keys, corr, ext, dev_kind, stream, device)

    def add_events(self, events: Sequence[Any]) -> None:
        """Fold a slice of typed events (:class:`~lightning_bottleneck.trace.fast_events.Event`) into the
        columns: the same values as :meth:`add` gives for the same JSON, read from attributes with C-level
        loops (``map`` over ``attrgetter``, no Python bytecode per event on the common path)."""
        codes = list(map(_KIND_PLUS_ONE.get, map(_PH_CAT, events)))  # kind + 1, None: not kept
        xs = list(compress(events, codes))
        if not xs:
            return
        kind = np.array(list(filter(None, codes)), dtype=np.int8) - 1
        ts = np.array(list(map(_TS, xs)), dtype=np.float64)
        dur = np.array(list(map(_DUR, xs)), dtype=np.float64)
        name_ids = _intern(self.names, list(map(_NAME, xs)))
        keys = list(zip(map(_PID, xs), map(_TID, xs)))
        thread_ids = _intern(self.threads, keys)
        args = list(map(_ARGS, xs))
        corr = _ints(list(map(_CORRELATION, args)))
        upper = list(map(_EXTERNAL_ID, args))  # None where "External id" is absent
        if None in upper:
            upper = [low if up is None else up for up, low in zip(upper, map(_EXTERNAL_ID_LOWER, args))]
        ext = _ints(upper)
        dev_kind = kind >= EventKind.KERNEL
        # every value is an int here: _ints maps each on its own, so reading all and masking is the same
        stream = np.where(dev_kind, _ints(list(map(_STREAM, args))), -1)
        device = np.where(dev_kind, _ints(list(map(_DEVICE, args))), -1)
        self._append(kind, ts, dur, name_ids, thread_ids, keys, corr, ext, dev_kind, stream, device)

    def _append(
        self,
        kind: np.ndarray,
        ts: np.ndarray,
        dur: np.ndarray,
        name_ids: list[int],
        thread_ids: list[int],
        keys: list[tuple[Any, Any]],
        corr: np.ndarray,
        ext: np.ndarray,
        dev_kind: np.ndarray,
        stream: np.ndarray,
        device: np.ndarray,
    ) -> None:
        with np.errstate(invalid="ignore"):
            keep = np.isfinite(ts) & (np.abs(ts) < MAX_TIMESTAMP)
            keep &= np.isfinite(dur) & (dur >= 0) & (dur < MAX_DURATION)
        self.invalid_timing += len(kind) - int(keep.sum())
        if not self.nonzero_duration and bool((dur[keep] > 0).any()):
            self.nonzero_duration = True
        for i in np.flatnonzero(dev_kind & ((stream < 0) | (device < 0))):  # PyTorch 1.8: "tid": "stream 7"
            if stream[i] < 0:
                stream[i] = _trailing_int(keys[i][1])
            if device[i] < 0:
                device[i] = _trailing_int(keys[i][0])
        device[device > MAX_DEVICE_ID] = -1
        names = np.array(name_ids, dtype=np.int32)
        threads = np.array(thread_ids, dtype=np.int32)
        if not keep.all():
            kind, names, threads, ts, dur, corr, ext, stream, device = (
                c[keep] for c in (kind, names, threads, ts, dur, corr, ext, stream, device)
            )
        self.kind.frombytes(kind.tobytes())
        self.name.frombytes(names.tobytes())
        self.thread.frombytes(threads.tobytes())
        self.ts.frombytes(ts.tobytes())
        self.dur.frombytes(dur.tobytes())
        self.correlation.frombytes(corr.tobytes())
        self.external_id.frombytes(ext.tobytes())
        self.stream.frombytes(stream.tobytes())
        self.device.frombytes(device.tobytes())


_NO_ARGS: dict[str, Any] = {}

#: ("X", category) -> kind + 1 (so that every kept event's code is true for ``itertools.compress``).
_KIND_PLUS_ONE: dict[tuple[str, str], int] = {("X", cat): int(k) + 1 for cat, k in CATEGORY_KINDS.items()}
_PH_CAT = attrgetter("ph", "cat")
_TS, _DUR, _NAME, _PID, _TID, _ARGS = (attrgetter(a) for a in ("ts", "dur", "name", "pid", "tid", "args"))
_CORRELATION, _EXTERNAL_ID, _EXTERNAL_ID_LOWER, _STREAM, _DEVICE = (
    attrgetter(a) for a in ("correlation", "external_id", "external_id_lower", "stream", "device")
)


def _id_table() -> defaultdict[Any, int]:
    """A value -> id table in which a value not seen yet gets the next id when looked up (its factory is the
    table's own ``__len__``: no Python code runs per lookup, new or not)."""
    table: defaultdict[Any, int] = defaultdict()
    table.default_factory = table.__len__
    return table


def _intern(table: dict[Any, int], values: list[Any]) -> list[int]:
    """Ids of ``values`` in ``table`` (an :func:`_id_table`), new ones numbered in order of first appearance:
    the same ids as ``[table.setdefault(v, len(table)) for v in values]``, in one C-level pass."""
    return list(map(table.__getitem__, values))


def _hashable(value: Any) -> Any:
    return value if value is None or type(value) in (str, int, float, bool) else json.dumps(value)


def _floats(values: list[Any]) -> np.ndarray:
    """float64 column; anything that is not a number becomes NaN."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        out = np.full(len(values), np.nan)
        for i, v in enumerate(values):
            if isinstance(v, (int, float, str)) and not isinstance(v, bool):
                with contextlib.suppress(ValueError, OverflowError):
                    out[i] = float(v)
        return out


def _ints(values: list[Any]) -> np.ndarray:
    """int64 column; anything that is not an integer becomes -1."""
    try:
        arr = np.array(values, dtype=np.int64)
        if len(values) and isinstance(values[0], float):
            raise TypeError  # floats would be truncated silently
        return arr
    except (TypeError, ValueError, OverflowError):
        return np.array(
            [v if type(v) is int and -(2**63) <= v < 2**63 else -1 for v in values], dtype=np.int64
        )


def _trailing_int(value: Any) -> int:
    if type(value) is int and -(2**63) <= value < 2**63:
        return value
    if isinstance(value, str):
        digits = value.rsplit(" ", 1)[-1]
        if digits.isdigit() and len(digits) < 19:
            return int(digits)
    return -1
