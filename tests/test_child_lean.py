"""The analysis child spends less CPU beside training and never more than one core (issue 30).

* Its numpy BLAS / OpenMP pools are held to one thread (``offload.ONE_THREAD_ENV``): one thread in all.
* It imports matplotlib without building the ``Artist.set`` docstrings, and draws the very same PNG, byte
  for byte, as a process that imported matplotlib the usual way.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lightning_bottleneck.live import offload
from lightning_bottleneck.offline import analyze_paths
from lightning_bottleneck.output.child_process import analyse_trace_file

from _trace_builders import gpu_training_events, write_trace


def test_the_child_runs_one_thread(tmp_path: Path) -> None:
    psutil = pytest.importorskip("psutil")
    env = offload._env()
    assert all(env[name] == "1" for name in offload.ONE_THREAD_ENV)
    trace = write_trace(tmp_path / "t.json", gpu_training_events() * 10)
    worker = offload.ChildWorker.start()
    try:
        answer = worker.request({"job": "analyse", "path": str(trace), "rank": 0})
        assert answer["summary"].num_steps > 0
        assert worker.pid is not None
        assert psutil.Process(worker.pid).num_threads() == 1
    finally:
        worker.close()


def test_the_child_draws_the_same_png_with_the_lean_import(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from lightning_bottleneck.output.image import render_png

    trace = write_trace(tmp_path / "t.json", gpu_training_events() * 10)
    report = analyze_paths([trace])
    _, phases = analyse_trace_file(trace, 0)
    request = {"job": "picture", "report": report, "phases": phases, "out_dir": None, "image": True}
    answer = offload.run_child(request)
    assert answer["forbidden_modules"] == []
    assert answer["png"] == render_png(report, phases)


def test_the_lean_import_puts_matplotlib_back() -> None:
    pytest.importorskip("matplotlib")
    code = (
        "import lightning_bottleneck.output.child_process as cp\n"
        "import matplotlib.artist as a\n"
        "update, kwdoc = a.Artist.__dict__[cp._MPL_SET_DOC], a.kwdoc\n"
        "cp._import_matplotlib_lean()\n"
        "import sys\n"
        "assert 'matplotlib.figure' in sys.modules\n"
        "assert a.Artist.__dict__[cp._MPL_SET_DOC] is update and a.kwdoc is kwdoc\n"
        "from matplotlib.lines import Line2D\n"
        "Line2D([0], [0]).set(linewidth=2, color='red')  # set() works without its docstring\n"
        "print('ok')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=offload._env(), check=False
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-500:]
