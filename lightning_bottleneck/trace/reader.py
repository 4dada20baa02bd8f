"""Streaming reader for Kineto / Chrome-trace JSON (``.json`` and ``.json.gz``), PyTorch 1.8 to today.

The file is read incrementally (a few MiB of text at a time) and the ``traceEvents`` array is decoded in
slices with the C JSON scanner; each slice's events are folded into compact numpy columns
(:class:`~lightning_bottleneck.trace.model.Trace`) and the dicts are dropped at once. Peak memory is the
columns plus one slice, not the whole document: a 1 GB trace does not need 10 GB of Python dicts.

Both category schemas are accepted (see :data:`~lightning_bottleneck.trace.model.CATEGORY_KINDS`); the
top-level value may be an object with ``traceEvents`` (Kineto) or a bare array of events (Chrome's "JSON
Array Format"). Anything else raises :class:`~lightning_bottleneck.errors.TraceError`.

Bounded whatever the input: every character is decoded a bounded number of times (the reader is linear in
its input, whatever the spacing between events), one JSON value may hold at most
:data:`MAX_VALUE_CHARS` characters, and events whose timing cannot be real (negative, NaN, infinite or
absurdly long durations) are dropped and counted; when they are most of the file it is an error.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import stat
import zlib
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from lightning_bottleneck.errors import TraceError
from lightning_bottleneck.trace.model import CATEGORY_KINDS, EventKind, Trace
from lightning_bottleneck.trace.time_unit import repair_time_unit

__all__ = ["TRACE_SUFFIXES", "TraceError", "find_trace_files", "load_trace", "path_kind"]

#: File names the reader picks up when given a directory.
TRACE_SUFFIXES = (".json", ".json.gz")

#: Characters of text decoded per slice. 1 Mi characters keep a slice's transient dicts to ~10 MiB while
#: amortising the per-slice cost; measured on the shared traces, 2-4 Mi slices are no faster.
CHUNK_CHARS = 1 << 20

#: Smallest slice worth a bulk decode; below it events are decoded one at a time.
MIN_SLICE_CHARS = 4096

#: Largest single JSON value (one event, one metadata entry). Kineto events are bytes to kilobytes (a
#: templated kernel name runs to a few KiB, an op's recorded input shapes to tens of KiB); 16 Mi characters
#: is a thousand times that, and bounds the memory a gzip bomb of one huge event name can take.
MAX_VALUE_CHARS = 16 << 20

#: Events decoded one at a time are folded into the columns in batches of this many.
ONE_BY_ONE_BATCH = 4096

#: Timestamps above this cannot be microseconds (1e17 µs is the year 5138): the file is in nanoseconds.
NS_TIMESTAMP_THRESHOLD = 1e17

#: A duration above this (in the file's unit, before any ns -> µs conversion) is not real timing: 1e15 ns
#: is 11.6 days and 1e15 µs 31 years, longer than any profiled window.
MAX_DURATION = 1e15

#: A timestamp beyond this (either unit) is not real timing: epoch nanoseconds are ~1.7e18 today.
MAX_TIMESTAMP = 1e20

#: Device ordinals above this are not real devices (a node has at most a few dozen; 4096 leaves room):
#: larger values would make per-device tables (``np.bincount``) allocate without bound.
MAX_DEVICE_ID = 4096

#: ``distributedInfo.world_size`` above this is not a real job (the largest runs are ~1e5 GPUs); such a
#: value is ignored with a note, so nothing lists "missing" ranks by the trillion.
MAX_WORLD_SIZE = 1 << 18

#: Nested gzip layers (a trace gzipped twice) the reader unwraps.
MAX_GZIP_LAYERS = 3

#: Bytes of a file (decompressed) looked at to decide whether a file found in a directory is a trace.
SNIFF_BYTES = 1 << 20

_NONWS = re.compile(r"[^ \t\n\r]")
_DECODER = json.JSONDecoder()


def find_trace_files(paths: Iterable[str | Path], notes: list[str] | None = None) -> list[Path]:
    """Expand files and directories (searched recursively) into a de-duplicated list of traces.

    Files named on the command line are taken as they are. In a directory, ``*.json``/``*.json.gz`` files
    that are not traces (a ``bottleneck_report.json``, a config) are skipped, as are sub-directories and
    files that cannot be read; each skip is appended to ``notes`` when given. Raises :class:`TraceError`
    for a path that does not exist or is not a regular file, or a directory holding no trace file.
    """
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path_kind(path) == "dir":
            found.extend(_traces_in(path, notes))
        else:
            _check_regular_file(path)
            found.append(path)
    unique: dict[Path, None] = {}
    for p in found:
        try:
            unique.setdefault(p.resolve(), None)
        except (OSError, RuntimeError):
            unique.setdefault(p.absolute(), None)
    return list(unique)


def path_kind(path: Path) -> str:
    """'dir', 'file', 'other' (FIFO, device, socket) or 'missing'; TraceError when it cannot be looked at."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:  # an embedded NUL character
        raise TraceError(path, f"not a usable path ({exc})") from None
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


def _check_regular_file(path: Path) -> None:
    kind = path_kind(path)
    if kind == "missing":
        raise TraceError(path, "no such file or directory")
    if kind == "other":
        raise TraceError(path, "not a regular file (a FIFO, socket or device): give a trace file")
    if kind == "dir":
        raise TraceError(path, "is a directory")


def _traces_in(root: Path, notes: list[str] | None) -> list[Path]:
    skipped_dirs: list[str] = []
    candidates: list[Path] = []

    def on_error(exc: OSError) -> None:
        skipped_dirs.append(f"{exc.filename} ({exc.strerror or exc})")

    for dirpath, dirnames, filenames in os.walk(root, onerror=on_error):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(TRACE_SUFFIXES):
                candidates.append(Path(dirpath) / name)
    traces: list[Path] = []
    not_traces: list[str] = []
    unreadable: list[str] = []
    for path in sorted(candidates):
        verdict = _sniff(path)
        if verdict is True:
            traces.append(path)
        elif verdict is False:
            not_traces.append(path.name)
        else:
            unreadable.append(f"{path.name} ({verdict})")
    skips: list[str] = []
    if not_traces:
        skips.append(f"skipped {len(not_traces)} JSON file(s) that are not traces: {_few(not_traces)}")
    if unreadable:
        skips.append(f"skipped {len(unreadable)} unreadable file(s): {_few(unreadable)}")
    if skipped_dirs:
        skips.append(f"skipped {len(skipped_dirs)} unreadable director(ies): {_few(skipped_dirs)}")
    if not traces:
        detail = f" ({'; '.join(skips)})" if skips else ""
        raise TraceError(root, f"directory holds no *.json or *.json.gz trace file{detail}")
    if notes is not None:
        notes.extend(f"{one}." for one in skips)
    return traces


def _few(items: Sequence[str], shown: int = 3) -> str:
    text = ", ".join(items[:shown])
    return text + (f" and {len(items) - shown} more" if len(items) > shown else "")


def _sniff(path: Path) -> bool | str:
    """True for a trace, False for JSON that is none, else the reason the file cannot be read."""
    try:
        if path_kind(path) != "file":
            return "not a regular file"
        with path.open("rb") as raw:
            head = _unwrap(raw).read(SNIFF_BYTES)
    except TraceError as exc:
        return exc.reason
    except (OSError, EOFError, zlib.error) as exc:
        return getattr(exc, "strerror", None) or exc.__class__.__name__
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"["):
        return True
    if b'"traceEvents"' in text:
        return True
    # Not a trace if the whole file was seen, or it is one of our reports; else the reader judges it.
    return not (len(head) < SNIFF_BYTES or b'"schema_version"' in text[:4096])


def load_trace(path: str | Path) -> Trace:
    """Parse one trace file into columns. Raises :class:`TraceError` for anything unusable."""
    path = Path(path)
    _check_regular_file(path)
    try:
        with path.open("rb") as raw:
            # utf-8-sig: a leading byte-order mark (Windows editors write one) is accepted and dropped.
            text = io.TextIOWrapper(_unwrap(raw), encoding="utf-8-sig")
            trace = _TraceParser(path, text).parse()
    except TraceError:
        raise
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceError(path, f"truncated or corrupt gzip file ({exc})") from None
    except UnicodeDecodeError:
        raise TraceError(path, "not a text (UTF-8 JSON) file") from None
    except RecursionError:
        raise TraceError(path, "invalid JSON: nested too deeply") from None
    except MemoryError:
        raise TraceError(path, "too large to read in the memory available") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    repair_time_unit(trace)  # milliseconds or nanoseconds written as microseconds
    return trace


def _unwrap(raw: io.BufferedReader) -> io.BufferedReader:
    """``raw``'s bytes with gzip layers removed: one, several (a trace gzipped twice), or a stream of
    concatenated members. The caller closes ``raw``."""
    stream: Any = raw
    for _ in range(MAX_GZIP_LAYERS):
        if stream.peek(2)[:2] != b"\x1f\x8b":
            break
        stream = io.BufferedReader(gzip.GzipFile(fileobj=stream, mode="rb"), buffer_size=1 << 20)
    return stream


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
        self.invalid_timing = 0  # complete events dropped for timing that cannot be real
        self.nonzero_duration = False

    def add(self, events: Sequence[Any]) -> None:
        """Fold a slice of decoded events into the columns (list comprehensions: the hot path)."""
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
        kind = [kinds[e["cat"]] for e in xs]
        ts = _floats([e.get("ts") for e in xs])
        dur = _floats([e.get("dur") for e in xs])
        with np.errstate(invalid="ignore"):
            keep = np.isfinite(ts) & (np.abs(ts) < MAX_TIMESTAMP)
            keep &= np.isfinite(dur) & (dur >= 0) & (dur < MAX_DURATION)
        self.invalid_timing += len(xs) - int(keep.sum())
        if not self.nonzero_duration and bool((dur[keep] > 0).any()):
            self.nonzero_duration = True
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
        dev_kind = np.asarray(kind, dtype=np.int8) >= EventKind.KERNEL
        stream = _ints([a.get("stream", -1) if d else -1 for a, d in zip(args, dev_kind)])
        device = _ints([a.get("device", -1) if d else -1 for a, d in zip(args, dev_kind)])
        for i in np.flatnonzero(dev_kind & ((stream < 0) | (device < 0))):  # PyTorch 1.8: "tid": "stream 7"
            if stream[i] < 0:
                stream[i] = _trailing_int(keys[i][1])
            if device[i] < 0:
                device[i] = _trailing_int(keys[i][0])
        device[device > MAX_DEVICE_ID] = -1
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


class _TraceParser:
    """Incremental parser of one document: a sliding text buffer over the file.

    Linear in its input: slices are cut at the last ``}``-then-``,`` (whatever whitespace lies between) or
    else the last ``,`` of the buffer, each cut is tried at most a few times, and a buffer in which no cut
    decodes is read one event at a time to its end before slicing is tried again.
    """

    def __init__(self, path: Path, fh: TextIO) -> None:
        self.path = path
        self.fh = fh
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.columns = _Columns()
        self.metadata: dict[str, Any] = {}
        self.saw_events = False
        self.no_cut_before = 0  # buffer offset: no slice is tried until ``pos`` gets here

    # ---- buffer -----------------------------------------------------------------------------------
    def _fill(self, want: int = CHUNK_CHARS) -> bool:
        """Make sure ``want`` characters are buffered past ``pos`` if the file has them; False at EOF."""
        if self.eof:
            return False
        if self.pos:
            self.buf = self.buf[self.pos :]
            self.no_cut_before = max(0, self.no_cut_before - self.pos)
            self.pos = 0
        chunks = [self.buf]
        have = len(self.buf)
        while have < want:
            chunk = self.fh.read(CHUNK_CHARS)
            if not chunk:
                self.eof = True
                break
            chunks.append(chunk)
            have += len(chunk)
        self.buf = "".join(chunks)
        return len(chunks) > 1

    def _peek(self) -> str:
        """Next non-whitespace character ('' at end of file)."""
        while True:
            match = _NONWS.search(self.buf, self.pos)
            if match is not None:
                self.pos = match.start()
                return self.buf[self.pos]
            self.pos = len(self.buf)
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
            pending = len(self.buf) - self.pos
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                incomplete = exc.pos >= len(self.buf) - 2 or exc.msg.startswith("Unterminated")
                if incomplete and self._grow(pending):
                    continue
                if incomplete:
                    raise TraceError(
                        self.path, "truncated JSON: the file ends in the middle of a value"
                    ) from None
                raise TraceError(self.path, f"invalid JSON: {exc.msg} (character {exc.pos})") from None
            except RecursionError:
                raise TraceError(self.path, "invalid JSON: nested too deeply") from None
            except ValueError as exc:  # e.g. an integer of thousands of digits
                raise TraceError(self.path, f"invalid JSON: {exc}") from None
            if end == len(self.buf) and self._grow(pending):
                continue  # a number may go on in the next chunk
            self.pos = end
            return value

    def _grow(self, pending: int) -> bool:
        """Read more for a value of ``pending`` characters so far (doubling: linear); False at EOF."""
        if pending > MAX_VALUE_CHARS:
            raise TraceError(
                self.path,
                f"one JSON value is over {MAX_VALUE_CHARS >> 20} Mi characters: not a trace this tool "
                "reads (trace events are kilobytes)",
            )
        return self._fill(min(max(2 * pending, CHUNK_CHARS), MAX_VALUE_CHARS + CHUNK_CHARS))

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
        if self._peek() != "":
            raise TraceError(self.path, "invalid JSON: text after the end of the JSON document")
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
        pending: list[Any] = []
        first = True
        while True:
            char = self._peek()
            if char == "]":
                self.pos += 1
                break
            if not first:
                if char != ",":
                    self._fail("',' or ']' in traceEvents", char)
                self.pos += 1
                char = self._peek()
                if char == "]":  # a trailing comma, as some writers leave
                    self.pos += 1
                    break
            first = False
            if char == "":
                self._fail("']' closing traceEvents", char)
            if self.pos >= self.no_cut_before:
                if len(self.buf) - self.pos < CHUNK_CHARS // 2:
                    self._fill()
                batch = self._slice()
                if batch is not None:
                    if pending:
                        add(pending)
                        pending = []
                    add(batch)
                    continue
            pending.append(self._value())
            if len(pending) >= ONE_BY_ONE_BATCH:
                add(pending)
                pending = []
        if pending:
            add(pending)

    def _slice(self) -> list[Any] | None:
        """Decode as many whole events as the buffer holds in one C-level call, or None.

        The slice ends at a ``,`` and is decoded as ``[...]``. JSON is parsed deterministically left to
        right, so if that decodes, the cut was a real boundary between events (a cut inside a string or a
        nested value leaves something unclosed and fails). After a few failed cuts, no slice is tried
        again before the end of this buffer (the caller reads it one event at a time): linear time.
        """
        buf, pos = self.buf, self.pos
        lo = pos + MIN_SLICE_CHARS
        limit = len(buf)
        for _ in range(3):
            cut = _last_cut(buf, lo, limit)
            if cut < 0:
                break
            try:
                batch = json.loads("[" + buf[pos:cut] + "]")
            except (ValueError, RecursionError):
                limit = cut
                continue
            self.pos = cut
            return batch
        self.no_cut_before = len(buf)
        return None

    def _build(self) -> Trace:
        c = self.columns
        # Zero-copy views over the array.array buffers: the columns exist once, never twice.
        ts = np.frombuffer(c.ts, dtype=np.float64)
        dur = np.frombuffer(c.dur, dtype=np.float64)
        notes: list[str] = []
        kept = int(ts.size)
        if c.invalid_timing:
            what = (
                f"{c.invalid_timing} event(s) have missing, negative, NaN, infinite or implausible "
                f"(over {MAX_DURATION:g}) timestamps or durations"
            )
            if c.invalid_timing >= kept:
                raise TraceError(self.path, f"invalid timing: {what}, against {kept} valid")
            notes.append(f"{what}: dropped")
        if kept and not c.nonzero_duration:
            raise TraceError(self.path, "invalid timing: every event has a zero duration")
        if ts.size and float(ts.max()) > NS_TIMESTAMP_THRESHOLD:
            ts /= 1000.0
            dur /= 1000.0
            notes.append("timestamps are in nanoseconds; converted to microseconds")
        self._check_distributed_info(notes)
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
            timing_repaired=bool(c.invalid_timing),
        )

    def _check_distributed_info(self, notes: list[str]) -> None:
        """Drop a ``rank``/``world_size`` that cannot be real (bool, negative, astronomically large)."""
        info = self.metadata.get("distributedInfo")
        if not isinstance(info, dict):
            return
        info = dict(info)
        world = info.get("world_size")
        if "world_size" in info and not (type(world) is int and 1 <= world <= MAX_WORLD_SIZE):
            notes.append(f"distributedInfo.world_size {_short(world)} is not a usable world size: ignored")
            del info["world_size"]
            world = None
        rank = info.get("rank")
        top = world if type(world) is int else MAX_WORLD_SIZE
        if "rank" in info and not (type(rank) is int and 0 <= rank < top):
            notes.append(f"distributedInfo.rank {_short(rank)} is not a usable rank: ignored")
            del info["rank"]
        self.metadata["distributedInfo"] = info


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _last_cut(buf: str, lo: int, limit: int) -> int:
    """Index of the last ``,`` in ``buf[lo:limit]`` that follows a ``}`` (whitespace allowed between),
    else of the last ``,`` at all; -1 if none. Looks at a bounded number of ``}``."""
    end = limit
    for _ in range(64):
        brace = buf.rfind("}", lo, end)
        if brace < 0:
            break
        after = _NONWS.search(buf, brace + 1, limit)
        if after is not None and buf[after.start()] == ",":
            return after.start()
        end = brace
    return buf.rfind(",", lo, limit)
