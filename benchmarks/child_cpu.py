"""CPU of the callback's analysis child process per fit (``python benchmarks/overhead.py --child STEPS``).

During a callback fit (the ``callback`` variant of ``overhead.py``: defaults, mid-run and end-of-fit verdicts,
pictures) a thread samples every child the callback started (``live/offload.py``'s ``live_children``) with
psutil every 10 ms: its CPU seconds (user + system, the last reading before it is killed at teardown), its
thread count, and its CPU rate over every 0.5 s window (above 1.0 the child would be using more than one
core). Not ``RUSAGE_CHILDREN``: that also counts DataLoader workers of the loader probe.

``--against REPO`` runs the same fits with another checkout of the package (e.g. the commit before a
change), each fit in its own process, interleaved round by round: a side-by-side comparison in one run.

Without torch, on any trace (a GPU-sized window, say): ``python benchmarks/child_cpu.py --replay TRACE
[--against REPO] [--rounds N]`` starts the child as the callback does (``ChildWorker``), sends it the fit's
two jobs on that trace (the analysis, then the picture with the PNG) and reads its CPU seconds (psutil)
before closing it: the child's CPU per fit for that window, start-up included.
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

#: Seconds between samples, and the window over which the child's CPU rate is judged (psutil's CPU times
#: tick in 10 ms: over 0.5 s a rate reads within ~4% of the truth; the thread count is the exact check).
SAMPLE_S = 0.01
RATE_WINDOW_S = 0.5


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
        f"peak {row['peak_cores']:.2f} cores over {RATE_WINDOW_S:g} s, fit {row['fit_s']:.2f} s"
    )


def replay_once(trace: str) -> dict[str, Any]:
    """The child's CPU for one fit's jobs on ``trace``: start, analyse, picture (HTML + PNG)."""
    import tempfile

    import psutil

    from lightning_bottleneck.live.offload import ChildWorker
    from lightning_bottleneck.offline import analyze_paths

    report = analyze_paths([trace])  # in this process: what the callback's verdict would hand the child
    worker = ChildWorker.start()
    try:
        proc = psutil.Process(worker.pid)
        t0 = time.perf_counter()
        answer = worker.request({"job": "analyse", "path": trace, "rank": 0})
        t1 = time.perf_counter()
        with tempfile.TemporaryDirectory() as out_dir:
            request = {"job": "picture", "report": report, "phases": answer["phases"], "out_dir": out_dir}
            png = worker.request({**request, "image": True})["png"]
        t2 = time.perf_counter()
        cpu = proc.cpu_times()
        threads = proc.num_threads()
    finally:
        worker.close()
    return {
        "child_cpu_s": cpu.user + cpu.system,
        "max_threads": threads,
        "analyse_wall_s": t1 - t0,
        "picture_wall_s": t2 - t1,
        "png_bytes": len(png or b""),
    }


def replay(trace: str, rounds: int, against: str | None) -> None:
    repos = [("this", str(REPO))] + ([("against", str(Path(against).resolve()))] if against else [])
    rows: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in repos}
    for r in range(rounds):
        for label, repo in repos if r % 2 == 0 else repos[::-1]:
            env = dict(os.environ, PYTHONPATH=repo)
            cmd = [sys.executable, str(HERE / "child_cpu.py"), "--replay-one", trace]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=repo, check=False)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            if proc.returncode != 0 or not lines:
                print(f"{label}: failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}", flush=True)
                continue
            rows[label].append(json.loads(lines[-1]))
            print(f"round {r + 1} {label:<8} ({repo}): {lines[-1]}", flush=True)
    print(f"\nthe child's jobs of one fit on {Path(trace).name}, median of {rounds} rounds:")
    for label, repo in repos:
        if rows[label]:
            med = {k: statistics.median(x[k] for x in rows[label]) for k in rows[label][0]}
            print(
                f"  {label:<8} {repo}: child CPU {med['child_cpu_s']:.3f} s (start-up, analysis, picture), "
                f"threads {med['max_threads']:.0f}, analysis {med['analyse_wall_s']:.3f} s wall, picture "
                f"{med['picture_wall_s']:.3f} s wall"
            )


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replay", metavar="TRACE", help="the child's jobs of one fit on TRACE")
    ap.add_argument("--replay-one", metavar="TRACE", help=argparse.SUPPRESS)
    ap.add_argument("--against", help="also another checkout of the package, interleaved")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.replay_one:
        print(json.dumps(replay_once(args.replay_one)))
    elif args.replay:
        replay(str(Path(args.replay).resolve()), args.rounds, args.against)
    else:
        ap.error("give --replay TRACE (the fit itself: overhead.py --child STEPS)")
