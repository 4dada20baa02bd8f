"""The schema-driven decoder (msgspec, ``trace/fast_events.py``) changes no number and no error.

Every trace is read twice, with the msgspec path (``reader.FAST_DECODE = True``, the default) and with the
stdlib ``json`` path alone (the reader as it was before msgspec): the columns, names, threads, metadata and
notes, and the summary every metric comes from, must be identical to the last bit, on the real traces in
``../shared/traces``, on the tests' own traces, and on every input of the fuzz corpus (the same exit code,
the same report or the same one-line error). Inputs msgspec rejects where ``json`` accepts them (NaN, huge
integers, duplicate keys, a BOM, lone surrogates, odd types) go to the stdlib path, never a traceback.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lightning_bottleneck.analysis.trace_file import summarize
from lightning_bottleneck.errors import TraceError
from lightning_bottleneck.trace import reader
from lightning_bottleneck.trace.fast_events import decode_events
from lightning_bottleneck.trace.model import Trace
from lightning_bottleneck.trace.reader import load_trace

from _trace_builders import NEW, OLD, cpu_training_events, gpu_training_events, tricky_events, write_trace

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
COLUMNS = ("kind", "name", "thread", "ts", "dur", "correlation", "external_id", "stream", "device")


def _both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """(msgspec path, stdlib path): each a Trace, or the TraceError's message."""
    out = []
    for fast in (True, False):
        monkeypatch.setattr(reader, "FAST_DECODE", fast)
        try:
            out.append(load_trace(path))
        except TraceError as err:
            out.append(f"TraceError: {err}")
    return out[0], out[1]


def assert_same_trace(a: Trace | str, b: Trace | str) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert isinstance(a, Trace) and isinstance(b, Trace)
    for col in COLUMNS:
        x, y = getattr(a, col), getattr(b, col)
        assert x.dtype == y.dtype, col
        assert x.tobytes() == y.tobytes(), col  # bit for bit (NaN, -0.0 included)
    assert a.names == b.names
    assert a.threads == b.threads
    assert a.metadata == b.metadata
    assert a.notes == b.notes
    assert a.timing_doubt == b.timing_doubt
    # every metric the rules see: the summary, as the JSON report writes it
    sa = json.dumps(summarize(a).to_dict(), sort_keys=True, default=str)
    sb = json.dumps(summarize(b).to_dict(), sort_keys=True, default=str)
    assert sa == sb


def _shared() -> list[str]:
    if not SHARED.is_dir():
        return []
    return sorted(str(p.relative_to(SHARED)) for p in SHARED.rglob("*.json.gz"))


@pytest.mark.parametrize("name", _shared() or ["(absent)"])
def test_shared_traces_identical_with_both_decoders(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if name == "(absent)":
        pytest.skip("../shared/traces is absent")
    fast, slow = _both(SHARED / name, monkeypatch)
    assert_same_trace(fast, slow)
    assert isinstance(fast, Trace) and len(fast) > 0


def _tests_traces(tmp: Path) -> list[Path]:
    tricky = tricky_events(30, name_tail=" é ✓", args_every=4, more_args={"stream": 7})
    return [
        write_trace(tmp / "new.json", gpu_training_events(NEW) * 40),
        write_trace(tmp / "old.json.gz", gpu_training_events(OLD) * 40, gz=True),
        write_trace(tmp / "cpu.json", cpu_training_events()),
        write_trace(tmp / "scaled.json", gpu_training_events(scale=1000.0) * 10),
        write_trace(tmp / "tricky.json", tricky),
    ]


def test_tests_traces_identical_with_both_decoders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "MIN_SLICE_CHARS", 64)  # small traces: slice them too
    for path in _tests_traces(tmp_path):
        for chunk in (257, 1 << 20):
            monkeypatch.setattr(reader, "CHUNK_CHARS", chunk)
            assert_same_trace(*_both(path, monkeypatch))


# ---- what msgspec rejects goes to json: the same answer --------------------------------------------------


def _event(**change: Any) -> str:
    e = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5}
    e["args"] = {"correlation": 3, "External id": 4, "stream": 7, "device": 0}
    text = json.dumps(e)[:-1]
    return text + "".join(f', "{k}": {v}' for k, v in change.items()) + "}"


ODD = {
    "nan timestamp": _event(ts="NaN"),
    "infinite duration": _event(dur="Infinity"),
    "exponent past float": _event(ts="1e400"),
    "huge integer ts": _event(ts="1" + "0" * 30),
    "huge integer pid": _event(pid="9" * 25),
    "uint64 correlation": '{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"correlation": 18446744073709551615}}',
    "past uint64 correlation": '{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"correlation": 18446744073709551616}}',
    "duplicate keys": _event(ts=99, dur=2, name='"twice"'),
    "bool timestamp": _event(ts="true"),
    "string timestamp": _event(ts='"12.5"'),
    "float correlation": _event(args='{"correlation": 5.0}'),
    "null args": _event(args="null"),
    "null External id": _event(args='{"External id": null, "external id": 5}'),
    "lower external id": _event(args='{"external id": 5}'),
    "number name": _event(name="12"),
    "null name": _event(name="null"),
    "list pid": _event(pid="[1, 2]"),
    "float tid": _event(tid="1.5"),
    "lone surrogate": _event(name='"\\ud800x"'),
    "not an object": "1",
    "rounding boundary ts": _event(ts=str(2**53 + 1)),
    "rounding boundary ts 2": _event(ts=str(2**63 + 2**10 + 1)),
    "negative zero": _event(ts="-0", dur="-0.0"),
}


@pytest.mark.parametrize("case", sorted(ODD))
def test_odd_values_same_answer(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = [_event(ts=str(20 + 10 * i)) for i in range(200)]
    events = [*good[:100], ODD[case], *good[100:]]
    path = tmp_path / "odd.json"
    path.write_text('{"traceEvents": [' + ",\n".join(events) + "]}")
    monkeypatch.setattr(reader, "MIN_SLICE_CHARS", 64)
    monkeypatch.setattr(reader, "CHUNK_CHARS", 4096)
    fast, slow = _both(path, monkeypatch)
    assert_same_trace(fast, slow)
    # with a BOM in front: accepted by both, the same answer
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert_same_trace(*_both(tmp_path / "bom.json", monkeypatch))


def test_decoder_accepts_only_what_json_gives_the_same() -> None:
    """Where msgspec decodes, each field holds what json.loads gives for it; else it declines (None)."""
    for case, text in ODD.items():
        events = decode_events("[" + text + "]")
        try:
            want = json.loads("[" + text + "]")[0]
        except ValueError:
            assert events is None, case
            continue
        if events is None:
            continue  # the stdlib path handles it (checked above)
        (e,) = events
        assert e.name == want.get("name", ""), case
        for key in ("ts", "dur"):
            got, raw = getattr(e, key), want.get(key)
            assert type(raw) in (int, float), case
            assert (math.isnan(got) and math.isnan(raw)) or got == float(raw), case
            assert np.float64(got).tobytes() == np.array([raw], dtype=np.float64).tobytes(), case
        assert (e.pid, e.tid) == (want.get("pid"), want.get("tid")), case


def test_many_odd_slices_go_straight_to_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file full of NaN is decoded by json after a few misses, not twice over."""
    events = [_event(ts=str(10 * i), dur="NaN" if i % 5 == 0 else "5") for i in range(3000)]
    path = tmp_path / "nan.json"
    path.write_text('{"traceEvents": [' + ",".join(events) + "]}")
    monkeypatch.setattr(reader, "CHUNK_CHARS", 4096)
    monkeypatch.setattr(reader, "MIN_SLICE_CHARS", 64)
    calls: list[bool] = []
    real = reader.decode_events
    monkeypatch.setattr(reader, "decode_events", lambda t: calls.append(True) or real(t))
    fast = load_trace(path)
    # ~100 slices of 4 KiB: msgspec is tried on the first few (a cut inside a string is no miss), then not
    assert reader.FAST_MISSES_BEFORE_STDLIB <= len(calls) <= 2 * reader.FAST_MISSES_BEFORE_STDLIB
    monkeypatch.setattr(reader, "FAST_DECODE", False)
    assert_same_trace(fast, load_trace(path))


# ---- the fuzz corpus: the same exit code and the same output either way ---------------------------------


def test_fuzz_corpus_same_outcome_with_both_decoders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_fuzz_cli import CORPUS, corpus, run_in_process

    cases = [*CORPUS, *corpus(seed=1, held_out=True)]
    differ = []
    for i, case in enumerate(cases):
        d = tmp_path / f"case{i:03d}"
        d.mkdir()
        argv = case.make(d)
        got = []
        for fast in (True, False):
            monkeypatch.setattr(reader, "FAST_DECODE", fast)
            o = run_in_process(argv)
            got.append((o.code, o.out, o.err))
        if got[0] != got[1]:
            differ.append(f"{case.name}: {got[0][0]} {got[0][2][:120]!r} != {got[1][0]} {got[1][2][:120]!r}")
    assert not differ, "\n".join(differ)
