"""Implausible timing: a trace whose clock is milliseconds or nanoseconds written as microseconds is
repaired from its own evidence (its cheapest ops), or, when the unit cannot be inferred, gives an
``unknown`` verdict with a note; never a confident verdict on it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.offline import analyze_paths
from lightning_bottleneck.trace.reader import load_trace
from lightning_bottleneck.trace.time_unit import check_time_unit

from _trace_builders import cpu_training_events, gpu_training_events, write_trace

REAL = "mi250_rocm_minitoy.json.gz"  # small real trace: 70 ops, 25 of them metadata ops


def _analyze(tmp_path: Path, name: str, events: list[dict[str, Any]]) -> Any:
    return analyze_paths([write_trace(tmp_path / name, events)])


def test_microsecond_trace_is_left_alone(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "us.json", cpu_training_events()))
    check = check_time_unit(trace)
    assert check.factor == 1.0 and check.doubt is None and "metadata ops" in check.evidence
    assert not any("Implausible" in n for n in trace.notes)


@pytest.mark.parametrize(("scale", "unit"), [(1e-3, "milliseconds"), (1e3, "nanoseconds")])
def test_scaled_clock_is_repaired_with_a_note(tmp_path: Path, scale: float, unit: str) -> None:
    base = _analyze(tmp_path, "us.json", cpu_training_events())
    trace = load_trace(write_trace(tmp_path / "scaled.json", cpu_training_events(scale=scale)))
    assert any("Implausible timing repaired" in n and unit in n for n in trace.notes), trace.notes
    assert trace.dur.max() == pytest.approx(2000.0)  # the 2000 us step, back in microseconds
    report = _analyze(tmp_path, "scaled.json", cpu_training_events(scale=scale))
    assert report.step_time_ms.median == pytest.approx(base.step_time_ms.median, rel=1e-6) == 2.0
    assert report.primary == base.primary and report.primary.value != "unknown"
    assert report.breakdown == pytest.approx(base.breakdown)
    # repaired timing is never reported as sure as clean timing
    assert report.confidence <= T.UNCERTAIN_CONFIDENCE_MAX
    assert any("Implausible timing repaired" in n for n in report.notes)


def test_a_repaired_clock_caps_a_confident_verdict(tmp_path: Path) -> None:
    """The repair is a typed field of the trace and its summary, not a word in a note: a verdict that would be
    sure on clean timing is capped on a repaired trace, and says why (the note-matching check never fired: the
    note says "Implausible", the check looked for "implausible")."""
    from test_ranking import _input_bound

    from lightning_bottleneck.analysis.trace_file import summarize_file
    from lightning_bottleneck.diagnose import diagnose

    clean = summarize_file(write_trace(tmp_path / "us.json", cpu_training_events()))
    repaired = summarize_file(write_trace(tmp_path / "ms.json", cpu_training_events(scale=1e-3)))
    assert not clean.timing_repaired and repaired.timing_repaired
    sure = _input_bound()
    assert diagnose(sure).confidence > T.UNCERTAIN_CONFIDENCE_MAX
    ev = _input_bound()  # the same evidence, read from a trace whose clock was repaired
    ev.summaries[0].notes, ev.summaries[0].timing_repaired = repaired.notes, repaired.timing_repaired
    report = diagnose(ev)
    assert report.confidence <= T.UNCERTAIN_CONFIDENCE_MAX
    assert any("timing had to be repaired" in n for n in report.notes), report.notes
    again = type(repaired).from_dict(repaired.to_dict())  # it survives the child process and the rank gather
    assert again.timing_repaired


def test_implausible_timing_of_unknown_unit_gives_no_verdict(tmp_path: Path) -> None:
    # a millisecond clock on a trace with too few ops to infer it: 1 us steps
    report = _analyze(tmp_path, "ms.json", gpu_training_events(scale=1e-3))
    assert report.primary.value == "unknown"
    assert report.confidence <= T.UNKNOWN_CONFIDENCE_MAX and not report.recommendations
    assert any("Implausible timing" in n and "unit" in n for n in report.notes), report.notes
    # the same trace in microseconds is judged as usual
    assert _analyze(tmp_path, "us.json", gpu_training_events()).primary.value != "unknown"


@pytest.mark.parametrize("scale", [1e-3, 1e3])
def test_real_trace_rescaled_reads_the_same(shared_traces: Path, tmp_path: Path, scale: float) -> None:
    doc = json.loads(gzip.decompress((shared_traces / REAL).read_bytes()))
    for e in doc["traceEvents"]:
        for key in ("ts", "dur"):
            if isinstance(e.get(key), (int, float)):
                e[key] = e[key] * scale
    scaled = tmp_path / "scaled.json"
    scaled.write_text(json.dumps(doc))
    original, repaired = load_trace(shared_traces / REAL), load_trace(scaled)
    assert check_time_unit(original).factor == 1.0
    assert any("Implausible timing repaired" in n for n in repaired.notes)
    assert repaired.dur == pytest.approx(original.dur, rel=1e-9, abs=1e-6)


def test_every_real_trace_reads_as_microseconds(shared_traces: Path) -> None:
    small = ["mi250_rocm_minitoy.json.gz", "cpu_only_rank34.pt.trace.json.gz", "alexnet_inference_a100.json.gz",
             "two_ranks_of128/rank0.json.gz"]  # fmt: skip
    for name in small:
        check = check_time_unit(load_trace(shared_traces / name))
        assert check.factor == 1.0 and check.doubt is None, (name, check)
