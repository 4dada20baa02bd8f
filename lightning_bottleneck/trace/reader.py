"""Streaming reader for Kineto / Chrome-trace JSON (``.json`` and ``.json.gz``), PyTorch 1.8 to today.

The file is read incrementally (a few MiB of text at a time) and the ``traceEvents`` array is decoded in
slices of 1 Mi characters, each by msgspec's schema-driven decoder into typed events holding only the
fields the analysis reads (:mod:`~lightning_bottleneck.trace.fast_events`), or by the C JSON scanner of
``json`` when a slice does not decode that way (odd types, NaN, invalid JSON: the errors and repairs are
``json``'s, as before); each slice's events are folded into compact numpy columns
(:mod:`~lightning_bottleneck.trace.columns`, :class:`~lightning_bottleneck.trace.model.Trace`) and dropped
at once. Peak memory is the columns plus one slice, not the whole document: a 1 GB trace does not need
10 GB of Python dicts. Finding trace files and unwrapping gzip layers: :mod:`~lightning_bottleneck.trace.files`.

Both category schemas are accepted (see :data:`~lightning_bottleneck.trace.model.CATEGORY_KINDS`); the
top-level value may be an object with ``traceEvents`` (Kineto) or a bare array of events (Chrome's "JSON
Array Format"). Anything else raises :class:`~lightning_bottleneck.errors.TraceError`.

Bounded whatever the input: every character is decoded a bounded number of times (the reader is linear in
its input, whatever the spacing between events), one JSON value may hold at most
:data:`MAX_VALUE_CHARS` characters, and events whose timing cannot be real (negative, NaN, infinite or
absurdly long durations) are dropped and counted; when they are most of the file it is an error.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from lightning_bottleneck.errors import TraceError
from lightning_bottleneck.trace.columns import MAX_DEVICE_ID, MAX_DURATION, MAX_TIMESTAMP, Columns
from lightning_bottleneck.trace.files import (
    GZIP_ERRORS,
    MAX_GZIP_LAYERS,
    SNIFF_BYTES,
    TRACE_SUFFIXES,
    check_regular_file,
    find_trace_files,
    path_kind,
    unwrap,
)
from lightning_bottleneck.trace.model import CATEGORY_KINDS, Trace
from lightning_bottleneck.trace.time_unit import repair_time_unit

try:  # the schema-driven decoder (a dependency); without it every slice is decoded by ``json``
    from lightning_bottleneck.trace.fast_events import decode_events
except ImportError:  # pragma: no cover - msgspec missing or broken
    decode_events = None  # type: ignore[assignment]

__all__ = [
    "CATEGORY_KINDS",
    "MAX_DEVICE_ID",
    "MAX_DURATION",
    "MAX_GZIP_LAYERS",
    "MAX_TIMESTAMP",
    "SNIFF_BYTES",
    "TRACE_SUFFIXES",
    "TraceError",
    "find_trace_files",
    "load_trace",
    "path_kind",
]

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

#: ``distributedInfo.world_size`` above this is not a real job (the largest runs are ~1e5 GPUs); such a
#: value is ignored with a note, so nothing lists "missing" ranks by the trillion.
MAX_WORLD_SIZE = 1 << 18

#: Decode slices with msgspec's schema-driven decoder first (``json`` when it cannot); tests turn it off to
#: compare both paths.
FAST_DECODE = True

#: Slices in a row msgspec fails to decode before the rest of the file goes straight to ``json`` (a file of
#: NaNs or odd types is then decoded once, not twice).
FAST_MISSES_BEFORE_STDLIB = 4

_NONWS = re.compile(r"[^ \t\n\r]")
_DECODER = json.JSONDecoder()


def load_trace(path: str | Path) -> Trace:
    """Parse one trace file into columns. Raises :class:`TraceError` for anything unusable."""
    path = Path(path)
    check_regular_file(path)
    try:
        with path.open("rb") as raw:
            # utf-8-sig: a leading byte-order mark (Windows editors write one) is accepted and dropped.
            text = io.TextIOWrapper(unwrap(raw), encoding="utf-8-sig")
            trace = _TraceParser(path, text).parse()
    except TraceError:
        raise
    except GZIP_ERRORS as exc:
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
        self.columns = Columns()
        self.fast = FAST_DECODE and decode_events is not None
        self.fast_misses = 0  # slices in a row that msgspec could not decode
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
                sliced = self._slice()
                if sliced is not None:
                    if pending:
                        add(pending)
                        pending = []
                    fold, batch = sliced
                    fold(batch)
                    continue
            pending.append(self._value())
            if len(pending) >= ONE_BY_ONE_BATCH:
                add(pending)
                pending = []
        if pending:
            add(pending)

    def _slice(self) -> tuple[Callable[[Any], None], list[Any]] | None:
        """Decode as many whole events as the buffer holds in one C-level call: (how to fold them into
        the columns, the events), or None.

        The slice ends at a ``,`` and is decoded as ``[...]``. JSON is parsed deterministically left to
        right, so if that decodes, the cut was a real boundary between events (a cut inside a string or a
        nested value leaves something unclosed and fails). After a few failed cuts, no slice is tried
        again before the end of this buffer (the caller reads it one event at a time): linear time.

        Each slice is first decoded by msgspec into typed events (:mod:`.fast_events`); when it does not
        decode (odd types, NaN, invalid JSON) the same text goes to ``json`` as before, and after
        :data:`FAST_MISSES_BEFORE_STDLIB` such slices in a row the rest of the file goes straight there.
        """
        buf, pos = self.buf, self.pos
        lo = pos + MIN_SLICE_CHARS
        limit = len(buf)
        for _ in range(3):
            cut = _last_cut(buf, lo, limit)
            if cut < 0:
                break
            text = "[" + buf[pos:cut] + "]"
            if self.fast:
                events = decode_events(text)
                if events is not None:
                    self.fast_misses = 0
                    self.pos = cut
                    return self.columns.add_events, events
            try:
                batch = json.loads(text)
            except (ValueError, RecursionError):
                limit = cut  # not a boundary between events (or invalid JSON): no miss of msgspec's
                continue
            if self.fast:  # json took what msgspec did not: values of odd types
                self.fast_misses += 1
                self.fast = self.fast_misses < FAST_MISSES_BEFORE_STDLIB
            self.pos = cut
            return self.columns.add, batch
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
