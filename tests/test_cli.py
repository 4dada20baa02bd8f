"""``lightning-bottleneck analyze`` / ``compare``: output schema, exit codes, and no torch import."""

from __future__ import annotations

import json
import os
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
        "('torch', 'lightning', 'pytorch_lightning', 'lightning_bottleneck.live.callback'))\n"
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


# ---- the newcomer's path: run folders, --version, help, the zero-code runner ---------------------------


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("lightning-bottleneck 0.")
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and "lightning-bottleneck analyze lightning_logs/version_0/" in text
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    text = capsys.readouterr().out
    assert "the run before the change" in text and "--fail-if-slower" in text


def _run_folder(root: Path, name: str, mtime: float, scale: float = 1.0) -> Path:
    """A Lightning log folder as the callback leaves it: report + traces under ``bottleneck/``."""
    run = root / name
    (run / "bottleneck").mkdir(parents=True)
    trace = write_trace(
        run / "bottleneck" / "host_1.17000.pt.trace.json.gz", gpu_training_events(scale=scale), gz=True
    )
    (run / "hparams.json").write_text("{}")
    os.utime(trace, (mtime, mtime))
    return run


def test_analyze_a_folder_of_runs_uses_the_newest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "lightning_logs"
    _run_folder(logs, "version_0", 1_000_000, scale=1.0)
    _run_folder(logs, "version_1", 2_000_000, scale=0.5)
    report = _json(capsys, ["analyze", str(logs), "--json"])
    assert report["step_time_ms"]["median"] == pytest.approx(0.5, rel=0.01)  # version_1's steps
    assert any("2 runs under" in n and "version_1" in n and "version_0" in n for n in report["notes"])
    assert any("not traces: hparams.json" in n for n in report["notes"])
    # one run's folder: its report next to the traces is skipped with a note, not an error
    single = _json(capsys, ["analyze", str(logs / "version_0"), "--json"])
    (logs / "version_0" / "bottleneck_report.json").write_text(json.dumps(single))
    again = _json(capsys, ["analyze", str(logs / "version_0"), "--json"])
    assert any("bottleneck_report.json" in n for n in again["notes"])
    assert again["step_time_ms"]["median"] == single["step_time_ms"]["median"]


def test_compare_run_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _run_folder(tmp_path, "before", 1_000_000, scale=1.0)
    after = _run_folder(tmp_path, "after", 1_000_000, scale=0.5)
    result = _json(capsys, ["compare", str(before), str(after), "--json"])  # traces in the folders
    assert result["step_time_ratio"] == pytest.approx(0.5, rel=0.01)
    assert "trace file(s) under" in result["after_source"]
    assert main(["analyze", str(after), "--json"]) == 0
    (after / "bottleneck_report.json").write_text(capsys.readouterr().out)
    result = _json(capsys, ["compare", str(before), str(after), "--json"])  # a report wins over traces
    assert result["after_source"].startswith("report ") and result["after_source"].endswith(
        "bottleneck_report.json"
    )


def test_invalid_step_timing_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = gpu_training_events()
    for e in events:
        if e["name"].startswith("ProfilerStep#"):
            e["dur"] = 0
    path = write_trace(tmp_path / "zero_steps.json", events)
    assert main(["analyze", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert "invalid timing" in err and err.count("\n") == 1


TINY_SCRIPT = """
import sys
import torch
from torch.utils.data import DataLoader, TensorDataset
import lightning.pytorch as pl


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


steps = int(sys.argv[sys.argv.index("--steps") + 1])
data = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=4)
trainer = pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=sys.argv[1])
trainer.fit(Model(), data)
print("SCRIPT-DONE", len([c for c in trainer.callbacks if type(c).__name__ == "BottleneckCallback"]))
"""


@pytest.mark.slow
def test_run_an_unmodified_script(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TINY_SCRIPT)
    report = tmp_path / "r.json"
    cmd = [
        sys.executable,
        "-m",
        "lightning_bottleneck",
        "run",
        "--wait",
        "1",
        "--warmup",
        "1",
        "--active",
        "3",
    ]
    cmd += ["--report-path", str(report), str(script), str(tmp_path), "--steps", "8"]
    env = {k: v for k, v in os.environ.items() if k != "LIGHTNING_BOTTLENECK"}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "SCRIPT-DONE 1" in proc.stdout  # the script's own arguments reached it; one callback attached
    saved = json.loads(report.read_text())
    assert saved["steps_profiled"] >= 2 and saved["primary"] in REPORT_PRIMARIES
    assert "evidence:" in proc.stderr  # the callback's summary, printed when fit ended
    assert f"lightning-bottleneck: verdict: {saved['primary']} (report: {report})" in proc.stderr
    assert "Traceback" not in proc.stderr


REPORT_PRIMARIES = {"input", "sync", "overhead", "compute", "memory", "communication", "unknown"}


def test_run_missing_script_and_bad_option_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tmp_path / "nope.py")]) == 2
    assert "no such script" in capsys.readouterr().err
    script = tmp_path / "train.py"
    script.write_text("print('hi')")
    assert main(["run", "--report-path", "a,b.json", str(script)]) == 2
    assert "may not hold ','" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["run", "--wait", "two", str(script)])
    assert info.value.code == 2


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("wiat=2", ["'wiat'", "valid options:", "wait", "active"]),
        ("active=0", ["active", ">= 1", "0"]),
        ("wait", ["key=value"]),
    ],
)
def test_env_var_mistakes_give_one_line(value: str, words: list[str]) -> None:
    code = "import lightning.pytorch as pl\npl.Trainer(logger=False)\nprint('NOT REACHED')\n"
    env = {**os.environ, "LIGHTNING_BOTTLENECK": value}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1 and "NOT REACHED" not in proc.stdout
    lines = [line for line in proc.stderr.splitlines() if "lightning-bottleneck" in line]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-1500:]
    for word in words:
        assert word in lines[0], lines[0]


def test_internal_errors_are_one_line_and_json_is_strict(
    gpu_trace: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import lightning_bottleneck.cli as cli

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(cli, "analyze_paths", broken)
    assert main(["analyze", str(gpu_trace)]) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "RuntimeError: a bug over two lines" in err.replace("\\n", " ")
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    with pytest.raises(RuntimeError):
        main(["analyze", str(gpu_trace)])
    text = cli.strict_json({"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": -float("inf")}})
    assert json.loads(text) == {"a": None, "b": [None, 1.5], "c": {"d": None}}
