"""The fit ledger's two promises, measured: its per-step cost, and that it accounts for (almost) every second.

``cost``: the profiler calls of one real training step (recorded from a real fit: every hook and loop stage
Lightning runs through ``trainer.profiler``, nested as they were) are replayed N times through Lightning's
default ``PassThroughProfiler`` (what every fit pays today) and through the ledger's ``LedgerProfiler``; the
per-step difference is the ledger's cost. The ledger's few wrapped methods (logger connector, ``self.log``)
are timed the same way, wrapped vs bare, times their calls per step.

``coverage``: every example (``examples/*.py`` that runs on a CPU) and every ``benchmarks/payoff_workloads.py``
workload is trained once with the callback, in its own process; its report's ledger is read and the
unaccounted share of the fit printed (the bound is 3%).

    python benchmarks/fit_ledger.py cost [--steps 20000]
    python benchmarks/fit_ledger.py coverage [--only NAME,...] [--skip-workloads]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))
UNACCOUNTED_MAX = 0.03


# ------------------------------------------------------------------------------------------------ cost
def record_step(steps: int = 12) -> tuple[list[tuple[str, str]], dict[str, float]]:
    """The profiler events of one steady training step of a real fit (step 8 of ``steps``), and the calls
    per step of the methods the ledger wraps."""
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.profilers import PassThroughProfiler
    from torch.utils.data import DataLoader

    from scenarios import Regressor, in_memory

    events: list[tuple[str, str]] = []

    class Recorder(PassThroughProfiler):
        @contextlib.contextmanager
        def profile(self, action_name: str) -> Iterator[str]:
            events.append(("enter", action_name))
            try:
                yield action_name
            finally:
                events.append(("exit", action_name))

        def start(self, action_name: str) -> None:
            events.append(("start", action_name))

        def stop(self, action_name: str) -> None:
            events.append(("stop", action_name))

    class Model(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("loss", loss)
            return loss

    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=steps,
        profiler=Recorder(),
        logger=pl.loggers.CSVLogger(tempfile.mkdtemp()),
        log_every_n_steps=1,
        enable_progress_bar=True,  # a default Trainer's callbacks: progress bar, model summary, checkpoint
        default_root_dir=tempfile.mkdtemp(),
    )
    trainer.fit(Model(), DataLoader(in_memory(512, 32), batch_size=8))
    fetch = "[_TrainingEpochLoop].train_dataloader_next"
    starts = [i for i, (kind, name) in enumerate(events) if kind == "start" and name == fetch]
    one = events[starts[8] : starts[9]]
    # per step: update_train_step_metrics, on_batch_end, _save_loggers_on_train_batch_end, log_metrics, self.log
    wrapped = {"logger connector": 3.0, "log_metrics": 1.0, "self.log": 1.0}
    return one, wrapped


def replay(profiler: Any, events: list[tuple[str, str]], n: int) -> float:
    """Seconds per replay of ``events`` (nested as recorded)."""
    stack: list[Any] = []
    t0 = time.perf_counter()
    for _ in range(n):
        for kind, name in events:
            if kind == "enter":
                cm = profiler.profile(name)
                cm.__enter__()
                stack.append(cm)
            elif kind == "exit":
                stack.pop().__exit__(None, None, None)
            elif kind == "start":
                profiler.start(name)
            else:
                profiler.stop(name)
    return (time.perf_counter() - t0) / n


def ledger_for_replay() -> Any:
    """A LiveLedger over a real Trainer and module (not fitted: only its profiler and wrappers are used)."""
    import lightning.pytorch as pl

    from lightning_bottleneck import BottleneckCallback
    from lightning_bottleneck.live.ledger import LiveLedger

    from scenarios import Regressor

    cb = BottleneckCallback()
    trainer = pl.Trainer(accelerator="cpu", callbacks=[cb], logger=False, default_root_dir=tempfile.mkdtemp())
    return LiveLedger(trainer, Regressor(), cb)


def wrapper_cost_s(n: int) -> float:
    """Seconds one wrapped call adds (a wrapped no-op vs the no-op)."""
    led = ledger_for_replay()

    def noop() -> None:
        return None

    wrapped = led._timed(led.s_log)(noop)
    best = []
    for fn in (noop, wrapped):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - t0) / n)
    return best[1] - best[0]


def cost(steps: int, rounds: int) -> None:
    from lightning.pytorch.profilers import PassThroughProfiler

    events, wrapped = record_step()
    actions = sum(1 for kind, _ in events if kind in ("enter", "start"))
    led = ledger_for_replay()
    times: dict[str, list[float]] = {"PassThroughProfiler (today)": [], "LedgerProfiler": []}
    for _ in range(rounds):  # interleaved, so drift hits both alike
        times["PassThroughProfiler (today)"].append(replay(PassThroughProfiler(), events, steps))
        times["LedgerProfiler"].append(replay(led.profiler, events, steps))
    per_wrap = wrapper_cost_s(steps * 5)
    calls = sum(wrapped.values())
    print(f"one training step of a default Trainer goes through trainer.profiler {actions} times")
    for name, ts in times.items():
        print(f"  {name:<30} {statistics.median(ts) * 1e6:7.2f} us/step (median of {rounds} rounds)")
    diff = statistics.median(times["LedgerProfiler"]) - statistics.median(
        times["PassThroughProfiler (today)"]
    )
    print(f"  ledger minus today's profiler path: {diff * 1e6:+.2f} us/step")
    print(
        f"  wrapped methods: {per_wrap * 1e6:.2f} us per call x {calls:.0f} calls/step = "
        f"{per_wrap * calls * 1e6:.2f} us/step"
    )
    print(f"  net per-step cost of the ledger: {(diff + per_wrap * calls) * 1e6:+.2f} us/step")


# -------------------------------------------------------------------------------------------- coverage
def _examples() -> list[tuple[str, list[str]]]:
    py = sys.executable
    out = []
    for name in ("input", "input_numpy", "overhead", "compute", "slow_val"):
        out.append((f"example:{name}", [py, str(ROOT / "examples" / "scenarios.py"), name, "--root", "runs"]))
    out.append(("example:long_run", [py, str(ROOT / "examples" / "long_run.py"), "--max-steps", "200"]))
    out.append(("example:memory_bound", [py, str(ROOT / "examples" / "memory_bound.py")]))
    return out


def _workloads() -> list[tuple[str, list[str]]]:
    from payoff_workloads import WORKLOADS

    py = sys.executable
    script = str(ROOT / "benchmarks" / "payoff_workloads.py")
    return [
        (f"workload:{w}", [py, script, "--workload", w, "--mode", "callback", "--out", "out"])
        for w, spec in WORKLOADS.items()
        if spec.devices == 1
    ]


def coverage(only: set[str], skip_workloads: bool) -> None:
    runs = _examples() + ([] if skip_workloads else _workloads())
    if only:
        runs = [r for r in runs if r[0].split(":", 1)[1] in only]
    worst = 0.0
    print(f"{'run':<28} {'fit s':>7} {'unacc.':>7}  largest parts")
    for name, cmd in runs:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
            reports = sorted(Path(tmp).rglob("bottleneck_report.json"))
            if not reports:
                print(f"{name:<28} no report (exit {proc.returncode}): {proc.stderr.strip()[-200:]}")
                continue
            ledger = json.loads(reports[-1].read_text()).get("metrics", {}).get("ledger")
        if not ledger:
            print(f"{name:<28} no ledger in the report")
            continue
        shares = ledger["shares"]
        worst = max(worst, shares["unaccounted"])
        top = sorted(((v, k) for k, v in shares.items() if k != "unaccounted"), reverse=True)[:4]
        parts = ", ".join(f"{k} {v:.0%}" for v, k in top if v >= 0.005)
        flag = "" if shares["unaccounted"] < UNACCOUNTED_MAX else "  <-- over 3%"
        print(f"{name:<28} {ledger['fit_s']:7.2f} {shares['unaccounted']:7.2%}  {parts}{flag}")
    print(f"worst unaccounted share: {worst:.2%} (bound {UNACCOUNTED_MAX:.0%})")


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("cost")
    c.add_argument("--steps", type=int, default=20000)
    c.add_argument("--rounds", type=int, default=5)
    v = sub.add_parser("coverage")
    v.add_argument("--only", default="", help="comma-separated example/workload names")
    v.add_argument("--skip-workloads", action="store_true")
    args = parser.parse_args()
    if args.command == "cost":
        cost(args.steps, args.rounds)
    else:
        coverage({x for x in args.only.split(",") if x}, args.skip_workloads)


if __name__ == "__main__":
    main()
