"""The pure layers: breakdown -> rules -> verdict -> advice, without a Trainer."""

from __future__ import annotations

import pytest

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.advice import advise, suggested_workers
from lightning_bottleneck.analysis.breakdown import breakdown_from_summary
from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.categories import Category
from lightning_bottleneck.diagnose import diagnose
from lightning_bottleneck.evidence import Evidence, RunConfig, TimingStats
from lightning_bottleneck.rules import choose_primary, share_findings


def _shares(**kw: float) -> dict[str, float]:
    out = {"data_wait": 0.0, "sync": 0.0, "communication": 0.0, "compute": 0.0, "overhead": 0.0}
    out.update(kw)
    out["other"] = max(0.0, 1 - sum(out.values()))
    return out


def test_primary_is_the_bucket_whose_fix_saves_most() -> None:
    # compute 70% (fix saves ~35%) beats input 20% (saves 20%)
    primary, savings = choose_primary(_shares(data_wait=0.2, compute=0.7))
    assert primary == Category.COMPUTE
    assert savings["input"] == pytest.approx(0.2)
    # input 45% beats compute 50% (saves 25%)
    assert choose_primary(_shares(data_wait=0.45, compute=0.5))[0] == Category.INPUT
    # nothing past a threshold: unknown
    assert choose_primary(_shares(data_wait=0.01, compute=0.2))[0] == Category.UNKNOWN


def test_input_thresholds_follow_their_sources() -> None:
    below = share_findings(_shares(data_wait=T.INPUT_SHARE_MEDIUM - 0.001))
    medium = share_findings(_shares(data_wait=T.INPUT_SHARE_MEDIUM))
    high = share_findings(_shares(data_wait=T.INPUT_SHARE_HIGH))
    assert not [f for f in below if f.kind == "input"]
    assert [f.severity.value for f in medium if f.kind == "input"] == ["medium"]
    assert [f.severity.value for f in high if f.kind == "input"] == ["high"]


def test_gpu_breakdown_attributes_idle_to_host_reasons() -> None:
    s = TraceSummary(
        device="cuda",
        num_steps=5,
        data_wait=0.5,
        device_busy=0.4,
        device_compute=0.4,
        device_idle=0.6,
        sync_api=0.3,
        comm_exposed=0.0,
    )
    b = breakdown_from_summary(s)
    assert b["data_wait"] == pytest.approx(0.5)
    assert b["sync"] == pytest.approx(0.1)  # only the idle time left after the data wait
    assert b["overhead"] == pytest.approx(0.0)
    assert b["compute"] == pytest.approx(0.4)
    assert sum(b.values()) == pytest.approx(1.0)


def test_cpu_breakdown_long_ops_are_compute_rest_is_overhead() -> None:
    s = TraceSummary(device="cpu", num_steps=5, data_wait=0.1, host_op_long=0.3, host_op_short=0.4)
    b = breakdown_from_summary(s)
    assert b["compute"] == pytest.approx(0.3)
    assert b["overhead"] == pytest.approx(0.6)
    assert b["data_wait"] == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("cpus", "per_node", "expected"), [(1, 1, 1), (2, 1, 1), (16, 1, 8), (16, 4, 3), (64, 8, 7)]
)
def test_worker_count_follows_usable_cpus_per_process(cpus: int, per_node: int, expected: int) -> None:
    assert suggested_workers(RunConfig(usable_cpus=cpus, devices_per_node=per_node)) == expected


def _input_evidence(cfg: RunConfig) -> Evidence:
    return Evidence(summaries=[TraceSummary(num_steps=5, data_wait=0.6, host_op_long=0.3)], config=cfg)


def test_input_advice_never_repeats_what_is_set() -> None:
    cfg = RunConfig(
        num_workers=8,
        pin_memory=True,
        persistent_workers=True,
        prefetch_factor=4,
        batch_size=32,
        accelerator="cuda",
        usable_cpus=8,
    )
    report = diagnose(_input_evidence(cfg))
    assert report.primary == Category.INPUT
    for rec in report.recommendations:
        for key in ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor"):
            assert key not in rec.settings, rec
    assert report.recommendations[0].title.startswith("Make each sample cheaper")


def test_input_advice_on_gpu_adds_pinning_and_persistence() -> None:
    cfg = RunConfig(
        num_workers=0,
        pin_memory=False,
        persistent_workers=False,
        batch_size=32,
        accelerator="cuda",
        usable_cpus=12,
    )
    rec = diagnose(_input_evidence(cfg)).recommendations[0]
    assert rec.settings == {"num_workers": 8, "persistent_workers": True, "pin_memory": True}
    assert (
        rec.snippet
        == "DataLoader(dataset, batch_size=32, num_workers=8, persistent_workers=True, pin_memory=True)"
    )


def test_epoch_start_stall_with_workers_recommends_persistent_workers() -> None:
    cfg = RunConfig(
        num_workers=4, persistent_workers=False, prefetch_factor=4, usable_cpus=4, accelerator="cpu"
    )
    timing = TimingStats(
        steps=40, step_ms=[10.0] * 30, data_wait_ms=[1.0] * 30, epoch_start_wait_ms=[400.0, 380.0]
    )
    ev = Evidence(
        summaries=[TraceSummary(num_steps=5, data_wait=0.3, host_op_long=0.6)], config=cfg, timing=timing
    )
    report = diagnose(ev)
    assert any(f.kind == "epoch_start_stall" for f in report.findings)
    assert {"persistent_workers": True} in [r.settings for r in report.recommendations]


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [
        (RunConfig(accelerator="cuda", precision="32-true", bf16_supported=True), "bf16-mixed"),
        (RunConfig(accelerator="cuda", precision="32-true", bf16_supported=False), "16-mixed"),
        (RunConfig(accelerator="cuda", precision="bf16-mixed", bf16_supported=True), None),
        (RunConfig(accelerator="cpu", precision="32-true", bf16_supported=False), None),
        (RunConfig(accelerator="cpu", precision="32-true", bf16_supported=True), "bf16-mixed"),
    ],
)
def test_precision_advice_fits_the_device(cfg: RunConfig, expected: str | None) -> None:
    recs = advise(Category.COMPUTE, [], Evidence(config=cfg))
    got = [r.settings["precision"] for r in recs if "precision" in r.settings]
    assert got == ([expected] if expected else [])


def test_tf32_only_on_ampere_at_highest_precision() -> None:
    on = RunConfig(
        accelerator="cuda", precision="bf16-mixed", tf32_capable=True, float32_matmul_precision="highest"
    )
    off = RunConfig(
        accelerator="cuda", precision="32-true", tf32_capable=True, float32_matmul_precision="high"
    )
    old = RunConfig(
        accelerator="cuda", precision="32-true", tf32_capable=False, float32_matmul_precision="highest"
    )

    def tf32(cfg: RunConfig) -> bool:
        return any(
            "float32_matmul_precision" in r.settings
            for r in advise(Category.COMPUTE, [], Evidence(config=cfg))
        )

    assert tf32(on) and not tf32(off) and not tf32(old)


def test_compile_not_recommended_when_already_compiled() -> None:
    recs = advise(Category.OVERHEAD, [], Evidence(config=RunConfig(compiled=True, batch_size=8)))
    assert not any(r.settings.get("compile") for r in recs)
    assert {"batch_size": 16} in [r.settings for r in recs]


def test_no_evidence_is_unknown() -> None:
    report = diagnose(Evidence())
    assert report.primary == Category.UNKNOWN
    assert report.confidence <= 0.2
    assert report.to_dict()["schema_version"] == 1


def test_report_round_trips_through_json() -> None:
    from lightning_bottleneck.report import Report

    report = diagnose(_input_evidence(RunConfig(num_workers=0, batch_size=4, usable_cpus=4)))
    again = Report.from_dict(report.to_dict())
    assert again.to_dict() == report.to_dict()
    assert "input-bound" in str(report)


def test_compute_is_worth_less_once_mixed_precision_is_on() -> None:
    shares = _shares(sync=0.25, compute=0.7)
    fp32 = Evidence(config=RunConfig(accelerator="cuda", precision="32-true"))
    bf16 = Evidence(config=RunConfig(accelerator="cuda", precision="bf16-mixed"))
    assert choose_primary(shares, fp32)[0] == Category.COMPUTE  # AMP would save ~35%
    primary, savings = choose_primary(shares, bf16)
    assert primary == Category.SYNC  # only compile's ~25% of 70% is left for compute
    assert savings["compute"] == pytest.approx(0.7 * T.COMPUTE_RECOVERABLE_NO_AMP)


def test_attention_advice_only_for_hand_written_attention() -> None:
    def recs(softmax: float, sdpa: float) -> list[str]:
        s = TraceSummary(num_steps=5, host_op_long=0.9, softmax_per_step=softmax, sdpa_per_step=sdpa)
        return [r.title for r in diagnose(Evidence(summaries=[s])).recommendations]

    assert "Use the fused attention kernel" in recs(softmax=12, sdpa=0)
    assert "Use the fused attention kernel" not in recs(softmax=0, sdpa=0)  # an MLP: nothing to fuse
    assert "Use the fused attention kernel" not in recs(softmax=12, sdpa=12)  # already fused


def test_cuda_memory_pressure_findings() -> None:
    from lightning_bottleneck.evidence import MemoryStats
    from lightning_bottleneck.rules import memory_findings

    gib = 1 << 30
    full = Evidence(
        memory=MemoryStats(device_total=80 * gib, peak_allocated=70 * gib, peak_reserved=75 * gib)
    )
    retries = Evidence(memory=MemoryStats(device_total=80 * gib, peak_reserved=40 * gib, num_alloc_retries=3))
    fine = Evidence(memory=MemoryStats(device_total=80 * gib, peak_reserved=40 * gib))
    (high,) = memory_findings(full)
    assert high.severity.value == "high" and "94%" in high.summary
    (medium,) = memory_findings(retries)
    assert medium.severity.value == "medium" and medium.evidence["num_alloc_retries"] == 3
    assert memory_findings(fine) == []


def test_too_few_steps_is_unknown(tmp_path) -> None:
    from conftest import fit_scenario

    _, cb = fit_scenario("compute", tmp_path, max_steps=2)
    assert cb.report is not None
    assert cb.report.primary == Category.UNKNOWN
    assert any("Too few training steps" in n for n in cb.report.notes)


def test_cgroup_cpu_quota_is_read_from_v2_and_v1_files(tmp_path) -> None:
    from lightning_bottleneck.measure.cpus import cgroup_cpu_quota, usable_cpus

    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(v2) is None
    (v2 / "cpu.max").write_text("250000 100000\n")
    assert cgroup_cpu_quota(v2) == pytest.approx(2.5)
    v1 = tmp_path / "v1" / "cpu"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(tmp_path / "v1") is None
    (v1 / "cpu.cfs_quota_us").write_text("400000\n")
    assert cgroup_cpu_quota(tmp_path / "v1") == pytest.approx(4.0)
    assert 1 <= usable_cpus() <= (__import__("os").cpu_count() or 1)


def test_ring_buffer_keeps_the_most_recent_values_without_growing() -> None:
    from lightning_bottleneck.live.timing import _Ring

    ring = _Ring(4)
    for v in range(1, 3):
        ring.push(float(v))
    assert ring.values() == [1.0, 2.0] and ring.last(5) == [1.0, 2.0] and ring.last(1) == [2.0]
    for v in range(3, 11):
        ring.push(float(v))
    assert len(ring.buf) == 4
    assert ring.values() == [7.0, 8.0, 9.0, 10.0]
    for k in range(0, 6):
        assert ring.last(k) == ring.values()[len(ring.values()) - min(k, 4) :]
