"""GPU example: a model that keeps the GPU busy with big matmuls and calls ``loss.item()`` every step.

The ``.item()`` makes the host wait for every queued kernel before it can queue the next step, so the
GPU idles while Lightning and Python prepare each step. BottleneckCallback names the line, counts
the calls per step, times the wait, and suggests the rewrite.

    python examples/gpu_sync_item.py            # with loss.item() every step
    python examples/gpu_sync_item.py --no-item  # the same model without it, to compare

Needs CUDA; exits with a message otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_bottleneck.callback import BottleneckCallback


class ItemEveryStep(pl.LightningModule):
    """``depth`` square matmuls of width ``dim`` per step; ``loss.item()`` after each forward."""

    def __init__(self, dim: int = 4096, depth: int = 8, read_loss: bool = True) -> None:
        super().__init__()
        self.net = nn.Sequential(*[nn.Linear(dim, dim, bias=False) for _ in range(depth)])
        self.read_loss = read_loss
        self.losses: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (x,) = batch
        loss = self.net(x).float().pow(2).mean()
        if self.read_loss:
            self.losses.append(loss.item())  # the sync: waits for the whole forward pass
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-6)


def main() -> int:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=fmt)
    parser.add_argument("--no-item", action="store_true", help="do not call loss.item()")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--dim", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=1024)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_sync_item.py needs a CUDA GPU (torch.cuda.is_available() is False); nothing to run.")
        return 2

    data = TensorDataset(torch.randn(args.batch * 8, args.dim))
    callback = BottleneckCallback(wait=5, warmup=3, active=5, verbose=True)
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(
            accelerator="cuda",
            devices=1,
            max_steps=args.steps,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=root,
            callbacks=[callback],
        )
        model = ItemEveryStep(dim=args.dim, read_loss=not args.no_item)
        trainer.fit(model, DataLoader(data, batch_size=args.batch))
    report = callback.report
    if report is None:
        print("no report was produced")
        return 1
    print(f"\nprimary: {report.primary.value}")
    for finding in report.findings:
        if finding.kind == "sync" and finding.location:
            print(f"  {finding.severity.value:<6} {finding.summary}")
    for rec in report.recommendations:
        if rec.kind == "sync":
            print(f"\nfix: {rec.title}\n{rec.snippet}")
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
