"""Attribution of each host-device sync to the user's line, and the per-site totals.

:class:`SyncAttribution` is what :class:`~lightning_bottleneck.live.sync_hooks.SyncTracker` records into:
given the frame that made a timed sync, it walks outwards to the first frame outside torch, Lightning, the
Python standard library and this package (each code object's kind is classified once and cached), and adds the
call and its blocked time to that line. When Lightning syncs on the user's behalf (turning a tensor logged with
``self.log(..., prog_bar=True)`` into a float after the batch), the sync goes to the ``self.log`` line the
tracker remembered for that metric, with ``lightning_log=True`` and the option that avoids it
(:func:`~lightning_bottleneck.advice.sync.avoid_lightning_log_sync`). :meth:`SyncAttribution.sites` merges the
totals into one :class:`~lightning_bottleneck.evidence.SyncSite` per call site.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from types import CodeType, FrameType
from typing import Any

from lightning_bottleneck.advice.sync import avoid_lightning_log_sync
from lightning_bottleneck.evidence import SyncSite

__all__ = ["FRAME_USER", "SyncAttribution"]

# Frame kinds (cached per code object).
FRAME_USER = 0  # the user's code: attribution stops here
FRAME_TORCH = 1  # torch internals: keep walking
FRAME_LIB = 2  # lightning & co., stdlib: keep walking
FRAME_LOGGING = 3  # Lightning's logging / result collection / progress bar: keep walking, remember it
FRAME_LOOP = 4  # Lightning's loops and hook dispatch: no user line between here and the sync
FRAME_IGNORE = 5  # this package, DataLoader internals, optimizer internals: not the user's sync

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

#: The files of this package whose frames are walked through, not ignored (every other file of ``live/`` is
#: this package's own work: a sync there is not the user's): the sync wrappers themselves, and the whole-fit
#: ledger's timers around ``self.log`` and the logger connector.
_TRANSPARENT_FILES = (
    "sync_hooks.py",
    "sync_attribution.py",
    "ledger.py",
    "ledger_clock.py",
    "ledger_actions.py",
    "ledger_profiler.py",
)


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


class SyncAttribution:
    """Where each timed sync came from, and the running totals per call site.

    Args:
        device_type: the training device (``"cpu"``, ``"cuda"``, ...).
        root: directory locations are made relative to (default: the working directory).
    """

    def __init__(self, device_type: str = "cpu", root: str | None = None) -> None:
        self.device_type = "cuda" if device_type in ("gpu", "cuda") else device_type
        self.root = os.path.realpath(root or os.getcwd())
        self._steps = 0
        self._kinds: dict[int, tuple[int, CodeType]] = {}
        self._acc: dict[tuple[Any, ...], _Acc] = {}
        self._log_sites: dict[str, _LogSite] = {}
        self._last_log_site: _LogSite | None = None  # most recent prog_bar / sync_dist self.log
        self._pkg_roots = _package_roots()
        self._stdlib = _stdlib_roots()
        self._own_dir = os.path.join(os.path.realpath(os.path.dirname(__file__)), "")
        self._transparent = {os.path.join(self._own_dir, name) for name in _TRANSPARENT_FILES}

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

    # ------------------------------------------------------------------ attribution
    def _kind(self, code: CodeType) -> int:
        entry = self._kinds.get(id(code))
        if entry is None:
            entry = (self._classify(code.co_filename), code)
            self._kinds[id(code)] = entry
        return entry[0]

    def _classify(self, filename: str) -> int:
        if filename.startswith("<"):
            return FRAME_LIB if filename.startswith("<frozen") else FRAME_USER
        real = os.path.realpath(filename)
        if real in self._transparent:
            return FRAME_LIB
        if real.startswith(self._own_dir):
            return FRAME_IGNORE
        for name, root in self._pkg_roots:
            if real.startswith(root):
                rel = real[len(root) :].replace(os.sep, "/")
                if name == "torch":
                    return FRAME_IGNORE if rel.startswith(_TORCH_IGNORED_PARTS) else FRAME_TORCH
                if name in ("lightning", "pytorch_lightning"):
                    if rel.startswith(_LOOP_PARTS):
                        return FRAME_LOOP
                    if rel.startswith(_LOGGING_PARTS):
                        return FRAME_LOGGING
                return FRAME_LIB
        if real.startswith(self._stdlib) and "-packages" not in real:
            return FRAME_LIB
        return FRAME_USER

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
        if entry is not None and entry[0] == FRAME_USER:
            self._add((id(code), frame.f_lineno, via), code, frame.f_lineno, via, ns)
            return True
        if direct_only and self._kind(code) != FRAME_USER:
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
            if kind == FRAME_USER:
                key = (
                    (id(f.f_code), f.f_lineno, via) if f is frame else (id(f.f_code), f.f_lineno, via, "via")
                )
                self._add(key, f.f_code, f.f_lineno, via, ns, lightning_log=saw_logging)
                return True
            if kind == FRAME_IGNORE:
                return False
            if kind == FRAME_LOOP:
                if saw_logging:
                    return self._record_lightning_log(via, probes, ns)
                if first_lib is not None and self.device_type != "cpu":
                    self._record_internal(via, first_lib, ns)
                    return True
                return False
            if kind == FRAME_LOGGING:
                saw_logging = True
            if kind != FRAME_TORCH:
                if first_lib is None:
                    first_lib = f
                if kind == FRAME_LOGGING or "apply_func" in f.f_code.co_filename:
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
        extra.update(avoid_lightning_log_sync(site.options, paths))
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
            if kind == FRAME_USER:
                break
            if kind in (FRAME_LOOP, FRAME_IGNORE):
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


def _merge_extra(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if key == "lightning_paths":
            paths = into.setdefault(key, {})
            for p, n in value.items():
                paths[p] = paths.get(p, 0) + n
        else:
            into[key] = value
