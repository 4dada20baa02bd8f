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

The rest of the fit's advice says where its settings go (``Recommendation.where``); a key written
``"<where>.<name>"`` goes there: ``"val DataLoader.num_workers"`` onto the val loader,
``"ModelCheckpoint.every_n_train_steps"`` onto the workload's ModelCheckpoint, ``"self.log.on_step"`` onto the
workload model's one ``self.log`` call, ``"<CallbackClass>.<arg>"`` onto the workload's own callback;
``plugins="AsyncCheckpointIO"`` becomes ``Trainer(plugins=[AsyncCheckpointIO()])``. Workloads whose time goes
outside the training step (``whole_fit``) and the input workloads (``per_fit``: their advice changes the workers'
start-up) are measured over the whole ``trainer.fit`` call: training samples per second of fit; the others as
steady-state samples/s (stand-ins for long runs, where a compile's one-off cost vanishes).
"""

from __future__ import annotations

import argparse
import gc
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
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import Logger
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


class FitMLP(MLP):
    """The MLP with a validation step, ``metrics`` values logged per step (``self.log``'s arguments in
    ``log_kw``), and optionally a large persistent buffer that every checkpoint carries (``buffer_mb``)."""

    def __init__(
        self, dim: int, width: int, depth: int, metrics: int = 1, buffer_mb: int = 0, **log_kw: Any
    ) -> None:
        super().__init__(dim, width, depth)
        self.metrics, self.log_kw = metrics, {"on_step": True, **log_kw}
        if not self.log_kw["on_step"]:  # followed the advice: reduced once per epoch instead
            self.log_kw.setdefault("on_epoch", True)
        if buffer_mb:
            self.register_buffer("big", torch.zeros(buffer_mb * 2**20 // 4))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        for i in range(self.metrics):
            self.log(f"train_loss_{i}", loss.detach(), **self.log_kw)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y))


#: What the logger and the callback below chew on: CPU work (it stretches with a busy host like the training
#: step does, so the share of the fit outside the step does not depend on the machine's load).
_PAYLOAD = np.random.default_rng(0).random(100_000)


def cpu_work(rounds: int) -> None:
    """About 5 ms of CPU per round on a quiet core (a sort of 100k floats)."""
    for _ in range(rounds):
        np.sort(_PAYLOAD)


class SlowLogger(Logger):
    """A logger whose every write serialises a payload (``rounds`` of CPU work, see :func:`cpu_work`)."""

    def __init__(self, rounds: int) -> None:
        super().__init__()
        self.rounds = rounds

    @property
    def name(self) -> str:
        return "slow"

    @property
    def version(self) -> str:
        return "0"

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        cpu_work(self.rounds)

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


class WeightStats(pl.Callback):
    """A user callback computing weight statistics every ``every_n_steps`` batches (``rounds`` of CPU work)."""

    def __init__(self, every_n_steps: int = 1, rounds: int = 2) -> None:
        self.every_n_steps, self.rounds = every_n_steps, rounds

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if trainer.global_step % self.every_n_steps == 0:
            cpu_work(self.rounds)


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
    # ---- the rest of the fit (whole_fit: measured as training samples per second of the whole fit)
    val_data: dict[str, Any] | None = None
    val_loader: dict[str, Any] = field(default_factory=dict)
    checkpoint: dict[str, Any] | None = None  # ModelCheckpoint kwargs
    logger_rounds: int | None = None  # a SlowLogger
    callback: dict[str, Any] | None = None  # WeightStats kwargs
    whole_fit: bool = False
    # the input workloads are also measured over the whole fit (without whole_fit's one intra-op thread): their
    # advice changes the workers' start-up, a cost of the fit that steady-state samples/s leaves out, and the
    # report's expected_speedup is the whole fit's (issue 19: io_wait 7.5x steady, 4.2x over the fit)
    per_fit: bool = False
    # measured over the fit as the ledger counts it, from the Trainer's ``setup`` hook to its ``teardown`` on rank 0:
    # a multi-rank fit's ``trainer.fit`` call also launches the other ranks (a Python start and imports, ~3 s here)
    # before any of it, which no advice changes. ddp_comm's fit spends 0.27 s in its set-up (the DDP reducer, the
    # 16M parameters broadcast) and 0.14 s outside its steps that accumulation does not shorten, 6.7 ms of its 67 ms a
    # step: the prediction is the fit's (``RunAccount.speedup``), and timed steady-state the advised fit read
    # 1.85-1.87x against a 1.64-1.81x range in two runs (issue 28). tiny_ops: a compile the trials measure is charged
    # to the fit (5 s with this VM's warm Inductor cache, 54-92 s from an empty one, on a 0.6 s fit): timed steady-state
    # the sweep would crown the compile that makes this fit 10x slower.
    fit_span: bool = False
    # steady-state workloads whose fit lasts well under a second: the fit without the callback (``--mode measure``)
    # runs this many epochs, so that its steady-state samples/s is timed over ~1.5 s. in_memory's 64 steps (0.25 s)
    # read 9 000-20 000 samples/s from run to run and its bf16 ratio 0.73-2.2x per round; the callback's run keeps
    # ``epochs`` (the measurement stage sees the same steady state either way)
    measure_epochs: int | None = None
    # one intra-op thread, as whole_fit: with two on the 2-core VM the same in_memory fit read 11 000-18 000
    # samples/s from process to process (bf16's ratio 1.10-1.62x per round: one core's availability decides),
    # with one 9 800-11 400; the callback's trials run on the same one thread as the fit they predict
    one_thread: bool = False

    @property
    def over_fit(self) -> bool:
        """Measured as training samples per second of the whole fit (``trainer.fit``, or :attr:`fit_span`)."""
        return self.whole_fit or self.per_fit or self.fit_span


_WORKERS: list[dict[str, Any]] = [{"num_workers": w, "persistent_workers": True} for w in (1, 2, 4, 8)]
_COMPUTE: list[dict[str, Any]] = [{"precision": "bf16-mixed"}, {"compile": True}]
# The same worker counts with the training process at one intra-op thread (``torch.set_num_threads(1)``): beside
# CPU-bound workers, a CPU step's spinning OpenMP threads take their cores (measure/host_threads.py; cpu_transform's
# 8 epochs: 28.49 s with 2 workers at 2 threads, 17.57 s at one), and the advice now sets them with the workers.
_WORKERS_ONE_THREAD: list[dict[str, Any]] = [{**s, "torch_threads": 1} for s in _WORKERS]

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
            per_fit=True,
        ),
        Workload(
            "cpu_transform",
            "numpy FFT transforms per sample, num_workers=0",
            {"kind": "mlp", "dim": 32, "width": 64, "depth": 2},
            {"kind": "heavy", "n": 384, "dim": 32, "size": 96, "rounds": 3},
            {"batch_size": 16, "num_workers": 0},
            2,
            _WORKERS[:3] + _WORKERS_ONE_THREAD[:3],
            per_fit=True,
        ),
        Workload(
            "worker_restart",
            "2 non-persistent workers, 0.4 s start-up, 10-batch epochs",
            {"kind": "mlp", "dim": 32, "width": 64, "depth": 2},
            {"kind": "tensor", "n": 160, "dim": 32},
            {"batch_size": 16, "num_workers": 2, "worker_init_fn": 0.4},
            6,
            [{"persistent_workers": True}, {"num_workers": 0}, {"num_workers": 4}],
            per_fit=True,
        ),
        Workload(
            "in_memory",
            "in-memory TensorDataset, small MLP, num_workers=0 (little wait)",
            {"kind": "mlp", "dim": 64, "width": 512, "depth": 3},
            {"kind": "tensor", "n": 4096, "dim": 64},
            {"batch_size": 64, "num_workers": 0},
            1,
            _WORKERS[:2] + _COMPUTE[:1],
            measure_epochs=6,
            one_thread=True,
        ),
        Workload(
            "wide_mlp",
            "wide MLP (2048x4), in-memory data: compute",
            {"kind": "mlp", "dim": 256, "width": 2048, "depth": 4},
            {"kind": "tensor", "n": 4096, "dim": 256},
            {"batch_size": 128, "num_workers": 0},
            1,
            [*_COMPUTE, {"num_workers": 1, "persistent_workers": True}],
            one_thread=True,
        ),
        Workload(
            "tiny_ops",
            "Python loop of 200 tiny element-wise ops: overhead",
            {"kind": "tiny", "dim": 16, "blocks": 200},
            {"kind": "tensor", "n": 1024, "dim": 16},
            {"batch_size": 32, "num_workers": 0},
            1,
            [*_COMPUTE, {"batch_size": 64}],
            measure_epochs=3,
            one_thread=True,
            fit_span=True,
        ),
        Workload(
            "tiny_linear",
            "nn.Linear(8, 1), batch 8: nothing worth fixing",
            {"kind": "mlp", "dim": 8, "width": 8, "depth": 0},
            {"kind": "tensor", "n": 800, "dim": 8},
            {"batch_size": 8, "num_workers": 0},
            1,
            _COMPUTE[:1] + _WORKERS[:1],
            measure_epochs=16,
            one_thread=True,
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
            fit_span=True,
        ),
        # ---- the rest of the fit: the time goes outside the training step (issue 17)
        Workload(
            "val_slow_loader",
            "validation every 10 batches, val samples wait 2 ms each, num_workers=0",
            {"kind": "fit", "dim": 32, "width": 128, "depth": 2},
            {"kind": "tensor", "n": 1600, "dim": 32},
            {"batch_size": 16, "num_workers": 0},
            1,
            [
                {"val_check_interval": 40},
                {"val_check_interval": 100},
                {"limit_val_batches": 0.25},
                {"val DataLoader.num_workers": 4, "val DataLoader.persistent_workers": True},
            ],
            trainer={"val_check_interval": 10},
            val_data={"kind": "sleepy", "n": 64, "dim": 32, "delay_s": 0.002},
            val_loader={"batch_size": 16, "num_workers": 0},
            whole_fit=True,
        ),
        Workload(
            "val_many_batches",
            "validation every 10 batches over 40 cheap val batches (batch 4)",
            {"kind": "fit", "dim": 32, "width": 128, "depth": 2},
            {"kind": "tensor", "n": 1600, "dim": 32},
            {"batch_size": 16, "num_workers": 0},
            1,
            [
                {"val_check_interval": 40},
                {"val_check_interval": 100},
                {"limit_val_batches": 0.25},
                {"val DataLoader.batch_size": 64},
            ],
            trainer={"val_check_interval": 10},
            val_data={"kind": "tensor", "n": 160, "dim": 32},
            val_loader={"batch_size": 4, "num_workers": 0},
            whole_fit=True,
        ),
        Workload(
            "checkpoint_heavy",
            "a 128 MB buffer in the model, ModelCheckpoint every 5 steps",
            {"kind": "fit", "dim": 32, "width": 128, "depth": 2, "buffer_mb": 128},
            {"kind": "tensor", "n": 640, "dim": 32},
            {"batch_size": 16, "num_workers": 0},
            1,
            [
                {"ModelCheckpoint.every_n_train_steps": 20},
                {"ModelCheckpoint.every_n_train_steps": 50},
                {"plugins": "AsyncCheckpointIO"},
                {"ModelCheckpoint.save_weights_only": True},
            ],
            checkpoint={"every_n_train_steps": 5},
            whole_fit=True,
        ),
        Workload(
            "logging_heavy",
            "a logger whose writes take ~10 ms of CPU, log_every_n_steps=1, 8 metrics per step",
            {"kind": "fit", "dim": 32, "width": 128, "depth": 2, "metrics": 8},
            {"kind": "tensor", "n": 1600, "dim": 32},
            {"batch_size": 16, "num_workers": 0},
            1,
            [{"log_every_n_steps": 10}, {"log_every_n_steps": 50}, {"self.log.on_step": False}],
            trainer={"log_every_n_steps": 1},
            logger_rounds=2,
            whole_fit=True,
        ),
        Workload(
            "heavy_callback",
            "a user callback taking ~3 ms of CPU at every training batch (every_n_steps=1)",
            {"kind": "fit", "dim": 32, "width": 128, "depth": 2},
            # 400 steps: at 100 (a 0.5 s bare fit) one fit's own speed moved +-25% (0.48-0.70 s), more than
            # the 20% a prediction is held to (issue 19's main-set run: 1.27-3.04x per round for one setting)
            {"kind": "tensor", "n": 6400, "dim": 32},
            {"batch_size": 16, "num_workers": 0},
            1,
            [{"WeightStats.every_n_steps": 10}, {"WeightStats.every_n_steps": 50}],
            callback={"every_n_steps": 1, "rounds": 2},
            whole_fit=True,
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
            per_fit=True,
        ),
        Workload(
            "cpu_transform_light",
            "held-out: lighter numpy transforms, bigger MLP",
            {"kind": "mlp", "dim": 32, "width": 256, "depth": 3},
            {"kind": "heavy", "n": 512, "dim": 32, "size": 48, "rounds": 2},
            {"batch_size": 32, "num_workers": 0},
            2,
            _WORKERS[:2] + _WORKERS_ONE_THREAD[:2],
            per_fit=True,
        ),
        Workload(
            "worker_restart_long",
            "held-out: 0.2 s worker start-up, 30-batch epochs",
            {"kind": "mlp", "dim": 32, "width": 64, "depth": 2},
            {"kind": "tensor", "n": 480, "dim": 32},
            {"batch_size": 16, "num_workers": 1, "worker_init_fn": 0.2},
            4,
            [{"persistent_workers": True}, {"num_workers": 0}],
            per_fit=True,
        ),
        Workload(
            "mid_mlp",
            "held-out: MLP 1024x3, batch 64",
            {"kind": "mlp", "dim": 128, "width": 1024, "depth": 3},
            {"kind": "tensor", "n": 2048, "dim": 128},
            {"batch_size": 64, "num_workers": 0},
            1,
            _COMPUTE,
            measure_epochs=3,
            one_thread=True,
        ),
    ]
}
HELD_OUT = ("io_wait_slow", "cpu_transform_light", "worker_restart_long", "mid_mlp")
MAIN = tuple(n for n in WORKLOADS if n not in HELD_OUT)
#: Where the rest of the fit's advice puts a setting (``Recommendation.where``) -> the prefix its keys carry here.
PLACED = ("val DataLoader.", "ModelCheckpoint.", "self.log.", "WeightStats.")


def _dataset(d: dict[str, Any]) -> Dataset:
    if d["kind"] == "sleepy":
        return SleepyDataset(d["n"], d["dim"], d["delay_s"])
    if d["kind"] == "heavy":
        return HeavyTransformDataset(d["n"], d["dim"], d["size"], d["rounds"])
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(d["n"], d["dim"], generator=g), torch.randn(d["n"], 1, generator=g))


def _placed(settings: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {k[len(prefix) :]: v for k, v in settings.items() if k.startswith(prefix)}


def build_rest_of_fit(
    w: Workload, settings: dict[str, Any], out: Path
) -> tuple[DataLoader | None, list[pl.Callback], list[str]]:
    """The rest of the fit's parts with ``settings`` applied: the val loader, the callbacks (ModelCheckpoint,
    WeightStats); plus the keys not applied (``self.log.*`` goes to the model in :func:`build`)."""
    unapplied: list[str] = []
    val: DataLoader | None = None
    if w.val_data is not None:
        kw = {**w.val_loader, **_placed(settings, "val DataLoader.")}
        if not kw.get("num_workers"):
            kw.pop("persistent_workers", None)
        val = DataLoader(_dataset(w.val_data), shuffle=False, **kw)
    elif _placed(settings, "val DataLoader."):
        unapplied.append("val DataLoader (the workload has none)")
    callbacks: list[pl.Callback] = []
    if w.checkpoint is not None:
        kw = {**w.checkpoint, **_placed(settings, "ModelCheckpoint.")}
        callbacks.append(ModelCheckpoint(dirpath=str(out / "ckpt"), **kw))
    elif _placed(settings, "ModelCheckpoint."):
        unapplied.append("ModelCheckpoint (the workload has none)")
    if w.callback is not None:
        callbacks.append(WeightStats(**{**w.callback, **_placed(settings, "WeightStats.")}))
    return val, callbacks, unapplied


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
    elif m["kind"] == "fit":
        extra = {k: v for k, v in m.items() if k not in ("kind", "dim", "width", "depth")}
        model = FitMLP(m["dim"], m["width"], m["depth"], **extra, **_placed(settings, "self.log."))
    elif m["kind"] == "tiny":
        model = TinyOps(m["dim"], m["blocks"])
    else:
        model = BigUnusedTable(m["rows"], m["dim"])
    dataset = _dataset(w.data)

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
        if k in LOADER_KEYS or k.startswith(PLACED):
            continue
        if k == "plugins" and v == "AsyncCheckpointIO":
            from lightning.pytorch.plugins.io import AsyncCheckpointIO

            trainer_kw["plugins"] = [AsyncCheckpointIO()]
        elif k in DDP_KEYS and w.devices > 1:
            if k == "ddp_comm_hook":
                from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

                ddp_kw[k] = getattr(default_hooks, str(v))
            else:
                ddp_kw[k] = v
        elif k == "compile" and v and isinstance(model, FitMLP):
            # its training_step calls self.log, which dynamo cannot trace: compile the network it runs
            model.net = torch.compile(model.net, mode=settings.get("compile_mode") or None)  # type: ignore[assignment]
        elif k == "compile" and v:
            model = torch.compile(model, mode=settings.get("compile_mode") or None)  # type: ignore[assignment]
        elif k == "compile_mode":
            continue
        elif k == "float32_matmul_precision":
            torch.set_float32_matmul_precision(str(v))
        elif k == "torch_threads":  # the training process's intra-op threads beside the workers (a CPU step)
            torch.set_num_threads(int(v))
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
    from lightning_bottleneck.evidence import RunConfig, TimingStats
    from lightning_bottleneck.measure.loader_probe import probe_loader
    from lightning_bottleneck.report import Report
    from lightning_bottleneck.rules.loader_pace import COVER_MARGIN, consumption_rate
    from lightning_bottleneck.rules.loader_plan import plan_from_timing

    report = Report.read(out / "bottleneck_report.json")
    callback = next(c for c in trainer.callbacks if type(c).__name__ == "BottleneckCallback")  # type: ignore[attr-defined]
    timing: TimingStats = callback._run.timer.stats(samples_per_step=float(loader.batch_size or 1))
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


class FitSamples(pl.Callback):
    """Training samples seen over the fit (divided by the whole ``trainer.fit`` call's wall time)."""

    def __init__(self) -> None:
        self.samples = 0
        self.t_setup: float | None = None
        self.t_teardown: float | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.t_setup = time.perf_counter()

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, idx: int
    ) -> None:
        self.samples += len(batch[0])

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.t_teardown = time.perf_counter()

    @property
    def span_s(self) -> float:
        """Seconds from the ``setup`` hook to the ``teardown`` hook (nan when either did not run)."""
        if self.t_setup is None or self.t_teardown is None:
            return float("nan")
        return self.t_teardown - self.t_setup


def run(name: str, mode: str, settings: dict[str, Any], out: Path, loader_plan: bool = False) -> None:
    warnings.filterwarnings("ignore")
    w = WORKLOADS[name]
    if w.whole_fit or w.one_thread:
        # the tiny MLPs gain nothing from intra-op threads; one thread keeps their steps from waiting on a
        # descheduled core on a busy host (which would stretch the step far more than the rest of the fit)
        torch.set_num_threads(1)
    model, loader, trainer_kw, unapplied = build(w, settings)
    val_loader, callbacks, more = build_rest_of_fit(w, settings, out)
    unapplied += more
    meter = SamplesPerSecond()
    fit_meter = FitSamples()
    if mode == "callback":
        from lightning_bottleneck import BottleneckCallback

        # The workloads are seconds-long stand-ins for runs of minutes to hours: give the measurement stage the
        # budgets it has on such runs (automatic budgets are capped at 1% of the projected fit: 120 s of compile on a
        # run of 3.3 hours).
        callbacks.append(
            BottleneckCallback(
                report_path=str(out / "bottleneck_report.json"),
                verbose=False,
                loader_budget_s=3.0,
                trial_budget_s=5.0,
                compile_budget_s=120.0,
            )
        )
    else:
        callbacks.append(fit_meter if w.over_fit else meter)
    if w.logger_rounds is not None:
        trainer_kw.setdefault("logger", SlowLogger(w.logger_rounds))
    if w.checkpoint is not None:
        trainer_kw.setdefault("enable_checkpointing", True)
    trainer = pl.Trainer(
        **{
            "accelerator": "cpu",
            "devices": w.devices,
            "max_epochs": w.measure_epochs if mode == "measure" and w.measure_epochs else w.epochs,
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
    # The process's first full garbage collection (~0.3 s here: the ~400k objects torch and lightning leave after
    # import) otherwise lands wherever allocation happens to trigger it: in a bare fit's first training step, in
    # the callback's run before the fit. On a fit of minutes it is noise; on these seconds-long stand-ins it would
    # be ~30% of a fit the prediction never saw (perf: gc_collect_main in the first step). Pay it before timing.
    gc.collect()
    t0 = time.perf_counter()
    trainer.fit(model, loader, val_loader)
    fit_s = time.perf_counter() - t0
    if mode == "callback" and loader_plan and trainer.global_rank == 0:
        _write_loader_plan(trainer, loader, out)
    if trainer.global_rank == 0:
        span = fit_meter.span_s if w.fit_span else fit_s
        rate = fit_meter.samples / span if w.over_fit else meter.samples_per_s
        result = {"samples_per_s": rate, "unapplied": unapplied, "settings": settings, "fit_s": fit_s}
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
