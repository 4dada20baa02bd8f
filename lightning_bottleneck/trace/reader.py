"""Streaming reader for Kineto / Chrome-trace JSON (``.json`` and ``.json.gz``), PyTorch 1.8 to today.

The file is read incrementally (a few MiB of text at a time) and the ``traceEvents`` array is decoded in
slices with the C JSON scanner; each slice's events are folded into compact numpy columns
(:class:`~lightning_bottleneck.trace.model.Trace`) and the dicts are dropped at once. Peak memory is the
columns plus one slice, not the whole document: a 1 GB trace does not need 10 GB of Python dicts.

Both category schemas are accepted (see :data:`~lightning_bottleneck.trace.model.CATEGORY_KINDS`); the
top-level value may be an object with ``traceEvents`` (Kineto) or a bare array of events (Chrome's "JSON
Array Format"). Anything else raises :class:`~lightning_bottleneck.trace.errors.TraceError`.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import zlib
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from lightning_bottleneck.trace.errors import TraceError
from lightning_bottleneck.trace.model import CATEGORY_KINDS, EventKind, Trace

__all__ = ["TRACE_SUFFIXES", "TraceError", "find_trace_files", "load_trace", "load_traces"]

#: File names the reader picks up when given a directory.
TRACE_SUFFIXES = (".json", ".json.gz")

#: Characters of text decoded per slice. 1 Mi characters keep a slice's transient dicts to ~10 MiB while
#: amortising the per-slice cost; measured on the shared traces, 2-4 Mi slices are no faster.
CHUNK_CHARS = 1 << 20

#: Smallest slice worth a bulk decode; below it events are decoded one at a time.
MIN_SLICE_CHARS = 4096

#: Timestamps above this cannot be microseconds (1e17 µs is the year 5138): the file is in nanoseconds.
NS_TIMESTAMP_THRESHOLD = 1e17

_WHITESPACE = " \t\n\r"
_DECODER = json.JSONDecoder()


def find_trace_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand files and directories (searched recursively) into a sorted, de-duplicated list of traces.

    Raises :class:`TraceError` for a path that does not exist or a directory holding no trace file.
    """
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
            if not inside:
                raise TraceError(path, "directory holds no *.json or *.json.gz trace file")
            found.extend(inside)
        elif path.is_file():
            found.append(path)
        else:
            raise TraceError(path, "no such file or directory")
    unique: dict[Path, None] = {}
    for p in found:
        unique.setdefault(p.resolve(), None)
    return list(unique)


def load_traces(paths: Iterable[str | Path]) -> list[Trace]:
    """:func:`find_trace_files` then :func:`load_trace` on each."""
    return [load_trace(p) for p in find_trace_files(paths)]


def load_trace(path: str | Path) -> Trace:
    """Parse one trace file into columns. Raises :class:`TraceError` for anything unusable."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(path, "no such file")
    try:
        with _open_text(path) as fh:
            return _TraceParser(path, fh).parse()
    except TraceError:
        raise
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceError(path, f"truncated or corrupt gzip file ({exc})") from None
    except UnicodeDecodeError:
        raise TraceError(path, "not a text (UTF-8 JSON) file") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None


def _open_text(path: Path) -> TextIO:
    with path.open("rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.GzipFile(path, "rb"), encoding="utf-8")
    return path.open("r", encoding="utf-8")


class _Columns:
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
        self.names: dict[str, int] = {}
        self.threads: dict[tuple[Any, Any], int] = {}

    def add(self, events: Sequence[Any]) -> None:
        """Fold a slice of decoded events into the columns (list comprehensions: the hot path)."""
        kinds = CATEGORY_KINDS
        xs = [e for e in events if type(e) is dict and e.get("ph") == "X" and e.get("cat") in kinds]
        if not xs:
            return
        kind = [kinds[e["cat"]] for e in xs]
        ts = _floats([e.get("ts") for e in xs])
        dur = _floats([e.get("dur") for e in xs])
        keep = ~np.isnan(ts)
        dur[np.isnan(dur)] = 0.0
        names = self.names
        name_ids = [
            names.setdefault(n if type(n) is str else str(n), len(names))
            for n in (e.get("name", "") for e in xs)
        ]
        threads = self.threads
        keys = [(e.get("pid"), e.get("tid")) for e in xs]
        thread_ids = [threads.setdefault(k, len(threads)) for k in keys]
        args = [e.get("args") or _NO_ARGS for e in xs]
        corr = _ints([a.get("correlation", -1) for a in args])
        ext = _ints([a.get("External id", a.get("external id", -1)) for a in args])
        dev_kind = np.asarray(kind, dtype=np.int8) >= EventKind.KERNEL
        stream = _ints([a.get("stream", -1) if d else -1 for a, d in zip(args, dev_kind)])
        device = _ints([a.get("device", -1) if d else -1 for a, d in zip(args, dev_kind)])
        for i in np.flatnonzero(dev_kind & ((stream < 0) | (device < 0))):  # PyTorch 1.8: "tid": "stream 7"
            if stream[i] < 0:
                stream[i] = _trailing_int(keys[i][1])
            if device[i] < 0:
                device[i] = _trailing_int(keys[i][0])
        if not keep.all():
            idx = np.flatnonzero(keep)
            kind = [kind[i] for i in idx]
            name_ids = [name_ids[i] for i in idx]
            thread_ids = [thread_ids[i] for i in idx]
            ts, dur, corr, ext, stream, device = (c[keep] for c in (ts, dur, corr, ext, stream, device))
        self.kind.extend(kind)
        self.name.extend(name_ids)
        self.thread.extend(thread_ids)
        self.ts.frombytes(ts.tobytes())
        self.dur.frombytes(dur.tobytes())
        self.correlation.frombytes(corr.tobytes())
        self.external_id.frombytes(ext.tobytes())
        self.stream.frombytes(stream.tobytes())
        self.device.frombytes(device.tobytes())


_NO_ARGS: dict[str, Any] = {}


def _floats(values: list[Any]) -> np.ndarray:
    """float64 column; anything that is not a number becomes NaN."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        out = np.full(len(values), np.nan)
        for i, v in enumerate(values):
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[i] = v
            elif isinstance(v, str):
                with contextlib.suppress(ValueError):
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
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        digits = value.rsplit(" ", 1)[-1]
        if digits.isdigit():
            return int(digits)
    return -1


class _TraceParser:
    """Incremental parser of one document: a sliding text buffer over the file."""

    def __init__(self, path: Path, fh: TextIO) -> None:
        self.path = path
        self.fh = fh
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.columns = _Columns()
        self.metadata: dict[str, Any] = {}
        self.saw_events = False

    # ---- buffer -----------------------------------------------------------------------------------
    def _fill(self, want: int = CHUNK_CHARS) -> bool:
        """Make sure ``want`` characters are buffered past ``pos`` if the file has them; False at EOF."""
        if self.eof:
            return False
        if self.pos:
            self.buf = self.buf[self.pos :]
            self.pos = 0
        added = False
        while len(self.buf) < want and not self.eof:
            chunk = self.fh.read(CHUNK_CHARS)
            if not chunk:
                self.eof = True
            else:
                self.buf += chunk
                added = True
        return added

    def _peek(self) -> str:
        """Next non-whitespace character ('' at end of file)."""
        while True:
            buf, pos = self.buf, self.pos
            n = len(buf)
            while pos < n and buf[pos] in _WHITESPACE:
                pos += 1
            self.pos = pos
            if pos < n:
                return buf[pos]
            if not self._fill():
                return ""

    def _expect(self, char: str, what: str) -> None:
        got = self._peek()
        if got != char:
            self._fail(what, got)
        self.pos += 1

    def _fail(self, what: str, got: str) -> None:
        if got == "":
            raise TraceError(self.path, f"truncated JSON: file ends where {what} was expected")
        raise TraceError(self.path, f"not a trace: expected {what}, found {got!r}")

    def _value(self) -> Any:
        """Decode one JSON value at ``pos``, reading more text until it is complete."""
        self._peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self._fill(len(self.buf) - self.pos + CHUNK_CHARS):
                    continue
                if exc.pos >= len(self.buf) - 2 or exc.msg.startswith("Unterminated"):
                    raise TraceError(
                        self.path, "truncated JSON: the file ends in the middle of a value"
                    ) from None
                raise TraceError(self.path, f"invalid JSON: {exc.msg}") from None
            self.pos = end
            return value

    # ---- document ---------------------------------------------------------------------------------
    def parse(self) -> Trace:
        first = self._peek()
        if first == "":
            raise TraceError(self.path, "empty file")
        if first == "[":
            self.pos += 1
            self._events()
        elif first == "{":
            self.pos += 1
            self._object()
        else:
            raise TraceError(self.path, "not JSON (it does not start with '{' or '[')")
        if not self.saw_events:
            raise TraceError(self.path, "JSON but not a trace: no 'traceEvents' array")
        return self._build()

    def _object(self) -> None:
        if self._peek() == "}":
            self.pos += 1
            return
        while True:
            if self._peek() != '"':
                self._fail("a key", self._peek())
            key = self._value()
            self._expect(":", "':'")
            if key == "traceEvents":
                self._expect("[", "the traceEvents array")
                self._events()
            else:
                self.metadata[key] = self._value()
            sep = self._peek()
            if sep == ",":
                self.pos += 1
                continue
            if sep == "}":
                self.pos += 1
                return
            self._fail("',' or '}'", sep)

    def _events(self) -> None:
        """Decode the event array whose '[' was just consumed, slice by slice."""
        self.saw_events = True
        add = self.columns.add
        while True:
            char = self._peek()
            if char == ",":
                self.pos += 1
                char = self._peek()
            if char == "]":
                self.pos += 1
                return
            if char == "":
                self._fail("']' closing traceEvents", char)
            if len(self.buf) - self.pos < CHUNK_CHARS // 2:
                self._fill()
            batch = self._slice()
            if batch is not None:
                add(batch)
            else:
                add((self._value(),))

    def _slice(self) -> list[Any] | None:
        """Decode as many whole events as the buffer holds in one C-level call, or None.

        The slice is cut after the last ``},`` in the buffer and decoded as ``[...]``. JSON is parsed
        deterministically left to right, so if that decodes, the cut was a real boundary between events
        (a cut inside a string or a nested object leaves something unclosed and fails).
        """
        buf, pos = self.buf, self.pos
        limit = len(buf)
        for _ in range(3):
            cut = buf.rfind("},", pos, limit)
            if cut < 0 or cut - pos < MIN_SLICE_CHARS:
                return None
            try:
                batch = json.loads("[" + buf[pos : cut + 1] + "]")
            except json.JSONDecodeError:
                limit = cut
                continue
            self.pos = cut + 1
            return batch if isinstance(batch, list) else None
        return None

    def _build(self) -> Trace:
        c = self.columns
        # Zero-copy views over the array.array buffers: the columns exist once, never twice.
        ts = np.frombuffer(c.ts, dtype=np.float64)
        dur = np.frombuffer(c.dur, dtype=np.float64)
        notes: list[str] = []
        if ts.size and float(ts.max()) > NS_TIMESTAMP_THRESHOLD:
            ts /= 1000.0
            dur /= 1000.0
            notes.append("timestamps are in nanoseconds; converted to microseconds")
        names = [""] * len(c.names)
        for n, i in c.names.items():
            names[i] = n if isinstance(n, str) else str(n)
        threads = [(None, None)] * len(c.threads)
        for key, i in c.threads.items():
            threads[i] = key
        return Trace(
            path=self.path,
            metadata=self.metadata,
            names=names,
            threads=threads,
            kind=np.frombuffer(c.kind, dtype=np.int8),
            name=np.frombuffer(c.name, dtype=np.int32),
            thread=np.frombuffer(c.thread, dtype=np.int32),
            ts=ts,
            dur=dur,
            correlation=np.frombuffer(c.correlation, dtype=np.int64),
            external_id=np.frombuffer(c.external_id, dtype=np.int64),
            stream=np.frombuffer(c.stream, dtype=np.int64),
            device=np.frombuffer(c.device, dtype=np.int64),
            notes=notes,
        )
