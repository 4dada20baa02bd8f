"""Per-call-site advice for host-device syncs: the rewrite that removes or defers each one.

One :class:`Recommendation` per :class:`SyncSite` (worst first), naming the user's line, with a
``settings`` dict and a copy-pasteable ``snippet`` for the API that synced; and which ``self.log`` option
avoids a sync Lightning makes on the user's behalf (:func:`avoid_lightning_log_sync`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning_bottleneck.evidence import SyncSite
from lightning_bottleneck.report import Recommendation
from lightning_bottleneck.vocabulary import VIA_BOOL, VIA_COPY, VIA_PRINT, VIA_READ, VIA_SYNC

# Lightning's default Trainer(log_every_n_steps=50): reading a value every N steps instead of every step
# divides the syncs by N (lightning.pytorch.Trainer docs, ``log_every_n_steps``).
READ_EVERY_N_STEPS = 50


def avoid_lightning_log_sync(options: dict[str, Any], paths: dict[str, int]) -> dict[str, Any]:
    """Which ``self.log`` option avoids Lightning's sync, and the alternatives.

    ``options``: the ``self.log`` call's options; ``paths``: how often Lightning read the value back for the
    progress bar (``"progress_bar"``) and for the loggers (``"logger"``). The live tracker attaches the result
    to the sync site as it attributes the sync (``extra["avoid"]``, ``extra["alternatives"]``), where the
    finding's text and evidence and :func:`_lightning_log` read it.
    """
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


def _rate(site: SyncSite) -> str:
    return f"{site.calls_per_step:.3g}x per step" if site.steps else f"{site.calls} time(s)"


def _lightning_log(site: SyncSite) -> Recommendation:
    metric = site.extra.get("metric") or "loss"
    avoid = str(site.extra.get("avoid", "prog_bar=False"))
    key, _, value = avoid.partition("=")
    settings: dict[str, object] = {key: value == "True" if value in ("True", "False") else value}
    options = site.extra.get("options") or {}
    if options.get("sync_dist"):
        settings["sync_dist"] = False
    extra_args = ", ".join(f"{k}={v!r}" for k, v in settings.items())
    snippet = (
        f'self.log("{metric}", value, {extra_args})\n'
        f"# or keep it in the progress bar but only per epoch:\n"
        f'self.log("{metric}", value, prog_bar=True, on_step=False, on_epoch=True)'
    )
    return Recommendation(
        kind="sync",
        title=f"Stop Lightning reading {metric!r} back to the host every step",
        detail=(
            f"{site.location}: `self.log({metric!r}, ...)` makes Lightning call {site.via} after the batch "
            f"({_rate(site)}) to show the value; `{avoid}` avoids it (alternatives: "
            f"{', '.join(site.extra.get('alternatives', [])) or 'none'})."
        ),
        settings=settings,
        snippet=snippet,
    )


def _read(site: SyncSite) -> Recommendation:
    n = READ_EVERY_N_STEPS
    return Recommendation(
        kind="sync",
        title=f"Accumulate on the device and read every {n} steps",
        detail=(
            f"{site.location} calls {site.via} {_rate(site)}, which waits for every queued kernel. Keep the "
            f"running value a tensor and read it once every {n} steps, or pass the tensor to `self.log`."
        ),
        settings={"log_every_n_steps": n},
        snippet=(
            "# in __init__: self.running = None\n"
            "d = loss.detach()\n"
            "self.running = d if self.running is None else self.running + d  # stays on the device\n"
            f"if (batch_idx + 1) % {n} == 0:\n"
            f"    value = (self.running / {n}).item()  # one sync every {n} steps\n"
            "    self.running = None"
        ),
    )


def _print(site: SyncSite) -> Recommendation:
    n = READ_EVERY_N_STEPS
    return Recommendation(
        kind="sync",
        title="Log the tensor instead of formatting or printing it",
        detail=(
            f"{site.location} formats a tensor ({site.via}, {_rate(site)}): an f-string or print() reads "
            f"it back to the host. `self.log` takes the tensor and Lightning reads it every "
            f"log_every_n_steps ({n})."
        ),
        settings={"log_every_n_steps": n},
        snippet=(
            'self.log("loss", loss)  # instead of print(f"{loss}")\n'
            f'# or print rarely: if batch_idx % {n} == 0: print(f"{{loss.item():.4f}}")'
        ),
    )


def _copy(site: SyncSite) -> Recommendation:
    return Recommendation(
        kind="sync",
        title="Copy to the host asynchronously (non_blocking=True into pinned memory)",
        detail=(
            f"{site.location} copies a device tensor to the CPU ({site.via}, {_rate(site)}) and waits "
            "for it. Copy into pinned memory with non_blocking=True and read it later, after an event."
        ),
        settings={"non_blocking": True, "pin_memory": True},
        snippet=(
            "host = torch.empty(x.shape, dtype=x.dtype, device='cpu', pin_memory=True)  # allocate once\n"
            "host.copy_(x, non_blocking=True)\n"
            "ready = torch.cuda.Event(); ready.record()\n"
            "# ... later, only when the value is needed:\n"
            "ready.synchronize(); use(host)"
        ),
    )


def _bool(site: SyncSite) -> Recommendation:
    return Recommendation(
        kind="sync",
        title="Keep the condition on the device",
        detail=(
            f"{site.location} branches on a tensor ({site.via}, {_rate(site)}), so the host waits for "
            "its value. Select with torch.where or a mask instead of an `if`, or check only every N steps."
        ),
        settings={},
        snippet=(
            "# instead of: if loss > threshold: loss = loss * 0.5\n"
            "loss = torch.where(loss > threshold, loss * 0.5, loss)"
        ),
    )


def _synchronize(site: SyncSite) -> Recommendation:
    return Recommendation(
        kind="sync",
        title="Call synchronize only to time code, outside the training loop",
        detail=(
            f"{site.location} calls {site.via} ({_rate(site)}), which drains the GPU queue. Remove it "
            "from the step; to time GPU work, record CUDA events and read them after the loop."
        ),
        settings={},
        snippet=(
            "start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)\n"
            "start.record(); out = model(x); end.record()\n"
            "# after training: end.synchronize(); print(start.elapsed_time(end), 'ms')"
        ),
    )


_BY_VIA: tuple[tuple[tuple[str, ...], Callable[[SyncSite], Recommendation]], ...] = (
    (VIA_PRINT, _print),
    (VIA_COPY, _copy),
    (VIA_BOOL, _bool),
    (VIA_SYNC, _synchronize),
    (VIA_READ, _read),
)


def recommendation_for(site: SyncSite) -> Recommendation:
    """The rewrite that removes or defers the sync at ``site``."""
    if site.lightning_log:
        return _lightning_log(site)
    for vias, make in _BY_VIA:
        if site.via in vias:
            return make(site)
    return _read(site)


def sync_site_recommendations(sites: list[SyncSite]) -> list[Recommendation]:
    """One recommendation per call site, worst first (blocked time, then calls)."""
    ordered = sorted((s for s in sites if s.calls > 0), key=lambda s: (-s.total_ms, -s.calls, s.location))
    return [recommendation_for(s) for s in ordered]
