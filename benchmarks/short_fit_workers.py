"""Which worker count makes a *short* input-bound fit fastest? Bare fits (no callback), side by side.

The input scenario of ``examples/scenarios.py`` (each sample sleeps ``--delay`` seconds, batches of 16, the small
``Regressor``) is trained for ``--steps`` steps with each DataLoader setting in turn, round after round, in this
one process, on one intra-op thread; ``trainer.fit`` is timed whole (start-up of the workers included). It prints
each setting's fit times and its speed-up over ``num_workers=0`` (medians):

    python benchmarks/short_fit_workers.py                             # 60 steps, 2 ms a sample, 3 rounds
    python benchmarks/short_fit_workers.py --steps 600 --workers 0,4,16

Fifteenth session (docs/benchmarks.md): at 60 steps 4 persistent workers made the fit 3.37x faster and 16 (the
count the loader probe finds fastest in steady state) 2.12x; at 600 steps 16 gave 4.68x and 4 3.87x: over a short
fit the workers' start-up decides.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))


def fit_s(delay_s: float, steps: int, workers: int) -> float:
    """Seconds of ``trainer.fit`` for the input scenario with ``workers`` persistent workers (0: in-process)."""
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    from scenarios import Regressor, SlowDataset

    torch.manual_seed(0)
    extra = {"num_workers": workers, "persistent_workers": True} if workers else {}
    loader = DataLoader(SlowDataset(delay_s=delay_s), batch_size=16, **extra)
    trainer = pl.Trainer(
        max_steps=steps,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tempfile.mkdtemp(),
    )
    gc.collect()
    start = time.perf_counter()
    trainer.fit(Regressor(), loader)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--delay", type=float, default=0.002, help="seconds each sample sleeps (default 0.002)")
    p.add_argument("--steps", type=int, default=60, help="training steps per fit (default 60)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every setting (default 3)")
    p.add_argument("--workers", default="0,4,16", help="worker counts, comma-separated (default 0,4,16)")
    args = p.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    if 0 not in counts:
        p.error(f"--workers must include 0 (the baseline); got {args.workers!r}")
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    times: dict[int, list[float]] = {w: [] for w in counts}
    for _ in range(args.rounds):
        for w in counts:
            times[w].append(fit_s(args.delay, args.steps, w))
    base = statistics.median(times[0])
    for w in counts:
        med = statistics.median(times[w])
        runs = " ".join(f"{t:.2f}" for t in times[w])
        print(f"num_workers={w:<3} fit {med:.2f} s (rounds: {runs})  speed-up {base / med:.2f}x")


if __name__ == "__main__":
    main()
