"""Comparisons that know about noise: per-step samples in reports, bootstrap interval, CI gate."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from lightning_bottleneck.categories import Category
from lightning_bottleneck.cli import main
from lightning_bottleneck.output.compare import (
    HELPED,
    HURT,
    INCONCLUSIVE,
    NO_CHANGE,
    compare_runs,
    ratio_interval,
    slower_beyond,
)
from lightning_bottleneck.report import MAX_STEP_SAMPLES, Report, StepTime


def _noisy(n: int, median: float, spread: float, seed: int) -> list[float]:
    """Step times of a busy machine: log-normal around ``median``, plus a few 3x stalls."""
    rng = random.Random(seed)
    out = [median * rng.lognormvariate(0.0, spread) for _ in range(n)]
    for i in rng.sample(range(n), max(1, n // 10)):
        out[i] *= 3.0
    return out


def _report(samples: list[float] | None, median: float | None = None) -> Report:
    st = StepTime.from_samples(samples) if samples else None
    if samples is None and median is not None:
        st = StepTime(median, median * 1.2)  # a report saved before samples existed
    return Report(Category.COMPUTE, 0.8, 10, len(samples or []), st, {"compute": 1.0})


def test_step_time_keeps_samples_through_json(tmp_path: Path) -> None:
    samples = _noisy(5000, 10.0, 0.2, seed=1)
    report = _report(samples)
    path = report.write(tmp_path / "r.json")
    saved = json.loads(path.read_text())["step_time_ms"]
    assert len(saved["samples"]) == MAX_STEP_SAMPLES  # capped, evenly thinned
    back = Report.read(path).step_time_ms
    assert back is not None and len(back.samples) == MAX_STEP_SAMPLES
    assert back.median == pytest.approx(report.step_time_ms.median, abs=1e-4)  # type: ignore[union-attr]
    # an old report (no samples) still loads
    old = tmp_path / "old.json"
    doc = json.loads(path.read_text())
    del doc["step_time_ms"]["samples"]
    old.write_text(json.dumps(doc))
    assert Report.read(old).step_time_ms.samples == []  # type: ignore[union-attr]


def test_same_configuration_on_a_noisy_machine_is_never_helped_or_hurt() -> None:
    """The issue's case: an unchanged configuration said "2.07x faster". 30 pairs of runs drawn from one
    distribution with 30% spread and stalls: none may be called helped or hurt."""
    outcomes = []
    for seed in range(30):
        before = _report(_noisy(12, 20.0, 0.3, seed=2 * seed))
        after = _report(_noisy(12, 20.0, 0.3, seed=2 * seed + 1))
        result = compare_runs(before, after)
        outcomes.append(result["outcome"])
        if result["outcome"] == INCONCLUSIVE:
            lo, hi = result["ratio_interval"]
            assert lo <= 1.0 <= hi and "interval" in result["verdict"] and result["helped"] is None
    assert set(outcomes) <= {INCONCLUSIVE, NO_CHANGE}, outcomes
    assert INCONCLUSIVE in outcomes


def test_a_real_change_is_seen_through_the_noise() -> None:
    before = _report(_noisy(40, 20.0, 0.2, seed=5))
    faster = _report(_noisy(40, 10.0, 0.2, seed=6))
    slower = _report(_noisy(40, 30.0, 0.2, seed=7))
    helped = compare_runs(before, faster)
    assert helped["outcome"] == HELPED and helped["helped"] is True
    assert helped["ratio_interval"][1] < 1.0 and "faster" in helped["verdict"]
    hurt = compare_runs(before, slower)
    assert hurt["outcome"] == HURT and hurt["ratio_interval"][0] > 1.0
    assert slower_beyond(hurt, 10.0) and not slower_beyond(hurt, 200.0)
    assert not slower_beyond(helped, 0.0)


def test_quiet_identical_runs_are_no_change() -> None:
    steps = [10.0, 10.1, 9.9, 10.05, 9.95, 10.0, 10.02, 9.98]
    result = compare_runs(_report(steps), _report(list(reversed(steps))))
    assert result["outcome"] == NO_CHANGE and result["helped"] is False


def test_interval_is_seeded_and_reproducible() -> None:
    a, b = _noisy(30, 10.0, 0.3, seed=8), _noisy(30, 11.0, 0.3, seed=9)
    assert ratio_interval(a, b) == ratio_interval(a, b)
    assert ratio_interval(a, b, seed=1) != ratio_interval(a, b, seed=2)
    assert ratio_interval([1.0], b) is None  # one sample is no distribution


def test_old_reports_without_samples_are_inconclusive() -> None:
    result = compare_runs(_report(None, median=20.0), _report(None, median=10.0))
    assert result["outcome"] == INCONCLUSIVE and result["helped"] is None
    assert result["step_time_ratio"] == pytest.approx(0.5)
    assert "per-step samples" in result["verdict"]


def _write(path: Path, report: Report) -> str:
    report.write(path)
    return str(path)


def test_fail_if_slower_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _write(tmp_path / "before.json", _report(_noisy(40, 20.0, 0.2, seed=10)))
    slower = _write(tmp_path / "slower.json", _report(_noisy(40, 30.0, 0.2, seed=11)))
    same = _write(tmp_path / "same.json", _report(_noisy(12, 20.0, 0.3, seed=12)))
    assert main(["compare", before, slower, "--fail-if-slower", "10"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "slower" in err
    assert main(["compare", before, slower, "--fail-if-slower", "200"]) == 0
    assert main(["compare", before, same, "--fail-if-slower", "0"]) == 0  # noise never trips the gate
    capsys.readouterr()
    assert main(["compare", slower, before, "--fail-if-slower", "0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["outcome"] == HELPED and result["before_source"].startswith("report ")


def test_report_read_is_the_one_validated_reader(tmp_path: Path) -> None:
    """``Report.read`` (the live side's baseline) and the CLI's reader are one function: a file that is no report
    is a one-line TraceError either way, never a KeyError from deep inside ``from_dict``."""
    from lightning_bottleneck.errors import TraceError
    from lightning_bottleneck.offline import read_report

    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1, "primary": "nope"}')
    for reader in (Report.read, read_report):
        with pytest.raises(TraceError, match="not a lightning-bottleneck report: primary 'nope'"):
            reader(bad)
