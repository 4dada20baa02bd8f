"""summarize_trace: exact figures on hand-made traces, behaviour on traces recorded here with
torch.profiler, and agreement with torch-tb-profiler / HolisticTraceAnalysis on the shared real traces."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from lightning_bottleneck.analysis import trace_metrics as tm
from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.trace.reader import load_trace

from _trace_builders import NEW, OLD, gpu_training_events, write_trace

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
PP = 0.02  # agreement bound with the other tools: 2 percentage points


# ---- exact figures on a hand-made GPU trace (see _trace_builders.gpu_training_events) ------------------


@pytest.mark.parametrize("schema", [NEW, OLD], ids=["new-schema", "old-schema"])
def test_synthetic_gpu_trace_exact(tmp_path: Path, schema: dict[str, str]) -> None:
    s = tm.summarize_trace(load_trace(write_trace(tmp_path / "t.json", gpu_training_events(schema))))
    assert s.num_steps == 2 and s.step_times_ms == [1.0, 1.0]
    approx = lambda v: pytest.approx(v, abs=1e-9)  # noqa: E731
    assert s.data_wait == approx(0.099)
    assert s.host_op_long == approx(0.06)  # aten::mm, 60 µs
    assert s.host_op_short == approx(0.016)  # 2 x aten::add, 8 µs
    assert s.sync_api == approx(0.05) and s.sync_api_calls_per_step == 1
    assert s.device_busy == approx(0.355)
    assert s.device_compute == approx(0.305)
    assert s.comm_kernel == approx(0.1) and s.comm_exposed == approx(0.05) and s.comm_overlap == approx(0.5)
    assert s.idle_host_wait == approx(1005 / 2000)
    assert s.idle_kernel_wait == approx(0.0)
    assert s.idle_other == approx(285 / 2000)
    assert s.device_busy + s.idle_host_wait + s.idle_kernel_wait + s.idle_other == approx(1.0)
    assert s.kernels_per_step == 3
    assert s.short_kernel_share == approx(5 / 405)
    assert s.tensor_core_share == approx(300 / 405)
    assert s.tensor_core_eligible_share == approx(300 / 405)
    assert s.fp32_gemm_share == approx(0.0)
    assert s.cpu_ops_per_step == 3


def test_nanosecond_trace_gives_same_summary(tmp_path: Path) -> None:
    us = tm.summarize_trace(load_trace(write_trace(tmp_path / "us.json", gpu_training_events())))
    events = gpu_training_events(scale=1000.0)
    for e in events:
        e["ts"] += 1.7e18
    ns = tm.summarize_trace(load_trace(write_trace(tmp_path / "ns.json", events)))
    for key in ("data_wait", "host_op_long", "device_busy", "idle_host_wait", "comm_exposed"):
        assert getattr(ns, key) == pytest.approx(getattr(us, key), abs=1e-6), key


def test_fallback_without_profiler_steps(tmp_path: Path) -> None:
    events = [e for e in gpu_training_events() if not e["name"].startswith("ProfilerStep")]
    s = tm.summarize_trace(load_trace(write_trace(tmp_path / "t.json", events)))
    assert s.num_steps == 1 and "no ProfilerStep" in s.step_source
    assert s.device_busy is not None and 0 < s.device_busy < 1


# ---- CPU traces recorded here with torch.profiler -------------------------------------------------------


def _record(tmp_path: Path, name: str, body: Callable[[], None], steps: int = 4) -> TraceSummary:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    out = tmp_path / f"{name}.json"
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=steps - 1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(out)),
    ) as prof:
        for _ in range(steps):
            body()
            prof.step()
    torch.set_num_threads(torch.get_num_threads())
    return tm.summarize_trace(load_trace(out))


class _SlowDataset:
    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int) -> Any:
        import torch

        time.sleep(0.01)
        return torch.ones(4)


def test_recorded_dataloader_sleep_is_data_wait(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    it = iter(torch.utils.data.DataLoader(_SlowDataset(), batch_size=3, num_workers=0))
    s = _record(tmp_path, "dl", lambda: (next(it) * 2).sum())
    assert s.device == "cpu" and s.device_busy is None
    assert s.data_wait > 0.8, s.data_wait


def test_recorded_tiny_op_loop_is_short_op_dominated(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    a, b = torch.ones(32), torch.ones(32)

    def body() -> None:
        x = a
        for _ in range(300):
            x = x + b

    s = _record(tmp_path, "tiny", body)
    assert s.host_op_short > 0.2 and s.host_op_short > 2 * s.host_op_long, (s.host_op_short, s.host_op_long)
    assert s.cpu_ops_per_step >= 300
    assert s.cpu_op_median_us < tm.LONG_HOST_OP_US


def test_recorded_large_matmul_is_long_op_dominated(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    a = torch.randn(768, 768)

    s = _record(tmp_path, "mm", lambda: [a @ a for _ in range(3)])
    assert s.host_op_long > 0.8 and s.host_op_short < 0.05, (s.host_op_long, s.host_op_short)


def test_recorded_gloo_collective(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    if not dist.is_available():
        pytest.skip("torch.distributed unavailable")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        t = torch.ones(1 << 16)
        s = _record(tmp_path, "gloo", lambda: [dist.all_reduce(t) for _ in range(20)])
    finally:
        dist.destroy_process_group()
    assert s.cpu_collective > 0.05, s.cpu_collective
    assert s.world_size == 1


# ---- agreement with the reference figures of ../shared/traces/README.md -------------------------------


def _readme_tables() -> dict[str, dict[str, list[float]]]:
    """{"hta"|"tb": {file label: [numbers...]}} parsed from the README (never copied into code)."""
    text = (SHARED / "README.md").read_text()
    out: dict[str, dict[str, list[float]]] = {"hta": {}, "tb": {}}
    section = None
    for line in text.splitlines():
        if "get_temporal_breakdown" in line:
            section = "hta"
        elif "torch-tb-profiler" in line and "Overview" in line:
            section = "tb"
        if section is None or not line.startswith("|") or "---" in line or "file" in line:
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        label, values = cells[0], cells[1:]
        if label.startswith("two_ranks_of128") and "/" in line:  # "rank0 / rank1 | a / b | ..."
            pairs = [v.split("/") for v in values]
            for i in range(2):
                out[section][f"two_ranks_of128/rank{i}"] = [float(p[i]) for p in pairs]
            continue
        label = label.replace(" ", "/")
        nums = [float(v) for v in values if re.fullmatch(r"[\d.]+", v)]
        if nums:
            out[section][label] = nums
    return out


def _file_for(label: str) -> Path:
    if label.startswith("two_ranks_of128"):
        return SHARED / f"{label}.json.gz"
    return next(SHARED.glob(f"{label}*.json.gz"))


@pytest.fixture(scope="module")
def shared() -> dict[str, Any]:
    if not SHARED.is_dir():
        pytest.skip("../shared/traces is absent")
    cache: dict[str, Any] = {"refs": _readme_tables()}
    for label in {*cache["refs"]["hta"], *cache["refs"]["tb"]}:
        trace = load_trace(_file_for(label))  # each file parsed once per module
        cache[label] = (tm.summarize_trace(trace), tm.gpu_temporal_breakdown(trace))
    return cache


def test_readme_parsed(shared: dict[str, Any]) -> None:
    assert len(shared["refs"]["hta"]) >= 8 and len(shared["refs"]["tb"]) >= 4


def test_agrees_with_hta_temporal_breakdown(shared: dict[str, Any]) -> None:
    for label, (idle, compute, non_compute) in shared["refs"]["hta"].items():
        _, hta = shared[label]
        assert hta["idle"] == pytest.approx(idle / 100, abs=PP), label
        assert hta["compute"] == pytest.approx(compute / 100, abs=PP), label
        assert hta["non_compute"] == pytest.approx(non_compute / 100, abs=PP), label


def test_agrees_with_tb_profiler_overview(shared: dict[str, Any]) -> None:
    for label, (step_ms, _kernel, *_rest, gpu_util) in shared["refs"]["tb"].items():
        summary, _ = shared[label]
        mean_step = sum(summary.step_times_ms) / len(summary.step_times_ms)
        assert mean_step == pytest.approx(step_ms, rel=0.01), label
        assert summary.kernel_busy == pytest.approx(gpu_util / 100, abs=PP), label


def test_shared_traces_are_consistent(shared: dict[str, Any]) -> None:
    for label, value in shared.items():
        if label == "refs":
            continue
        s, _ = value
        if s.device_busy is None:
            continue
        assert s.device_idle == pytest.approx(1 - s.device_busy)
        parts = s.idle_host_wait + s.idle_kernel_wait + s.idle_other
        assert parts == pytest.approx(s.device_idle, abs=1e-6), label
        assert 0 <= s.device_compute <= s.device_busy + 1e-9
        assert s.comm_exposed <= s.comm_kernel + 1e-9


def test_cpu_only_shared_trace() -> None:
    path = SHARED / "cpu_only_rank34.pt.trace.json.gz"
    if not path.is_file():
        pytest.skip("../shared/traces is absent")
    s = tm.summarize_trace(load_trace(path))
    assert s.device == "cpu" and s.device_busy is None and s.num_steps == 1
    assert s.rank == 34 and s.cpu_collective > 0.5  # gloo barrier-dominated step


def test_one_off_stall_is_set_aside_but_a_recurring_one_is_not(tmp_path: Path) -> None:
    """A single 20x step (a GC pass, a checkpoint) must not decide the verdict of a 6-step window."""

    def trace(durations_ms: list[float], name: str) -> TraceSummary:
        events, t = [], 0.0
        for i, d in enumerate(durations_ms):
            us = d * 1000
            events.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"ProfilerStep#{i}",
                    "pid": 1,
                    "tid": 1,
                    "ts": t,
                    "dur": us,
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::mm",
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 1,
                    "dur": us - 2,
                }
            )
            t += us
        return tm.summarize_trace(load_trace(write_trace(tmp_path / f"{name}.json", events)))

    once = trace([10, 10, 200, 10, 10, 10], "once")
    assert once.num_steps == 5 and max(once.step_times_ms) < 11
    assert any("one-off stalls" in n for n in once.notes)
    recurring = trace([10, 200, 10, 200, 10, 200], "recurring")  # every other step: the run's real pattern
    assert recurring.num_steps == 6
