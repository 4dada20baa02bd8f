"""Advice for communication-bound runs (DDP / FSDP), drawn from the run's strategy settings and from the
communication metrics measured on its trace (:mod:`lightning_bottleneck.analysis.communication`, attached
to the ``communication`` finding's evidence by
:func:`lightning_bottleneck.rules.communication.with_communication_evidence`)."""

from __future__ import annotations

from typing import Any

from lightning_bottleneck.categories import FindingKind
from lightning_bottleneck.evidence import RunConfig
from lightning_bottleneck.report import Finding, Recommendation

# DDP's default gradient bucket is 25 MB; fewer, larger buckets cut per-collective latency on slow links
# (torch.nn.parallel.DistributedDataParallel docs, ``bucket_cap_mb``).
DDP_DEFAULT_BUCKET_MB = 25
SUGGESTED_BUCKET_MB = 100
# More gradient all-reduces per step than this means many small buckets: latency, not bandwidth, dominates.
MANY_ALL_REDUCES_PER_STEP = 8
# DDP's reducer copies (gradient -> bucket -> gradient) above this share of the step are worth removing
# with ``gradient_as_bucket_view`` (same 5% trigger as the input and sync rules).
REDUCER_COPY_SHARE = 0.05


def _comm_evidence(findings: list[Finding]) -> dict[str, Any]:
    for f in findings:
        if f.kind == FindingKind.COMMUNICATION and (
            "by_kind" in f.evidence or "wait_in_backward_share" in f.evidence
        ):
            return f.evidence
    return {}


def communication_recommendations(cfg: RunConfig, findings: list[Finding]) -> list[Recommendation]:
    recs: list[Recommendation] = []
    ev = _comm_evidence(findings)
    outside = float(ev.get("wait_outside_backward_share") or 0.0)
    inside = float(ev.get("wait_in_backward_share") or 0.0)
    if ev and outside > inside:
        recs.append(
            Recommendation(
                kind="communication",
                title="Sync logged metrics once per epoch, not every step (sync_dist)",
                detail=(
                    f"{outside:.0%} of step time waits on collectives outside the backward pass (gradient "
                    f"all-reduce: {inside:.0%}): `self.log(..., sync_dist=True)` on every step, barriers, or "
                    "FSDP all-gathers. Log with on_step=False, on_epoch=True (one reduction per epoch) or drop "
                    "sync_dist for per-step training metrics."
                ),
                settings={"sync_dist": False},
                snippet='self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)',
            )
        )
    acc = cfg.accumulate_grad_batches
    if not cfg.manual_optimization:
        recs.append(
            Recommendation(
                kind="communication",
                title=f"Accumulate gradients over {acc * 2} batches",
                detail=(
                    "Lightning skips the gradient all-reduce on accumulation steps (DDP no_sync), so each "
                    "all-reduce is amortised over more batches."
                ),
                settings={"accumulate_grad_batches": acc * 2},
                snippet=f"Trainer(accumulate_grad_batches={acc * 2})",
            )
        )
    strategy = (cfg.strategy or "").lower()
    if "fsdp" not in strategy:
        recs += _ddp_recommendations(cfg, ev)
    else:
        recs.append(
            Recommendation(
                kind="communication",
                title="Prefetch FSDP all-gathers and shard less aggressively",
                detail=(
                    "Prefetching the next all-gather overlaps it with compute; SHARD_GRAD_OP keeps parameters "
                    "gathered between forward and backward (no re-gather); HYBRID_SHARD keeps all-gathers "
                    "inside a node when there are several."
                ),
                settings={
                    "sharding_strategy": "HYBRID_SHARD" if cfg.num_nodes > 1 else "SHARD_GRAD_OP",
                    "backward_prefetch": "BACKWARD_PRE",
                    "forward_prefetch": True,
                },
                snippet=(
                    "from torch.distributed.fsdp import BackwardPrefetch\n"
                    'FSDPStrategy(sharding_strategy="SHARD_GRAD_OP", '
                    "backward_prefetch=BackwardPrefetch.BACKWARD_PRE, forward_prefetch=True)"
                ),
            )
        )
    if cfg.accelerator == "cuda" and (cfg.distributed_backend or "") == "gloo":
        recs.insert(
            0,
            Recommendation(
                kind="communication",
                title="Use NCCL, not gloo, between GPUs",
                detail="gloo copies GPU tensors through host memory; NCCL moves them device to device.",
                settings={"process_group_backend": "nccl"},
                snippet='Trainer(strategy=DDPStrategy(process_group_backend="nccl"))',
            ),
        )
    return recs


def _ddp_recommendations(cfg: RunConfig, ev: dict[str, Any]) -> list[Recommendation]:
    recs: list[Recommendation] = []
    kw = cfg.ddp_kwargs
    bucket = kw.get("bucket_cap_mb", DDP_DEFAULT_BUCKET_MB)
    calls = float(((ev.get("by_kind") or {}).get("all_reduce") or {}).get("calls_per_step") or 0.0)
    copies = float(ev.get("reducer_copy_share") or 0.0)
    settings: dict[str, object] = {}
    why: list[str] = []
    if (
        isinstance(bucket, (int, float))
        and bucket < SUGGESTED_BUCKET_MB
        and (not ev or calls >= MANY_ALL_REDUCES_PER_STEP)
    ):
        settings["bucket_cap_mb"] = SUGGESTED_BUCKET_MB
        why.append(
            f"{calls:.0f} all-reduces per step" if calls else "larger buckets mean fewer all-reduce calls"
        )
    if not kw.get("gradient_as_bucket_view") and (not ev or copies >= REDUCER_COPY_SHARE):
        settings["gradient_as_bucket_view"] = True
        why.append(
            f"DDP's bucket copies take {copies:.0%} of the step"
            if copies
            else "bucket views avoid a gradient copy"
        )
    if not kw.get("static_graph"):
        settings["static_graph"] = True
        why.append("a static graph lets DDP skip the unused-parameter search and overlap more")
    if kw.get("find_unused_parameters"):
        settings["find_unused_parameters"] = False
        why.append(
            "find_unused_parameters=True traverses the graph every step and all-reduces gradients of "
            "parameters the step never used (freeze them with requires_grad_(False) instead)"
        )
    if settings:
        args = ", ".join(f"{k}={v!r}" for k, v in settings.items())
        recs.append(
            Recommendation(
                kind="communication",
                title="Tune DDP's gradient buckets",
                detail="; ".join(why) + ".",
                settings=settings,
                snippet=f"from lightning.pytorch.strategies import DDPStrategy\nTrainer(strategy=DDPStrategy({args}))",
            )
        )
    hook = "bf16_compress_hook" if cfg.accelerator == "cuda" else "fp16_compress_hook"
    recs.append(
        Recommendation(
            kind="communication",
            title="Compress gradients before the all-reduce",
            detail="A 16-bit compression comm hook halves the bytes each all-reduce moves.",
            settings={"ddp_comm_hook": hook},
            snippet=(
                "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
                f"Trainer(strategy=DDPStrategy(ddp_comm_hook=default_hooks.{hook}))"
            ),
        )
    )
    return recs
