"""What the callback costs a training run, side by side with the tools users would otherwise use.

Runs the same CPU fit, interleaved over several rounds (so drift hits every variant alike):

* ``bare``                 : no profiling at all
* ``callback``             : BottleneckCallback() at its defaults (5/5/5 window, sync hooks, report, the
                              measurement stage: loader probe when input matters, trials when compute does)
* ``callback-no-measure``  : the callback with the measurement stage off (``probe_loader=False,
                              trial_budget_s=0``): the window, its off-thread analysis and the report
* ``callback-outside``     : the callback with its window pushed past the end of the run and the
                              measurement stage off: the always-on cost (step timing, sync hooks, memory
                              samples) alone
* ``SimpleProfiler``       : Lightning's ``Trainer(profiler="simple")``
* ``PyTorchProfiler``      : Lightning's ``Trainer(profiler="pytorch")``

and prints the median wall time of ``trainer.fit`` and its ratio to ``bare``, for a short fit (~1-2 s, where
the callback's fixed cost shows most) and a long one (where the window is a small part of the run).

    python benchmarks/overhead.py [--short-steps 400] [--long-steps 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from lightning_bottleneck import BottleneckCallback

from scenarios import Regressor, in_memory

warnings.filterwarnings("ignore")
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)


@contextlib.contextmanager
def quiet() -> Any:
    """Silence the profilers' printed reports and Kineto's C++ log lines (file descriptors 1 and 2)."""
    saved = os.dup(1), os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def make_fit(steps: int, variant: str) -> Callable[[], float]:
    def run() -> float:
        torch.manual_seed(0)
        model = Regressor(dim=256, width=512, depth=3)
        loader = DataLoader(in_memory(8192, 256), batch_size=128, shuffle=True)
        kwargs: dict[str, Any] = {}
        callbacks: list[Any] = []
        if variant == "callback":
            callbacks.append(BottleneckCallback(verbose=False))
        elif variant == "callback-no-measure":
            callbacks.append(BottleneckCallback(verbose=False, probe_loader=False, trial_budget_s=0))
        elif variant == "callback-outside":
            callbacks.append(
                BottleneckCallback(skip_first=10 * steps, verbose=False, probe_loader=False, trial_budget_s=0)
            )
        elif variant == "SimpleProfiler":
            kwargs["profiler"] = "simple"
        elif variant == "PyTorchProfiler":
            kwargs["profiler"] = "pytorch"
        with tempfile.TemporaryDirectory() as root:
            trainer = pl.Trainer(
                accelerator="cpu",
                max_steps=steps,
                logger=False,
                default_root_dir=root,
                callbacks=callbacks,
                enable_progress_bar=False,
                enable_model_summary=False,
                enable_checkpointing=False,
                **kwargs,
            )
            with quiet():
                t0 = time.perf_counter()
                trainer.fit(model, loader)
                elapsed = time.perf_counter() - t0
            return elapsed

    return run


def hook_cost_ns(n: int = 200_000) -> float:
    """ns per training step of the always-on path outside the window (timing + sync-tracker step count +
    the counter check for due work, with a memory sample every 10 steps)."""
    from lightning_bottleneck.live.sync_hooks import SyncTracker
    from lightning_bottleneck.live.timing import StepTimer
    from lightning_bottleneck.measure.memory_trend import MemorySampler

    timer, tracker, memory = StepTimer(), SyncTracker(), MemorySampler()
    timer.epoch_start()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        timer.batch_start()
        timer.batch_end()
        tracker.step()
        if timer.steps >= memory.next_step:
            memory.sample(timer.steps)
    return (time.perf_counter_ns() - t0) / n


def run_table(steps: int, rounds: int, variants: list[str]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(rounds):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for v in order:
            times[v].append(make_fit(steps, v)())
    return times


def print_table(label: str, steps: int, rounds: int, times: dict[str, list[float]]) -> float:
    base = statistics.median(times["bare"])
    print(f"{label} fit of {steps} steps (CPU, 1 thread), median of {rounds} interleaved rounds")
    print(f"{'variant':<20} {'median s':>9} {'min s':>8} {'vs bare':>8}")
    for v, ts in times.items():
        med = statistics.median(ts)
        print(f"{v:<20} {med:9.3f} {min(ts):8.3f} {med / base:8.3f}x")
    return base


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--short-steps", type=int, default=400)
    parser.add_argument("--long-steps", type=int, default=2000, help="0 skips the long fit")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-peers", action="store_true", help="skip SimpleProfiler and PyTorchProfiler")
    args = parser.parse_args()
    torch.set_num_threads(1)
    variants = ["bare", "callback", "callback-no-measure", "callback-outside"]
    if not args.no_peers:
        variants += ["SimpleProfiler", "PyTorchProfiler"]
    make_fit(20, "bare")()  # warm caches/imports once
    base = print_table(
        "short", args.short_steps, args.rounds, run_table(args.short_steps, args.rounds, variants)
    )
    per_step_ms = base / args.short_steps * 1e3
    if args.long_steps:
        print()
        print_table("long", args.long_steps, args.rounds, run_table(args.long_steps, args.rounds, variants))
    hook_ns = hook_cost_ns()
    print(
        f"always-on hooks outside the window: {hook_ns / 1e3:.2f} us per step = "
        f"{hook_ns / 1e6 / per_step_ms * 100:.3f}% of the short run's {per_step_ms:.2f} ms bare step"
    )


if __name__ == "__main__":
    main()
