"""CPU of the callback's analysis child process per fit (``python benchmarks/overhead.py --child STEPS``).

During a callback fit (the ``callback`` variant of ``overhead.py``: defaults, mid-run and end-of-fit verdicts,
pictures) a thread samples every child the callback started (``live/offload.py``'s ``live_children``) with
psutil every 10 ms: its CPU seconds (user + system, the last reading before it is killed at teardown), its
thread count, and its CPU rate over every 100 ms window (above 1.0 the child would be using more than one
core). Not ``RUSAGE_CHILDREN``: that also counts DataLoader workers of the loader probe.

``--against REPO`` runs the same fits with another checkout of the package (e.g. the commit before a
change), each fit in its own process, interleaved round by round: a side-by-side comparison in one run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

#: Seconds between samples, and the window over which the child's CPU rate is judged.
SAMPLE_S = 0.01
RATE_WINDOW_S = 0.1


class ChildSampler:
    """Samples the callback's child processes (psutil) in a daemon thread until :meth:`stop`."""

    def __init__(self) -> None:
        self.cpu: dict[int, float] = {}  # pid -> last CPU seconds seen
        self.max_threads = 0
        self.peak_rate = 0.0  # CPU seconds per wall second over RATE_WINDOW_S, the highest seen
        self._history: dict[int, list[tuple[float, float]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ChildSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psutil

        from lightning_bottleneck.live.offload import live_children

        procs: dict[int, Any] = {}
        while not self._stop.is_set():
            for pid in live_children():
                try:
                    proc = procs.setdefault(pid, psutil.Process(pid))
                    times = proc.cpu_times()
                    threads = proc.num_threads()
                except (psutil.Error, OSError):
                    continue
                now, cpu = time.perf_counter(), times.user + times.system
                self.cpu[pid] = cpu
                self.max_threads = max(self.max_threads, threads)
                hist = self._history.setdefault(pid, [])
                hist.append((now, cpu))
                while len(hist) > 1 and now - hist[1][0] >= RATE_WINDOW_S:
                    hist.pop(0)
                if now - hist[0][0] >= RATE_WINDOW_S:
                    self.peak_rate = max(self.peak_rate, (cpu - hist[0][1]) / (now - hist[0][0]))
            time.sleep(SAMPLE_S)


def one_fit(steps: int, run_fit: Callable[[int, str], Any]) -> dict[str, Any]:
    """One callback fit of ``steps`` steps with the sampler on: the child's CPU and more, as a dict."""
    sampler = ChildSampler().start()
    fit = run_fit(steps, "callback")
    sampler.stop()
    return {
        "child_cpu_s": sum(sampler.cpu.values()),
        "children": len(sampler.cpu),
        "max_threads": sampler.max_threads,
        "peak_cores": sampler.peak_rate,
        "fit_s": fit.seconds,
    }


def side_by_side(steps: int, rounds: int, against: str | None) -> None:
    """``rounds`` fits per checkout, interleaved, each in a fresh process; prints per-round and medians."""
    repos = [("this", str(REPO))] + ([("against", str(Path(against).resolve()))] if against else [])
    rows: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in repos}
    for r in range(rounds):
        order = repos if r % 2 == 0 else repos[::-1]
        for label, repo in order:
            env = dict(os.environ, PYTHONPATH=repo)
            cmd = [sys.executable, str(HERE / "overhead.py"), "--child-one", str(steps)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=repo, check=False)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            if proc.returncode != 0 or not lines:
                print(f"{label}: failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}", flush=True)
                continue
            row = json.loads(lines[-1])
            rows[label].append(row)
            print(f"round {r + 1} {label:<8} ({repo}): " + _fmt(row), flush=True)
    print(f"\nanalysis child per {steps}-step callback fit, median of {rounds} rounds:")
    for label, repo in repos:
        if rows[label]:
            med = {k: statistics.median(x[k] for x in rows[label]) for k in rows[label][0]}
            med["max_threads"] = max(x["max_threads"] for x in rows[label])
            med["peak_cores"] = max(x["peak_cores"] for x in rows[label])
            print(f"  {label:<8} {repo}: " + _fmt(med) + " (threads, peak: the most over rounds)")


def _fmt(row: dict[str, Any]) -> str:
    return (
        f"child CPU {row['child_cpu_s']:.3f} s, threads {row['max_threads']}, "
        f"peak {row['peak_cores']:.2f} cores over {RATE_WINDOW_S * 1e3:.0f} ms, fit {row['fit_s']:.2f} s"
    )
