"""Read the live run's configuration, environment and device memory from the Trainer (torch + lightning)."""

from __future__ import annotations

import platform
import socket
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from lightning_bottleneck.evidence import MemoryStats, RunConfig
from lightning_bottleneck.measure.cpus import cpu_has_bf16, usable_cpus


def find_train_dataloader(trainer: pl.Trainer) -> DataLoader | None:
    loaders: Any = trainer.train_dataloader
    stack = [loaders]
    while stack:
        obj = stack.pop()
        if isinstance(obj, DataLoader):
            return obj
        if isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif hasattr(obj, "iterables"):
            stack.append(obj.iterables)
    return None


def run_config(trainer: pl.Trainer, pl_module: pl.LightningModule) -> RunConfig:
    cfg = RunConfig()
    loader = find_train_dataloader(trainer)
    if loader is not None:
        cfg.num_workers = loader.num_workers
        cfg.pin_memory = bool(loader.pin_memory)
        cfg.persistent_workers = bool(loader.persistent_workers)
        cfg.prefetch_factor = loader.prefetch_factor if loader.num_workers > 0 else None
        bs = loader.batch_size
        if bs is None and loader.batch_sampler is not None:
            bs = getattr(loader.batch_sampler, "batch_size", None)
        cfg.batch_size = bs
        try:
            cfg.dataset_len = len(loader.dataset)  # type: ignore[arg-type]
        except TypeError:
            cfg.dataset_len = None
    cfg.precision = str(trainer.precision)
    root = trainer.strategy.root_device
    cfg.accelerator = root.type
    if root.type == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(root)
        cfg.device_name = props.name
        cfg.bf16_supported = bool(torch.cuda.is_bf16_supported())
        cfg.tf32_capable = props.major >= 8
    elif root.type == "cpu":
        cfg.bf16_supported = cpu_has_bf16()
    cfg.float32_matmul_precision = torch.get_float32_matmul_precision()
    cfg.usable_cpus = usable_cpus()
    cfg.world_size = trainer.world_size
    cfg.num_nodes = trainer.num_nodes
    cfg.devices_per_node = max(1, trainer.num_devices)
    cfg.strategy = type(trainer.strategy).__name__.replace("Strategy", "").lower()
    cfg.accumulate_grad_batches = trainer.accumulate_grad_batches
    cfg.manual_optimization = not pl_module.automatic_optimization
    cfg.compiled = _is_compiled(pl_module)
    cfg.num_parameters = sum(p.numel() for p in pl_module.parameters())
    pg_backend = getattr(trainer.strategy, "_process_group_backend", None)
    if pg_backend is None and torch.distributed.is_available() and torch.distributed.is_initialized():
        pg_backend = torch.distributed.get_backend()
    cfg.distributed_backend = pg_backend
    ddp_kwargs = getattr(trainer.strategy, "_ddp_kwargs", None)
    if isinstance(ddp_kwargs, dict):
        cfg.ddp_kwargs = {k: v for k, v in ddp_kwargs.items() if isinstance(v, (int, float, bool, str))}
    return cfg


def _is_compiled(pl_module: pl.LightningModule) -> bool:
    if getattr(pl_module, "_compiler_ctx", None):
        return True
    return any(type(m).__name__ == "OptimizedModule" for m in pl_module.modules())


def memory_stats(trainer: pl.Trainer) -> MemoryStats | None:
    root = trainer.strategy.root_device
    if root.type != "cuda" or not torch.cuda.is_available():
        return None
    stats = torch.cuda.memory_stats(root)
    return MemoryStats(
        device_total=torch.cuda.get_device_properties(root).total_memory,
        peak_allocated=int(torch.cuda.max_memory_allocated(root)),
        peak_reserved=int(torch.cuda.max_memory_reserved(root)),
        num_alloc_retries=int(stats.get("num_alloc_retries", 0)),
        num_ooms=int(stats.get("num_ooms", 0)),
    )


def environment(trainer: pl.Trainer, cfg: RunConfig) -> dict[str, Any]:
    import lightning

    return {
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "accelerator": cfg.accelerator,
        "device_name": cfg.device_name,
        "cuda": torch.version.cuda,
        "precision": cfg.precision,
        "strategy": cfg.strategy,
        "world_size": cfg.world_size,
        "num_nodes": cfg.num_nodes,
        "usable_cpus": cfg.usable_cpus,
        "num_workers": cfg.num_workers,
        "batch_size": cfg.batch_size,
    }
