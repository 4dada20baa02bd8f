"""A longer run: the verdict is printed when the profiling window has been analysed, while training goes on.

    python examples/long_run.py [--max-steps 1500]

The callback profiles steps 6-15, reads the trace in a background thread, measures the loader (the
data here waits on I/O) and prints its verdict a few steps later; the progress lines below show training
continuing after it. At the end of fit the report is refreshed with the whole run's timing and says
what changed since the mid-run verdict.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lightning_bottleneck import BottleneckCallback

from scenarios import Regressor, SlowDataset


class Progress(pl.Callback):
    """Prints a line every ``every`` steps, so the mid-run verdict shows up in the middle of them."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step % self.every == 0:
            print(f"[train] step {trainer.global_step}, {time.perf_counter() - self.t0:.1f} s", flush=True)


def main(argv: list[str] | None = None) -> BottleneckCallback:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--max-steps", type=int, default=1500)
    parser.add_argument("--root", default="runs/long")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    loader = DataLoader(SlowDataset(n=4096, delay_s=0.0005), batch_size=16, shuffle=True)
    # the torch.compile trial takes 10-60 s on a small CPU; 0 skips it so the verdict comes within seconds
    callback = BottleneckCallback(loader_budget_s=2.0, compile_budget_s=0)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.max_steps,
        default_root_dir=args.root,
        callbacks=[callback, Progress(every=max(1, args.max_steps // 10))],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(Regressor(), loader)
    assert callback.midrun_report is not None and callback.report is not None
    print(
        f"mid-run verdict: {callback.midrun_report.primary.value}; end of fit: {callback.report.primary.value}"
    )
    return callback


if __name__ == "__main__":
    main()
