"""Fuzz corpus for the offline command line: every bad or odd input ends in exit 2 with one line on
stderr, or in a right answer; no traceback, bounded time and memory, strict JSON, invalid timing never a
confident verdict.

The corpus is generated (seeded) into ``tmp_path``: the cases of the bad-input issue and their variants.
Most run ``main()`` in-process (fast); the slow and large inputs (bombs, quadratic-spacing traces, a
closed pipe) run in a subprocess with a wall-clock timeout and an address-space limit.

A held-out corpus (other seed, other variants) runs with ``python tests/test_fuzz_cli.py --held-out``
or ``pytest -m slow tests/test_fuzz_cli.py``.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import random
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lightning_bottleneck.cli import main

from _trace_builders import cpu_training_events, gpu_training_events

REPO = Path(__file__).resolve().parents[1]

#: The step of ``cpu_training_events`` in milliseconds (what a repaired clock must read).
CPU_STEP_MS = 2.0

#: Seconds one small input may take in-process (they take milliseconds; the margin is for a busy machine).
SMALL_INPUT_SECONDS = 5.0

# expectations
ERROR = "error"  # exit 2, one line
OK = "ok"  # exit 0, strict JSON report
SAME = "same"  # exit 0 and the same verdict and step time as the untouched trace
OK_NOTE = "ok_note"  # exit 0 with a note about what was dropped or ignored
ERROR_OR_UNKNOWN = "error_or_unknown"  # invalid timing: exit 2, or exit 0 with an "unknown" verdict
CLEAN = "clean"  # exit 0 or 2, cleanly
REPAIRED = "repaired"  # a scaled clock: exit 0, the note, the unscaled trace's step time, never above 90%


@dataclass
class Case:
    name: str
    make: Callable[[Path], list[str]]  # writes its files under the directory, returns argv
    expect: str
    note: str = ""  # a word the report's notes (OK_NOTE) or the error line (ERROR) must contain


# ---- building blocks ---------------------------------------------------------------------------------


def base_events(steps: int = 6) -> list[dict[str, Any]]:
    """``steps`` training steps (three copies of the two-step builder, shifted in time)."""
    out: list[dict[str, Any]] = []
    for i in range(max(1, steps // 2)):
        for e in gpu_training_events():
            e = json.loads(json.dumps(e))
            e["ts"] += i * 2000
            if "ProfilerStep#" in e["name"]:
                e["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + 2 * i}"
            args = e.get("args") or {}
            if "correlation" in args:
                args["correlation"] += 100 * i
            out.append(e)
    return out


def _scaled(events: list[dict[str, Any]], scale: float) -> list[dict[str, Any]]:
    for e in events:
        e["ts"], e["dur"] = e["ts"] * scale, e["dur"] * scale
    return events


def doc_text(events: Any, sep: str = ",", **meta: Any) -> str:
    body = sep.join(json.dumps(e) for e in events) if isinstance(events, list) else json.dumps(events)
    head = "".join(f"{json.dumps(k)}: {json.dumps(v)}, " for k, v in meta.items())
    return '{"schemaVersion": 1, ' + head + '"traceEvents": [' + body + "]}"


def write(path: Path, data: str | bytes, gz: bool = False) -> Path:
    raw = data.encode() if isinstance(data, str) else data
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def trace_case(
    name: str, text: Callable[[random.Random], str | bytes], expect: str, seed: int, **kw: Any
) -> Case:
    gz = kw.pop("gz", False)

    def make(d: Path) -> list[str]:
        rng = random.Random(f"{seed}-{name}")
        p = write(d / ("t.json.gz" if gz else "t.json"), text(rng), gz=gz)
        return ["analyze", str(p), "--json"]

    return Case(name, make, expect, **kw)


def mutate(field: str, value: Any, which: str = "one") -> Callable[[random.Random], str]:
    """The base trace with ``field`` (``args``, ``cat``, ``dur``, ``args.device``, ...) set to ``value``
    on one event, on every event, or on a random half (``which``)."""

    def build(rng: random.Random) -> str:
        events = base_events()
        targets = {
            "one": [rng.randrange(len(events))],
            "all": list(range(len(events))),
            "half": rng.sample(range(len(events)), len(events) // 2),
        }[which]
        for i in targets:
            e = events[i]
            if field.startswith("args."):
                if isinstance(e.get("args"), dict):
                    e["args"][field[5:]] = value
            else:
                e[field] = value
        return json.dumps({"schemaVersion": 1, "traceEvents": events}, allow_nan=True)

    return build


def raw_number(field: str, digits: int, which: str = "one") -> Callable[[random.Random], str]:
    """A ``field`` written as an integer literal of ``digits`` digits (beyond float and int limits)."""

    def build(rng: random.Random) -> str:
        text = mutate(field, "__BIG__", which)(rng)
        return text.replace('"__BIG__"', "9" * digits)

    return build


def nested(depth: int, where: str) -> Callable[[random.Random], str]:
    deep = "[" * depth + "]" * depth

    def build(rng: random.Random) -> str:
        if where == "top":
            return deep
        if where == "metadata":
            return doc_text(base_events()).replace(
                '"schemaVersion": 1,', f'"schemaVersion": 1, "deep": {deep},'
            )
        if where == "event":
            return doc_text(base_events()).replace('"traceEvents": [', f'"traceEvents": [{deep}, ')
        text = mutate("args", "__DEEP__")(rng)
        return text.replace('"__DEEP__"', deep)

    return build


def text_of(content: str | bytes) -> Callable[[random.Random], str | bytes]:
    return lambda rng: content


def truncated(fraction: float) -> Callable[[random.Random], str]:
    return lambda rng: doc_text(base_events())[: int(len(doc_text(base_events())) * fraction)]


def flipped(n: int) -> Callable[[random.Random], bytes]:
    def build(rng: random.Random) -> bytes:
        raw = bytearray(doc_text(base_events()).encode())
        for _ in range(n):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw)

    return build


def spaced(sep: str) -> Callable[[random.Random], str]:
    return lambda rng: doc_text(base_events(), sep=sep)


# ---- the corpus ------------------------------------------------------------------------------------------


def corpus(seed: int = 0, held_out: bool = False) -> list[Case]:
    rng = random.Random(seed)
    cases: list[Case] = []

    def add(name: str, text: Callable[[random.Random], str | bytes], expect: str, **kw: Any) -> None:
        cases.append(trace_case(name, text, expect, seed, **kw))

    # wrong types where the reader expects objects, strings and numbers
    odd_values: list[Any] = [[1], "x", 5, None, [], True, {"nested": {"a": [1, 2]}}]
    if held_out:
        odd_values = [[None], "", -1.5, [{"correlation": 1}], False, {"": ""}]
    for i, value in enumerate(odd_values):
        add(
            f"args-{i}-{type(value).__name__}",
            mutate("args", value, rng.choice(["one", "all", "half"])),
            CLEAN,
        )
    for field in ("cat", "tid", "pid", "name", "ph"):
        for value in ([1, 2], {"a": 1}) if not held_out else ([[]], {"b": [1]}):
            add(f"{field}-{type(value).__name__}", mutate(field, value, rng.choice(["one", "half"])), CLEAN)
    for field in ("args.device", "args.stream", "args.correlation", "args.External id"):
        for value in (2**62, -(2**62), 2**70, "7", 1.5) if not held_out else (2**63 - 1, -1, 10**30, "x"):
            add(f"{field}-{value!r:.12}", mutate(field, value, rng.choice(["one", "all"])), CLEAN)
    # numbers beyond float and int limits
    for digits in (401, 5001) if not held_out else (309, 4301, 20000):
        for field in ("ts", "dur", "args.correlation"):
            add(f"{field}-{digits}-digits", raw_number(field, digits), CLEAN)
    # deep nesting
    for depth in (100_000, 3000) if not held_out else (50_000, 1500):
        for where in ("top", "metadata", "event", "args"):
            add(f"nest-{where}-{depth}", nested(depth, where), CLEAN if depth < 10_000 else ERROR)
    # distributedInfo that cannot be real
    for info in (
        {"rank": 0, "world_size": 10**12},
        {"rank": 2**62, "world_size": 2},
        {"rank": -3, "world_size": 4},
        {"rank": True, "world_size": "8"},
        {"rank": 0, "world_size": 0},
    ) + (({"rank": 1, "world_size": 10**9}, {"rank": [0], "world_size": {}}) if held_out else ()):
        add(f"dist-{info}", lambda r, info=info: doc_text(base_events(), distributedInfo=info), OK)
    # invalid timing: never a confident verdict
    bad_timing: list[tuple[str, Any, str, str]] = [
        ("dur", -5.0, "all", ERROR_OR_UNKNOWN),
        ("dur", float("nan"), "all", ERROR_OR_UNKNOWN),
        ("dur", 0, "all", ERROR_OR_UNKNOWN),
        ("dur", 1e308, "all", ERROR_OR_UNKNOWN),
        ("dur", float("inf"), "all", ERROR_OR_UNKNOWN),
        ("dur", float("-inf"), "all", ERROR_OR_UNKNOWN),
        ("ts", float("nan"), "all", ERROR_OR_UNKNOWN),
        ("ts", float("inf"), "all", ERROR_OR_UNKNOWN),
        ("ts", 1e308, "all", ERROR_OR_UNKNOWN),
        ("dur", float("inf"), "one", OK_NOTE),
        ("dur", -1.0, "one", OK_NOTE),
        ("dur", float("nan"), "one", OK_NOTE),
    ]
    if held_out:
        bad_timing += [
            ("dur", -1e-9, "all", ERROR_OR_UNKNOWN),
            ("dur", 1e200, "half", ERROR_OR_UNKNOWN),
            ("dur", "nan", "all", ERROR_OR_UNKNOWN),
            ("ts", -1e300, "all", ERROR_OR_UNKNOWN),
        ]
    for field, value, which, expect in bad_timing:
        add(
            f"timing-{field}-{value}-{which}",
            mutate(field, value, which),
            expect,
            note="dropped" if expect == OK_NOTE else "",
        )
    # a clock in another unit written as microseconds: repaired from the trace's own ops, else unknown
    scales = (1e-3, 1e3) if not held_out else (1e-3 * 0.999, 1e3 * 1.001)
    for scale in scales:
        add(f"clock-x{scale:g}-ops", lambda r, k=scale: doc_text(cpu_training_events(6, scale=k)), REPAIRED,
            note="Implausible timing repaired")  # fmt: skip
    for scale in (1e-3, 1e-6) if not held_out else (2e-3, 1e-4):
        # too few ops to infer the unit: steps of a microsecond or less
        add(f"clock-x{scale:g}-steps-only", lambda r, k=scale: doc_text(_scaled(base_events(), k)),
            ERROR_OR_UNKNOWN)  # fmt: skip
    # not JSON, not a trace, truncated, damaged
    for name, content, note in (
        ("empty", b"", "empty"),
        ("whitespace", b"  \n\t ", "empty"),
        ("text", b"hello, not JSON", "not JSON"),
        ("open-bracket", b"[", "truncated"),
        ("open-brace", b"{", "truncated"),
        ("empty-object", b"{}", "no 'traceEvents'"),
        ("events-object", b'{"traceEvents": {}}', "traceEvents"),
        ("events-string", b'{"traceEvents": "x"}', "traceEvents"),
        ("package-json", b'{"name": "a", "version": "1.0"}', "no 'traceEvents'"),
        ("latin1", '{"traceEvents": [{"name": "caf\xe9"}]}'.encode("latin-1"), "UTF-8"),
        ("missing-comma", b'{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', "expected"),
        ("double-comma", b'{"traceEvents": [{"ph": "X"},, {"ph": "X"}]}', "JSON"),
        ("nul-bytes", b"\x00" * 100, "not JSON"),
    ):
        add(f"bad-{name}", text_of(content), ERROR, note=note)
    add("bad-trailing-text", lambda r: doc_text(base_events()) + " trailing", ERROR, note="after the end")
    add("bad-two-documents", lambda r: doc_text(base_events()) * 2, ERROR, note="after the end")
    add("ok-trailing-whitespace", lambda r: doc_text(base_events()) + "\n\n  \t", SAME)
    add("ok-bom", lambda r: "\ufeff" + doc_text(base_events()), SAME)
    add("ok-trailing-comma", lambda r: doc_text(base_events())[:-2] + ",]}", SAME)
    add("ok-array-format", lambda r: json.dumps(base_events()), SAME)
    add("ok-ints-only", lambda r: '{"traceEvents": [' + ",".join(["1"] * 5000) + "]}", OK)
    for frac in (0.1, 0.5, 0.9, 0.999) if not held_out else (0.3, 0.7, 0.95):
        add(f"truncated-{frac}", truncated(frac), ERROR, note="truncated")
    for n in (1, 5, 50) if not held_out else (2, 20):
        add(f"flipped-{n}", flipped(n), CLEAN)
    # any spacing between events gives the same answer
    for sep in (" ,", " , ", ",\n", "\n,\n", "\t,\t", "  ,  ") if not held_out else (",\r\n", " \n , \n "):
        add(f"spacing-{sep!r}", spaced(sep), SAME)
    # gzip variants
    add("gzip-double", lambda r: gzip.compress(doc_text(base_events()).encode()), SAME, gz=True)
    add("gzip-members", lambda r: _members(doc_text(base_events()).encode(), 97), SAME)
    add("gzip-truncated", lambda r: gzip.compress(doc_text(base_events()).encode())[:-30], ERROR)
    add("gzip-garbage", text_of(b"\x1f\x8bnot really gzip at all"), ERROR)
    add("gzip-of-garbage", text_of(gzip.compress(b"\x00\xff garbage")), ERROR)
    cases.extend(file_system_cases(held_out))
    cases.extend(compare_cases(held_out))
    return cases


def _members(raw: bytes, size: int) -> bytes:
    return b"".join(gzip.compress(raw[i : i + size]) for i in range(0, len(raw), size))


def file_system_cases(held_out: bool) -> list[Case]:
    def long_name(d: Path) -> list[str]:
        return ["analyze", str(d / ("x" * (300 if not held_out else 256) + ".json"))]

    def long_name_compare(d: Path) -> list[str]:
        return ["compare", str(d / ("y" * 400)), str(d / "z.json")]

    def newline_name(d: Path) -> list[str]:
        p = d / "bad\nname\r.json"
        p.write_text("not json")
        return ["analyze", str(p)]

    def newline_missing(d: Path) -> list[str]:
        return ["analyze", str(d / "no\nsuch.json")]

    def fifo(d: Path) -> list[str]:
        p = d / "pipe.json"
        os.mkfifo(p)
        return ["analyze", str(p)]

    def dev_zero(d: Path) -> list[str]:
        return ["analyze", "/dev/zero"]

    def directory_of_nothing(d: Path) -> list[str]:
        (d / "empty").mkdir()
        (d / "empty" / "notes.txt").write_text("x")
        return ["analyze", str(d / "empty")]

    def rank_missing(d: Path) -> list[str]:
        write(d / "rank0.json", doc_text(base_events(), distributedInfo={"rank": 0}))
        return ["analyze", str(d), "--rank", "5"]

    def run_folder(d: Path) -> list[str]:
        run = d / "lightning_logs" / "version_0"
        (run / "bottleneck").mkdir(parents=True)
        write(run / "bottleneck" / "host_1.123.pt.trace.json.gz", doc_text(base_events()), gz=True)
        (run / "bottleneck_report.json").write_text('{"schema_version": 1, "primary": "input"}')
        (run / "hparams.json").write_text("{}")
        return ["analyze", str(d / "lightning_logs"), "--json"]

    def nul_in_path(d: Path) -> list[str]:
        return ["analyze", str(d / "a\x00b.json")]

    return [
        Case("fs-long-name", long_name, ERROR, note="too long"),
        Case("fs-long-name-compare", long_name_compare, ERROR, note="too long"),
        Case("fs-newline-name", newline_name, ERROR, note="\\n"),
        Case("fs-newline-missing", newline_missing, ERROR, note="no such file"),
        Case("fs-fifo", fifo, ERROR, note="not a regular file"),
        Case("fs-dev-zero", dev_zero, ERROR, note="not a regular file"),
        Case("fs-empty-dir", directory_of_nothing, ERROR, note="no *.json"),
        Case("fs-rank-5", rank_missing, ERROR, note="--rank 5"),
        Case("fs-run-folder", run_folder, OK_NOTE, note="not traces"),
        Case("fs-nul-in-path", nul_in_path, ERROR),
    ]


def compare_cases(held_out: bool) -> list[Case]:
    good = {
        "schema_version": 1, "primary": "input", "confidence": 0.9, "steps_observed": 10,
        "steps_profiled": 5, "step_time_ms": {"median": 10.0, "p90": 12.0, "samples": [9.0, 10.0, 11.0]},
        "breakdown": {"data_wait": 0.6, "compute": 0.4}, "findings": [], "recommendations": [],
    }  # fmt: skip
    bad: list[tuple[str, str]] = [
        ("median-string", json.dumps({**good, "step_time_ms": {"median": "1", "p90": 2}})),
        ("median-infinity", json.dumps(good).replace('"median": 10.0', '"median": Infinity')),
        ("median-nan", json.dumps(good).replace('"median": 10.0', '"median": NaN')),
        ("median-negative", json.dumps({**good, "step_time_ms": {"median": -1, "p90": 2}})),
        ("breakdown-string", json.dumps({**good, "breakdown": {"compute": "lots"}})),
        ("breakdown-list", json.dumps({**good, "breakdown": [1, 2]})),
        ("top-level-list", '[1, 2, {"schema_version": 1}]'),
        ("deep-nesting", '{"schema_version": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        ("primary-bogus", json.dumps({**good, "primary": "fast"})),
        ("samples-strings", json.dumps({**good, "step_time_ms": {"median": 1, "p90": 2, "samples": ["a"]}})),
        ("findings-junk", json.dumps({**good, "findings": [{"kind": 1}]})),
        ("confidence-missing", json.dumps({k: v for k, v in good.items() if k != "confidence"})),
    ]
    if held_out:
        bad += [
            ("median-huge-int", json.dumps(good).replace('"median": 10.0', '"median": ' + "9" * 5000)),
            ("step-time-list", json.dumps({**good, "step_time_ms": [1, 2]})),
            ("ranks-junk", json.dumps({**good, "ranks": [{"rank": "x"}]})),
        ]
    cases = []
    for name, text in bad:

        def make(d: Path, text: str = text) -> list[str]:
            (d / "good").mkdir()
            (d / "good" / "bottleneck_report.json").write_text(json.dumps(good))
            p = d / "bad_report.json"
            p.write_text(text)
            return ["compare", str(d / "good"), str(p), "--json"]

        cases.append(Case(f"compare-{name}", make, ERROR))

    def old_report(d: Path) -> list[str]:
        old = {**good, "step_time_ms": {"median": 10.0, "p90": 12.0}}
        (d / "old.json").write_text(json.dumps(old))
        (d / "new.json").write_text(
            json.dumps({**good, "step_time_ms": {"median": 5.0, "p90": 6.0, "samples": [5.0, 5.0]}})
        )
        return ["compare", str(d / "old.json"), str(d / "new.json"), "--json"]

    cases.append(Case("compare-old-report-inconclusive", old_report, OK, note="inconclusive"))
    return cases


# ---- running and judging ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    code: int
    out: str
    err: str
    seconds: float


def run_in_process(argv: list[str]) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = int(exc.code or 0)
    return Outcome(code, out.getvalue(), err.getvalue(), time.perf_counter() - start)


def _strict(text: str) -> Any:
    def reject(name: str) -> Any:
        raise ValueError(f"{name} in --json output")

    return json.loads(text, parse_constant=reject)


def judge(case: Case, got: Outcome, reference: dict[str, Any] | None) -> str | None:
    """What is wrong with ``got`` for ``case`` (None when nothing)."""
    if "Traceback" in got.err or "Traceback" in got.out:
        return f"traceback: {got.err[-300:]}"
    if got.code not in (0, 2):
        return f"exit {got.code}: {got.err[-300:]}"
    if got.seconds > SMALL_INPUT_SECONDS:
        return f"took {got.seconds:.1f} s"
    if got.code == 2:
        if got.out or got.err.count("\n") != 1 or not got.err.startswith("lightning-bottleneck: error:"):
            return f"exit 2 without exactly one error line: {got.err!r:.300}"
        if case.expect in (OK, SAME, OK_NOTE):
            return f"expected an answer, got: {got.err.strip()}"
        if case.expect == ERROR and case.note and case.note not in got.err:
            return f"error line lacks {case.note!r}: {got.err.strip()}"
        return None
    if case.expect == ERROR:
        return f"expected exit 2, got exit 0: {got.out[:200]}"
    try:
        doc = _strict(got.out)
    except ValueError as exc:
        return f"--json output is not strict JSON: {exc}"
    if "verdict" in doc:  # a comparison
        if case.note and case.note not in doc["verdict"].lower():
            return f"comparison verdict lacks {case.note!r}: {doc['verdict']}"
        return None
    if case.expect == ERROR_OR_UNKNOWN and doc["primary"] != "unknown":
        return f"invalid timing gave a confident verdict: {doc['primary']} ({doc['confidence']})"
    if case.expect in (OK_NOTE, REPAIRED) and not any(case.note in n for n in doc["notes"]):
        return f"no note with {case.note!r}: {doc['notes']}"
    if case.expect == REPAIRED:
        if doc["primary"] == "unknown" or doc["confidence"] > 0.9:
            return f"repaired timing: {doc['primary']} at {doc['confidence']} (want a verdict at <= 90%)"
        if abs(doc["step_time_ms"]["median"] - CPU_STEP_MS) > 0.01 * CPU_STEP_MS:
            return f"repaired step time {doc['step_time_ms']['median']} ms, want {CPU_STEP_MS} ms"
    if case.expect == SAME and reference is not None:
        ours = (doc["primary"], doc["step_time_ms"], doc["breakdown"])
        want = (reference["primary"], reference["step_time_ms"], reference["breakdown"])
        if ours != want:
            return f"answer differs from the untouched trace: {ours} != {want}"
    return None


def reference_report(tmp: Path) -> dict[str, Any]:
    p = write(tmp / "reference.json", doc_text(base_events()))
    got = run_in_process(["analyze", str(p), "--json"])
    assert got.code == 0, got.err
    return json.loads(got.out)  # type: ignore[no-any-return]


def run_corpus(cases: list[Case], tmp: Path) -> tuple[dict[str, int], list[str]]:
    reference = reference_report(tmp)
    counts: dict[str, int] = {"exit 0": 0, "exit 2": 0}
    failures: list[str] = []
    for i, case in enumerate(cases):
        d = tmp / f"case{i:03d}"
        d.mkdir()
        got = run_in_process(case.make(d))
        counts[f"exit {got.code}"] = counts.get(f"exit {got.code}", 0) + 1
        problem = judge(case, got, reference)
        if problem:
            failures.append(f"{case.name}: {problem}")
    return counts, failures


CORPUS = corpus(seed=0)


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 100
    assert len({c.name for c in CORPUS}) == len(CORPUS)


def test_corpus(tmp_path: Path) -> None:
    counts, failures = run_corpus(CORPUS, tmp_path)
    print(f"\nfuzz corpus: {len(CORPUS)} inputs, {counts}")
    assert not failures, "\n".join(failures)


@pytest.mark.slow
def test_held_out_corpus(tmp_path: Path) -> None:
    cases = corpus(seed=1, held_out=True)
    counts, failures = run_corpus(cases, tmp_path)
    print(f"\nheld-out corpus: {len(cases)} inputs, {counts}")
    assert not failures, "\n".join(failures)


def test_the_judge_catches_what_it_must() -> None:
    """The checks themselves can fail: a traceback, two lines, a confident verdict on invalid timing."""
    case = Case("x", lambda d: [], ERROR_OR_UNKNOWN)
    assert judge(case, Outcome(1, "", "Traceback (most recent call last):\n", 0.1), None)
    assert judge(case, Outcome(2, "", "lightning-bottleneck: error: a\nb\n", 0.1), None)
    confident = json.dumps({"primary": "overhead", "confidence": 0.99, "notes": []})
    assert judge(case, Outcome(0, confident, "", 0.1), None)
    assert judge(Case("y", lambda d: [], OK), Outcome(0, '{"primary": NaN}', "", 0.1), None)
    repaired = Case("z", lambda d: [], REPAIRED, note="Implausible timing repaired")
    doc = {"primary": "input", "confidence": 0.95, "step_time_ms": {"median": CPU_STEP_MS},
           "notes": ["Implausible timing repaired: ..."]}  # fmt: skip
    assert judge(repaired, Outcome(0, json.dumps(doc), "", 0.1), None)  # too sure
    doc.update(confidence=0.5, step_time_ms={"median": CPU_STEP_MS / 1000})
    assert judge(repaired, Outcome(0, json.dumps(doc), "", 0.1), None)  # not rescaled
    doc.update(step_time_ms={"median": CPU_STEP_MS})
    assert judge(repaired, Outcome(0, json.dumps(doc), "", 0.1), None) is None
    assert judge(case, Outcome(2, "", "lightning-bottleneck: error: x\n", SMALL_INPUT_SECONDS + 1), None)


# ---- large and slow inputs: subprocess, wall-clock timeout, address-space limit ---------------------------

#: Address space a subprocess may map. The CLI (numpy, no torch) maps ~0.4 GB at rest; the bombs below
#: took 1.1 GB and more before the reader bounded one value's size.
MEMORY_LIMIT = 1 << 30


def _limited() -> None:  # pragma: no cover - runs in the child
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_cli(args: list[str], timeout: float = 30.0) -> tuple[int, str, str, float]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_bottleneck", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        preexec_fn=_limited,
    )
    return proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - start


def _ones(path: Path, mb: float) -> Path:
    n = int(mb * (1 << 20) / 2)
    path.write_text('{"traceEvents": [' + ",".join(["1"] * n) + "]}")
    return path


def _gzip_bomb(path: Path, mb: int) -> Path:
    with gzip.GzipFile(path, "wb", compresslevel=9) as fh:
        fh.write(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "')
        block = b"a" * (1 << 20)
        for _ in range(mb):
            fh.write(block)
        fh.write(b'", "ts": 1, "dur": 1}]}')
    return path


def _metadata_array(path: Path, mb: int) -> Path:
    with path.open("w") as fh:
        fh.write('{"junk": [')
        fh.write(",".join(["1"] * (mb << 19)))
        fh.write('], "traceEvents": []}')
    return path


def _spaced_trace(path: Path, copies: int, sep: str) -> Path:
    events = []
    for i in range(copies):
        for e in gpu_training_events():
            e["ts"] += i * 2000
            events.append(e)
    path.write_text(doc_text(events, sep=sep))
    return path


@pytest.mark.parametrize(
    ("name", "build", "expect_code", "seconds"),
    [
        ("ones-4mb", lambda d: _ones(d / "ones.json", 4), 0, 10),
        ("gzip-bomb-512mb-name", lambda d: _gzip_bomb(d / "bomb.json.gz", 512), 2, 10),
        ("metadata-int-array-100mb", lambda d: _metadata_array(d / "meta.json", 100), 2, 15),
        ("spaced-4mb", lambda d: _spaced_trace(d / "spaced.json", 1200, " ,"), 0, 10),
    ],
)
def test_large_inputs_bounded(
    tmp_path: Path, name: str, build: Callable[[Path], Path], expect_code: int, seconds: float
) -> None:
    path = build(tmp_path)
    code, out, err, took = run_cli(["analyze", str(path), "--json"], timeout=60)
    assert "Traceback" not in err and code == expect_code, err[-500:]
    if code == 2:
        assert err.count("\n") == 1 and not out
    else:
        _strict(out)
    assert took < seconds, f"{name}: {took:.1f} s"


def test_spacing_costs_no_more_than_commas(tmp_path: Path) -> None:
    """Linear whatever the spacing: ``} ,`` between events reads within a small factor of ``},``."""
    plain = _spaced_trace(tmp_path / "plain.json", 1200, ",")
    spaced_ = _spaced_trace(tmp_path / "spaced.json", 1200, " ,\n")
    from lightning_bottleneck.trace.reader import load_trace

    def best(path: Path) -> float:
        times = []
        for _ in range(3):
            t = time.perf_counter()
            load_trace(path)
            times.append(time.perf_counter() - t)
        return min(times)

    assert best(spaced_) < 4 * best(plain) + 0.2  # it was 50x (9.6 s against 0.19 s)


def test_broken_pipe_is_quiet(tmp_path: Path) -> None:
    path = write(tmp_path / "t.json", doc_text(base_events()))
    cmd = f"{sys.executable} -m lightning_bottleneck analyze {path} --json | head -c 10"
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.stdout == '{\n  "schem'
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def _can_drop_privileges() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def test_unsearchable_directory_and_subdirectory(tmp_path: Path) -> None:
    """A file in a directory the user cannot search: exit 2, one line; an unreadable sub-directory of a
    run folder: skipped with a note. Run as an unprivileged user (root reads everything)."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="lb-perm-"))
    try:
        base.chmod(0o755)
        locked = base / "locked"
        locked.mkdir()
        write(locked / "t.json", doc_text(base_events()))
        run = base / "run"
        (run / "secret").mkdir(parents=True)
        write(run / "rank0.json", doc_text(base_events()))
        write(run / "secret" / "rank1.json", doc_text(base_events()))
        locked.chmod(0)
        (run / "secret").chmod(0)
        if _can_drop_privileges():
            user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        elif os.geteuid() != 0:
            user = []
        else:  # pragma: no cover
            pytest.skip("cannot run as an unprivileged user here")
        cli = [*user, sys.executable, "-m", "lightning_bottleneck"]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        one = subprocess.run(
            [*cli, "analyze", str(locked / "t.json")],
            capture_output=True,
            text=True,
            env=env,
            cwd=base,
            timeout=60,
        )
        if (
            "Permission denied" in one.stderr
            and "lightning_bottleneck" not in one.stderr
            and one.returncode != 2
        ):
            pytest.skip(f"the unprivileged user cannot run Python here: {one.stderr[-200:]}")
        assert one.returncode == 2 and one.stderr.count("\n") == 1, one.stderr[-500:]
        assert "Permission denied" in one.stderr
        two = subprocess.run(
            [*cli, "analyze", str(run), "--json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=base,
            timeout=60,
        )
        assert two.returncode == 0, two.stderr[-500:]
        notes = json.loads(two.stdout)["notes"]
        assert any("unreadable director" in n and "secret" in n for n in notes), notes
    finally:
        for p in (base / "locked", base / "run" / "secret"):
            with contextlib.suppress(OSError):
                p.chmod(stat.S_IRWXU)
        import shutil

        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    import tempfile

    held_out = "--held-out" in sys.argv
    cases = corpus(seed=1, held_out=True) if held_out else CORPUS
    with tempfile.TemporaryDirectory() as tmp:
        counts, failures = run_corpus(cases, Path(tmp))
    print(f"{'held-out' if held_out else 'main'} corpus: {len(cases)} inputs, {counts}")
    for line in failures:
        print("FAIL", line)
    sys.exit(1 if failures else 0)
