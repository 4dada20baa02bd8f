"""``lightning-bottleneck analyze`` / ``compare``: output schema, exit codes, and no torch import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_bottleneck.cli import main

from _trace_builders import gpu_training_events, write_trace

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
REPO = Path(__file__).resolve().parents[1]

REPORT_KEYS = {
    "schema_version", "primary", "confidence", "steps_observed", "steps_profiled", "step_time_ms",
    "breakdown", "findings", "recommendations", "ranks", "stragglers", "environment", "trace_files",
}  # fmt: skip


@pytest.fixture
def gpu_trace(tmp_path: Path) -> Path:
    return write_trace(
        tmp_path / "rank0.json.gz", gpu_training_events(), gz=True, distributedInfo={"rank": 0}
    )


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_analyze_json_schema(gpu_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = _json(capsys, ["analyze", str(gpu_trace), "--json"])
    assert set(report) >= REPORT_KEYS
    assert set(report["step_time_ms"]) == {"median", "p90", "samples"}
    assert len(report["step_time_ms"]["samples"]) == report["steps_profiled"]
    for f in report["findings"]:
        assert {"kind", "severity", "summary", "evidence", "location"} <= set(f)
    for r in report["recommendations"]:
        assert {"kind", "title", "detail", "settings"} <= set(r)
    assert [r["rank"] for r in report["ranks"]] == [0]
    assert {"rank", "primary", "breakdown", "step_time_ms"} <= set(report["ranks"][0])
    assert report["steps_profiled"] == 2
    assert sum(report["breakdown"].values()) == pytest.approx(1.0, abs=1e-3)


def test_analyze_text(gpu_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(gpu_trace)]) == 0
    out = capsys.readouterr().out
    assert out.strip() and "{" not in out.splitlines()[0]


def test_several_ranks_and_rank_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for rank in (0, 1):
        write_trace(tmp_path / f"rank{rank}.json", gpu_training_events(), distributedInfo={"rank": rank})
    report = _json(capsys, ["analyze", str(tmp_path), "--json", "--rank", "1"])
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert main(["analyze", str(tmp_path), "--rank", "7"]) == 2
    err = capsys.readouterr().err
    assert "rank 7" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("missing.json", None),
        ("cut.json.gz", "truncated-gz"),
        ("text.json", b"hello, I am not JSON"),
        ("other.json", b'{"name": "a package.json", "version": "1.0"}'),
        ("notgz.json.gz", b"\x1f\x8bgarbage-not-really-gzip"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: bytes | str | None
) -> None:
    path = tmp_path / name
    if content == "truncated-gz":
        good = write_trace(tmp_path / "good.json.gz", gpu_training_events() * 30, gz=True)
        path.write_bytes(good.read_bytes()[:-200])
    elif isinstance(content, bytes):
        path.write_bytes(content)
    assert main(["analyze", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("lightning-bottleneck: error:") and captured.err.count("\n") == 1
    assert "Traceback" not in captured.err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["analyze"])
    assert info.value.code == 2


def test_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = write_trace(tmp_path / "before.json", gpu_training_events())
    fast = gpu_training_events(scale=0.5)  # same work, every span halved: 2x faster steps
    after = write_trace(tmp_path / "after.json", fast)
    result = _json(capsys, ["compare", str(before), str(after), "--json"])
    assert result["step_time_ratio"] == pytest.approx(0.5)
    assert result["helped"] is True and "helped" in result["verdict"]
    assert set(result["breakdown_change"]) == set(result["before"]["breakdown"])
    # a saved report.json works as either side
    report = tmp_path / "report.json"
    assert main(["analyze", str(before), "--json"]) == 0
    report.write_text(capsys.readouterr().out)
    assert main(["compare", str(report), str(before)]) == 0
    assert "No measurable change" in capsys.readouterr().out


def test_module_entry_point_never_imports_torch_or_lightning(gpu_trace: Path) -> None:
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['lightning_bottleneck', 'analyze', {str(gpu_trace)!r}, '--json']\n"
        "try:\n"
        "    runpy.run_module('lightning_bottleneck', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'lightning', 'pytorch_lightning', 'lightning_bottleneck.callback'))\n"
        "sys.stderr.write('HEAVY=' + repr(heavy))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY=[]" in proc.stderr
    assert json.loads(proc.stdout)["schema_version"] == 1


def test_python_m_importtime(gpu_trace: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "lightning_bottleneck", "analyze", str(gpu_trace)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert not {m for m in imported if m.split(".")[0] in ("torch", "lightning", "pytorch_lightning")}


def test_shared_two_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    path = SHARED / "two_ranks_of128"
    if not path.is_dir():
        pytest.skip("../shared/traces is absent")
    report = _json(capsys, ["analyze", str(path), "--json", "--rank", "1"])
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert report["environment"]["world_size"] == 128
    rank1 = next(r for r in report["ranks"] if r["rank"] == 1)
    assert report["primary"] == rank1["primary"]
