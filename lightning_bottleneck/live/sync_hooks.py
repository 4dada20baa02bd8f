"""Live hooks that find each host-device synchronisation in the training step and name its line.

:class:`SyncTracker` wraps the calls that block the host on the device (``Tensor.item``, ``tolist``,
``cpu``, ``numpy``, ``.to()``/``copy_`` towards the CPU, ``__bool__``/``__int__``/``__float__``/
``__format__``/``__repr__``, ``torch.cuda.synchronize``, stream and event ``synchronize``), times each
call, and attributes it to the first frame outside torch, Lightning, the Python standard library and
this package: the user's line. When Lightning syncs on the user's behalf (turning a tensor logged with
``self.log(..., prog_bar=True)`` into a float after the batch), the sync is attributed to that
``self.log`` line with ``lightning_log=True``.

This module patches and times; :mod:`~lightning_bottleneck.live.sync_attribution` (the base class
:class:`~lightning_bottleneck.live.sync_attribution.SyncAttribution`) finds the line each sync belongs to and
keeps the per-site totals that :meth:`SyncTracker.sites` returns.

Cost: a wrapper adds a Python call, a flag check, two clock reads and a dictionary look-up keyed by
the caller's code object (its classification is cached), about a microsecond per intercepted call.
Nothing is patched outside :meth:`SyncTracker.install` / :meth:`SyncTracker.uninstall`.
"""

from __future__ import annotations

import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from lightning_bottleneck.live.sync_attribution import FRAME_USER, SyncAttribution
from lightning_bottleneck.vocabulary import (
    TENSOR_COPY_METHODS,
    TENSOR_READ_METHODS,
    VIA_ACCELERATOR_SYNCHRONIZE,
    VIA_CUDA_SYNCHRONIZE,
    tensor_via,
)

_OWNER: SyncTracker | None = None  # the tracker whose patches are in place


class _Depth(threading.local):
    """Per-thread nesting depth: a sync inside another (``__format__`` calling ``item``) counts once."""

    depth = 0


class SyncTracker(SyncAttribution):
    """Patch the host-device sync calls while training steps run; report each call site.

    Args:
        device_type: the training device (``"cpu"``, ``"cuda"``, ...). On a device other than the CPU,
            tensor calls on CPU tensors are not syncs and pass through uncounted.
        root: directory locations are made relative to (default: the working directory).
    """

    def __init__(self, device_type: str = "cpu", root: str | None = None) -> None:
        super().__init__(device_type, root)
        self.installed = False
        self._active = False
        self._depth = _Depth()
        # (owner, name, had_own_attr, original, our wrapper)
        self._patches: list[tuple[Any, str, bool, Any, Any]] = []
        self._last_d2h_id = 0  # id() of the tensor an intercepted copy to the CPU just returned

    # ------------------------------------------------------------------ lifecycle
    def install(self) -> None:
        """Patch the sync calls (idempotent). Counting starts at once.

        Only one tracker patches at a time (stacked patches could not be undone in any order); while
        another is installed this warns and leaves ``installed`` False.
        """
        global _OWNER
        if self.installed:
            return
        if _OWNER is not None:
            warnings.warn("Another SyncTracker is installed; this one will not track syncs.", stacklevel=2)
            return
        _OWNER = self
        self.installed = True
        try:
            self._patch_all()
        except BaseException:
            self.uninstall()
            raise
        self._active = True

    def uninstall(self) -> None:
        """Restore the exact originals (idempotent; never raises for a single failed restore).

        Only what is still ours is restored: when the user (or another library) replaced one of our
        wrappers during fit, their function stays in place (ours, which theirs may call, passes every
        call through once uninstalled).
        """
        global _OWNER
        self._active = False
        while self._patches:
            owner, name, had_own, original, wrapper = self._patches.pop()
            try:
                if vars(owner).get(name) is not wrapper:
                    continue  # replaced since: not ours to undo
                if had_own:
                    setattr(owner, name, original)
                else:
                    delattr(owner, name)
            except Exception:  # pragma: no cover - restoring must go on for the others
                continue
        if _OWNER is self:
            _OWNER = None
        self.installed = False

    def pause(self) -> None:
        """Stop counting without unpatching (e.g. around the validation loop)."""
        self._active = False

    def resume(self) -> None:
        """Count again after :meth:`pause` (no effect when not installed)."""
        self._active = self.installed

    def step(self) -> None:
        """Mark the end of one training step (called by the callback at ``on_train_batch_end``)."""
        if self.installed:
            self._steps += 1

    @property
    def steps(self) -> int:
        return self._steps

    def __enter__(self) -> SyncTracker:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # ------------------------------------------------------------------ patching
    def _patch_all(self) -> None:
        cpu_run = self.device_type == "cpu"
        for name in TENSOR_READ_METHODS:
            self._patch(
                torch.Tensor, name, self._read_wrapper(getattr(torch.Tensor, name), tensor_via(name), cpu_run)
            )
        for name in TENSOR_COPY_METHODS:
            orig = getattr(torch.Tensor, name)
            wrapper = self._tensor_wrapper(orig, tensor_via(name), cpu_run, d2h=name == "cpu")
            self._patch(torch.Tensor, name, wrapper)
        self._patch(torch.Tensor, "to", self._to_wrapper(torch.Tensor.to, cpu_run))
        self._patch(torch.Tensor, "copy_", self._copy_wrapper(torch.Tensor.copy_))
        cuda = getattr(torch, "cuda", None)
        if cuda is not None:  # attribute access only: patching never initialises CUDA
            if hasattr(cuda, "synchronize"):
                self._patch(cuda, "synchronize", self._plain_wrapper(cuda.synchronize, VIA_CUDA_SYNCHRONIZE))
            for cls_name in ("Stream", "Event"):
                cls = getattr(cuda, cls_name, None)
                if cls is not None and "synchronize" in cls.__dict__:
                    via = f"torch.cuda.{cls_name}.synchronize"
                    self._patch(cls, "synchronize", self._plain_wrapper(cls.__dict__["synchronize"], via))
        accel = getattr(torch, "accelerator", None)
        if accel is not None and hasattr(accel, "synchronize"):
            self._patch(
                accel, "synchronize", self._plain_wrapper(accel.synchronize, VIA_ACCELERATOR_SYNCHRONIZE)
            )
        for mod_name in ("lightning.pytorch", "pytorch_lightning"):
            mod = sys.modules.get(mod_name)
            cls = getattr(mod, "LightningModule", None) if mod is not None else None
            if cls is not None and "log" in cls.__dict__:
                self._patch(cls, "log", self._log_wrapper(cls.__dict__["log"]))

    def _patch(self, owner: Any, name: str, wrapper: Any) -> None:
        had_own = name in vars(owner)
        original = vars(owner)[name] if had_own else None
        self._patches.append((owner, name, had_own, original, wrapper))
        setattr(owner, name, wrapper)

    def _tensor_wrapper(
        self, orig: Callable[..., Any], via: str, cpu_run: bool, d2h: bool
    ) -> Callable[..., Any]:
        tracker, depth, perf, getframe = self, self._depth, time.perf_counter_ns, sys._getframe
        fast_get = self._acc.get
        direct_only = cpu_run and d2h
        remember_copy = cpu_run and d2h

        def wrapper(t: Any, *args: Any, **kwargs: Any) -> Any:
            if not tracker._active or depth.depth:
                return orig(t, *args, **kwargs)
            if cpu_run:
                last = tracker._last_d2h_id
                if last and id(t) == last:  # x.cpu().numpy(): one sync, already counted
                    tracker._last_d2h_id = 0
                    return orig(t, *args, **kwargs)
            elif t.is_cpu:  # not a host-device sync on this run
                return orig(t, *args, **kwargs)
            depth.depth = 1
            t0 = perf()
            try:
                out = orig(t, *args, **kwargs)
            finally:
                depth.depth = 0
            ns = perf() - t0
            f = getframe(1)
            acc = fast_get((id(f.f_code), f.f_lineno, via))
            if acc is not None:  # a user line seen before: count it, nothing else
                acc.calls += 1
                acc.ns += ns
            elif not tracker._record(via, f, ns, direct_only):
                return out
            if remember_copy:
                tracker._last_d2h_id = id(out)
            return out

        wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
        return wrapper

    def _read_wrapper(self, orig: Callable[..., Any], via: str, cpu_run: bool) -> Callable[..., Any]:
        """:meth:`_tensor_wrapper` for the argument-less reads (``item``, ``tolist``, ``__bool__``, ...).

        A fixed signature saves the ``*args, **kwargs`` packing (about a tenth of a microsecond).
        """
        tracker, depth, perf, getframe = self, self._depth, time.perf_counter_ns, sys._getframe
        fast_get = self._acc.get

        def wrapper(t: Any) -> Any:
            if not tracker._active or depth.depth:
                return orig(t)
            if cpu_run:
                last = tracker._last_d2h_id
                if last and id(t) == last:  # x.cpu().item(): one sync, already counted
                    tracker._last_d2h_id = 0
                    return orig(t)
            elif t.is_cpu:  # not a host-device sync on this run
                return orig(t)
            depth.depth = 1
            t0 = perf()
            try:
                out = orig(t)
            finally:
                depth.depth = 0
            ns = perf() - t0
            f = getframe(1)
            acc = fast_get((id(f.f_code), f.f_lineno, via))
            if acc is not None:  # a user line seen before: count it, nothing else
                acc.calls += 1
                acc.ns += ns
            else:
                tracker._record(via, f, ns)
            return out

        wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
        return wrapper

    def _to_wrapper(self, orig: Callable[..., Any], cpu_run: bool) -> Callable[..., Any]:
        tracker, depth, perf, getframe = self, self._depth, time.perf_counter_ns, sys._getframe
        via = tensor_via("to")
        fast_get = self._acc.get
        kind_get = self._kinds.get
        dtype_cls, device_cls, tensor_cls = torch.dtype, torch.device, torch.Tensor
        # id -> (device, is cpu): ``torch.device.type`` costs about a microsecond, and Lightning passes the
        # same device object every step (the object is kept, so its id cannot be reused)
        cpu_devices: dict[int, tuple[Any, bool]] = {}

        def to(t: Any, *args: Any, **kwargs: Any) -> Any:
            if cpu_run:  # first, the cheapest test: a library caller seen before is never timed on a CPU run
                kind = kind_get(id(getframe(1).f_code))  # (Lightning: ~7 calls a step)
                if kind is not None and kind[0] != FRAME_USER:
                    return orig(t, *args, **kwargs)
            dest = args[0] if args else kwargs.get("device")
            cls = dest.__class__
            if cls is dtype_cls or dest is None or not tracker._active or depth.depth:
                return orig(t, *args, **kwargs)
            if cls is str:
                to_cpu = dest.startswith("cpu")
                nb_pos = 2
            elif cls is device_cls:
                known = cpu_devices.get(id(dest))
                if known is not None and known[0] is dest:
                    to_cpu = known[1]
                else:
                    to_cpu = dest.type == "cpu"
                    if len(cpu_devices) < 64:
                        cpu_devices[id(dest)] = (dest, to_cpu)
                nb_pos = 2
            elif isinstance(dest, tensor_cls):
                to_cpu = dest.is_cpu
                nb_pos = 1
            else:
                return orig(t, *args, **kwargs)
            non_blocking = kwargs.get("non_blocking") or (len(args) > nb_pos and args[nb_pos] is True)
            if not to_cpu or non_blocking or (not cpu_run and t.is_cpu):
                return orig(t, *args, **kwargs)
            depth.depth = 1
            t0 = perf()
            try:
                out = orig(t, *args, **kwargs)
            finally:
                depth.depth = 0
            ns = perf() - t0
            f = getframe(1)
            acc = fast_get((id(f.f_code), f.f_lineno, via))
            if acc is not None:
                acc.calls += 1
                acc.ns += ns
            elif not tracker._record(via, f, ns, cpu_run):
                return out
            if cpu_run:
                tracker._last_d2h_id = id(out)
            return out

        to.__wrapped__ = orig  # type: ignore[attr-defined]
        return to

    def _copy_wrapper(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        tracker, depth, perf, getframe = self, self._depth, time.perf_counter_ns, sys._getframe
        tensor_cls = torch.Tensor
        via = tensor_via("copy_")

        def copy_(dst: Any, src: Any, *args: Any, **kwargs: Any) -> Any:
            if (
                not tracker._active
                or depth.depth
                or not dst.is_cpu
                or not isinstance(src, tensor_cls)
                or src.is_cpu
                or kwargs.get("non_blocking")
                or (args and args[0] is True)
            ):
                return orig(dst, src, *args, **kwargs)
            depth.depth = 1
            t0 = perf()
            try:
                out = orig(dst, src, *args, **kwargs)
            finally:
                depth.depth = 0
            tracker._record(via, getframe(1), perf() - t0)
            return out

        copy_.__wrapped__ = orig  # type: ignore[attr-defined]
        return copy_

    def _plain_wrapper(self, orig: Callable[..., Any], via: str) -> Callable[..., Any]:
        tracker, depth, perf, getframe = self, self._depth, time.perf_counter_ns, sys._getframe
        fast_get = self._acc.get

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not tracker._active or depth.depth:
                return orig(*args, **kwargs)
            depth.depth = 1
            t0 = perf()
            try:
                out = orig(*args, **kwargs)
            finally:
                depth.depth = 0
            ns = perf() - t0
            f = getframe(1)
            acc = fast_get((id(f.f_code), f.f_lineno, via))
            if acc is not None:
                acc.calls += 1
                acc.ns += ns
            else:
                tracker._record(via, f, ns)
            return out

        wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
        wrapper.__name__ = getattr(orig, "__name__", "synchronize")
        wrapper.__doc__ = getattr(orig, "__doc__", None)
        return wrapper

    def _log_wrapper(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        tracker, getframe = self, sys._getframe

        sites = self._log_sites

        def log(module: Any, name: str, value: Any, *args: Any, **kwargs: Any) -> Any:
            if tracker._active:
                f = getframe(1)
                site = sites.get(name)
                # the common call, every step: self.log(name, value) from the same line as last time
                if args or kwargs or site is None or site.code is not f.f_code or site.lineno != f.f_lineno:
                    tracker._remember_log(name, args, kwargs, f)
            return orig(module, name, value, *args, **kwargs)

        log.__wrapped__ = orig  # type: ignore[attr-defined]
        log.__doc__ = orig.__doc__
        return log
