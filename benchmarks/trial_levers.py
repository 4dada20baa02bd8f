"""Measured speedup of each compute lever on the scenario models, via the trial code path (run_trials).

    python benchmarks/trial_levers.py                      # wide MLP and tiny-op loop, CPU
    python benchmarks/trial_levers.py --device cuda --compile-budget 120

Prints one line per lever: median speedup over interleaved A/B pairs, its IQR, pairs, compile time.
Timings on a shared machine are noisy: compare the IQR with the speedup before trusting a figure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from lightning_bottleneck.measure.contention import assess, take_snapshot
from lightning_bottleneck.measure.trials import run_trials

from scenarios import scenario


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", nargs="+", default=["compute", "overhead"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--budget", type=float, default=10.0)
    parser.add_argument("--compile-budget", type=float, default=0.0)
    args = parser.parse_args()
    for name in args.scenarios:
        torch.manual_seed(0)
        model, train, _ = scenario(name)
        model = model.to(args.device).train()
        batch = [t.to(args.device) for t in next(iter(train))]
        start = take_snapshot()
        report = run_trials(model, batch, budget_s=args.budget, compile_budget_s=args.compile_budget)
        busy = assess(start, take_snapshot())
        print(f"== {name} ({args.device}, {torch.get_num_threads()} thread(s)) ==")
        print(report)
        print(f"  machine: {busy}")


if __name__ == "__main__":
    main()
