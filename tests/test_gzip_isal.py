"""Gzip through ISA-L (python-isal): the same columns as the stdlib's gzip, the same one-line errors.

The reader unwraps gzip with ``isal.igzip.IGzipFile`` (~1.7x the stdlib's inflate; issue 30). These tests check
that it is the decompressor in use, that it gives the trace bit for bit as ``gzip.GzipFile`` does, and that every
corrupt or truncated file still ends in the same clean one-line error (only the decompressor's own detail in
brackets may be worded differently, e.g. a CRC printed in decimal rather than hex).
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
from test_fast_events import assert_same_trace

import lightning_bottleneck.trace.files as files
from lightning_bottleneck.errors import TraceError
from lightning_bottleneck.trace.reader import load_trace

from _trace_builders import gpu_training_events

isal_igzip = pytest.importorskip("isal.igzip")


def _load(path: Path, opener: type) -> object:
    """The trace, or the reason of its one-line error, read with ``opener`` as the gzip decompressor."""
    saved = files._GzipFile
    files._GzipFile = opener
    try:
        return load_trace(path)
    except TraceError as err:
        assert "\n" not in str(err)
        return err.reason
    finally:
        files._GzipFile = saved


def test_isal_is_the_decompressor_in_use() -> None:
    assert files._GzipFile is isal_igzip.IGzipFile


def test_isal_and_stdlib_give_the_same_trace(tmp_path: Path, shared_traces: Path) -> None:
    doc = json.dumps({"traceEvents": gpu_training_events() * 40}).encode()
    cases = {
        "one.json.gz": gzip.compress(doc),
        "twice.json.gz": gzip.compress(gzip.compress(doc)),
        "members.json.gz": b"".join(gzip.compress(doc[i : i + 997]) for i in range(0, len(doc), 997)),
        "zeros-after.json.gz": gzip.compress(doc) + b"\x00" * 16,
    }
    for name, raw in cases.items():
        (tmp_path / name).write_bytes(raw)
    paths = [tmp_path / name for name in cases] + [shared_traces / "two_ranks_of128" / "rank0.json.gz"]
    for path in paths:
        fast, slow = _load(path, isal_igzip.IGzipFile), _load(path, gzip.GzipFile)
        assert not isinstance(fast, str), (path.name, fast)
        assert_same_trace(fast, slow)  # type: ignore[arg-type]


def test_corrupt_gzip_gives_the_same_one_line_error(tmp_path: Path) -> None:
    doc = json.dumps({"traceEvents": gpu_training_events() * 50}).encode()
    good = gzip.compress(doc)
    rng = random.Random(30)
    cases = [good[:-30], good[: len(good) // 2], b"\x1f\x8bnot really gzip at all", good[:-4] + b"\0\0\0\0"]
    for _ in range(24):  # one flipped byte in the deflate stream or its trailer
        raw = bytearray(good)
        raw[rng.randrange(10, len(raw))] ^= 0xFF
        cases.append(bytes(raw))
    failed = 0
    for i, raw in enumerate(cases):
        path = tmp_path / f"bad{i}.json.gz"
        path.write_bytes(raw)
        fast, slow = _load(path, isal_igzip.IGzipFile), _load(path, gzip.GzipFile)
        if isinstance(slow, str):
            failed += 1
            assert isinstance(fast, str), (i, slow)
            # the same error; the decompressor's detail in brackets may be worded its own way
            assert fast.split(" (")[0] == slow.split(" (")[0], (i, fast, slow)
        else:
            assert_same_trace(fast, slow)  # type: ignore[arg-type]
    assert failed >= len(cases) - 4  # the corruptions really are errors, so the comparison means something
