"""GPU example: a model that keeps the GPU busy with big matmuls and calls ``loss.item()`` every step.

The ``.item()`` makes the host wait for every queued kernel before it can queue the next step, so the
GPU idles while Lightning and Python prepare each step. BottleneckCallback names the line, counts
the calls per step, times the wait, and suggests the rewrite.

    python examples/gpu_sync_item.py            # with loss.item() every step, then without, to compare
    python examples/gpu_sync_item.py --no-item  # only the run without it

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
from torch.utils.data import DataLoader

from lightning_bottleneck.live.callback import BottleneckCallback


class ItemEveryStep(pl.LightningModule):
    """GPU-bound bf16 matmuls on data made on the device, and optionally ``loss.item()`` every step.

    Sized (``depth``) so one step keeps the GPU busy several times longer than Lightning needs on the
    host to queue it: without the read the host runs ahead and the GPU never waits; with it the host
    drains the queue every step and the GPU idles while the next step is prepared.
    """

    def __init__(self, dim: int, depth: int, batch: int, read_loss: bool = True) -> None:
        super().__init__()
        self.net = nn.Sequential(*[nn.Linear(dim, dim, bias=False) for _ in range(depth)])
        self.dim, self.batch, self.read_loss = dim, batch, read_loss
        self.losses: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x = torch.randn(self.batch, self.dim, device=self.device)  # no input pipeline: GPU-bound
        loss = self.net(x).float().pow(2).mean()
        if self.read_loss:
            self.losses.append(loss.item())  # SYNC:gpu_item  the host waits for the whole forward pass
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-6)


def depth_for_gpu_ms(target_ms: float, dim: int, batch: int) -> int:
    """Layers needed for about ``target_ms`` of bf16 forward+backward on this GPU (forward x 3)."""
    a = torch.randn(batch, dim, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(dim, dim, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ w
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        a @ w
    end.record()
    torch.cuda.synchronize()
    per_layer = start.elapsed_time(end) / 10 * 3
    return max(2, min(96, round(target_ms / per_layer)))


def fit(
    root: str, read_loss: bool, steps: int = 14, dim: int = 4096, batch: int = 2048, step_ms: float = 15.0
) -> Any:
    """Train on CUDA with BottleneckCallback; return the report."""
    callback = BottleneckCallback(wait=3, warmup=2, active=5, verbose=False)
    trainer = pl.Trainer(
        accelerator="cuda",
        devices=1,
        precision="bf16-mixed",
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=[callback],
    )
    model = ItemEveryStep(dim, depth_for_gpu_ms(step_ms, dim, batch), batch, read_loss)
    trainer.fit(model, DataLoader(range(100_000), batch_size=1))
    return callback.report


def main() -> int:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=fmt)
    parser.add_argument("--no-item", action="store_true", help="only the run without loss.item()")
    parser.add_argument("--steps", type=int, default=14)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_sync_item.py needs a CUDA GPU (torch.cuda.is_available() is False); nothing to run.")
        return 2
    runs = [False] if args.no_item else [True, False]
    for read_loss in runs:
        with tempfile.TemporaryDirectory() as root:
            report = fit(root, read_loss, steps=args.steps)
        if report is None:
            print("no report was produced")
            return 1
        st = report.step_time_ms
        print(
            f"\n{'with' if read_loss else 'without'} loss.item(): primary {report.primary.value}, "
            f"step {st.median if st else float('nan'):.2f} ms, breakdown "
            + ", ".join(f"{k} {v:.0%}" for k, v in report.breakdown.items() if v >= 0.005)
        )
        for finding in report.findings:
            if finding.kind == "sync" and finding.location:
                print(f"  {finding.severity.value:<6} {finding.summary}")
        for rec in report.recommendations:
            if rec.kind == "sync":
                print(f"  fix: {rec.title}\n{rec.snippet}")
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
