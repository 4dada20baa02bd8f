"""Demo: training dies of an out-of-memory error; the report still gets written with a memory verdict.

On a CPU-only machine the OOM is injected (a ``torch.OutOfMemoryError`` raised in step 8), exactly what
CUDA raises when an allocation fails. ``python examples/memory_bound.py``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lightning_bottleneck import BottleneckCallback

from scenarios import Regressor, in_memory


class TooBig(Regressor):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if batch_idx == 8:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (injected)")
        return super().training_step(batch, batch_idx)


def main() -> None:
    root = Path("runs/demo/memory")
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=20,
        default_root_dir=str(root),
        logger=False,
        callbacks=[BottleneckCallback(wait=2, warmup=2, active=3)],
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    try:
        trainer.fit(TooBig(dim=512, width=1024), DataLoader(in_memory(4096, 512), batch_size=256))
    except torch.OutOfMemoryError as err:
        print(f"\ntraining raised {type(err).__name__} as it should: {err}")
    report = json.loads((root / "bottleneck_report.json").read_text())
    print(f"verdict in {root / 'bottleneck_report.json'}: {report['primary']}")


if __name__ == "__main__":
    main()
