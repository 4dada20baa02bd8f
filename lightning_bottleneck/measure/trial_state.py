"""Everything a trial step touches, set aside and put back: the trial-state context of the trials.

:func:`trial_state` restores torch's global numerics settings and grad mode (:func:`restored_globals`), the
Python, NumPy and torch RNG states, and the module's grads (the same tensor objects), buffers (BatchNorm
statistics), torchmetrics states and train/eval modes (:func:`preserved_module`, which also discards
``self.log``/``self.log_dict`` calls meanwhile).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["preserved_module", "restored_globals", "trial_state"]


@contextlib.contextmanager
def restored_globals() -> Iterator[None]:
    """Restore torch's global numerics settings (legacy and fp32_precision APIs) and grad mode."""
    b = torch.backends
    legacy: list[tuple[Any, str]] = [(b.cuda.matmul, "allow_tf32"), (b.cudnn, "allow_tf32")]
    modern: list[tuple[Any, str]] = []
    for path in ("mkldnn.matmul", "mkldnn.conv", "mkldnn.rnn", "mkldnn", "cuda.matmul", "cudnn.conv",
                 "cudnn.rnn", "cudnn", ""):  # fmt: skip
        obj: Any = b
        for part in filter(None, path.split(".")):
            obj = getattr(obj, part, None)
        if obj is not None and hasattr(obj, "fp32_precision"):
            modern.append((obj, "fp32_precision"))
    flags = [(b.cudnn, "benchmark"), (b.cudnn, "deterministic"), (b.cudnn, "enabled")]
    matmul = torch.get_float32_matmul_precision()
    saved_flags = [(o, a, getattr(o, a)) for o, a in flags]
    saved_modern = _read(modern)
    saved_legacy = _read(legacy)
    grad = torch.is_grad_enabled()
    try:
        yield
    finally:
        torch.set_grad_enabled(grad)
        torch.set_float32_matmul_precision(matmul)
        for o, a, v in saved_modern:  # the fp32_precision attributes first, the legacy flags after
            with contextlib.suppress(Exception):
                setattr(o, a, v)
        for o, a, v in saved_legacy:
            with contextlib.suppress(Exception):
                if getattr(o, a) != v:
                    setattr(o, a, v)
        for o, a, v in saved_flags:
            setattr(o, a, v)


def _read(attrs: list[tuple[Any, str]]) -> list[tuple[Any, str, Any]]:
    out = []
    for o, a in attrs:
        with contextlib.suppress(Exception):  # an API mix torch refuses to read: left alone
            out.append((o, a, getattr(o, a)))
    return out


@contextlib.contextmanager
def _restored_rng(device: torch.device) -> Iterator[None]:
    py = random.getstate()
    npy = np.random.get_state()
    cpu = torch.get_rng_state()
    cuda = (
        torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    )
    try:
        yield
    finally:
        random.setstate(py)
        np.random.set_state(npy)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


@contextlib.contextmanager
def preserved_module(module: nn.Module) -> Iterator[None]:
    """Grads set aside (the same tensor objects are put back), buffers and metric states copied back,
    train/eval modes restored, ``log``/``log_dict`` replaced by no-ops."""
    params = list(module.parameters())
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    buffers = [(b, b.detach().clone()) for b in module.buffers()]
    modes = [(m, m.training) for m in module.modules()]
    metrics = _metric_states(module)
    patched = {name: module.__dict__.get(name, _MISSING) for name in ("log", "log_dict")}
    for name in patched:
        object.__setattr__(module, name, _discard)
    try:
        yield
    finally:
        for name, old in patched.items():
            if old is _MISSING:
                module.__dict__.pop(name, None)
            else:
                object.__setattr__(module, name, old)
        for p, g in zip(params, grads):
            p.grad = g
        with torch.no_grad():
            for b, v in buffers:
                b.copy_(v)
        for m, training in modes:
            m.training = training
        for m, state in metrics:
            for k, v in state.items():
                setattr(m, k, v)


_MISSING = object()


def _discard(*args: Any, **kwargs: Any) -> None:
    """Stands in for ``LightningModule.log``/``log_dict`` during trials: nothing is logged."""


def _metric_states(module: nn.Module) -> list[tuple[nn.Module, dict[str, Any]]]:
    """torchmetrics states (not buffers): each ``Metric``'s ``_defaults`` keys plus its update count."""
    out = []
    for m in module.modules():
        defaults = getattr(m, "_defaults", None)
        if not isinstance(defaults, dict):
            continue
        state: dict[str, Any] = {}
        for k in [*defaults, "_update_count", "_computed", "_forward_cache"]:
            if hasattr(m, k):
                v = getattr(m, k)
                if isinstance(v, torch.Tensor):
                    v = v.detach().clone()
                elif isinstance(v, list):
                    v = [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in v]
                state[k] = v
        out.append((m, state))
    return out


@contextlib.contextmanager
def trial_state(module: nn.Module, device: torch.device) -> Iterator[None]:
    """Everything a trial step touches, restored on exit (torch's global settings and grad mode, the RNG
    states, the module's grads, buffers, metric states and modes; ``self.log`` discarded); grad mode on inside."""
    with restored_globals(), _restored_rng(device), preserved_module(module):
        torch.set_grad_enabled(True)
        yield
