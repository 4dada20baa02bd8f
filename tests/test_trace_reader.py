"""The streaming trace reader: both schemas, gzip, ns timestamps, ranks, bad input, the shared traces."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest

from lightning_bottleneck.errors import TraceError
from lightning_bottleneck.trace import reader
from lightning_bottleneck.trace.model import EventKind
from lightning_bottleneck.trace.reader import find_trace_files, load_trace

from _trace_builders import NEW, OLD, gpu_training_events, tricky_events, write_trace

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def _x_events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]


def test_new_schema_columns(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "t.json", gpu_training_events(), distributedInfo={"rank": 3}))
    assert trace.rank == 3
    assert trace.device_type == "cuda"
    kinds = {EventKind(k) for k in np.unique(trace.kind)}
    assert kinds == {EventKind.USER_ANNOTATION, EventKind.CPU_OP, EventKind.RUNTIME, EventKind.KERNEL}
    kernels = trace.kind == EventKind.KERNEL
    assert set(trace.stream[kernels]) == {7} and set(trace.device[kernels]) == {0}
    assert (trace.correlation[kernels] > 0).all()


def test_old_schema_and_stream_from_tid(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "old.json", gpu_training_events(OLD)))
    kernels = trace.kind == EventKind.KERNEL
    assert kernels.sum() == 6
    assert set(trace.stream[kernels]) == {7}  # "tid": "stream 7"
    assert (trace.kind == EventKind.RUNTIME).sum() == 8
    assert "ProfilerStep#0" in trace.names


def test_nanosecond_integer_timestamps_are_converted(tmp_path: Path) -> None:
    us = load_trace(write_trace(tmp_path / "us.json", gpu_training_events()))
    ns_events = gpu_training_events(scale=1000.0)
    for e in ns_events:
        e["ts"] = int(e["ts"]) + 1_700_000_000_000_000_000  # epoch nanoseconds
        e["dur"] = int(e["dur"])
    ns = load_trace(write_trace(tmp_path / "ns.json", ns_events, displayTimeUnit="ns"))
    assert ns.notes and "nanoseconds" in ns.notes[0]
    np.testing.assert_allclose(ns.dur, us.dur)
    np.testing.assert_allclose(np.diff(ns.ts), np.diff(us.ts), atol=1e-3)


def test_gzip_and_array_format_and_rank_from_name(tmp_path: Path) -> None:
    events = gpu_training_events()
    gz = load_trace(write_trace(tmp_path / "job_rank5.json.gz", events, gz=True))
    assert gz.rank == 5 and len(gz) == len(events)
    arr = tmp_path / "array.json"
    arr.write_text(json.dumps(events))
    assert len(load_trace(arr)) == len(events)


def test_small_chunks_match_one_shot_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = gpu_training_events() * 40
    path = write_trace(tmp_path / "t.json.gz", events, gz=True, deviceProperties=[{"id": 0, "name": "X"}])
    whole = load_trace(path)
    monkeypatch.setattr(reader, "CHUNK_CHARS", 97)  # events straddle every refill
    monkeypatch.setattr(reader, "MIN_SLICE_CHARS", 64)
    small = load_trace(path)
    assert len(small) == len(whole) == len(events)
    for col in ("kind", "name", "ts", "dur", "correlation", "stream"):
        np.testing.assert_array_equal(getattr(small, col), getattr(whole, col))
    assert small.metadata["deviceProperties"][0]["name"] == "X"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"this is not json", "not JSON"),
        (b"", "empty"),
        (b'{"foo": [1, 2, 3]}', "no 'traceEvents'"),
        (b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 2}', "truncated"),
    ],
)
def test_bad_files_raise_one_line_trace_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_truncated_gzip(tmp_path: Path) -> None:
    good = write_trace(tmp_path / "good.json.gz", gpu_training_events() * 50, gz=True)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(TraceError, match="truncated"):
        load_trace(cut)


def test_find_trace_files(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    one = write_trace(tmp_path / "a" / "rank0.json", gpu_training_events())
    two = write_trace(tmp_path / "a" / "b" / "rank1.pt.trace.json.gz", gpu_training_events(), gz=True)
    (tmp_path / "a" / "notes.txt").write_text("x")
    assert find_trace_files([tmp_path]) == sorted([one.resolve(), two.resolve()])
    assert find_trace_files([one, tmp_path / "a"]) == [one.resolve(), two.resolve()]
    with pytest.raises(TraceError, match="no such file"):
        find_trace_files([tmp_path / "missing.json"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match=r"no \*\.json"):
        find_trace_files([tmp_path / "empty"])


def test_schemas_agree(tmp_path: Path) -> None:
    new = load_trace(write_trace(tmp_path / "n.json", gpu_training_events(NEW)))
    old = load_trace(write_trace(tmp_path / "o.json", gpu_training_events(OLD)))
    for kind in (EventKind.KERNEL, EventKind.RUNTIME):
        np.testing.assert_array_equal(new.ts[new.kind == kind], old.ts[old.kind == kind])


# ---- the shared real traces: every kept event matches a plain json.load of the same file ---------------

SMALL_SHARED = [
    "cpu_only_rank34.pt.trace.json.gz",
    "mi250_rocm_minitoy.json.gz",
    "alexnet_inference_a100.json.gz",
]


@pytest.mark.parametrize("name", SMALL_SHARED)
def test_shared_trace_matches_json_load(name: str) -> None:
    path = SHARED / name
    if not path.is_file():
        pytest.skip("../shared/traces is absent")
    trace = load_trace(path)
    raw = [e for e in _x_events(path) if e.get("cat") in reader.CATEGORY_KINDS]
    assert len(trace) == len(raw)
    np.testing.assert_allclose(trace.ts, [float(e["ts"]) for e in raw])
    assert [trace.names[i] for i in trace.name] == [e["name"] for e in raw]


def test_shared_ranks_and_devices() -> None:
    if not SHARED.is_dir():
        pytest.skip("../shared/traces is absent")
    cpu = load_trace(SHARED / "cpu_only_rank34.pt.trace.json.gz")
    assert (cpu.rank, cpu.world_size, cpu.device_type) == (34, 300, "cpu")
    assert load_trace(SHARED / "mi250_rocm_minitoy.json.gz").device_type == "rocm"
    files = find_trace_files([SHARED / "two_ranks_of128"])
    assert sorted(load_trace(f).rank for f in files) == [0, 1]


# ---- bounded and linear whatever the input (the bad-input issue) -------------------------------------


@pytest.mark.parametrize("sep", [",", " ,", " , ", ",\n", "\n,\n\t", "   ,"])
@pytest.mark.parametrize("chunk", [97, 1 << 20])
def test_any_spacing_and_tricky_strings_match_json_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sep: str, chunk: int
) -> None:
    events = tricky_events(20)
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [' + sep.join(json.dumps(e) for e in events) + "]}")
    monkeypatch.setattr(reader, "CHUNK_CHARS", chunk)
    monkeypatch.setattr(reader, "MIN_SLICE_CHARS", 64 if chunk < 1000 else reader.MIN_SLICE_CHARS)
    trace = load_trace(path)
    raw = [e for e in events if e.get("ph") == "X"]
    assert [trace.names[i] for i in trace.name] == [e["name"] for e in raw]
    np.testing.assert_allclose(trace.dur, [e["dur"] for e in raw])


def test_bom_nested_gzip_and_members(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": gpu_training_events()})
    want = len(load_trace(write_trace(tmp_path / "plain.json", gpu_training_events())))
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + text.encode())
    (tmp_path / "twice.json.gz").write_bytes(gzip.compress(gzip.compress(text.encode())))
    raw = text.encode()
    members = b"".join(gzip.compress(raw[i : i + 50]) for i in range(0, len(raw), 50))
    (tmp_path / "members.json.gz").write_bytes(members)
    for name in ("bom.json", "twice.json.gz", "members.json.gz"):
        assert len(load_trace(tmp_path / name)) == want, name


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"traceEvents": []} extra', "after the end"),
        ('{"traceEvents": []}{"traceEvents": []}', "after the end"),
        ("[" * 50_000 + "]" * 50_000, "nested too deeply"),
        ('{"traceEvents": [{"ph": "X", "ts": ' + "9" * 5000 + "}]}", "invalid JSON"),
    ],
)
def test_more_bad_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(TraceError, match=message):
        load_trace(path)


def test_one_value_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "MAX_VALUE_CHARS", 1 << 16)
    monkeypatch.setattr(reader, "CHUNK_CHARS", 4096)
    path = tmp_path / "big.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "' + "a" * 300_000 + '"}]}')
    with pytest.raises(TraceError, match="over"):
        load_trace(path)
    fine = tmp_path / "fine.json"
    fine.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "' + "a" * 30_000 + '", "ts": 1, "dur": 2}]}'
    )
    assert len(load_trace(fine)) == 1


def test_invalid_timing_dropped_with_a_note_or_an_error(tmp_path: Path) -> None:
    events = gpu_training_events()
    events[3]["dur"] = -5.0
    events[4]["dur"] = float("inf")
    events[5]["ts"] = float("nan")
    trace = load_trace(write_trace(tmp_path / "some.json", events))
    assert len(trace) == len(events) - 3
    assert any("3 event(s)" in n and "dropped" in n for n in trace.notes)
    for e in events:
        e["dur"] = -1.0
    with pytest.raises(TraceError, match="invalid timing"):
        load_trace(write_trace(tmp_path / "all.json", events))
    for e in events:
        e["dur"] = 0
    with pytest.raises(TraceError, match="zero duration"):
        load_trace(write_trace(tmp_path / "zero.json", events))


def test_values_of_the_wrong_type_or_size(tmp_path: Path) -> None:
    events = gpu_training_events()
    events[0]["args"] = [1]
    events[1]["args"] = "x"
    events[2]["tid"] = [1, 2]
    events[3]["pid"] = {"a": 1}
    events[4]["cat"] = ["kernel"]  # not a category: skipped
    kernels = [e for e in events if e["cat"] == "kernel"]
    kernels[0]["args"]["device"] = 2**62
    kernels[1]["args"]["stream"] = 10**30
    trace = load_trace(
        write_trace(tmp_path / "t.json", events, distributedInfo={"rank": 2**62, "world_size": 10**12})
    )
    assert len(trace) == len(events) - 1
    assert int(trace.device.max()) <= reader.MAX_DEVICE_ID
    assert trace.world_size is None and trace.rank is None
    assert any("world_size" in n for n in trace.notes) and any("rank" in n for n in trace.notes)


def test_find_trace_files_skips_non_traces_with_a_note(tmp_path: Path) -> None:
    run = tmp_path / "version_0"
    (run / "bottleneck").mkdir(parents=True)
    trace = write_trace(run / "bottleneck" / "w.pt.trace.json.gz", gpu_training_events(), gz=True)
    (run / "bottleneck_report.json").write_text('{"schema_version": 1, "primary": "input"}')
    (run / "config.json").write_text('{"lr": 0.1}')
    (run / "broken.json.gz").write_bytes(b"\x1f\x8bnope")
    notes: list[str] = []
    assert find_trace_files([run], notes) == [trace.resolve()]
    assert any("not traces" in n and "bottleneck_report.json" in n and "config.json" in n for n in notes)
    assert any("unreadable" in n and "broken.json.gz" in n for n in notes)


def test_not_regular_files(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero")):
        with pytest.raises(TraceError, match="not a regular file"):
            load_trace(path)
    with pytest.raises(TraceError, match="too long"):
        find_trace_files([tmp_path / ("x" * 300)])
    with pytest.raises(TraceError) as info:
        load_trace(tmp_path / "a\nb.json")
    assert "\n" not in str(info.value) and "a\\nb.json" in str(info.value)
