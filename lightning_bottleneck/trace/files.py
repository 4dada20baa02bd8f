"""Finding trace files: a directory searched recursively, what is a trace, gzip layers unwrapped.

Split from :mod:`~lightning_bottleneck.trace.reader` (which re-exports the public names); torch-free.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lightning_bottleneck.errors import TraceError

_GzipFile: Any = gzip.GzipFile
_IsalError: Any = zlib.error
try:  # ISA-L's inflate (python-isal): the gzip module's API and exceptions, ~1.7x its decompression speed
    from isal import igzip, isal_zlib

    _GzipFile, _IsalError = igzip.IGzipFile, isal_zlib.error
except ImportError:  # pragma: no cover - isal is a dependency; a platform without its wheel uses the stdlib
    pass

__all__ = [
    "GZIP_ERRORS",
    "MAX_GZIP_LAYERS",
    "SNIFF_BYTES",
    "TRACE_SUFFIXES",
    "find_trace_files",
    "path_kind",
    "unwrap",
]

#: What a truncated or corrupt gzip stream raises, with either decompressor (isal raises the gzip module's
#: ``BadGzipFile`` and ``EOFError`` but its own ``error`` where zlib raises ``zlib.error``).
GZIP_ERRORS: tuple[type[BaseException], ...] = (EOFError, zlib.error, gzip.BadGzipFile, _IsalError)

#: File names the reader picks up when given a directory.
TRACE_SUFFIXES = (".json", ".json.gz")
#: Nested gzip layers (a trace gzipped twice) the reader unwraps.
MAX_GZIP_LAYERS = 3

#: Bytes of a file (decompressed) looked at to decide whether a file found in a directory is a trace.
SNIFF_BYTES = 1 << 20


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
            check_regular_file(path)
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


def check_regular_file(path: Path) -> None:
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
            head = unwrap(raw).read(SNIFF_BYTES)
    except TraceError as exc:
        return exc.reason
    except (OSError, EOFError, zlib.error, _IsalError) as exc:
        return getattr(exc, "strerror", None) or exc.__class__.__name__
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"["):
        return True
    if b'"traceEvents"' in text:
        return True
    # Not a trace if the whole file was seen, or it is one of our reports; else the reader judges it.
    return not (len(head) < SNIFF_BYTES or b'"schema_version"' in text[:4096])


def unwrap(raw: io.BufferedReader) -> io.BufferedReader:
    """``raw``'s bytes with gzip layers removed: one, several (a trace gzipped twice), or a stream of
    concatenated members. The caller closes ``raw``."""
    stream: Any = raw
    for _ in range(MAX_GZIP_LAYERS):
        if stream.peek(2)[:2] != b"\x1f\x8b":
            break
        stream = io.BufferedReader(_GzipFile(fileobj=stream, mode="rb"), buffer_size=1 << 20)
    return stream
