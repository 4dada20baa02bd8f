"""What the callback's always-on step marks cost inside a real fit, call by call (after the profiling window).

After the window the fit ledger tells the callback each step's start and end (``live/step_feed.py``): the step
timer's two marks and, at the end, the check for due work (``after_step``). Their cost in a fit is not what a
warm loop shows: between two marks Lightning runs a millisecond of Python that evicts the interpreter's caches,
so a mark of ten lines took ~2 us where a ``timeit`` loop reads 0.3 us (twenty-fourth session). A fit's
wall time moves by a few % from one process to the next, far more than these microseconds, so this script
times the calls themselves: each fed call wrapped in two ``perf_counter`` reads, the same wrapper around an
empty call beside them (the wrapper's own cost, subtracted), the median and mean per step over the fit.

The fit: ``benchmarks/tiny_steps.py``'s (``nn.Linear(8, 1)``, batch 8, 100 steps an epoch, ``self.log`` of the loss
each step, one intra-op thread, the default Trainer) with ``BottleneckCallback(verbose=False, probe_loader=False,
trial_budget_s=0)``.

    python benchmarks/step_marks.py [--epochs 30] [--rounds 3] [--against ../old-checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_steps import tiny_fit


def one_fit(epochs: int) -> dict[str, float]:
    """One fit in this process: per fed step, the start mark, the end mark and the due check (us), wrapper
    cost subtracted; medians and means."""
    import lightning.pytorch as pl

    from lightning_bottleneck import BottleneckCallback
    from lightning_bottleneck.live import step_feed

    marks: dict[str, list[float]] = {"empty": [], "start": [], "end": [], "due": []}
    clock = time.perf_counter

    def nothing() -> None:
        return None

    class Timed:
        """Stands in for the ledger's feed: times each of its calls, and an empty call beside it."""

        def __init__(self, feed: Any) -> None:
            self.feed = feed

        def step_started(self) -> None:
            t0 = clock()
            nothing()
            t1 = clock()
            self.feed.step_started()
            t2 = clock()
            marks["empty"].append(t1 - t0)
            marks["start"].append(t2 - t1)

        def step_ended(self) -> None:
            feed, run = self.feed, self.feed.run
            t0 = clock()
            ended = run.timer.batch_end()
            t1 = clock()
            if ended:
                step_feed.after_step(run, run.trainer, run.pl_module, feed.diagnosis)
            t2 = clock()
            marks["end"].append(t1 - t0)
            marks["due"].append(t2 - t1)

        def failed(self, where: str, err: Exception) -> None:
            self.feed.failed(where, err)

    class Wrap(pl.Callback):
        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            ledger = getattr(trainer.profiler, "_ledger", None)
            if ledger is not None and ledger.feed is not None and not isinstance(ledger.feed, Timed):
                ledger.feed = Timed(ledger.feed)

    tiny_fit([BottleneckCallback(verbose=False, probe_loader=False, trial_budget_s=0), Wrap()], epochs)
    empty = statistics.median(marks["empty"])
    out: dict[str, float] = {"steps": float(len(marks["end"]))}
    for name in ("start", "end"):
        out[f"{name}_median_us"] = (statistics.median(marks[name]) - empty) * 1e6
        out[f"{name}_mean_us"] = (statistics.mean(marks[name]) - empty) * 1e6
    out["due_median_us"] = statistics.median(marks["due"]) * 1e6  # no wrapper call inside: nothing subtracted
    out["due_mean_us"] = statistics.mean(marks["due"]) * 1e6
    out["wrapper_us"] = empty * 1e6
    return out


def _run(checkout: Path, epochs: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = os.pathsep.join([str(checkout.resolve()), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", str(epochs)]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env, check=True, timeout=900, cwd=str(checkout)
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if not str(result.pop("package")).startswith(str(checkout.resolve())):
        raise RuntimeError(f"the fit did not import the package from {checkout}")
    return {k: float(v) for k, v in result.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--against", default=None, help="another checkout, timed in the same rounds")
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one is not None:
        result: dict[str, Any] = dict(one_fit(a.one))
        result["package"] = str(Path(sys.modules["lightning_bottleneck"].__file__ or "").resolve())
        print(json.dumps(result))
        return
    here = Path(__file__).resolve().parents[1]
    checkouts = {"this": here, **({Path(a.against).name: Path(a.against)} if a.against else {})}
    rows: dict[str, list[dict[str, float]]] = {k: [] for k in checkouts}
    for _ in range(a.rounds):
        for name, path in checkouts.items():
            rows[name].append(_run(path, a.epochs))
    keys = (
        "start_median_us",
        "end_median_us",
        "due_median_us",
        "start_mean_us",
        "end_mean_us",
        "due_mean_us",
    )
    print(
        f"{a.rounds} rounds of {a.epochs} epochs (100 steps each); medians over the rounds, us per fed step"
    )
    print("| checkout | start (median) | end (median) | due check (median) | start (mean) | end (mean) | due check (mean) | total (means) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name, results in rows.items():
        med = {k: statistics.median(r[k] for r in results) for k in keys}
        total = med["start_mean_us"] + med["end_mean_us"] + med["due_mean_us"]
        print(f"| {name} | " + " | ".join(f"{med[k]:.2f}" for k in keys) + f" | {total:.2f} |")


if __name__ == "__main__":
    main()
