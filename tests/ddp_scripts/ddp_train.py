"""Two-process Lightning DDP run on CPU (gloo) with the callback; run as a script by tests/test_distributed.py.

    python tests/ddp_scripts/ddp_train.py OUT_DIR comm        # 32M-parameter embedding, tiny compute
    python tests/ddp_scripts/ddp_train.py OUT_DIR straggler   # only rank 1's dataset is slow

Lightning's ``strategy="ddp"`` re-runs this file for rank 1, so everything happens under ``__main__``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader, Dataset

from lightning_bottleneck import BottleneckCallback


class Samples(Dataset):
    """Random samples; ``__getitem__`` sleeps ``delay_s`` on global rank ``slow_rank`` only."""

    def __init__(self, dim: int, slow_rank: int = -1, delay_s: float = 0.0) -> None:
        self.dim, self.slow_rank, self.delay_s = dim, slow_rank, delay_s

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay_s and torch.distributed.is_initialized() and torch.distributed.get_rank() == self.slow_rank:
            time.sleep(self.delay_s)
        g = torch.Generator().manual_seed(i)
        return torch.rand(self.dim, generator=g), torch.rand(1, generator=g)


class WideTable(pl.LightningModule):
    """A 32M-parameter embedding table (128 MB of fp32 gradients per step) and a tiny head: almost no
    compute, one large gradient all-reduce per step."""

    def __init__(self, rows: int = 500_000, dim: int = 64) -> None:
        super().__init__()
        self.table = nn.Embedding(rows, dim)
        self.head = nn.Linear(dim, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        idx = (x[:, :8] * self.table.num_embeddings).long()
        loss = nn.functional.mse_loss(self.head(self.table(idx).mean(1)), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-3)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        optimizer.zero_grad(set_to_none=False)  # keep the 128 MB gradient warm: no page faults per step


class SmallMLP(pl.LightningModule):
    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-3)


def main(out_dir: str, mode: str) -> None:
    torch.manual_seed(0)
    if mode == "comm":
        model: pl.LightningModule = WideTable()
        data = Samples(dim=8)
        # wait=3: the first steps pay first-touch page faults for the 128 MB gradient, not comm
        callback = BottleneckCallback(wait=3, warmup=1, active=3, verbose=True, gather_timeout=60)
    elif mode == "straggler":
        model = SmallMLP()
        data = Samples(dim=32, slow_rank=1, delay_s=0.02)
        callback = BottleneckCallback(wait=1, warmup=1, active=3, verbose=True, gather_timeout=60)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=DDPStrategy(gradient_as_bucket_view=True) if mode == "comm" else "ddp",
        max_steps=8,
        default_root_dir=out_dir,
        callbacks=[callback],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(model, DataLoader(data, batch_size=4))
    report = callback.report
    print(f"RANK {trainer.global_rank} REPORT {report.primary.value if report else None}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(sys.argv[1], sys.argv[2])
