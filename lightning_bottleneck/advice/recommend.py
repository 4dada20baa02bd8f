"""Advice: concrete settings for *this* run, derived from its real configuration.

Never recommends what is already set. Each recommendation carries a ``settings`` dict (names listed in
the README) and a copy-pasteable ``snippet``. The primary bucket's advice comes first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.advice.fit import fit_advice
from lightning_bottleneck.advice.loader_plan import loader_recommendations
from lightning_bottleneck.advice.ranked import ranked_recommendations
from lightning_bottleneck.categories import Category
from lightning_bottleneck.evidence import Evidence, RunConfig
from lightning_bottleneck.report import Finding, Recommendation
from lightning_bottleneck.vocabulary import code_line

if TYPE_CHECKING:
    from lightning_bottleneck.rules.ranking import Ranking

# Workers beyond this rarely help one training process and each costs memory (a copy of the dataset
# object per worker); Lightning's own "does not have many workers" hint also caps at the CPU count.
MAX_SUGGESTED_WORKERS = 8
# Prefetching more batches per worker evens out a spiky loader (torch default is 2).
SUGGESTED_PREFETCH_FACTOR = 4
# Doubling the batch halves the per-sample launch/dispatch overhead (the rules own the number: the ranking
# estimates the same change's saving).
BATCH_GROWTH = T.BATCH_GROWTH


def _loader(settings: dict[str, object], cfg: RunConfig) -> str:
    args = ["dataset"]
    if cfg.batch_size is not None and "batch_size" not in settings:
        args.append(f"batch_size={cfg.batch_size}")
    return code_line(settings, args)


# Offline (a trace alone) the machine's CPUs are unknown: 4 workers is the usual starting point (the
# PyTorch performance tuning guide's examples; Lightning's own hint suggests up to the CPU count).
UNKNOWN_CPUS_WORKERS = 4


def suggested_workers(cfg: RunConfig) -> int:
    if cfg.usable_cpus is None:
        return UNKNOWN_CPUS_WORKERS
    cpus = cfg.usable_cpus
    per_process = max(1, cpus // max(1, cfg.devices_per_node))
    # Leave one core to the training process itself when there is more than one.
    return max(1, min(MAX_SUGGESTED_WORKERS, per_process - 1 if per_process > 1 else 1))


def _cpu_sentence(cfg: RunConfig, target: int) -> str:
    if cfg.usable_cpus is None:
        return (
            f"The trace does not say how many CPUs the machine has: start with {target} and stay below the "
            "CPU count per training process."
        )
    shared = f" shared by {cfg.devices_per_node} processes per node" if cfg.devices_per_node > 1 else ""
    return (
        f"This process may use {cfg.usable_cpus} CPU(s){shared}; {target} worker(s) leave one for training."
    )


def input_advice(cfg: RunConfig, findings: list[Finding]) -> list[Recommendation]:
    recs: list[Recommendation] = []
    workers = cfg.num_workers
    target = suggested_workers(cfg)
    stall = any(f.kind == "epoch_start_stall" for f in findings)
    steady = any(
        f.kind == "input" or (f.kind == "straggler" and f.evidence.get("cause") == "input") for f in findings
    )
    if not steady:
        # the steady-state data wait is below its medium threshold: loader changes would not pay (issue
        # 8 measured num_workers=1 at 0.79x on in-memory data); only worker restarts can still be fixed
        if stall and workers and not cfg.persistent_workers:
            return [_persistent_recommendation(cfg, workers)]
        return []
    if workers is not None and workers < target:
        settings: dict[str, object] = {"num_workers": target}
        if not cfg.persistent_workers:
            settings["persistent_workers"] = True
        if cfg.accelerator == "cuda" and not cfg.pin_memory:
            settings["pin_memory"] = True
        recs.append(
            Recommendation(
                kind="input",
                title=f"Load batches in {target} background worker(s)",
                detail=(
                    f"The train DataLoader uses num_workers={workers}, so every batch is loaded on the training "
                    f"process while the model waits. {_cpu_sentence(cfg, target)}"
                ),
                settings=settings,
                snippet=_loader(settings, cfg),
            )
        )
        return recs
    if workers:
        if stall and not cfg.persistent_workers:
            recs.append(_persistent_recommendation(cfg, workers))
        if cfg.accelerator == "cuda" and not cfg.pin_memory:
            recs.append(
                Recommendation(
                    kind="input",
                    title="Pin host memory for faster, asynchronous copies",
                    detail="Pinned batches copy to the GPU with non_blocking=True, overlapping the transfer.",
                    settings={"pin_memory": True},
                    snippet=_loader({"num_workers": workers, "pin_memory": True}, cfg),
                )
            )
        pf = cfg.prefetch_factor or 2
        if pf < SUGGESTED_PREFETCH_FACTOR:
            recs.append(
                Recommendation(
                    kind="input",
                    title=f"Prefetch {SUGGESTED_PREFETCH_FACTOR} batches per worker",
                    detail=f"prefetch_factor={pf} leaves little slack when some batches are slower than others.",
                    settings={"prefetch_factor": SUGGESTED_PREFETCH_FACTOR},
                    snippet=_loader(
                        {"num_workers": workers, "prefetch_factor": SUGGESTED_PREFETCH_FACTOR}, cfg
                    ),
                )
            )
    recs.append(
        Recommendation(
            kind="input",
            title="Make each sample cheaper to produce",
            detail=(
                "The loader itself is the limit"
                + (f" even with {workers} workers" if workers else "")
                + ": cache decoded samples, move heavy augmentations to the GPU or do them batched in "
                "`on_after_batch_transfer`, and avoid per-sample Python loops in `__getitem__`."
            ),
            settings={},
            snippet="def on_after_batch_transfer(self, batch, dataloader_idx):\n    return gpu_augment(batch)",
        )
    )
    return recs


def _persistent_recommendation(cfg: RunConfig, workers: int) -> Recommendation:
    return Recommendation(
        kind="input",
        title="Keep DataLoader workers alive between epochs",
        detail="Workers are re-created at every epoch and each start costs a visible stall.",
        settings={"persistent_workers": True},
        snippet=_loader({"num_workers": workers, "persistent_workers": True}, cfg),
    )


def overhead_advice(cfg: RunConfig, findings: list[Finding]) -> list[Recommendation]:
    recs: list[Recommendation] = []
    if not cfg.compiled:
        mode = "reduce-overhead" if cfg.accelerator == "cuda" else "default"
        detail = "torch.compile fuses the many small ops into few kernels and removes Python dispatch per op"
        if mode == "reduce-overhead":
            detail += "; mode='reduce-overhead' also replays them as CUDA graphs (one launch per step)"
        recs.append(
            Recommendation(
                kind="overhead",
                title="Compile the model",
                detail=detail + ".",
                settings={"compile": True, "compile_mode": mode},
                snippet=f'model = torch.compile(model, mode="{mode}")\ntrainer.fit(model, datamodule)',
            )
        )
    if cfg.batch_size:
        new = cfg.batch_size * BATCH_GROWTH
        recs.append(
            Recommendation(
                kind="overhead",
                title=f"Use a bigger batch ({cfg.batch_size} -> {new})",
                detail="Per-op overhead is paid once per step whatever the batch size; a bigger batch amortises it.",
                settings={"batch_size": new},
                snippet=_loader({"batch_size": new}, cfg),
            )
        )
    recs.append(
        Recommendation(
            kind="overhead",
            title="Vectorise Python loops over tensors",
            detail="Replace per-element or per-row loops in the step with batched tensor ops.",
            settings={},
            snippet="# instead of: for i in range(n): y = y + w[i] * x\ny = y + (w[:, None] * x).sum(0)",
        )
    )
    return recs


def _precision_target(cfg: RunConfig) -> str | None:
    if cfg.precision and ("16" in cfg.precision):
        return None
    if cfg.accelerator == "cuda":
        return "bf16-mixed" if cfg.bf16_supported else "16-mixed"
    if cfg.accelerator == "cpu" and cfg.bf16_supported:
        return "bf16-mixed"
    return None


def compute_advice(cfg: RunConfig, findings: list[Finding]) -> list[Recommendation]:
    recs: list[Recommendation] = []
    target = _precision_target(cfg)
    if target is not None:
        why = (
            "the GPU supports bf16 (no loss scaling needed)"
            if target == "bf16-mixed" and cfg.accelerator == "cuda"
            else "the GPU lacks bf16, so fp16 with loss scaling"
            if target == "16-mixed"
            else "this CPU has native bf16 instructions (AVX512-BF16/AMX)"
        )
        recs.append(
            Recommendation(
                kind="compute",
                title=f"Train in mixed precision ({target})",
                detail=f"The run uses precision={cfg.precision!r}; {why}. Matmuls and convolutions run about twice as fast.",
                settings={"precision": target},
                snippet=f'Trainer(precision="{target}")',
            )
        )
    if (
        cfg.accelerator == "cuda"
        and cfg.tf32_capable
        and (cfg.float32_matmul_precision or "highest") == "highest"
    ):
        recs.append(
            Recommendation(
                kind="compute",
                title="Allow TF32 for float32 matmuls",
                detail="This GPU has TF32 tensor cores; float32 matmuls currently use full-precision FP32 units.",
                settings={"float32_matmul_precision": "high"},
                snippet='torch.set_float32_matmul_precision("high")',
            )
        )
    if not cfg.compiled:
        recs.append(
            Recommendation(
                kind="compute",
                title="Compile the model to fuse kernels",
                detail="torch.compile fuses elementwise ops into the matmuls' neighbours and picks faster kernels.",
                settings={
                    "compile": True,
                    "compile_mode": "max-autotune" if cfg.accelerator == "cuda" else "default",
                },
                snippet="model = torch.compile(model)",
            )
        )
    if any(f.evidence.get("signature") == "manual_attention" for f in findings):
        recs.append(
            Recommendation(
                kind="compute",
                title="Use the fused attention kernel",
                detail="Hand-written attention (softmax(QK^T)V) should call torch.nn.functional.scaled_dot_product_attention.",
                settings={},
                snippet="out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)",
            )
        )
    return recs


def memory_advice(cfg: RunConfig, findings: list[Finding]) -> list[Recommendation]:
    recs = [
        Recommendation(
            kind="memory",
            title="Recompute activations in the backward pass (activation checkpointing)",
            detail="Trades roughly a third more compute for storing far fewer activations.",
            settings={"gradient_checkpointing": True},
            snippet="from torch.utils.checkpoint import checkpoint\nx = checkpoint(block, x, use_reentrant=False)",
        )
    ]
    target = _precision_target(cfg) if cfg.accelerator == "cuda" else None
    if target:
        recs.append(
            Recommendation(
                kind="memory",
                title=f"Halve activation memory with {target}",
                detail=f"The run uses precision={cfg.precision!r}; 16-bit activations take half the memory.",
                settings={"precision": target},
                snippet=f'Trainer(precision="{target}")',
            )
        )
    if cfg.batch_size and cfg.batch_size > 1:
        bs = max(1, cfg.batch_size // 2)
        acc = cfg.accumulate_grad_batches * 2
        recs.append(
            Recommendation(
                kind="memory",
                title=f"Halve the batch and accumulate gradients (batch {bs} x {acc})",
                detail="Same effective batch size, half the activation memory per step.",
                settings={"batch_size": bs, "accumulate_grad_batches": acc},
                snippet=f"{_loader({'batch_size': bs}, cfg)}\nTrainer(accumulate_grad_batches={acc})",
            )
        )
    return recs


def communication_advice(cfg: RunConfig, findings: list[Finding]) -> list[Recommendation]:
    from lightning_bottleneck.advice.communication import communication_recommendations

    return communication_recommendations(cfg, findings)


def sync_advice(cfg: RunConfig, findings: list[Finding]) -> list[Recommendation]:
    # Per-site advice (with the user's line) is added by the caller from the sync hooks' sites; this is
    # what a trace alone can say.
    return [
        Recommendation(
            kind="sync",
            title="Remove host-device synchronisations from the training step",
            detail=(
                "Calls such as .item(), .cpu(), .tolist(), print(tensor) and torch.cuda.synchronize() make the "
                "host wait for the GPU every step. Accumulate on the device and read values every N steps."
            ),
            settings={"log_every_n_steps": 50},
            snippet='self.log("loss", loss)  # pass the tensor; Lightning reads it every log_every_n_steps',
        )
    ]


ADVISORS: dict[Category, Callable[[RunConfig, list[Finding]], list[Recommendation]]] = {
    Category.INPUT: input_advice,
    Category.SYNC: sync_advice,
    Category.OVERHEAD: overhead_advice,
    Category.COMPUTE: compute_advice,
    Category.MEMORY: memory_advice,
    Category.COMMUNICATION: communication_advice,
    Category.REST_OF_FIT: fit_advice,
}


def advise(
    primary: Category, findings: list[Finding], evidence: Evidence, ranking: Ranking | None = None
) -> list[Recommendation]:
    """Recommendations for the primary bucket first, then for other buckets with findings.

    With a :class:`~lightning_bottleneck.rules.ranking.Ranking`, the input advice is the loader plan's when
    the probe measured a ladder, levers measured no faster are dropped, every recommendation that a
    candidate fix backs carries its saving and speed-up, and the list is ordered by time saved.
    """
    cfg = evidence.config or config_from_trace(evidence)
    order = [primary] + [Category(f.kind) for f in findings if f.kind in Category._value2member_map_]
    if ranking is not None:
        order += [c.category for c in ranking.candidates]
    seen: set[Category] = set()
    recs: list[Recommendation] = []
    for cat in order:
        if cat in seen or cat not in ADVISORS:
            continue
        seen.add(cat)
        if cat == Category.INPUT and ranking is not None and ranking.loader_plan is not None:
            recs += loader_recommendations(ranking.loader_plan, cfg)
            continue
        recs += ADVISORS[cat](cfg, findings)
    recs = _drop_repeated(_drop_already_set(recs, cfg))
    if ranking is not None:
        recs = ranked_recommendations(recs, ranking)
    return recs


def _drop_repeated(recs: list[Recommendation]) -> list[Recommendation]:
    """One recommendation per setting: a later bucket's advice for a setting already advised is dropped.

    The rest of the fit's advice is apart: its settings go elsewhere (the val DataLoader's ``num_workers`` is not
    the train loader's) and its rules never advise what is already set."""
    seen: set[str] = set()
    out = []
    for r in recs:
        if r.kind == Category.REST_OF_FIT.value:
            out.append(r)
            continue
        if r.settings and set(r.settings) <= seen:
            continue
        seen |= set(r.settings)
        out.append(r)
    return out


def config_from_trace(evidence: Evidence) -> RunConfig:
    """Offline, the trace is all there is: device kind and capability come from its deviceProperties."""
    cfg = RunConfig()
    for s in evidence.summaries[:1]:
        iters = s.dataloader_iter
        if iters and all("SingleProcess" in name for name in iters):
            cfg.num_workers = 0
        if s.device in ("cuda", "rocm"):
            cfg.accelerator = "cuda"
            cfg.device_name = s.device_name
            cc = s.compute_capability
            if cc:
                # bf16 and TF32 tensor cores arrive with Ampere (compute capability 8.0); ROCm reports
                # the gfx major here, and MI200+ (gfx9 with major >= 9) support bf16.
                cfg.bf16_supported = cc[0] >= 8
                cfg.tf32_capable = s.device == "cuda" and cc[0] >= 8
    return cfg


def _drop_already_set(recs: list[Recommendation], cfg: RunConfig) -> list[Recommendation]:
    current = {
        "num_workers": cfg.num_workers,
        "pin_memory": cfg.pin_memory,
        "persistent_workers": cfg.persistent_workers,
        "prefetch_factor": cfg.prefetch_factor,
        "batch_size": cfg.batch_size,
        "precision": cfg.precision,
        "compile": cfg.compiled,
        "float32_matmul_precision": cfg.float32_matmul_precision,
        "accumulate_grad_batches": cfg.accumulate_grad_batches,
    }
    out = []
    for r in recs:
        if r.kind == Category.REST_OF_FIT.value:  # its rules read the current values themselves
            out.append(r)
            continue
        if (
            r.settings
            and all(current.get(k) == v for k, v in r.settings.items() if k in current)
            and all(k in current for k in r.settings)
        ):
            continue
        out.append(r)
    return out
