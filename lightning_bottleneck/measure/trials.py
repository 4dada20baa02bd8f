"""Trial steps on the live model: measure a compute lever before advising it.

Given the LightningModule (under DDP: the inner module, so no collective runs), one real batch captured in
the profiling window (already on the device), the Trainer's precision and a time budget, :func:`run_trials`
times forward+backward (``training_step`` -> loss -> ``backward``; never an optimizer step) without and
with each lever that applies, interleaved A/B, and returns one :class:`TrialResult` per lever.

The trials leave training untouched: gradients (tensors and None-ness) are set aside and put back, buffers
(BatchNorm statistics) and torchmetrics states are restored, RNG states (python, numpy, torch CPU and CUDA)
and torch's global settings (matmul precision, cuDNN/oneDNN flags, grad mode) are restored, train/eval
modes are restored, ``self.log``/``self.log_dict`` calls are discarded, and ``torch.compile`` is applied to
a wrapper function (dynamo's caches are reset afterwards when nothing else had been compiled).

The levers (which apply, how each runs) are :mod:`~lightning_bottleneck.measure.trial_levers`; what is set
aside and put back around the trials is :mod:`~lightning_bottleneck.measure.trial_state`. This module times.

Example::

    from lightning_bottleneck.measure.trials import run_trials

    # in a callback's on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx):
    report = run_trials(pl_module, batch, batch_idx=batch_idx, precision=trainer.precision, budget_s=5.0)
    print(report)                       # one line per lever: speedup, spread, repetitions, verdict
    report.best                         # the recommended lever with the largest speedup, or None
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Callable

import torch
from torch import nn

from lightning_bottleneck.evidence.trial_results import DEFAULT_BUDGET_S, TrialReport, TrialResult
from lightning_bottleneck.measure.contention import assess, take_snapshot
from lightning_bottleneck.measure.trial_levers import Lever, baseline_context, levers_for, select_levers
from lightning_bottleneck.measure.trial_state import trial_state
from lightning_bottleneck.thresholds import NO_CHANGE_BAND

__all__ = [
    "DEFAULT_BUDGET_S",
    "NOISE_BAND",
    "TrialReport",
    "TrialResult",
    "restored_trial_step",
    "run_trials",
]

# ---- named constants ------------------------------------------------------------------------------------

#: Seconds ``torch.compile`` may take by default, on top of ``budget_s`` (compile is paid once per run:
#: Inductor compiles small models in 10-60 s, and a step of a few thousand traced ops in 54-92 s from an empty
#: cache here (:data:`COMPILE_S_PER_OP`); a larger estimate skips the lever with a note). Issue 28: at 60 s the
#: scoreboard's tiny_ops (an estimated 107 s) was never measured, and its compile advice stayed a bound.
DEFAULT_COMPILE_BUDGET_S = 120.0
#: A lever is recommended only when its median speedup is above ``1 + NOISE_BAND``: the project's no-change
#: band (:data:`lightning_bottleneck.thresholds.NO_CHANGE_BAND`), which the one-change loop uses too.
NOISE_BAND = NO_CHANGE_BAND
#: Fewest A/B pairs a lever is judged on; the median of 3 pairs already survives one disturbed pair.
MIN_REPETITIONS = 3
#: Most A/B pairs: beyond ~15 pairs the median moves less than the noise band (tested on the tiny-op and
#: wide-MLP scenarios here).
MAX_REPETITIONS = 15
#: A timed sample repeats the step until it lasts at least this long, so timer resolution and per-call
#: jitter stay under 1% of it (torch.utils.benchmark's ``blocked_autorange`` aims at 0.1-1 s blocks; a
#: few ms suffices for relative A/B comparisons of one step).
MIN_SAMPLE_S = 0.005
#: Compile-time estimate for the budget check: seconds per aten op traced in one forward+backward, plus a
#: fixed start-up. Measured here (2 cores, torch 2.13 Inductor, an empty Inductor cache: a user's first
#: compile): the scoreboard's tiny_ops step (3412 ops) compiled in 54-92 s (0.014-0.025 s/op; 21 s with a
#: warm cache), ``python benchmarks/prediction_bounds.py --compile``; an earlier, busier measurement gave
#: 0.07 s/op (158 s for 2145 ops). 0.03 errs on skipping.
COMPILE_S_PER_OP = 0.03
COMPILE_S_FIXED = 5.0


# ---- timing ---------------------------------------------------------------------------------------------


def _loss_of(output: Any) -> torch.Tensor | None:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict) and isinstance(output.get("loss"), torch.Tensor):
        return output["loss"]
    return None


class _StepRunner:
    def __init__(self, module: nn.Module, batch: Any, batch_idx: int, device: torch.device) -> None:
        self.module, self.batch, self.batch_idx, self.device = module, batch, batch_idx, device
        self.params = list(module.parameters())

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def step_fn(self) -> Callable[[Any], None]:
        module, idx = self.module, self.batch_idx

        def step(batch: Any) -> None:
            loss = _loss_of(module.training_step(batch, idx))  # type: ignore[operator]
            if loss is None:
                raise _NoLoss
            loss.backward()

        return step

    def run(self, fn: Callable[[Any], None], ctx: Callable[[], contextlib.AbstractContextManager[Any]],
            batch: Any, n: int = 1) -> float:  # fmt: skip
        """Seconds per step for ``n`` steps (grads reset to None before each, as ``zero_grad`` does)."""
        with ctx():  # entered once per sample: its own cost is not the lever's
            self._sync()
            t0 = time.perf_counter()
            for _ in range(n):
                for p in self.params:
                    p.grad = None
                fn(batch)
            self._sync()
        return (time.perf_counter() - t0) / n


class _NoLoss(Exception):
    pass


def _device_of(module: nn.Module, device: torch.device | str | None) -> torch.device:
    """``device``, or where the module's first parameter lives (the CPU for a module without parameters)."""
    if device is None:
        first = next(module.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
    return torch.device(device)


@contextlib.contextmanager
def restored_trial_step(
    module: nn.Module,
    batch_idx: int = 0,
    device: torch.device | str | None = None,
    precision: str = "32-true",
) -> Iterator[Callable[[Any], None]]:
    """A function that runs one trial step (``training_step`` -> loss -> ``backward``, grads reset first, as
    ``zero_grad`` does) on any batch, under the Trainer's ``precision``, for as long as the context lasts; on
    exit everything the trials restore is restored (:func:`~lightning_bottleneck.measure.trial_state.trial_state`;
    ``self.log`` discarded meanwhile). The loader probe feeds it batches to time worker counts *with* the model's step.
    Raises ``RuntimeError`` from the step when ``training_step`` returns no loss tensor.

    Example::

        with restored_trial_step(pl_module, batch_idx) as step:
            for batch in loader:
                step(batch)
    """
    device = _device_of(module, device)
    with trial_state(module, device):
        runner = _StepRunner(module, None, batch_idx, device)
        fn = runner.step_fn()
        ctx = baseline_context(precision, device.type)

        def step(batch: Any) -> None:
            for p in runner.params:
                p.grad = None
            try:
                with ctx():
                    fn(batch)
            except _NoLoss:
                raise RuntimeError("training_step returned no loss tensor") from None

        yield step


def _count_ops(runner: _StepRunner, batch: Any) -> int:
    """aten ops in one forward+backward (a dispatch-mode counter, one step): sizes the compile estimate."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Counter(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            _Counter.n += 1
            return func(*args, **(kwargs or {}))

    with _Counter():
        runner.run(runner.step_fn(), contextlib.nullcontext, batch)
    return _Counter.n


# ---- entry point -------------------------------------------------------------------------------------------


def run_trials(
    module: nn.Module,
    batch: Any,
    *,
    batch_idx: int = 0,
    device: torch.device | str | None = None,
    precision: str = "32-true",
    budget_s: float = DEFAULT_BUDGET_S,
    compile_budget_s: float = DEFAULT_COMPILE_BUDGET_S,
    levers: list[str] | None = None,
    noise_band: float = NOISE_BAND,
    bigger_batch: bool = True,
) -> TrialReport:
    """Time forward+backward with and without each applicable lever on ``batch``; leave training untouched.

    Args:
        module: the LightningModule (under DDP the inner module: ``trainer.lightning_module``).
        batch: one batch as ``training_step`` receives it (already on ``device``).
        batch_idx: passed to ``training_step``.
        device: where the module runs; default: the device of its first parameter.
        precision: the Trainer's ``precision`` (``trainer.precision``): the baseline runs under the same
            autocast, and precision levers are tried only from full fp32 (``"32-true"``).
        budget_s: seconds for the timed steps of all levers together (checked between samples); 0 turns
            the trials off.
        compile_budget_s: seconds ``torch.compile`` may take on top of ``budget_s``; the lever is skipped
            with a note when its estimate (from the op count of one step) is larger; 0 skips it.
        levers: names to try (default all that apply): ``"bf16-mixed"``/``"16-mixed"``,
            ``"float32_matmul_precision=high"``/``"=medium"``, ``"channels_last"``, ``"compile"``.
        noise_band: a lever is recommended only when its median speedup exceeds ``1 + noise_band`` and
            its lower quartile exceeds 1.
        bigger_batch: also time the batch repeated ``BATCH_GROWTH`` times (per sample); the measurement stage
            asks for it on an overhead step only, where its advice is given.

    Returns:
        A :class:`TrialReport`; never raises for the model's sake: a failing lever becomes a note.
    """
    if budget_s < 0 or not math.isfinite(budget_s):
        raise ValueError(f"`budget_s` must be a finite number >= 0, got {budget_s!r}")
    if compile_budget_s < 0:
        raise ValueError(f"`compile_budget_s` must be >= 0, got {compile_budget_s!r}")
    report = TrialReport(budget_s=budget_s)
    if budget_s == 0:
        report.skipped = "turned off (budget_s=0)"
        return report
    if getattr(module, "automatic_optimization", True) is False:
        report.skipped = (
            "manual optimization: training_step steps the optimizers itself, so it cannot be trialled"
        )
        return report
    device = _device_of(module, device)
    start = time.perf_counter()
    before = take_snapshot(threads=torch.get_num_threads())
    with trial_state(module, device):
        try:
            _run(module, batch, batch_idx, device, str(precision), budget_s, compile_budget_s, levers,
                 noise_band, report, start, bigger_batch)  # fmt: skip
        except _NoLoss:
            report.skipped = "training_step returned no loss tensor"
        except Exception as err:  # a trial must never break training
            report.notes.append(f"trials stopped: {type(err).__name__}: {err}")
    report.elapsed_s = time.perf_counter() - start
    busy = assess(before, take_snapshot(threads=torch.get_num_threads()))
    report.contention = busy.to_dict()
    if busy.busy and any(r.measured_speedup is not None for r in report.results):
        # Contention distorts both ways: a win may be fewer threads waiting at barriers, a loss a lever that
        # needs the cores others took (bf16 measured 2.3x and 0.5x on busy runs of models it does not change
        # on a quiet machine). Keep the figures as evidence, unconfirmed: the advice then rests on the trace.
        why = "measured on a busy machine: unconfirmed, not used for advice"
        report.results = [replace(r, recommended=False, unconfirmed=True, note=_join(r.note, why))
                          if r.measured_speedup is not None else r for r in report.results]  # fmt: skip
        report.notes.append(f"busy machine during the trials: {busy.note}")
    return report


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a and b else a or b


def _run(
    module: nn.Module,
    batch: Any,
    batch_idx: int,
    device: torch.device,
    precision: str,
    budget_s: float,
    compile_budget_s: float,
    only: list[str] | None,
    noise_band: float,
    report: TrialReport,
    start: float,
    bigger_batch: bool = True,
) -> None:
    runner = _StepRunner(module, batch, batch_idx, device)
    base_ctx = baseline_context(precision, device.type)
    eager = runner.step_fn()
    runner.run(eager, base_ctx, batch)  # warm-up: allocator, oneDNN primitives
    t_step = runner.run(eager, base_ctx, batch)
    inner = max(1, math.ceil(MIN_SAMPLE_S / max(t_step, 1e-9)))
    candidates, notes = levers_for(module, batch, device, precision)
    if (
        not bigger_batch
    ):  # its advice is given on an overhead step only: its share of the budget goes to the others
        candidates = [lv for lv in candidates if lv.samples_factor == 1]
    candidates = select_levers(candidates, only, compile_budget_s, notes)
    report.notes.extend(notes)
    deadline = start + budget_s
    for i, lever in enumerate(candidates):
        left = deadline - time.perf_counter()
        share = left / (len(candidates) - i)
        pair_s = 2 * t_step * inner
        if share < MIN_REPETITIONS * pair_s + t_step:  # the pairs plus the lever's warm-up step
            report.results.append(
                TrialResult(lever.name, lever.settings, note=f"not measured: over the {budget_s:g} s budget")
            )
            continue
        try:
            report.results.append(
                _measure(
                    runner, lever, eager, base_ctx, batch, inner, t_step, share, compile_budget_s, noise_band
                )
            )
        except _NoLoss:
            raise
        except Exception as err:  # the lever itself failed (an op without bf16 kernel, a compile error)
            report.results.append(
                TrialResult(
                    lever.name, lever.settings, note=f"failed: {type(err).__name__}: {str(err)[:200]}"
                )
            )


def _measure(
    runner: _StepRunner,
    lever: Lever,
    eager: Callable[[Any], None],
    base_ctx: Callable[[], contextlib.AbstractContextManager[Any]],
    batch: Any,
    inner: int,
    t_step: float,
    share: float,
    compile_budget_s: float,
    noise_band: float,
) -> TrialResult:
    lever_batch = lever.transform_batch(batch) if lever.transform_batch else batch
    fn = eager
    compile_s: float | None = None
    reset_dynamo = False
    if lever.compile:
        estimate = COMPILE_S_FIXED + COMPILE_S_PER_OP * _count_ops(runner, batch)
        if estimate > compile_budget_s:
            return TrialResult(
                lever.name,
                lever.settings,
                note=f"not measured: compiling would take ~{estimate:.0f} s, over compile_budget_s={compile_budget_s:g}",
            )
        import torch._dynamo

        reset_dynamo = _dynamo_untouched()
        fn = torch.compile(eager)
        t0 = time.perf_counter()
        runner.run(fn, lever.context, lever_batch)
        compile_s = max(0.0, time.perf_counter() - t0 - t_step)  # the first call: compile + one step
    graphs_before = _dynamo_graphs()
    base_t: list[float] = []
    lever_t: list[float] = []
    try:
        runner.run(fn, lever.context, lever_batch)  # warm-up of the lever's path
        # the pairs' deadline starts after the warm-up, charged one step as planned: compile time is excluded (it
        # has its own budget), and so is a first call's one-off cost (oneDNN primitives for channels_last; once in
        # CI a slow warm-up left 1 pair of the 3 planned and the lever went unmeasured)
        deadline = time.perf_counter() + share - t_step
        pair_s = 2 * t_step * inner
        reps = max(MIN_REPETITIONS, min(MAX_REPETITIONS, int((share - t_step) / pair_s)))
        for r in range(reps):
            now = time.perf_counter()
            # past the deadline: a lever far slower than planned (recompiling, swapping), or a machine that stalled;
            # the fewest pairs a lever is judged on still get up to one more share (once in CI a 1 s budget held
            # 1 pair of a conv net's 15 planned, and channels_last went unmeasured)
            if now > deadline and (r >= MIN_REPETITIONS or now > deadline + share):
                break
            if r % 2 == 0:  # alternate the order inside each pair: neither side always runs second
                base_t.append(runner.run(eager, base_ctx, batch, inner))
                lever_t.append(runner.run(fn, lever.context, lever_batch, inner))
            else:
                lever_t.append(runner.run(fn, lever.context, lever_batch, inner))
                base_t.append(runner.run(eager, base_ctx, batch, inner))
    finally:
        recompiles = _dynamo_graphs() - graphs_before if lever.compile else 0
        if reset_dynamo:
            torch._dynamo.reset()
    recompiled = (
        f"dynamo compiled {recompiles} more graph(s) after the first call (recompiles: training_step "
        "changes state dynamo guards on, such as a Python counter or a shape)"
        if recompiles > 0
        else ""
    )
    reps = len(base_t)
    if reps < MIN_REPETITIONS:
        return TrialResult(
            lever.name,
            lever.settings,
            repetitions=reps,
            compile_s=None if compile_s is None else round(compile_s, 3),
            note=_join(f"not measured: {reps} pair(s) fit in its share of the budget", recompiled),
        )
    # per sample: a bigger batch's step does samples_factor times the work of the baseline's
    ratios = sorted(b * lever.samples_factor / max(v, 1e-12) for b, v in zip(base_t, lever_t))
    q = statistics.quantiles(ratios, n=4, method="inclusive")
    speedup = statistics.median(ratios)
    recommended = speedup > 1.0 + noise_band and q[0] > 1.0
    note = ""
    if not recommended:
        note = (
            "within the noise band"
            if abs(speedup - 1.0) <= noise_band
            else ("slower" if speedup < 1.0 else "lower quartile not above 1.0")
        )
    note = _join(note, recompiled)
    if lever.name == "channels_last":
        note = _join(note, "inputs converted; convert the model too")
    return TrialResult(
        lever.name,
        lever.settings,
        measured_speedup=round(speedup, 4),
        spread=round(q[2] - q[0], 4),
        repetitions=reps,
        baseline_ms=round(statistics.median(base_t) * 1000, 4),
        lever_ms=round(statistics.median(lever_t) * 1000, 4),
        compile_s=None if compile_s is None else round(compile_s, 3),
        recommended=recommended,
        note=note,
    )


def _dynamo_graphs() -> int:
    """Graphs dynamo has compiled so far in this process (0 when unknown)."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # pragma: no cover - private API moved
        return 0


def _dynamo_untouched() -> bool:
    """True when dynamo has compiled nothing yet in this process, so ``torch._dynamo.reset()`` is safe."""
    try:
        from torch._dynamo.utils import counters

        return not counters["frames"]["total"] and not counters["stats"]["unique_graphs"]
    except Exception:  # pragma: no cover - private API moved
        return False
