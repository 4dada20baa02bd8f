"""Advice for communication-bound runs (DDP / FSDP), drawn from the run's strategy settings."""

from __future__ import annotations

from lightning_bottleneck.evidence import RunConfig
from lightning_bottleneck.report import Finding, Recommendation

# DDP's default gradient bucket is 25 MB; fewer, larger buckets cut per-collective latency on slow links
# (torch.nn.parallel.DistributedDataParallel docs, ``bucket_cap_mb``).
DDP_DEFAULT_BUCKET_MB = 25
SUGGESTED_BUCKET_MB = 100


def communication_recommendations(cfg: RunConfig, findings: list[Finding]) -> list[Recommendation]:
    recs: list[Recommendation] = []
    acc = cfg.accumulate_grad_batches
    recs.append(
        Recommendation(
            kind="communication",
            title=f"Accumulate gradients over {acc * 2} batches",
            detail="Lightning skips the gradient all-reduce on accumulation steps (no_sync), so each all-reduce is amortised.",
            settings={"accumulate_grad_batches": acc * 2},
            snippet=f"Trainer(accumulate_grad_batches={acc * 2})",
        )
    )
    strategy = (cfg.strategy or "").lower()
    if "fsdp" not in strategy:
        bucket = cfg.ddp_kwargs.get("bucket_cap_mb", DDP_DEFAULT_BUCKET_MB)
        ddp_settings: dict[str, object] = {}
        if bucket < SUGGESTED_BUCKET_MB:
            ddp_settings["bucket_cap_mb"] = SUGGESTED_BUCKET_MB
        if not cfg.ddp_kwargs.get("gradient_as_bucket_view"):
            ddp_settings["gradient_as_bucket_view"] = True
        if not cfg.ddp_kwargs.get("static_graph"):
            ddp_settings["static_graph"] = True
        if ddp_settings:
            args = ", ".join(f"{k}={v!r}" for k, v in ddp_settings.items())
            recs.append(
                Recommendation(
                    kind="communication",
                    title="Tune DDP's gradient buckets",
                    detail="Larger buckets mean fewer all-reduce calls; bucket views avoid a gradient copy; a static graph lets DDP overlap more.",
                    settings=ddp_settings,
                    snippet=f"from lightning.pytorch.strategies import DDPStrategy\nTrainer(strategy=DDPStrategy({args}))",
                )
            )
        recs.append(
            Recommendation(
                kind="communication",
                title="Compress gradients before the all-reduce",
                detail="A bf16/fp16 compression hook halves the bytes each all-reduce moves.",
                settings={"ddp_comm_hook": "bf16_compress_hook" if cfg.accelerator == "cuda" else "fp16_compress_hook"},
                snippet=(
                    "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
                    "Trainer(strategy=DDPStrategy(ddp_comm_hook=default_hooks.fp16_compress_hook))"
                ),
            )
        )
    else:
        recs.append(
            Recommendation(
                kind="communication",
                title="Prefetch FSDP all-gathers and shard less aggressively",
                detail="Prefetching the next all-gather overlaps it with compute; SHARD_GRAD_OP avoids re-gathering parameters in backward.",
                settings={"sharding_strategy": "SHARD_GRAD_OP", "backward_prefetch": "BACKWARD_PRE", "forward_prefetch": True},
                snippet='FSDPStrategy(sharding_strategy="SHARD_GRAD_OP", backward_prefetch=BackwardPrefetch.BACKWARD_PRE, forward_prefetch=True)',
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
