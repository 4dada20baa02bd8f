"""Candidate fixes inside the training step beyond input: syncs, exposed communication, compute and per-op
overhead (measured trials where they ran, the named estimates otherwise), a bigger batch that sizes its advice."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import lightning_bottleneck.thresholds as T
from lightning_bottleneck.analysis.ledger import FitLedger
from lightning_bottleneck.categories import (
    Category,
    FitPart,
    Provenance,
    Share,
)
from lightning_bottleneck.evidence import Evidence, RunConfig
from lightning_bottleneck.evidence.trial_results import TrialResult
from lightning_bottleneck.rules.candidates import (
    COMPUTE_LEVERS,
    Candidate,
    Ranking,
    RunAccount,
    estimate,
    share_of,
)
from lightning_bottleneck.rules.shares import mixed_precision_open


def sync_candidates_of(breakdown: dict[str, float], account: RunAccount) -> list[Candidate]:
    share = share_of(breakdown, Share.SYNC)
    if share < T.SYNC_SHARE_MEDIUM:
        return []
    saved = share * T.RECOVERABLE["sync"] * account.step_ms
    return [
        estimate(
            Category.SYNC,
            "remove the synchronisations",
            None,
            {},
            saved,
            account,
            f"{share:.0%} of the step blocks on the device; removing the calls removes the wait",
        )
    ]


def communication_candidates_of(
    evidence: Evidence, breakdown: dict[str, float], account: RunAccount
) -> list[Candidate]:
    share = share_of(breakdown, Share.COMMUNICATION)
    cfg = evidence.config or RunConfig()
    if share < T.COMM_SHARE_MEDIUM:
        return []
    exposed = share * account.step_ms
    out = []
    if not cfg.manual_optimization:
        acc = max(1, cfg.accumulate_grad_batches)
        new = acc * 2
        frac = 1.0 - acc / new  # all-reduces per batch: 1/acc -> 1/new; (k-1)/k from acc=1
        # the optimizer step (and its zero_grad) runs once per accumulation too: its phase of the step, measured
        # on the host thread apart from backward (where DDP waits for the all-reduce), is saved in the same
        # proportion (issue 19: ddp_comm's 16M-parameter step applied 1.97x against a 1.58x high end without it)
        summary = evidence.summaries[0] if evidence.summaries else None
        phases = summary.phases if summary is not None else {}
        opt_ms = phases.get("optimizer_step", 0.0) * account.step_ms
        overhead_ms = share_of(breakdown, Share.OVERHEAD) * account.step_ms
        # find_unused_parameters=True: each synchronising step DDP searches the graph for unused parameters and
        # zero-fills their gradients before the all-reduce, work no_sync skips with the all-reduce. It is the
        # backward phase's host work outside its collectives and the step's compute (at most the per-op overhead):
        # the point has it go in the same proportion (ddp_comm: 17% of the step; without it the point read 1.51-1.64x
        # for an applied 1.70-1.94x in six scoreboard runs and 1.96-2.03x in two bare pairs; the high end missed in four)
        reducer_ms = 0.0
        comm = summary.communication if summary is not None else None
        if cfg.ddp_kwargs.get("find_unused_parameters") and comm is not None and "backward" in phases:
            outside = phases["backward"] - comm.wait_in_backward_share - share_of(breakdown, Share.COMPUTE)
            reducer_ms = min(max(0.0, outside) * account.step_ms, overhead_ms)
        parts = [f"{exposed:.1f} ms/step of exposed collectives"]
        parts += [f"{opt_ms:.1f} ms/step of optimizer step"] if opt_ms >= 0.05 else []
        parts += (
            [f"{reducer_ms:.1f} ms/step of DDP's unused-parameter search and zero-fill"]
            if reducer_ms >= 0.05
            else []
        )
        what = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        accumulate = estimate(
            Category.COMMUNICATION,
            f"accumulate_grad_batches={new}",
            "accumulate_grad_batches",
            {"accumulate_grad_batches": new},
            (exposed + opt_ms + reducer_ms) * frac,
            account,
            f"{what}, run once per {new} batches "
            f"instead of {acc}: saves {frac:.0%} of it; the effective batch grows {new // acc}x (retune the learning "
            "rate), memory per batch is unchanged",
        )
        if not reducer_ms:
            # the high end: under no_sync DDP also skips the reducer's host work around the all-reduce (bucket
            # copies, zero-filled unused gradients), which the trace counts as per-op overhead; at most all of it
            # goes in the same proportion (ddp_comm: 83% collectives, 17% overhead, applied 1.88-1.97x: 47-49% saved)
            accumulate.evidence["saved_high_ms_per_step"] = (exposed + opt_ms + overhead_ms) * frac
            accumulate.evidence["range_why"] = (
                f"the high end also has the {overhead_ms:.1f} ms/step of per-op host work (DDP's bucket copies around "
                "the all-reduce) run once per accumulation"
            )
        # arithmetic on the trace's measured collective and optimizer time, no published factor (issue 28: a
        # computed point; ddp_comm predicted 1.70x, applied 1.74x)
        out.append(replace(accumulate, method=Provenance.COMPUTED))
    if "fsdp" not in (cfg.strategy or "").lower():
        out.append(
            estimate(
                Category.COMMUNICATION,
                "DDP bucket settings",
                "static_graph",
                {},
                exposed * T.COMM_BUCKETS_RECOVERABLE,
                account,
                f"{T.COMM_BUCKETS_RECOVERABLE:.0%} of {exposed:.1f} ms/step exposed collectives (fewer, larger buckets)",
            )
        )
        out.append(
            estimate(
                Category.COMMUNICATION,
                "gradient compression hook",
                "ddp_comm_hook",
                {},
                exposed * T.COMM_COMPRESS_RECOVERABLE,
                account,
                f"{T.COMM_COMPRESS_RECOVERABLE:.0%} of {exposed:.1f} ms/step exposed collectives (half the bytes)",
            )
        )
    else:
        out.append(
            estimate(
                Category.COMMUNICATION,
                "FSDP prefetch",
                "backward_prefetch",
                {},
                exposed * T.RECOVERABLE["communication"],
                account,
                f"{T.RECOVERABLE['communication']:.0%} of {exposed:.1f} ms/step exposed all-gathers overlapped",
            )
        )
    return out


def model_candidates_of(
    evidence: Evidence, breakdown: dict[str, float], account: RunAccount, ranking: Ranking
) -> list[Candidate]:
    """Compute and overhead: measured trials where they ran, the RECOVERABLE estimates otherwise."""
    compute = share_of(breakdown, Share.COMPUTE)
    overhead = share_of(breakdown, Share.OVERHEAD)
    out: list[Candidate] = []
    measured_keys: set[str] = set()
    trials = evidence.trials
    if trials is not None and trials.skipped:
        ranking.notes.append(f"Trials on the live model skipped: {trials.skipped}")
    if trials is not None and not trials.skipped:
        model_ms = account.step_ms * max(
            0.0, 1.0 - sum(share_of(breakdown, s) for s in (Share.DATA_WAIT, Share.SYNC, Share.COMMUNICATION))
        )
        unconfirmed = [r for r in trials.results if r.unconfirmed and r.measured_speedup is not None]
        # a lever measured slower even on a busy machine is not advised on an estimate either: contention slows
        # the baseline and the trial alike, and "never advise what measured slower" holds either way
        slower = [r for r in unconfirmed if (r.measured_speedup or 1.0) < 1.0 - T.NO_CHANGE_BAND]
        if unconfirmed:
            ranking.notes.append(
                "Trials ran while other processes took the CPUs, so their figures ("
                + ", ".join(f"{r.name} {r.measured_speedup:.2f}x" for r in unconfirmed)
                + ") are kept as evidence but not used: the compute advice is estimated from the trace"
                + (
                    f"; {', '.join(r.name for r in slower)} measured slower even so and is not advised."
                    if slower
                    else "."
                )
            )
        for r in trials.results:  # measured: a candidate (a slower one is "tried, not advised")
            if r.measured_speedup is None or (r.unconfirmed and r not in slower):
                continue
            measured_keys |= set(r.settings)
            if "batch_size" in r.settings:
                out.append(_measured_bigger_batch(r, breakdown, model_ms, account, evidence.ledger))
            else:
                out.append(_trial_candidate(r, compute, overhead, model_ms, account))
    amp_open = mixed_precision_open(evidence)
    cfg = evidence.config
    if compute >= T.COMPUTE_SHARE_MEDIUM and cfg is not None and cfg.accelerator == "cpu" \
            and cfg.bf16_supported is False and str(cfg.precision) in ("32-true", "32"):  # fmt: skip
        ranking.notes.append(
            "Mixed precision (bf16) was neither tried nor advised: this CPU has no native bf16 instructions "
            "(AVX512-BF16/AMX), where bf16 autocast runs slower than fp32 (0.03x measured on a wide MLP)."
        )
    if compute >= T.COMPUTE_SHARE_MEDIUM:
        # mixed precision while it is open and untried; once it measured no faster (or is on), compile
        key = "precision" if amp_open and "precision" not in measured_keys else "compile"
        compiled = evidence.config is not None and bool(evidence.config.compiled)
        if key not in measured_keys and not (key == "compile" and compiled):
            frac = T.RECOVERABLE["compute"] if key == "precision" else T.COMPUTE_RECOVERABLE_NO_AMP
            lever = "mixed precision" if key == "precision" else "torch.compile"
            out.append(
                estimate(
                    Category.COMPUTE,
                    lever,
                    key,
                    {},
                    compute * frac * account.step_ms,
                    account,
                    f"{compute:.0%} of the step is compute; {lever} recovers about {frac:.0%} of it "
                    "(not measured on this model)",
                )
            )
    if (
        overhead >= T.OVERHEAD_SHARE_MEDIUM
        and cfg is not None
        and cfg.batch_size
        and "batch_size" not in measured_keys
    ):
        out.append(_bigger_batch(breakdown, account, cfg.batch_size))
    if overhead >= T.OVERHEAD_SHARE_MEDIUM and "compile" not in measured_keys:
        frac = T.RECOVERABLE["overhead"]
        sized = estimate(
            Category.OVERHEAD,
            "torch.compile",
            "compile",
            {},
            overhead * frac * account.step_ms,
            account,
            f"{overhead:.0%} of the step is per-op overhead; compile removes about {frac:.0%} of it "
            "(not measured on this model)",
        )
        sized.evidence["saved_high_ms_per_step"] = overhead * T.OVERHEAD_RECOVERABLE_MAX * account.step_ms
        out.append(sized)
    return out


def _bigger_batch(breakdown: dict[str, float], account: RunAccount, batch_size: int) -> Candidate:
    """A batch BATCH_GROWTH times bigger, estimated from the step's composition: the data wait and the compute
    grow with the batch, the rest (per-op overhead, syncs, collectives over the parameters, other) is paid once
    per step. Per sample, the step keeps ``s + (1 - s) / G`` of its time (``s`` the per-sample share), so it
    saves ``(1 - s)(1 - 1/G)`` of each step's worth of samples: the low end, since per-sample work rarely grows
    faster than the batch; the high end (``evidence["speedup_max"]``, G) has nothing grow with it (the
    scoreboard measured 1.71-1.92x for a small MLP whose trace put 45% of the step in per-sample work).
    It sizes the bigger-batch advice only (``competes=False``): a trade-off, estimated, that never outranks a
    measured fix nor moves the verdict."""
    g = T.BATCH_GROWTH
    per_sample = min(1.0, share_of(breakdown, Share.DATA_WAIT) + share_of(breakdown, Share.COMPUTE))
    frac = (1.0 - per_sample) * (1.0 - 1.0 / g)
    sized = estimate(
        Category.OVERHEAD,
        f"batch size {batch_size} -> {batch_size * g}",
        "batch_size",
        {"batch_size": batch_size * g},
        frac * account.step_ms,
        account,
        f"{per_sample:.0%} of the step grows with the batch (data wait and compute), the other "
        f"{1 - per_sample:.0%} is paid once per step: a {g}x batch saves {frac:.0%} of the time per sample "
        "(not measured on this model; the learning rate may need retuning)",
    )
    # the other bound: nothing grows with the batch, the step nor Lightning's loop around it (logging, hooks):
    # G times the samples per second (a bigger matmul often costs little more than a small one)
    return replace(sized, competes=False, evidence={"speedup_max": float(g)})


def _measured_bigger_batch(
    r: TrialResult,
    breakdown: dict[str, float],
    model_ms: float,
    account: RunAccount,
    ledger: FitLedger | None,
) -> Candidate:
    """A bigger batch, its forward+backward timed on the batch repeated (issue 28: a point from this model, not
    a bound): per ``b`` samples the step becomes ``(lever_ms + fixed + grown wait) / G``, where ``fixed`` is what
    the step holds besides the data wait and the model's forward+backward (the optimizer step, the loop's hooks:
    paid once per step) and the data wait grows with the batch: by the fetch's measured growth on a loader without
    workers (``TrialResult.lever_fetch_ms``), else G-fold. The fit's per-step parts outside the step (the
    ledger's logging, other callbacks' hooks, the loop's unaccounted code) are paid once per step too: G times
    fewer steps pay them G times less often (tiny_linear: 1.65x from the step alone, 1.97x applied). Sizes the
    advice only (``competes=False``): a trade-off, which never outranks a fix nor moves the verdict."""
    g = T.BATCH_GROWTH
    step = account.step_ms
    wait = share_of(breakdown, Share.DATA_WAIT) * step
    base = min(r.baseline_ms or model_ms, model_ms) if model_ms > 0 else (r.baseline_ms or 0.0)
    lever = (r.lever_ms or 0.0) * (base / r.baseline_ms if r.baseline_ms else 1.0)  # on the window's scale
    fixed = max(0.0, step - wait - base)
    outside = 0.0
    if ledger is not None and ledger.train_steps > 0:
        per_step_parts = (FitPart.LOGGING, FitPart.CALLBACKS, FitPart.UNACCOUNTED)
        outside = sum(ledger.parts.get(p, 0.0) for p in per_step_parts) * 1e3 / ledger.train_steps
    # the data wait of a G-times batch: its fetch timed beside the batch's (a loader without workers) adds what it
    # measured longer; else G times the wait (tiny_linear's in-memory batch of 16 fetched in 0.21 ms for 8's 0.15)
    grown_wait, grown = g * wait, ""
    if r.fetch_ms is not None and r.lever_fetch_ms is not None:
        grown_wait = min(grown_wait, wait + max(0.0, r.lever_fetch_ms - r.fetch_ms))
        grown = f" to {grown_wait:.1f} ms (its fetch timed: {r.fetch_ms:.2f} -> {r.lever_fetch_ms:.2f} ms)"
    per_step = 0.0
    if r.recommended and lever > 0:
        per_step = max(0.0, step - (lever + fixed + grown_wait) / g + outside * (1 - 1 / g))
        # no cost of the fit falls by more than G-fold per sample: the whole fit's time a step, G times less often,
        # is the most a G-times batch saves. With the trial at most G per sample the formula stays under
        # (1 - 1/G) x (step + outside), which exceeds that only when the median step plus the ledger's per-step
        # parts read above the fit's own time a step: a 2x batch whose trial read 1.99x printed 2.13x
        per_step = min(per_step, (1 - 1 / g) * account.whole_ms_per_step)
    basis = (
        f"forward+backward of a {g}x batch measured {r.measured_speedup:.2f}x per sample on this model "
        f"({r.repetitions} A/B pairs); the rest of the step ({fixed:.1f} ms: optimizer, hooks) and the fit's "
        f"{outside:.1f} ms a step outside it (logging, callbacks, the loop) are paid once per step, the data wait "
        f"({wait:.1f} ms) grows with the batch{grown} (the learning rate may need retuning)"
        if r.recommended
        else (r.note or "not faster than the noise band")
    )
    return Candidate(
        Category.OVERHEAD,
        r.name,
        "batch_size",
        dict(r.settings),
        per_step,
        account.over_run(per_step),
        Provenance.MEASURED,
        account.speedup(per_step) if per_step > 0 else None,
        basis,
        r.measured_speedup,
        r.recommended and per_step > 0,
        {"trial": r.to_dict()},
        competes=False,
    )


def _trial_candidate(
    r: TrialResult, compute: float, overhead: float, model_ms: float, account: RunAccount
) -> Candidate:
    key = next(iter(r.settings), None)
    cat = COMPUTE_LEVERS.get(key or "", Category.COMPUTE)
    if cat is None:
        cat = Category.OVERHEAD if overhead > compute else Category.COMPUTE
    speedup = float(r.measured_speedup or 0.0)
    part = min(r.baseline_ms, model_ms) if r.baseline_ms else model_ms
    per_step = part * (1.0 - 1.0 / speedup) if speedup > 0 else 0.0
    saved_s = account.over_run(per_step)
    amortised = per_step
    basis = f"forward+backward measured {speedup:.2f}x on this model ({r.repetitions} A/B pairs)"
    recommended = r.recommended and per_step > 0
    if r.compile_s is not None:
        basis += f"; {r.compile_s:.1f} s compile time counted against the run"
        if saved_s is not None:
            saved_s -= r.compile_s
            amortised = account.per_step(saved_s)
            if saved_s <= 0:
                recommended = False
                basis += " (it costs more than the run would save)"
    if not r.recommended:
        basis = r.note or "not faster than the noise band"
    evidence: dict[str, Any] = {"trial": r.to_dict()}
    if r.compile_s is not None and per_step > 0:
        # the two figures of a compile (issue 28): the steady-state speed-up above, and its one-off cost with the
        # training steps it takes to pay it back
        evidence["one_off_s"] = round(r.compile_s, 3)
        evidence["break_even_steps"] = math.ceil(r.compile_s * 1e3 / per_step)
    return Candidate(
        cat,
        r.name,
        key,
        dict(r.settings),
        amortised,
        saved_s,
        Provenance.MEASURED,
        account.speedup(amortised) if recommended else None,
        basis,
        r.measured_speedup,
        recommended,
        evidence,
    )
