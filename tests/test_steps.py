"""One set of analysed steps for every metric: the step breakdown and the communication metrics measure
the same steps (validation steps and one-off stalls dropped for both)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lightning_bottleneck.analysis.communication import communication_metrics
from lightning_bottleneck.analysis.steps import analysed_steps
from lightning_bottleneck.analysis.trace_file import summarize
from lightning_bottleneck.trace.reader import load_trace

from _trace_builders import write_trace

WAIT_MS = 2.5  # every normal step: the training thread idles 2.5 ms while gloo all-reduces on tid 2


def _ddp_like_events() -> list[dict[str, Any]]:
    """7 CPU steps on tid 1: five normal 10 ms steps, one 20 ms step that ran the validation loop (a 12 ms
    collective inside it), and one 200 ms one-off stall (a 150 ms collective inside it)."""
    events: list[dict[str, Any]] = []

    def x(cat: str, name: str, ts_ms: float, dur_ms: float, tid: int = 1) -> None:
        events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": 1,
                "tid": tid,
                "ts": ts_ms * 1000,
                "dur": dur_ms * 1000,
            }
        )

    t = 0.0
    for i, kind in enumerate(["normal", "normal", "validation", "normal", "stall", "normal", "normal"]):
        length = {"normal": 10.0, "validation": 20.0, "stall": 200.0}[kind]
        wait = {"normal": WAIT_MS, "validation": 12.0, "stall": 150.0}[kind]
        x("user_annotation", f"ProfilerStep#{i}", t, length)
        x("cpu_op", "aten::mm", t + 1, 6)
        if kind == "validation":
            x("user_annotation", "bottleneck/validation", t + 7, wait)
        x("user_annotation", "gloo:all_reduce", t + 7, wait, tid=2)
        t += length
    return events


def test_breakdown_and_communication_use_the_same_steps(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "ddp.json", _ddp_like_events()))
    steps = analysed_steps(trace)
    assert steps is not None and steps.count == 5
    assert steps.durations.max() == pytest.approx(10_000.0)
    assert any("validation" in n for n in steps.notes) and any("one-off stalls" in n for n in steps.notes)

    summary = summarize(trace)
    comm = summary.communication
    assert comm is not None and comm == communication_metrics(trace, steps)
    assert summary.num_steps == steps.count
    # Over the five normal steps only: 2.5 ms of 10 ms. Over all seven raw steps it would be ~25 ms per step.
    assert comm.wait_ms_per_step == pytest.approx(WAIT_MS, abs=0.01)
    assert comm.wait_share == pytest.approx(WAIT_MS / 10.0, abs=0.001)
    assert comm.collective_ms_per_step == pytest.approx(WAIT_MS, abs=0.01)
    assert comm.by_kind["all_reduce"].calls_per_step == pytest.approx(1.0)
    # ... and the breakdown's communication share says the same
    assert summary.cpu_collective == pytest.approx(comm.wait_share, abs=0.001)
