"""Is the profiled window representative of the run? Pure checks on step-time lists."""

from __future__ import annotations

from lightning_bottleneck.analysis.representative import FASTER_RATIO, SLOWER_RATIO, check_window

OUT = [118.0, 120.0, 117.0, 119.0, 121.0, 118.0]


def test_similar_window_is_representative() -> None:
    c = check_window([125.0, 130.0, 122.0], OUT)
    assert c.representative and c.direction is None and c.likely_cause is None
    assert 1.0 < (c.ratio or 0) < SLOWER_RATIO


def test_issue_example_threads_on_a_busy_machine() -> None:
    # Lightning's demo Transformer while another process used a core: 3.1-3.2 s against 118 ms
    c = check_window([3100.0, 3200.0, 3150.0], OUT, contended=True, intra_op_threads=2, free_cores=1.1)
    assert not c.representative and c.direction == "slower" and c.likely_cause == "threads"
    assert (c.ratio or 0) > 25 and "torch.set_num_threads(1)" in c.note


def test_contention_without_oversubscription() -> None:
    c = check_window([300.0] * 4, OUT, contended=True, intra_op_threads=1, free_cores=1.2)
    assert c.likely_cause == "contention"


def test_profiler_overhead_on_many_small_ops() -> None:
    # 5000 ops per step at ~2 µs each: ~10 ms of profiler cost explains a 12 ms -> 21 ms window
    c = check_window([21.0, 22.0, 21.5], [12.0, 12.5, 11.8, 12.1], ops_per_step=5000)
    assert c.likely_cause == "profiler" and "5000 ops per step" in c.note
    # ... but not a window 10x slower with few ops
    assert check_window([120.0] * 3, [12.0] * 3, ops_per_step=50).likely_cause == "unknown"


def test_much_faster_window() -> None:
    c = check_window([80.0, 82.0, 81.0], OUT)
    assert not c.representative and c.direction == "faster" and c.likely_cause == "outside_stalls"
    assert (c.ratio or 1) <= 1 / FASTER_RATIO


def test_too_few_steps_is_not_judged() -> None:
    c = check_window([100.0, 101.0], OUT)
    assert c.representative and c.ratio is None and "too few" in c.note
    assert c.to_dict()["representative"] is True


def test_single_thread_on_a_busy_machine_is_contention_not_threads() -> None:
    c = check_window([300.0] * 4, OUT, contended=True, intra_op_threads=1, free_cores=0.4)
    assert c.likely_cause == "contention" and "set_num_threads" not in c.note
