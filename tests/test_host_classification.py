"""CPU-only compute vs overhead from the SELF time of the ops that do the math (not top-level span length).

Hand-made traces pin the rule (a preempted tiny op is not compute; a composite op's own time is dispatch);
real fits check the tiny-op and wide-MLP verdicts on a quiet machine and while another process keeps one
core busy.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lightning_bottleneck import Category
from lightning_bottleneck.analysis import trace_metrics as tm
from lightning_bottleneck.analysis.breakdown import breakdown_from_summary
from lightning_bottleneck.trace.reader import load_trace

from _trace_builders import write_trace
from conftest import fit_scenario


def _cpu_trace(tmp_path: Path, ops_per_step: list[tuple[str, float, float]], steps: int = 3) -> Any:
    """Steps of 1000 µs on one thread; ``ops_per_step`` = (name, offset µs, dur µs)."""
    ev: list[dict[str, Any]] = []
    for step in range(steps):
        t0 = 1_000_000 + step * 1000
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                   "ts": t0, "dur": 1000, "args": {}})  # fmt: skip
        for name, off, dur in ops_per_step:
            ev.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": t0 + off,
                       "dur": dur, "args": {}})  # fmt: skip
    return tm.summarize_trace(load_trace(write_trace(tmp_path / "cpu.json", ev)))


def test_math_op_self_time_is_compute_and_composite_parent_is_not(tmp_path: Path) -> None:
    # aten::linear (composite, 400 µs) holds aten::addmm (390 µs): only the addmm's self time is compute
    s = _cpu_trace(tmp_path, [("aten::linear", 10, 400), ("aten::addmm", 15, 390)])
    assert s.host_op_long == pytest.approx(0.39)
    assert s.host_op_short == pytest.approx(0.01)
    assert s.extra["host_compute_ops"] == {"aten::addmm": 0.39}


def test_preempted_tiny_ops_stay_overhead(tmp_path: Path) -> None:
    # 40 one-µs multiplies per step; in every step one of them was descheduled for 300 µs (a busy machine):
    # its span is long, but the median self time per call is 1 µs, so it is not compute.
    ops = [("aten::mul", 10 + 20 * i, 1.0) for i in range(40)]
    ops[5] = ("aten::mul", 110, 300.0)
    s = _cpu_trace(tmp_path, ops)
    assert s.host_op_long == 0.0
    b = breakdown_from_summary(s)
    assert b["overhead"] > 0.99 and b["compute"] == 0.0


def test_large_elementwise_counts_small_matmul_does_not(tmp_path: Path) -> None:
    s = _cpu_trace(
        tmp_path,
        [
            ("aten::add_", 10, 120.0),  # large element-wise: 120 µs self
            ("aten::mm", 200, 4.0),  # dispatch-sized matmul
            ("autograd::engine::evaluate_function: AddmmBackward0", 300, 200.0),  # bookkeeping
            ("aten::_local_scalar_dense", 600, 100.0),  # a sync, never compute
        ],
    )
    assert s.host_op_long == pytest.approx(0.12)
    assert list(s.extra["host_compute_ops"]) == ["aten::add_"]


def test_mkldnn_and_conv_names_are_math() -> None:
    for name in ("aten::mkldnn_convolution", "aten::_convolution", "aten::convolution_backward",
                 "aten::bmm", "aten::_scaled_dot_product_flash_attention_for_cpu", "mkldnn::matmul"):  # fmt: skip
        assert tm.MATH_OPS.match(name), name
    for name in (
        "aten::linear",
        "aten::matmul",
        "aten::add",
        "autograd::engine::evaluate_function: MmBackward0",
    ):
        assert not tm.MATH_OPS.match(name), name


@pytest.fixture(params=["quiet", "busy"])
def machine(request: pytest.FixtureRequest) -> Iterator[str]:
    """Quiet, or with another process keeping one core busy for the whole test."""
    if request.param == "quiet":
        yield "quiet"
        return
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield "busy"
    finally:
        proc.kill()
        proc.wait()


def test_tiny_op_loop_is_overhead(tmp_path: Path, machine: str) -> None:
    _, cb = fit_scenario("overhead", tmp_path)
    report = cb.report
    assert report is not None and report.primary == Category.OVERHEAD, (machine, report.breakdown)
    assert report.breakdown["compute"] < 0.2, (machine, report.breakdown)


def test_wide_mlp_is_compute(tmp_path: Path, machine: str) -> None:
    _, cb = fit_scenario("compute", tmp_path)
    report = cb.report
    assert report is not None and report.primary == Category.COMPUTE, (machine, report.breakdown)
    assert report.breakdown["compute"] > 0.6, (machine, report.breakdown)
