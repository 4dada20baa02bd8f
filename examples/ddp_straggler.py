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
import time
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from lightning_bottleneck import BottleneckCallback


class SlowOnOneRank(Dataset):
    """Random regression samples; ``__getitem__`` sleeps ``delay_s`` on global rank ``slow_rank`` only."""

    def __init__(self, slow_rank: int, delay_s: float, n: int = 4096, dim: int = 32) -> None:
        self.slow_rank, self.delay_s, self.n, self.dim = slow_rank, delay_s, n, dim

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        if rank == self.slow_rank and self.delay_s:
            time.sleep(self.delay_s)
        g = torch.Generator().manual_seed(i)
        return torch.rand(self.dim, generator=g), torch.rand(1, generator=g)


class MLP(pl.LightningModule):
    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-2)


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
    trainer.fit(MLP(), DataLoader(SlowOnOneRank(slow_rank=1, delay_s=args.delay), batch_size=4))


if __name__ == "__main__":
    main()
