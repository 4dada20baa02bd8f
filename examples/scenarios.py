"""Tiny Lightning models with a bottleneck injected on purpose, one per CPU-reachable verdict.

Used by the example scripts next to this file and by the test suite. Everything makes its own data.

    python examples/scenarios.py input      # slow __getitem__ with num_workers=0
    python examples/scenarios.py overhead   # hundreds of tiny ops per step
    python examples/scenarios.py compute    # wide MLP, big batch, in-memory data
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset


class SlowDataset(Dataset):
    """``__getitem__`` sleeps ``delay_s`` (I/O-like) or runs heavy numpy transforms (CPU-like)."""

    def __init__(self, n: int = 512, dim: int = 32, delay_s: float = 0.002, numpy_work: int = 0) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randn(n, 1, generator=g)
        self.delay_s = delay_s
        self.numpy_work = numpy_work

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay_s:
            time.sleep(self.delay_s)
        x = self.x[i]
        if self.numpy_work:
            img = np.random.default_rng(i).random((self.numpy_work, self.numpy_work), dtype=np.float32)
            for _ in range(3):  # "augmentations": blur-ish FFT filtering per sample
                img = np.abs(np.fft.ifft2(np.fft.fft2(img) * 0.5)).astype(np.float32)
            x = x + float(img.mean())
        return x, self.y[i]


class SlowOnOneRank(Dataset):
    """Random regression samples; ``__getitem__`` sleeps ``delay_s`` on global rank ``slow_rank`` only."""

    def __init__(self, slow_rank: int = -1, delay_s: float = 0.0, n: int = 4096, dim: int = 32) -> None:
        self.slow_rank, self.delay_s, self.n, self.dim = slow_rank, delay_s, n, dim

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        if rank == self.slow_rank and self.delay_s:
            time.sleep(self.delay_s)
        g = torch.Generator().manual_seed(i)
        return torch.rand(self.dim, generator=g), torch.rand(1, generator=g)


class Regressor(pl.LightningModule):
    """A small MLP; ``width`` and ``depth`` scale the compute; ``tiny_ops`` adds a Python loop of tiny ops."""

    def __init__(
        self, dim: int = 32, width: int = 64, depth: int = 2, tiny_ops: int = 0, lr: float = 1e-3
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        d = dim
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.ReLU()]
            d = width
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)
        self.tiny_ops = tiny_ops
        # only a parameter when used: DDP (find_unused_parameters=False) rejects unused parameters
        self.scale = nn.Parameter(torch.ones(1)) if tiny_ops else None
        self.lr = lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.net(x)
        for _ in range(self.tiny_ops):  # the overhead bottleneck: many ops on a handful of numbers
            y = y * self.scale + 0.001
        return y

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def in_memory(n: int, dim: int) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, dim, generator=g), torch.randn(n, 1, generator=g))


def scenario(name: str) -> tuple[pl.LightningModule, DataLoader, DataLoader | None]:
    """(model, train loader, val loader) for a named bottleneck."""
    if name == "input":
        return Regressor(), DataLoader(SlowDataset(delay_s=0.002), batch_size=16, num_workers=0), None
    if name == "input_numpy":
        return (
            Regressor(),
            DataLoader(SlowDataset(delay_s=0.0, numpy_work=96), batch_size=16, num_workers=0),
            None,
        )
    if name == "overhead":
        return Regressor(tiny_ops=300), DataLoader(in_memory(512, 32), batch_size=8), None
    if name == "compute":
        return Regressor(dim=512, width=2048, depth=3), DataLoader(in_memory(4096, 512), batch_size=256), None
    if name == "slow_val":
        train = DataLoader(in_memory(4096, 512), batch_size=256)
        val = DataLoader(SlowDataset(n=64, dim=512, delay_s=0.01), batch_size=8)
        return Regressor(dim=512, width=1024, depth=3), train, val
    raise ValueError(
        f"unknown scenario {name!r}; choose from input, input_numpy, overhead, compute, slow_val"
    )


SCENARIOS = ("input", "input_numpy", "overhead", "compute", "slow_val")


class ScenarioData(pl.LightningDataModule):
    """The loaders of a named scenario as a DataModule (for LightningCLI)."""

    def __init__(self, name: str = "input") -> None:
        super().__init__()
        _, self._train, self._val = scenario(name)

    def train_dataloader(self) -> DataLoader:
        return self._train

    def val_dataloader(self) -> DataLoader | list:
        return self._val if self._val is not None else []


def main(argv: list[str] | None = None) -> None:
    from lightning_bottleneck import BottleneckCallback

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("scenario", choices=SCENARIOS, nargs="?", default="input")
    parser.add_argument("--max-steps", type=int, default=25)
    parser.add_argument("--root", default="runs/demo")
    parser.add_argument("--accelerator", default="cpu", help="cpu (default) or gpu")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model, train, val = scenario(args.scenario)
    # A demo of seconds stands in for a run of minutes: give the measurement stage (loader probe, trial steps)
    # the budget it would take automatically on such a run, so the advice is measured, not estimated.
    callback = BottleneckCallback(wait=3, warmup=2, active=5, loader_budget_s=2.0, trial_budget_s=2.0)
    trainer = pl.Trainer(
        accelerator=args.accelerator,
        devices=1,
        max_steps=args.max_steps,
        default_root_dir=f"{args.root}/{args.scenario}",
        callbacks=[callback],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        limit_val_batches=4 if val is not None else 0,
        val_check_interval=10 if val is not None else None,
    )
    trainer.fit(model, train, val)
    assert callback.report is not None
    print(f"\nverdict for the '{args.scenario}' scenario: {callback.report.primary.value}")


if __name__ == "__main__":
    main()
