"""Two-process DDP on CPU (gloo) where only rank 1's dataset is slow: rank 1 is named the straggler.

    python examples/ddp_straggler.py                 # rank 1 sleeps 20 ms per sample
    python examples/ddp_straggler.py --delay 0       # no straggler: compare the report

Lightning's ``strategy="ddp"`` re-runs this script for rank 1 (so keep the work under ``__main__``).
Expected report (``lightning_logs/.../bottleneck_report.json`` or ``--root``): ``stragglers: [1]``, the
first finding "Rank 1 is a straggler ... Its own cause is input", ``ranks[0].primary == "communication"``
(rank 0 waits for rank 1 in the gradient all-reduce) and ``ranks[1].primary == "input"``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import lightning.pytorch as pl
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lightning_bottleneck import BottleneckCallback

from scenarios import Regressor, SlowOnOneRank


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--delay", type=float, default=0.02, help="seconds rank 1 sleeps per sample")
    parser.add_argument("--root", default=None, help="default_root_dir (default: the current directory)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=12,
        default_root_dir=args.root,
        callbacks=[BottleneckCallback(wait=2, warmup=1, active=4)],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(
        Regressor(width=64, depth=1), DataLoader(SlowOnOneRank(slow_rank=1, delay_s=args.delay), batch_size=4)
    )


if __name__ == "__main__":
    main()
