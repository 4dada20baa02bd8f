"""The heavy work in a torch-free child process: the same answer as in-process, a fallback with a note when
the child fails, no child left alive after a fit (normal or failed), and a child that never imports torch.

Real fits of a few steps on CPU; the failing child is a real one (a module that does not exist, a module
that hangs), not a mock.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader

from lightning_bottleneck import BottleneckCallback
from lightning_bottleneck.live import offload
from lightning_bottleneck.live.window_analysis import WindowAnalysis
from lightning_bottleneck.measure.cpus import usable_cpus
from lightning_bottleneck.output.child_process import READY_JOB, analyse_trace_file

from conftest import quiet_trainer
from scenarios import Regressor, in_memory

SMALL = {"wait": 1, "warmup": 1, "active": 3, "verbose": False, "probe_loader": False, "trial_budget_s": 0}
FALLBACK_NOTE = "analysed in the training process"


class _Recorded:
    """Every child process started, so that the test can check each one has ended."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        real = subprocess.Popen

        def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
            proc = real(*args, **kwargs)
            self.procs.append(proc)
            return proc

        monkeypatch.setattr(offload.subprocess, "Popen", popen)

    def alive(self, within_s: float = 5.0) -> list[int]:
        """The children still running ``within_s`` seconds from now (a killed child is reaped by a daemon
        thread, not waited for in teardown: it may take a few milliseconds to end)."""
        deadline = time.monotonic() + within_s
        while True:
            left = [p.pid for p in self.procs if p.poll() is None]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.01)


def _fit(root: Path, steps: int = 12, model: Any = None) -> BottleneckCallback:
    cb = BottleneckCallback(**SMALL)
    torch.manual_seed(0)
    trainer = quiet_trainer(root, [cb], max_steps=steps)
    trainer.fit(model or Regressor(), DataLoader(in_memory(512, 32), batch_size=16))
    return cb


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    cb = _fit(tmp_path_factory.mktemp("fit"))
    assert cb._run.window.trace_files
    return cb._run.window.trace_files[-1]


def test_child_analysis_gives_the_in_process_summary(trace_file: str) -> None:
    answer = offload.run_child({"job": "analyse", "path": trace_file, "rank": 3})
    summary, phases = analyse_trace_file(trace_file, 3)
    assert answer["summary"].to_dict() == summary.to_dict()
    assert answer["phases"] is not None and phases is not None
    assert answer["phases"].to_dict() == phases.to_dict()
    assert summary.num_steps == 3 and answer["summary"].rank == 3
    assert answer["forbidden_modules"] == []


def test_the_child_runs_under_an_import_blocker(trace_file: str, tmp_path: Path) -> None:
    """The entry module, run with torch and lightning unimportable, still analyses and draws."""
    blocked = (
        "import importlib.abc, runpy, sys\n"
        "class B(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'lightning', 'pytorch_lightning'):\n"
        "            raise ImportError('blocked import of ' + name)\n"
        "sys.meta_path.insert(0, B())\n"
        f"runpy.run_module({offload.ENTRY_MODULE!r}, run_name='__main__')\n"
    )
    _summary, phases = analyse_trace_file(trace_file, 0)
    report = _fit(tmp_path / "fit", steps=8).report
    for request in (
        {"job": "analyse", "path": trace_file, "rank": 0},
        {
            "job": "picture",
            "report": report,
            "phases": phases,
            "out_dir": str(tmp_path),
            "image": True,
        },
    ):
        out = subprocess.run(
            [sys.executable, "-c", blocked],
            input=offload.plain_pickle(request),
            capture_output=True,
            timeout=120,
        )
        answer = pickle.loads(out.stdout)
        assert answer["ok"], answer
        assert answer["forbidden_modules"] == []
    assert answer["html"] == str(tmp_path / "bottleneck_report.html") and Path(answer["html"]).is_file()
    assert answer["png"][:8] == b"\x89PNG\r\n\x1a\n"


def test_a_fit_uses_the_child_and_leaves_none_alive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started = _Recorded(monkeypatch)
    cb = _fit(tmp_path)
    assert cb.report is not None and cb.report.primary is not None
    assert not any(FALLBACK_NOTE in n or "drawn in the training process" in n for n in cb.report.notes)
    assert len(started.procs) == 1  # one warm child for the fit: the analysis and both pictures
    assert started.alive() == [] and offload.live_children() == []
    assert (tmp_path / "bottleneck_report.html").is_file()


@pytest.mark.parametrize("spare_core", [False, True], ids=["every-core", "a-core-spare"])
def test_a_fit_on_the_cpu_has_the_child_warm_before_its_first_step_where_no_core_is_spare(
    tmp_path: Path, spare_core: bool
) -> None:
    """The child's start (~0.2-0.3 s of CPU) beside the first CPU steps took the cores their intra-op threads run on
    (cpu_transform_light, 2 cores, 2 threads: 1.3 ms steps took 50-130 ms, booked as training by the ledger); the
    fit waits for it in setup instead, before the loader's workers start, so that it answered "ready" before the
    first batch. With a core to spare (fewer intra-op threads than usable cores) it starts beside the steps."""
    cores = usable_cpus()
    if spare_core and cores < 2:
        pytest.skip("one usable core: none to spare")
    cb = BottleneckCallback(**SMALL)
    seen: list[bool] = []

    class FirstStep(pl.Callback):
        def on_train_batch_start(self, *args: Any) -> None:
            if not seen:
                worker = cb._run.worker
                seen.append(worker is not None and getattr(worker, "ready", False) is True)

    threads = torch.get_num_threads()
    torch.set_num_threads(cores - 1 if spare_core else cores)
    try:
        trainer = quiet_trainer(tmp_path, [FirstStep(), cb], max_steps=12)
        trainer.fit(Regressor(), DataLoader(in_memory(512, 32), batch_size=16))
    finally:
        torch.set_num_threads(threads)
    assert seen == [not spare_core]
    assert cb.report is not None and not any(FALLBACK_NOTE in n for n in cb.report.notes)
    # the wait (~0.2-0.3 s) is this package's time: as setup's it read as the fit's, and worker_restart's
    # num_workers=0 was predicted 9.00x for an applied 34.68x
    assert cb.report.metrics["ledger"]["parts"]["setup_teardown"] < 0.1, cb.report.metrics["ledger"]["parts"]


def test_ready_means_warm_and_a_child_that_never_answers_fails_the_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ready answer comes after the child's imports, the Text-tab writer's too (no import beside the steps
    after it); a child that hangs is killed at the wait's timeout and later requests fail at once."""
    worker = offload.ChildWorker.start(warm_text=True)
    try:
        # sent at once: the request waits before the child's first idle moment
        answer = _raw_request(worker, {"job": READY_JOB})
        assert answer["ok"] is True and answer["text_writer_ready"] is True, answer
    finally:
        worker.close()
    _hanging_entry(tmp_path, monkeypatch)
    hung = offload.ChildWorker.start()
    t0 = time.monotonic()
    assert hung.wait_ready(1.0) is False and not hung.ready
    assert time.monotonic() - t0 < 30
    with pytest.raises(offload.ChildFailed, match="longer than 1 s"):
        hung.request({"job": "analyse", "path": "nothing", "rank": 0})
    hung.close()


def test_a_child_that_cannot_run_is_one_note_and_the_verdict_still_comes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(offload, "ENTRY_MODULE", "lightning_bottleneck.no_such_module")
    # a single process takes the mid-run verdict at the first batch end after the (here in-process)
    # analysis finished, without waiting: steps of several ms, so that 200 outlast a failed child start
    # (an interpreter that exits ~0.2 s in) and the in-process analysis even on a loaded machine
    cb = _fit(tmp_path, steps=200, model=Regressor(width=512, depth=3))
    assert cb.report is not None and cb.midrun_report is not None
    own = [n for n in cb.report.notes if FALLBACK_NOTE in n]
    assert len(own) == 1 and "No module named" in own[0], cb.report.notes
    assert cb.report.steps_profiled == 3  # the in-process analysis gave the summary
    assert any("drawn in the training process" in n for n in cb.report.notes)
    assert (tmp_path / "bottleneck_report.html").is_file()
    assert cb.report.to_dict()["primary"] == cb.midrun_report.to_dict()["primary"]


def _hanging_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "hangs_forever.py").write_text("import time\ntime.sleep(600)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(offload, "ENTRY_MODULE", "hangs_forever")


def test_a_child_past_its_time_is_killed_and_the_work_done_in_process(
    trace_file: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hanging_entry(tmp_path, monkeypatch)
    monkeypatch.setattr(offload, "CHILD_TIMEOUT_S", 1.0)
    started = _Recorded(monkeypatch)
    analysis = WindowAnalysis.start(trace_file, 0)
    summary, _ = analysis.result(timeout=120)
    assert summary.num_steps == 3
    assert len(analysis.notes) == 1 and "longer than 1 s" in analysis.notes[0]
    assert len(started.procs) == 1 and started.alive() == []


def test_closing_a_running_analysis_kills_its_child_without_a_fallback(
    trace_file: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hanging_entry(tmp_path, monkeypatch)
    started = _Recorded(monkeypatch)
    analysis = WindowAnalysis.start(trace_file, 0)
    while not started.procs:
        analysis.join(0.05)
    analysis.close()
    assert analysis.done and started.alive() == []
    with pytest.raises(offload.ChildFailed):
        analysis.result(timeout=1)
    assert analysis.notes == []


class _DiesAfterTheWindow(Regressor):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == 6:  # the window (steps 0-4) is closed; its analysis has just started
            raise RuntimeError("boom")
        return super().training_step(batch, batch_idx)


def test_no_child_outlives_a_fit_that_dies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started = _Recorded(monkeypatch)
    cb = BottleneckCallback(**SMALL)
    trainer = quiet_trainer(tmp_path, [cb], max_steps=40)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(_DiesAfterTheWindow(), DataLoader(in_memory(512, 32), batch_size=16))
    assert started.procs and started.alive() == [] and offload.live_children() == []
    assert cb.report is not None
    assert json.loads((tmp_path / "bottleneck_report.json").read_text())["primary"]


def test_in_process_switch(trace_file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(offload.IN_PROCESS_ENV, "1")
    started = _Recorded(monkeypatch)
    analysis = WindowAnalysis.start(trace_file, 0)
    summary, _ = analysis.result(timeout=120)
    assert summary.num_steps == 3 and started.procs == []
    assert offload.IN_PROCESS_ENV in analysis.notes[0]


def test_the_child_draws_the_page_the_training_process_would(trace_file: str, tmp_path: Path) -> None:
    from lightning_bottleneck.output.html import render_html

    report = _fit(tmp_path / "fit", steps=8).report
    assert report is not None
    _, phases = analyse_trace_file(trace_file, 0)
    request = {
        "job": "picture",
        "report": report,
        "phases": phases,
        "out_dir": str(tmp_path),
        "image": False,
    }
    answer = offload.run_child(request)
    assert answer["png"] is None and answer["forbidden_modules"] == []
    assert Path(answer["html"]).read_text() == render_html(report, phases)


def test_a_worker_past_its_time_is_killed_and_later_requests_fail_at_once(
    trace_file: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hanging_entry(tmp_path, monkeypatch)
    monkeypatch.setattr(offload, "CHILD_TIMEOUT_S", 1.0)
    started = _Recorded(monkeypatch)
    worker = offload.ChildWorker.start()
    analysis = WindowAnalysis.start(trace_file, 0, worker)
    summary, _ = analysis.result(timeout=120)  # done in-process after the child was killed
    assert summary.num_steps == 3 and "longer than 1 s" in analysis.notes[0]
    assert started.alive() == []
    with pytest.raises(offload.ChildFailed, match="longer than 1 s"):
        worker.request({"job": "analyse", "path": trace_file, "rank": 0})
    worker.close()


def test_a_worker_told_it_writes_the_text_readies_that_writer_while_idle_and_only_then(
    trace_file: str,
) -> None:
    """A fit without a TensorBoard logger: the child imports the Text-tab writer before any job asks for it
    (the end-of-fit picture job must not pay ~0.1 s of imports while teardown waits); with a logger, never."""
    ready: dict[bool, list[bool]] = {}
    for warm in (True, False):
        worker = offload.ChildWorker.start(warm_text=warm)
        try:
            answers = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # no job needs the writer: an unknown one answers an error
                answer = _raw_request(worker, {"job": "nothing"})
                answers.append(answer["text_writer_ready"])
                if answers[-1] or (not warm and len(answers) >= 5):
                    break
                time.sleep(0.2)
            answers.append(
                _raw_request(worker, {"job": "analyse", "path": trace_file, "rank": 0})["text_writer_ready"]
            )
            ready[warm] = answers
        finally:
            worker.close()
    assert ready[True][-1] and ready[True][-2], ready  # before the analysis, and still after it
    assert not any(ready[False]), ready  # a fit with a TensorBoard logger writes its text in-process


def _raw_request(worker: offload.ChildWorker, request: dict[str, Any]) -> dict[str, Any]:
    """The child's whole answer, errors included (``ChildWorker.request`` raises on ``ok: False``)."""
    proc = worker._proc
    assert proc is not None and proc.stdin is not None and proc.stdout is not None
    pickle.dump(request, proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
    proc.stdin.flush()
    return dict(pickle.load(proc.stdout))
