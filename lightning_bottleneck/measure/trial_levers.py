"""The compute levers the trials try: which apply to this model, batch, device and precision, and how each runs.

A :class:`Lever` is a setting (its name and the Trainer/torch settings it stands for) with the context a trial
step runs in (autocast, a matmul precision) and, for some, a change of the batch (``channels_last``) or
``torch.compile`` of the step. :func:`levers_for` lists the levers that apply, with a note for each left out;
:func:`baseline_context` is the autocast the Trainer's own precision runs the step in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from lightning_bottleneck.measure.cpus import cpu_has_bf16
from lightning_bottleneck.measure.trial_state import restored_globals
from lightning_bottleneck.thresholds import BATCH_GROWTH

__all__ = ["Lever", "baseline_context", "levers_for", "select_levers"]


@dataclass
class Lever:
    """One setting to trial: its name, the settings it stands for, the context its steps run in."""

    name: str
    settings: dict[str, Any]
    context: Callable[[], contextlib.AbstractContextManager[Any]]
    transform_batch: Callable[[Any], Any] | None = None
    compile: bool = False
    #: the lever's batch holds this many times the samples (a bigger batch): its speed-up is per sample
    samples_factor: int = 1


def _autocast(device_type: str, dtype: torch.dtype) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    return lambda: torch.autocast(device_type=device_type, dtype=dtype)


@contextlib.contextmanager
def _matmul_precision(value: str) -> Iterator[None]:
    with restored_globals():
        torch.set_float32_matmul_precision(value)
        yield


def baseline_context(
    precision: str, device_type: str
) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """The autocast the Trainer's precision plugin wraps ``training_step`` in, so the baseline is training."""
    p = str(precision)
    if p in ("bf16-mixed", "bf16"):
        return _autocast(device_type, torch.bfloat16)
    if p in ("16-mixed", "16"):
        return _autocast(device_type, torch.float16)
    return contextlib.nullcontext


def levers_for(
    module: nn.Module, batch: Any, device: torch.device, precision: str
) -> tuple[list[Lever], list[str]]:
    """The levers that apply to this model, batch, device and precision; a note for each one left out."""
    levers: list[Lever] = []
    notes: list[str] = []
    p = str(precision)
    full_fp32 = p in ("32-true", "32")
    base = baseline_context(p, device.type)
    if full_fp32:
        if device.type == "cuda":
            bf16 = torch.cuda.is_bf16_supported()
            dtype, setting = (torch.bfloat16, "bf16-mixed") if bf16 else (torch.float16, "16-mixed")
            levers.append(Lever(setting, {"precision": setting}, _autocast("cuda", dtype)))
        elif device.type == "cpu":
            if cpu_has_bf16():
                levers.append(
                    Lever("bf16-mixed", {"precision": "bf16-mixed"}, _autocast("cpu", torch.bfloat16))
                )
            else:
                notes.append("bf16-mixed not tried: this CPU has no native bf16 (AVX512-BF16/AMX)")
        if torch.get_float32_matmul_precision() == "highest":
            for value in _matmul_precisions(device):
                levers.append(
                    Lever(
                        f"float32_matmul_precision={value}",
                        {"float32_matmul_precision": value},
                        lambda value=value: _matmul_precision(value),  # type: ignore[misc]
                    )
                )
    else:
        notes.append(f"precision levers not tried: the Trainer already runs precision={p!r}")
    if _has_conv(module) and _has_4d_float(batch):
        levers.append(
            Lever(
                "channels_last",
                {"channels_last": True},
                base,
                transform_batch=_to_channels_last,
            )
        )
    rows = _batch_rows(batch)
    if rows:  # a bigger batch (issue 28: measured, not only bounded): the batch repeated BATCH_GROWTH times
        g = BATCH_GROWTH
        levers.append(
            Lever(
                f"batch_size={rows * g}",
                {"batch_size": rows * g},
                base,
                transform_batch=lambda b, rows=rows, g=g: _grown(b, rows, g),  # type: ignore[misc]
                samples_factor=g,
            )
        )
    if _already_compiled(module):
        notes.append("torch.compile not tried: the model is already compiled")
    else:
        levers.append(Lever("compile", {"compile": True, "compile_mode": "default"}, base, compile=True))
    return levers, notes


def select_levers(
    levers: list[Lever], only: list[str] | None, compile_budget_s: float, notes: list[str]
) -> list[Lever]:
    """The levers asked for (``only``; all when None), without ``torch.compile`` when it has no budget."""
    if only is not None:
        levers = [lv for lv in levers if lv.name in only]
    if compile_budget_s <= 0 and any(lv.compile for lv in levers):
        notes.append("torch.compile not tried: compile_budget_s=0")
        levers = [lv for lv in levers if not lv.compile]
    return levers


def _matmul_precisions(device: torch.device) -> list[str]:
    """The ``float32_matmul_precision`` values that change the matmul path on this device.

    CUDA: "high" (TF32) from Ampere (sm80). CPU (oneDNN): "high" allows TF32 only with AMX (tiles),
    "medium" allows bf16 matmuls on CPUs with native bf16 (AVX512-BF16/AMX).
    """
    if device.type == "cuda":
        return ["high"] if torch.cuda.get_device_capability(device)[0] >= 8 else []
    if device.type != "cpu":
        return []
    out = []
    amx = getattr(torch.cpu, "_is_amx_tile_supported", None)
    if amx is not None and amx():
        out.append("high")
    if cpu_has_bf16():
        out.append("medium")
    return out


def _has_conv(module: nn.Module) -> bool:
    return any(
        isinstance(m, (nn.Conv2d, nn.Conv3d, nn.ConvTranspose2d, nn.ConvTranspose3d))
        for m in module.modules()
    )


def _tensors(batch: Any) -> Iterator[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, dict):
        for v in batch.values():
            yield from _tensors(v)
    elif isinstance(batch, (list, tuple)):
        for v in batch:
            yield from _tensors(v)


def _has_4d_float(batch: Any) -> bool:
    return any(t.dim() in (4, 5) and t.is_floating_point() for t in _tensors(batch))


def _to_channels_last(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        if batch.is_floating_point() and batch.dim() == 4:
            return batch.contiguous(memory_format=torch.channels_last)
        if batch.is_floating_point() and batch.dim() == 5:
            return batch.contiguous(memory_format=torch.channels_last_3d)
        return batch
    if isinstance(batch, dict):
        return type(batch)({k: _to_channels_last(v) for k, v in batch.items()})
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(_to_channels_last(v) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_channels_last(v) for v in batch)
    return batch


def _batch_rows(batch: Any) -> int | None:
    """The batch's sample count: the leading size its tensors share (None without a tensor of one or more
    dimensions, or when they disagree: no bigger batch can be built by repeating it)."""
    sizes = {t.shape[0] for t in _tensors(batch) if t.dim() >= 1}
    return sizes.pop() if len(sizes) == 1 else None


def _grown(batch: Any, rows: int, g: int) -> Any:
    """The batch with each tensor's ``rows`` samples repeated ``g`` times along the leading dimension."""
    if isinstance(batch, torch.Tensor):
        return torch.cat([batch] * g) if batch.dim() >= 1 and batch.shape[0] == rows else batch
    if isinstance(batch, dict):
        return type(batch)({k: _grown(v, rows, g) for k, v in batch.items()})
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(_grown(v, rows, g) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_grown(v, rows, g) for v in batch)
    return batch


def _already_compiled(module: nn.Module) -> bool:
    if type(module).__name__ == "OptimizedModule":
        return True
    return getattr(module, "_compiler_ctx", None) is not None
