"""The analysis child spends less CPU beside training and never more than one core (issue 30).

* Its numpy BLAS / OpenMP pools are held to one thread (``offload.ONE_THREAD_ENV``): one thread in all.
* It draws the picture with Pillow and never imports matplotlib (~0.45 s of CPU a fit: its import and its
  Agg drawing), and its PNG is the very one, byte for byte, that the training process's fallback draws.
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


def test_the_child_draws_the_same_png_as_the_fallback(tmp_path: Path) -> None:
    pytest.importorskip("PIL")
    from lightning_bottleneck.output.image import render_png

    trace = write_trace(tmp_path / "t.json", gpu_training_events() * 10)
    report = analyze_paths([trace])
    _, phases = analyse_trace_file(trace, 0)
    request = {"job": "picture", "report": report, "phases": phases, "out_dir": None, "image": True}
    answer = offload.run_child(request)
    assert answer["forbidden_modules"] == []
    assert answer["png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert answer["png"] == render_png(report, phases)


def test_the_picture_never_imports_matplotlib(tmp_path: Path) -> None:
    """The child's whole picture job (the HTML page and the PNG) runs without importing matplotlib."""
    pytest.importorskip("PIL")
    trace = write_trace(tmp_path / "t.json", gpu_training_events() * 10)
    report = analyze_paths([trace])
    _, phases = analyse_trace_file(trace, 0)
    request = {"job": "picture", "report": report, "phases": phases, "out_dir": str(tmp_path), "image": True}
    (tmp_path / "request.pickle").write_bytes(offload.plain_pickle(request))
    code = (
        "import pickle, sys\n"
        "from lightning_bottleneck.output.child_process import handle\n"
        f"answer = handle(pickle.load(open({str(tmp_path / 'request.pickle')!r}, 'rb')))\n"
        "assert answer['png'][:8] == b'\\x89PNG\\r\\n\\x1a\\n' and answer['html'], answer\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=offload._env(), check=False
    )
    assert proc.returncode == 0, proc.stderr[-500:]
    assert proc.stdout.strip() == "[]"
    assert (tmp_path / "bottleneck_report.html").is_file()
