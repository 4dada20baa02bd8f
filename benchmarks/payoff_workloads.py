"""Workloads for ``benchmarks/advice_payoff.py``, and the child process that trains one of them.

Each workload is a tiny Lightning model with one bottleneck on purpose, making its own data. The child
process trains it once, either with the callback (``--mode callback``: writes the report) or without it
(``--mode measure``: writes steady-state samples/s), with a set of settings applied:

    python benchmarks/payoff_workloads.py --workload io_wait --mode callback --out /tmp/x
    python benchmarks/payoff_workloads.py --workload io_wait --mode measure \
        --settings '{"num_workers": 8, "persistent_workers": true}' --out /tmp/y

Settings are mapped the way a user would follow the advice: DataLoader arguments onto the train loader,
Trainer arguments onto the Trainer, DDP arguments onto ``DDPStrategy``, ``compile``/``compile_mode`` onto
the model (``torch.compile``), ``float32_matmul_precision`` onto torch. Keys that need a code change
(``sync_dist``, ``gradient_checkpointing``, ...) are reported as not applied.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

LOADER_KEYS = {"num_workers", "persistent_workers", "pin_memory", "prefetch_factor", "batch_size"}
DDP_KEYS = {
    "bucket_cap_mb",
    "gradient_as_bucket_view",
    "static_graph",
    "find_unused_parameters",
    "ddp_comm_hook",
}
MODEL_KEYS = {"compile", "compile_mode", "float32_matmul_precision", "channels_last"}
TRAINER_KEYS = set(inspect.signature(pl.Trainer.__init__).parameters) - {"self", "callbacks"}
# Batches of the first epoch left out of the timing (compile, allocator and worker warm-up).
WARM_BATCHES = 3


# ----------------------------------------------------------------------------------------------- data


class SleepyDataset(Dataset):
    """Each sample waits ``delay_s`` like a read from slow storage (no CPU spent)."""

    def __init__(self, n: int, dim: int, delay_s: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y, self.delay_s = (
            torch.randn(n, dim, generator=g),
            torch.randn(n, 1, generator=g),
            delay_s,
        )

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.delay_s)
        return self.x[i], self.y[i]


class HeavyTransformDataset(Dataset):
    """Each sample runs numpy FFT "augmentations" on a ``size x size`` image (CPU-bound)."""

    def __init__(self, n: int, dim: int, size: int, rounds: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, dim, generator=g), torch.randn(n, 1, generator=g)
        self.size, self.rounds = size, rounds

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img = np.random.default_rng(i).random((self.size, self.size), dtype=np.float32)
        for _ in range(self.rounds):
            img = np.abs(np.fft.ifft2(np.fft.fft2(img) * 0.5)).astype(np.float32)
        return self.x[i] + float(img.mean()), self.y[i]


class SlowStartWorkers:
    """A ``worker_init_fn`` whose start-up costs ``delay_s`` (opening files, building an index, ...)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def __call__(self, worker_id: int) -> None:
        time.sleep(self.delay_s)


# ---------------------------------------------------------------------------------------------- models


class MLP(pl.LightningModule):
    def __init__(self, dim: int, width: int, depth: int, lr: float = 1e-3) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        d = dim
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.ReLU()]
            d = width
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)
        self.lr = lr

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class TinyOps(pl.LightningModule):
    """Hundreds of tiny element-wise ops per step in a Python loop: dispatch-bound."""

    def __init__(self, dim: int, blocks: int) -> None:
        super().__init__()
        self.w = nn.ParameterList([nn.Parameter(torch.randn(dim) * 0.1) for _ in range(blocks)])
        self.head = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for w in self.w:
            x = torch.tanh(x * w + 0.1) * 0.9 + x * 0.1
        return self.head(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-3)


class BigUnusedTable(pl.LightningModule):
    """Many parameters, little compute: DDP all-reduces a large gradient bucket every step.

    As in tests/ddp_scripts/ddp_train.py: with ``find_unused_parameters=True`` DDP zero-fills and
    all-reduces the unused table's gradients every step, so the gloo all-reduce is all the step does.
    """

    def __init__(self, rows: int, dim: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.zeros(rows, dim))
        self.head = nn.Linear(8, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        out = self.head(x)  # the table is not used this phase; DDP still all-reduces its gradient bucket
        return nn.functional.mse_loss(out, y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-3)


# ------------------------------------------------------------------------------------------- workloads


@dataclass
class Workload:
    name: str
    what: str
    model: dict[str, Any]
    data: dict[str, Any]
    loader: dict[str, Any]
    epochs: int
    candidates: list[dict[str, Any]]
    devices: int = 1
    trainer: dict[str, Any] = field(default_factory=dict)


_WORKERS: list[dict[str, Any]] = [{"num_workers": w, "persistent_workers": True} for w in (1, 2, 4, 8)]
_COMPUTE: list[dict[str, Any]] = [{"precision": "bf16-mixed"}, {"compile": True}]

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload(
            "io_wait",
            "each sample sleeps 3 ms (I/O), num_workers=0",
            {"kind": "mlp", "dim": 32, "width": 64, "depth": 2},
            {"kind": "sleepy", "n": 512, "dim": 32, "delay_s": 0.003},
            {"batch_size": 16, "num_workers": 0},
            2,
            [*_WORKERS, {"num_workers": 16, "persistent_workers": True}],
        ),
        Workload(
            "cpu_transform",
            "numpy FFT transforms per sample, num_workers=0",
            {"kind": "mlp", "dim": 32, "width": 64, "depth": 2},
            {"kind": "heavy", "n": 384, "dim": 32, "size": 96, "rounds": 3},
            {"batch_size": 16, "num_workers": 0},
            2,
            _WORKERS[:3],
        ),
        Workload(
            "worker_restart",
            "2 non-persistent workers, 0.4 s start-up, 10-batch epochs",
            {"kind": "mlp", "dim": 32, "width": 64, "depth": 2},
            {"kind": "tensor", "n": 160, "dim": 32},
            {"batch_size": 16, "num_workers": 2, "worker_init_fn": 0.4},
            6,
            [{"persistent_workers": True}, {"num_workers": 0}, {"num_workers": 4}],
        ),
        Workload(
            "in_memory",
            "in-memory TensorDataset, small MLP, num_workers=0 (little wait)",
            {"kind": "mlp", "dim": 64, "width": 512, "depth": 3},
            {"kind": "tensor", "n": 4096, "dim": 64},
            {"batch_size": 64, "num_workers": 0},
            1,
            _WORKERS[:2] + _COMPUTE[:1],
        ),
        Workload(
            "wide_mlp",
            "wide MLP (2048x4), in-memory data: compute",
            {"kind": "mlp", "dim": 256, "width": 2048, "depth": 4},
            {"kind": "tensor", "n": 4096, "dim": 256},
            {"batch_size": 128, "num_workers": 0},
            1,
            [*_COMPUTE, {"num_workers": 1, "persistent_workers": True}],
        ),
        Workload(
            "tiny_ops",
            "Python loop of 200 tiny element-wise ops: overhead",
            {"kind": "tiny", "dim": 16, "blocks": 200},
            {"kind": "tensor", "n": 1024, "dim": 16},
            {"batch_size": 32, "num_workers": 0},
            1,
            [*_COMPUTE, {"batch_size": 64}],
        ),
        Workload(
            "tiny_linear",
            "nn.Linear(8, 1), batch 8: nothing worth fixing",
            {"kind": "mlp", "dim": 8, "width": 8, "depth": 0},
            {"kind": "tensor", "n": 800, "dim": 8},
            {"batch_size": 8, "num_workers": 0},
            1,
            _COMPUTE[:1] + _WORKERS[:1],
        ),
        Workload(
            "ddp_comm",
            "DDP 2 ranks (gloo), 16M parameters, tiny compute: communication",
            {"kind": "table", "rows": 250_000, "dim": 64},
            {"kind": "tensor", "n": 512, "dim": 8},
            {"batch_size": 4, "num_workers": 0},
            1,
            [
                {"accumulate_grad_batches": 2},
                {"accumulate_grad_batches": 4},
                {"ddp_comm_hook": "fp16_compress_hook"},
            ],
            devices=2,
        ),
        # ---- held-out: other sizes and variants, checked the same way, never tuned against
        Workload(
            "io_wait_slow",
            "held-out: each sample sleeps 8 ms, batch 8, num_workers=1",
            {"kind": "mlp", "dim": 32, "width": 64, "depth": 2},
            {"kind": "sleepy", "n": 320, "dim": 32, "delay_s": 0.008},
            {"batch_size": 8, "num_workers": 1, "persistent_workers": True},
            2,
            [{"num_workers": w, "persistent_workers": True} for w in (2, 4, 8, 16)],
        ),
        Workload(
            "cpu_transform_light",
            "held-out: lighter numpy transforms, bigger MLP",
            {"kind": "mlp", "dim": 32, "width": 256, "depth": 3},
            {"kind": "heavy", "n": 512, "dim": 32, "size": 48, "rounds": 2},
            {"batch_size": 32, "num_workers": 0},
            2,
            _WORKERS[:2],
        ),
        Workload(
            "worker_restart_long",
            "held-out: 0.2 s worker start-up, 30-batch epochs",
            {"kind": "mlp", "dim": 32, "width": 64, "depth": 2},
            {"kind": "tensor", "n": 480, "dim": 32},
            {"batch_size": 16, "num_workers": 1, "worker_init_fn": 0.2},
            4,
            [{"persistent_workers": True}, {"num_workers": 0}],
        ),
        Workload(
            "mid_mlp",
            "held-out: MLP 1024x3, batch 64",
            {"kind": "mlp", "dim": 128, "width": 1024, "depth": 3},
            {"kind": "tensor", "n": 2048, "dim": 128},
            {"batch_size": 64, "num_workers": 0},
            1,
            _COMPUTE,
        ),
    ]
}
HELD_OUT = ("io_wait_slow", "cpu_transform_light", "worker_restart_long", "mid_mlp")
MAIN = tuple(n for n in WORKLOADS if n not in HELD_OUT)


def build(
    w: Workload, settings: dict[str, Any]
) -> tuple[pl.LightningModule, DataLoader, dict[str, Any], list[str]]:
    """The model, train loader and Trainer kwargs with ``settings`` applied; plus the keys not applied."""
    torch.manual_seed(0)
    unapplied: list[str] = []
    m = w.model
    model: pl.LightningModule
    if m["kind"] == "mlp":
        model = MLP(m["dim"], m["width"], m["depth"])
    elif m["kind"] == "tiny":
        model = TinyOps(m["dim"], m["blocks"])
    else:
        model = BigUnusedTable(m["rows"], m["dim"])
    d = w.data
    dataset: Dataset
    if d["kind"] == "sleepy":
        dataset = SleepyDataset(d["n"], d["dim"], d["delay_s"])
    elif d["kind"] == "heavy":
        dataset = HeavyTransformDataset(d["n"], d["dim"], d["size"], d["rounds"])
    else:
        g = torch.Generator().manual_seed(0)
        dataset = TensorDataset(
            torch.randn(d["n"], d["dim"], generator=g), torch.randn(d["n"], 1, generator=g)
        )

    loader_kw = dict(w.loader)
    init_delay = loader_kw.pop("worker_init_fn", None)
    for k, v in settings.items():
        if k in LOADER_KEYS:
            loader_kw[k] = v
    if loader_kw.get("num_workers", 0) == 0:
        for k in ("persistent_workers", "prefetch_factor"):
            if loader_kw.pop(k, None) and k in settings:
                unapplied.append(f"{k} (needs num_workers > 0)")
    elif init_delay:
        loader_kw["worker_init_fn"] = SlowStartWorkers(init_delay)
    loader = DataLoader(dataset, shuffle=True, drop_last=True, **loader_kw)

    trainer_kw: dict[str, Any] = dict(w.trainer)
    ddp_kw: dict[str, Any] = {"find_unused_parameters": True} if w.devices > 1 else {}
    for k, v in settings.items():
        if k in LOADER_KEYS:
            continue
        if k in DDP_KEYS and w.devices > 1:
            if k == "ddp_comm_hook":
                from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

                ddp_kw[k] = getattr(default_hooks, str(v))
            else:
                ddp_kw[k] = v
        elif k == "compile" and v:
            model = torch.compile(model, mode=settings.get("compile_mode") or None)  # type: ignore[assignment]
        elif k == "compile_mode":
            continue
        elif k == "float32_matmul_precision":
            torch.set_float32_matmul_precision(str(v))
        elif k in TRAINER_KEYS:
            trainer_kw[k] = v
        else:
            unapplied.append(k)
    if w.devices > 1:
        from lightning.pytorch.strategies import DDPStrategy

        trainer_kw["strategy"] = DDPStrategy(**ddp_kw)
    return model, loader, trainer_kw, unapplied


class SamplesPerSecond(pl.Callback):
    """Steady-state samples/s over the whole fit after the first WARM_BATCHES batches (epoch starts included)."""

    def __init__(self) -> None:
        self.batches = 0
        self.samples = 0
        self.t_start: float | None = None
        self.t_end: float | None = None

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, idx: int
    ) -> None:
        self.batches += 1
        if self.batches == WARM_BATCHES + 1:
            self.t_start = time.perf_counter()
        if self.t_start is not None:
            self.samples += len(batch[0])

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self.t_end = time.perf_counter()

    @property
    def samples_per_s(self) -> float:
        if self.t_start is None or self.t_end is None or self.t_end <= self.t_start:
            return float("nan")
        # the last counted batch finished at t_end; its samples count, the first counted batch's wait does
        return self.samples / (self.t_end - self.t_start)


def _write_loader_plan(trainer: pl.Trainer, loader: DataLoader, out: Path) -> None:
    """Preview of the probe + plan wiring: measure the loader after the fit, plan from the report's timing."""
    from lightning_bottleneck.advice.loader_plan import COVER_MARGIN, consumption_rate, plan_from_timing
    from lightning_bottleneck.evidence import RunConfig, TimingStats
    from lightning_bottleneck.measure.loader_probe import probe_loader
    from lightning_bottleneck.output.report import Report

    report = Report.read(out / "bottleneck_report.json")
    callback = next(c for c in trainer.callbacks if type(c).__name__ == "BottleneckCallback")  # type: ignore[attr-defined]
    timing: TimingStats = callback._timer.stats(samples_per_step=float(loader.batch_size or 1))
    cfg = RunConfig(
        num_workers=loader.num_workers,
        persistent_workers=loader.persistent_workers,
        pin_memory=loader.pin_memory,
        prefetch_factor=loader.prefetch_factor if loader.num_workers else None,
        batch_size=loader.batch_size,
        usable_cpus=report.environment.get("usable_cpus"),
        accelerator="cpu",
    )
    rate = consumption_rate(timing)
    ladder = probe_loader(loader, target_samples_per_s=rate * COVER_MARGIN if rate else None)
    plan = plan_from_timing(ladder, cfg, timing, trainer.num_training_batches)
    (out / "loader_plan.json").write_text(
        json.dumps(
            {"ladder": ladder.to_dict(), "plan": plan.to_dict(), "text": f"{ladder}\n{plan}"}, indent=2
        ),
        encoding="utf-8",
    )


def run(name: str, mode: str, settings: dict[str, Any], out: Path, loader_plan: bool = False) -> None:
    warnings.filterwarnings("ignore")
    w = WORKLOADS[name]
    model, loader, trainer_kw, unapplied = build(w, settings)
    callbacks: list[pl.Callback] = []
    meter = SamplesPerSecond()
    if mode == "callback":
        from lightning_bottleneck import BottleneckCallback

        # The workloads are seconds-long stand-ins for runs of minutes to hours: give the measurement stage the
        # budgets it has on such runs (automatic budgets are capped at 2% of the projected fit).
        callbacks.append(
            BottleneckCallback(
                report_path=str(out / "bottleneck_report.json"),
                verbose=False,
                loader_budget_s=3.0,
                trial_budget_s=5.0,
                compile_budget_s=60.0,
            )
        )
    else:
        callbacks.append(meter)
    trainer = pl.Trainer(
        **{
            "accelerator": "cpu",
            "devices": w.devices,
            "max_epochs": w.epochs,
            "default_root_dir": str(out),
            "callbacks": callbacks,
            "logger": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "enable_checkpointing": False,
            "num_sanity_val_steps": 0,
            **trainer_kw,
        }
    )
    trainer.fit(model, loader)
    if mode == "callback" and loader_plan and trainer.global_rank == 0:
        _write_loader_plan(trainer, loader, out)
    if trainer.global_rank == 0:
        result = {"samples_per_s": meter.samples_per_s, "unapplied": unapplied, "settings": settings}
        (out / "result.json").write_text(json.dumps(result), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    p.add_argument("--mode", required=True, choices=("callback", "measure"))
    p.add_argument("--settings", default="{}")
    p.add_argument("--out", required=True)
    p.add_argument("--loader-plan", action="store_true", help="callback mode: also probe the loader and plan")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    run(a.workload, a.mode, json.loads(a.settings), out, a.loader_plan)


if __name__ == "__main__":
    os.environ.setdefault("PL_DISABLE_FORK", "1")
    main()
