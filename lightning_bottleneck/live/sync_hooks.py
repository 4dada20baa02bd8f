"""Live hooks that find each host-device synchronisation in the training step and name its line.

:class:`SyncTracker` wraps the calls that block the host on the device (``Tensor.item``, ``tolist``,
``cpu``, ``numpy``, ``.to()``/``copy_`` towards the CPU, ``__bool__``/``__int__``/``__float__``/
``__format__``/``__repr__``, ``torch.cuda.synchronize``, stream and event ``synchronize``), times each
call, and attributes it to the first frame outside torch, Lightning, the Python standard library and
this package: the user's line. When Lightning syncs on the user's behalf (turning a tensor logged with
``self.log(..., prog_bar=True)`` into a float after the batch), the sync is attributed to that
``self.log`` line with ``lightning_log=True``.

Cost: a wrapper adds a Python call, a flag check, two clock reads and a dictionary look-up keyed by
the caller's code object (its classification is cached), about a microsecond per intercepted call.
Nothing is patched outside :meth:`SyncTracker.install` / :meth:`SyncTracker.uninstall`.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

import torch

from lightning_bottleneck.evidence import SyncSite
from lightning_bottleneck.vocabulary import (
    TENSOR_COPY_METHODS,
    TENSOR_READ_METHODS,
    VIA_ACCELERATOR_SYNCHRONIZE,
    VIA_CUDA_SYNCHRONIZE,
    tensor_via,
)

# Frame kinds (cached per code object).
_USER = 0  # the user's code: attribution stops here
_TORCH = 1  # torch internals: keep walking
_LIB = 2  # lightning & co., stdlib: keep walking
_LOGGING = 3  # Lightning's logging / result collection / progress bar: keep walking, remember it
_LOOP = 4  # Lightning's loops and hook dispatch: no user line between here and the sync
_IGNORE = 5  # this package, DataLoader internals, optimizer internals: not the user's sync

_LIBRARY_PACKAGES = (
    "torch",
    "lightning",
    "pytorch_lightning",
    "lightning_fabric",
    "torchmetrics",
    "lightning_utilities",
)
# Relative to a Lightning package root ("lightning/" holds "pytorch/..."; "pytorch_lightning/" holds
# "loops/..." directly), hence the two spellings.
_LOOP_PARTS = ("pytorch/loops/", "pytorch/trainer/call.py", "loops/", "trainer/call.py")
_LOGGING_PARTS = (
    "pytorch/trainer/connectors/logger_connector/",
    "pytorch/callbacks/progress/",
    "pytorch/loggers/",
    "trainer/connectors/logger_connector/",
    "callbacks/progress/",
    "loggers/",
)
_TORCH_IGNORED_PARTS = ("utils/data/", "optim/")

# Metric probes: frames whose locals name the metric Lightning is converting.
_PROBE_RESULT = "result_metric"  # _ResultCollection.metrics loop variable (progress-bar values)
_PROBE_KEY = "k"  # apply_to_collection's dict loop variable (logger values)

_LOG_PARAMS = ("prog_bar", "logger", "on_step", "on_epoch", "reduce_fx", "enable_graph", "sync_dist")


_OWNER: SyncTracker | None = None  # the tracker whose patches are in place


class _Depth(threading.local):
    """Per-thread nesting depth: a sync inside another (``__format__`` calling ``item``) counts once."""

    depth = 0


class _Acc:
    """Running totals for one (code, line, via) key."""

    __slots__ = ("calls", "code", "extra", "lightning_log", "lineno", "ns", "via")

    def __init__(self, code: CodeType, lineno: int, via: str, lightning_log: bool = False) -> None:
        self.calls = 0
        self.ns = 0
        self.code = code  # keeps the code object alive, so its id() stays unique
        self.lineno = lineno
        self.via = via
        self.lightning_log = lightning_log
        self.extra: dict[str, Any] = {}


class _LogSite:
    """Where the user called ``self.log`` for one metric name, and with which options."""

    __slots__ = ("code", "lineno", "options")

    def __init__(self, code: CodeType, lineno: int, options: dict[str, Any]) -> None:
        self.code = code
        self.lineno = lineno
        self.options = options


def _package_roots() -> list[tuple[str, str]]:
    """(package name, real directory with trailing separator) for the library packages installed."""
    roots = []
    for name in _LIBRARY_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for loc in (spec.submodule_search_locations or []) if spec else []:
            roots.append((name, os.path.join(os.path.realpath(loc), "")))
    return roots


def _stdlib_roots() -> tuple[str, ...]:
    return tuple(
        {os.path.join(os.path.realpath(os.path.dirname(m.__file__ or "")), "") for m in (os, threading)}
    )


class SyncTracker:
    """Patch the host-device sync calls while training steps run; report each call site.

    Args:
        device_type: the training device (``"cpu"``, ``"cuda"``, ...). On a device other than the CPU,
            tensor calls on CPU tensors are not syncs and pass through uncounted.
        root: directory locations are made relative to (default: the working directory).
    """

    def __init__(self, device_type: str = "cpu", root: str | None = None) -> None:
        self.device_type = "cuda" if device_type in ("gpu", "cuda") else device_type
        self.root = os.path.realpath(root or os.getcwd())
        self.installed = False
        self._active = False
        self._steps = 0
        self._depth = _Depth()
        # (owner, name, had_own_attr, original, our wrapper)
        self._patches: list[tuple[Any, str, bool, Any, Any]] = []
        self._kinds: dict[int, tuple[int, CodeType]] = {}
        self._acc: dict[tuple[Any, ...], _Acc] = {}
        self._log_sites: dict[str, _LogSite] = {}
        self._last_log_site: _LogSite | None = None  # most recent prog_bar / sync_dist self.log
        self._last_d2h_id = 0  # id() of the tensor an intercepted copy to the CPU just returned
        self._pkg_roots = _package_roots()
        self._stdlib = _stdlib_roots()
        self._own_dir = os.path.join(os.path.realpath(os.path.dirname(__file__)), "")
        self._own_file = os.path.realpath(__file__)
        # the wrappers themselves, and the whole-fit ledger's timers around ``self.log``, are transparent
        self._transparent = {self._own_file, os.path.join(os.path.dirname(self._own_file), "ledger.py")}

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

    # ------------------------------------------------------------------ results
    def sites(self) -> list[SyncSite]:
        """One :class:`SyncSite` per call site, worst first (total blocked time, then calls)."""
        merged: dict[tuple[str, bool], SyncSite] = {}
        for acc in self._acc.values():
            location = self._location(acc.code.co_filename, acc.lineno)
            site = merged.get((location, acc.lightning_log))
            if site is None:
                site = SyncSite(location, acc.via, steps=self._steps, lightning_log=acc.lightning_log)
                site.extra["vias"] = {}
                merged[(location, acc.lightning_log)] = site
            site.calls += acc.calls
            site.total_ms += acc.ns / 1e6
            vias = site.extra["vias"]
            vias[acc.via] = vias.get(acc.via, 0) + acc.calls
            _merge_extra(site.extra, acc.extra)
        for site in merged.values():
            vias = site.extra["vias"]
            site.via = max(vias, key=lambda v: vias[v])
            site.extra.setdefault("device_type", self.device_type)
        return sorted(merged.values(), key=lambda s: (-s.total_ms, -s.calls, s.location))

    def _location(self, filename: str, lineno: int) -> str:
        real = os.path.realpath(filename)
        base = os.path.join(self.root, "")
        if real.startswith(base):
            return f"{os.path.relpath(real, self.root)}:{lineno}"
        for name, root in self._pkg_roots:
            if real.startswith(root):
                return f"{name}/{real[len(root) :]}:{lineno}"
        return f"{filename}:{lineno}"

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
                if kind is not None and kind[0] != _USER:
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

    # ------------------------------------------------------------------ attribution
    def _kind(self, code: CodeType) -> int:
        entry = self._kinds.get(id(code))
        if entry is None:
            entry = (self._classify(code.co_filename), code)
            self._kinds[id(code)] = entry
        return entry[0]

    def _classify(self, filename: str) -> int:
        if filename.startswith("<"):
            return _LIB if filename.startswith("<frozen") else _USER
        real = os.path.realpath(filename)
        if real in self._transparent:
            return _LIB
        if real.startswith(self._own_dir):
            return _IGNORE
        for name, root in self._pkg_roots:
            if real.startswith(root):
                rel = real[len(root) :].replace(os.sep, "/")
                if name == "torch":
                    return _IGNORE if rel.startswith(_TORCH_IGNORED_PARTS) else _TORCH
                if name in ("lightning", "pytorch_lightning"):
                    if rel.startswith(_LOOP_PARTS):
                        return _LOOP
                    if rel.startswith(_LOGGING_PARTS):
                        return _LOGGING
                return _LIB
        if real.startswith(self._stdlib) and "-packages" not in real:
            return _LIB
        return _USER

    def _record(self, via: str, frame: FrameType | None, ns: int, direct_only: bool = False) -> bool:
        """Attribute one timed sync to its site (fast path: the caller is user code); True if counted.

        ``direct_only``: count only a call made by user code itself. On a CPU run, libraries move
        tensors "to the device" (the CPU) all the time; only the user's own ``.cpu()`` / ``.to("cpu")``
        would be a device-to-host copy on a GPU run.
        """
        if frame is None:
            return False
        code = frame.f_code
        entry = self._kinds.get(id(code))
        if entry is not None and entry[0] == _USER:
            self._add((id(code), frame.f_lineno, via), code, frame.f_lineno, via, ns)
            return True
        if direct_only and self._kind(code) != _USER:
            return False
        return self._record_slow(via, frame, ns)

    def _add(
        self,
        key: tuple[Any, ...],
        code: CodeType,
        lineno: int,
        via: str,
        ns: int,
        lightning_log: bool = False,
    ) -> _Acc:
        acc = self._acc.get(key)
        if acc is None:
            acc = self._acc[key] = _Acc(code, lineno, via, lightning_log)
        acc.calls += 1
        acc.ns += ns
        return acc

    def _record_slow(self, via: str, frame: FrameType, ns: int) -> bool:
        """Walk outwards to the user's frame; decide whether Lightning synced on the user's behalf."""
        saw_logging = False
        probes: list[FrameType] = []
        first_lib: FrameType | None = None
        f: FrameType | None = frame
        while f is not None:
            kind = self._kind(f.f_code)
            if kind == _USER:
                key = (
                    (id(f.f_code), f.f_lineno, via) if f is frame else (id(f.f_code), f.f_lineno, via, "via")
                )
                self._add(key, f.f_code, f.f_lineno, via, ns, lightning_log=saw_logging)
                return True
            if kind == _IGNORE:
                return False
            if kind == _LOOP:
                if saw_logging:
                    return self._record_lightning_log(via, probes, ns)
                if first_lib is not None and self.device_type != "cpu":
                    self._record_internal(via, first_lib, ns)
                    return True
                return False
            if kind == _LOGGING:
                saw_logging = True
            if kind != _TORCH:
                if first_lib is None:
                    first_lib = f
                if kind == _LOGGING or "apply_func" in f.f_code.co_filename:
                    probes.append(f)
            f = f.f_back
        return False

    def _record_internal(self, via: str, frame: FrameType, ns: int) -> None:
        acc = self._add((id(frame.f_code), frame.f_lineno, via), frame.f_code, frame.f_lineno, via, ns)
        acc.extra["origin"] = "lightning"

    def _record_lightning_log(self, via: str, probes: list[FrameType], ns: int) -> bool:
        metric, path = _metric_from_probes(probes)
        site = self._log_site_for(metric)
        if site is None:
            return False
        acc = self._add(
            ("log", id(site.code), site.lineno, via), site.code, site.lineno, via, ns, lightning_log=True
        )
        extra = acc.extra
        if metric is not None and metric in self._log_sites:
            extra["metric"] = metric
            extra["attributed_by"] = "metric name"
        else:
            extra["attributed_by"] = "most recent prog_bar/sync_dist self.log"
        extra["options"] = dict(site.options)
        paths: dict[str, int] = extra.setdefault("lightning_paths", {})
        paths[path] = paths.get(path, 0) + 1
        extra.update(_avoid(site.options, paths))
        return True

    def _log_site_for(self, metric: str | None) -> _LogSite | None:
        if metric is not None:
            for candidate in _name_candidates(metric):
                site = self._log_sites.get(candidate)
                if site is not None:
                    return site
        return self._last_log_site

    def _remember_log(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], frame: FrameType | None
    ) -> None:
        f = frame
        while f is not None:
            kind = self._kind(f.f_code)
            if kind == _USER:
                break
            if kind in (_LOOP, _IGNORE):
                return
            f = f.f_back
        if f is None:
            return
        if args or kwargs:
            options = {k: v for k, v in zip(_LOG_PARAMS, args)}
            options.update((k, kwargs[k]) for k in _LOG_PARAMS if k in kwargs)
        else:  # self.log(name, value): the common call, every step
            options = {}
        site = self._log_sites.get(name)
        if site is None or site.code is not f.f_code or site.lineno != f.f_lineno or site.options != options:
            site = _LogSite(f.f_code, f.f_lineno, options)  # else the same call as last step: kept
            self._log_sites[name] = site
        if options and (options.get("prog_bar") or options.get("sync_dist")):
            self._last_log_site = site


def _metric_from_probes(probes: list[FrameType]) -> tuple[str | None, str]:
    """The metric Lightning is converting (innermost frame first), and the Lightning path doing it."""
    path = "progress_bar"
    metric: str | None = None
    for f in probes:
        if f.f_code.co_name == "log_metrics":
            path = "logger"
        if metric is not None:
            continue
        local = f.f_locals
        rm = local.get(_PROBE_RESULT)
        meta = getattr(rm, "meta", None)
        if meta is not None and isinstance(getattr(meta, "name", None), str):
            metric = meta.name
        elif "apply_func" in f.f_code.co_filename and isinstance(local.get(_PROBE_KEY), str):
            metric = local[_PROBE_KEY]
    return metric, path


def _name_candidates(metric: str) -> list[str]:
    """``loss_step`` / ``loss/dataloader_idx_0`` back to the name passed to ``self.log``."""
    out = [metric]
    base = metric.split("/dataloader_idx_")[0]
    out.append(base)
    for suffix in ("_step", "_epoch"):
        if base.endswith(suffix):
            out.append(base[: -len(suffix)])
    return out


def _avoid(options: dict[str, Any], paths: dict[str, int]) -> dict[str, Any]:
    """Which ``self.log`` option avoids Lightning's sync, and the alternatives."""
    alternatives = []
    if paths.get("progress_bar"):
        avoid = "prog_bar=False"
        alternatives.append("on_step=False")
    else:
        avoid = "on_step=False"
        alternatives.append("log_every_n_steps=<larger>")
    if options.get("sync_dist"):
        alternatives.insert(0, "sync_dist=False")
    return {"avoid": avoid, "alternatives": alternatives}


def _merge_extra(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if key == "lightning_paths":
            paths = into.setdefault(key, {})
            for p, n in value.items():
                paths[p] = paths.get(p, 0) + n
        else:
            into[key] = value
