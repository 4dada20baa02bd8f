"""Two-process Lightning DDP run on CPU (gloo) with the callback; run as a script by tests/test_distributed.py.

    python tests/ddp_scripts/ddp_train.py OUT_DIR comm        # 32M-parameter embedding, tiny compute
    python tests/ddp_scripts/ddp_train.py OUT_DIR straggler   # only rank 1's dataset is slow
    python tests/ddp_scripts/ddp_train.py OUT_DIR spawn_straggler   # the same under strategy="ddp_spawn"
    python tests/ddp_scripts/ddp_train.py OUT_DIR midrun      # a longer run: the mid-run verdict on both ranks
    python tests/ddp_scripts/ddp_train.py OUT_DIR autotune    # autotune: rank zero's choice, applied on both ranks
    python tests/ddp_scripts/ddp_train.py OUT_DIR autotune_epoch   # the same in one epoch: checked within it
    python tests/ddp_scripts/ddp_train.py OUT_DIR autotune_epoch_persistent   # the same from one persistent worker a rank
    python tests/ddp_scripts/ddp_train.py OUT_DIR autotune_restart   # workers restarted every epoch: the restart fix

Lightning's ``strategy="ddp"`` re-runs this file for rank 1, so everything happens under ``__main__``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from lightning_bottleneck import BottleneckCallback

from scenarios import Regressor, SlowOnOneRank


class FrozenInPractice(pl.LightningModule):
    """32M parameters (128 MB of fp32 gradients per step) and almost no compute.

    The large table stays trainable but the step does not touch it this phase (think of a model whose
    second tower is switched off in a curriculum): DDP, with ``find_unused_parameters=True``, still
    zero-fills and all-reduces its 128 MB gradient bucket every step, so the gloo all-reduce is all the
    step does. (A model that *uses* a big table pays dense zero-fills and bucket copies on the training
    thread, which on a 2-core box costs as much as the all-reduce and makes the verdict a coin toss.)
    """

    def __init__(self, rows: int = 500_000, dim: int = 64) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(rows, dim))
        self.head = nn.Linear(8, 1)
        self.use_table = False

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        out = self.head(x)
        if self.use_table:
            out = out + self.table[: x.shape[0], :1]
        loss = nn.functional.mse_loss(out, y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-3)


def _line(text: str) -> None:
    """One line on stdout in one write(2) of under PIPE_BUF bytes: the ranks' lines never interleave on the shared
    pipe (``print`` can hand the text and its newline over separately: "RANK 1 REPORT overheadRANK 0 REPORT input")."""
    sys.stdout.flush()
    os.write(1, f"{text}\n".encode())


def _slow_start(worker_id: int) -> None:
    time.sleep(0.3)  # each worker's start-up, paid every epoch (no persistent_workers)


def main(out_dir: str, mode: str) -> None:
    in_one = mode.startswith("autotune_epoch")  # one epoch, switched and checked within it
    torch.manual_seed(0)
    if mode == "comm":
        model: pl.LightningModule = FrozenInPractice()
        data = SlowOnOneRank(dim=8)
        callback = BottleneckCallback(wait=3, warmup=1, active=3, verbose=True, gather_timeout=60)
    elif mode == "midrun":  # only rank 1 waits on its data: both ranks must still run the same plan
        model = Regressor(width=64, depth=1)
        data = SlowOnOneRank(slow_rank=1, delay_s=0.003)
        callback = BottleneckCallback(
            wait=1, warmup=1, active=3, verbose=False, gather_timeout=60,
            loader_budget_s=0.5, trial_budget_s=0.3, compile_budget_s=0,
        )  # fmt: skip
    elif mode in ("straggler", "spawn_straggler"):
        model = Regressor(width=64, depth=1)
        data = SlowOnOneRank(slow_rank=1, delay_s=0.02)
        callback = BottleneckCallback(wait=1, warmup=1, active=3, verbose=True, gather_timeout=60)
    elif mode == "autotune_restart":
        # 2 workers a rank, restarted every epoch, 0.3 s to start, for 40 steps of a few ms: only rank zero times the
        # loading in-process and picks the fix (rules/autotune.py: restart_fix); rank 1 applies it from the broadcast
        model = Regressor(width=64, depth=1)
        data = SlowOnOneRank(n=320)
        callback = BottleneckCallback(
            wait=1, warmup=1, active=3, verbose=False, gather_timeout=60, probe_loader=False,
            trial_budget_s=0, autotune=True,
        )  # fmt: skip
    elif mode.startswith("autotune"):
        # only rank zero's chooser has a setting: rank 1 gets it from the broadcast
        import lightning_bottleneck.live.autotune as live

        rank = int(os.environ.get("LOCAL_RANK", "0"))
        from lightning_bottleneck.rules.autotune import CLEAN_BEFORE_MIN, CLEAN_BEFORE_STEPS, Choice

        # rank 1's own chooser would also wait another number of steps: the broadcast carries rank zero's
        chosen = (
            Choice(
                {"num_workers": 2, "persistent_workers": True},
                "",
                CLEAN_BEFORE_MIN,
                alternative={"num_workers": 3, "persistent_workers": True},  # raced once the first is kept
            )
            if rank == 0
            else Choice(None, "", CLEAN_BEFORE_STEPS)
        )
        live.choose = lambda report, accelerator, left_to_run=None: chosen  # type: ignore[assignment]
        model = Regressor(width=64, depth=1)
        # 40 steps an epoch on each rank; rank zero's batches sleep 16 ms in-process (both ranks wait for them), so
        # two workers are ~2x (kept) and the race of three has the 20 steps it needs to be decided
        # one epoch: 160 steps on each rank, switched and checked within it
        # (autotune_epoch_persistent: one persistent worker a rank loads them, the batches it was given delivered
        # before the rest; 32 ms a batch: at 16 ms, with another process keeping a core busy, the step's own time
        # under contention left two workers 1.15-1.6x over 13 steps before, and the check undid them in 2 of 4 runs)
        persisting = mode == "autotune_epoch_persistent"
        data = SlowOnOneRank(slow_rank=0, delay_s=0.008 if persisting else 0.004, n=1280 if in_one else 320)
        callback = BottleneckCallback(
            wait=1, warmup=1, active=3, verbose=False, gather_timeout=60, probe_loader=False,
            trial_budget_s=0, autotune=True,
        )  # fmt: skip
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=DDPStrategy(find_unused_parameters=True)
        if mode == "comm"
        else ("ddp_spawn" if mode.startswith("spawn") else "ddp"),
        max_steps=30 if mode == "midrun" else -1 if mode.startswith("autotune") else 8,
        max_epochs=(1 if in_one else 8) if mode.startswith("autotune") else None,
        default_root_dir=out_dir,
        callbacks=[callback],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    workers: dict[str, Any] = {}
    if mode == "autotune_restart":
        workers = {"num_workers": 2, "worker_init_fn": _slow_start}
    elif mode == "autotune_epoch_persistent":  # the rank is read in the worker: no process group there
        data.slow_rank = 0 if int(os.environ.get("LOCAL_RANK", "0")) == 0 else -1
        workers = {"num_workers": 1, "persistent_workers": True}
    trainer.fit(model, DataLoader(data, batch_size=4, **workers))
    if mode.startswith("autotune"):
        import json

        record = callback.report.autotune.to_dict() if callback.report and callback.report.autotune else {}
        record["workers_now"] = trainer.train_dataloader.num_workers
        _line(f"RANK {trainer.global_rank} AUTOTUNE {json.dumps(record)}")
    report = callback.report
    _line(f"RANK {trainer.global_rank} REPORT {report.primary.value if report else None}")
    if mode == "midrun":
        measured = callback._run.measured
        midrun = callback.midrun_report
        step = (
            next((n for n in midrun.notes if n.startswith("Mid-run verdict at step")), None)
            if midrun
            else None
        )
        probed = measured is not None and measured.loader_ladder is not None
        _line(f"RANK {trainer.global_rank} MIDRUN {step!r} PROBED {probed}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(sys.argv[1], sys.argv[2])
