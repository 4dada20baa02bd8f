"""What the callback costs a training run as users run it, side by side with Lightning's own profilers.

The fit is what a new user runs: a 3-layer MLP on CPU (4096x256 in-memory data, batch 64, one intra-op
thread, ~4 ms steps) whose ``training_step`` logs its loss with ``self.log``, under the default Trainer
(TensorBoard logger, checkpointing, model summary), progress bar off on every side. Variants, interleaved
over rounds so that drift hits each alike:

* ``bare``             : no profiling at all
* ``callback``         : ``BottleneckCallback(verbose=False)`` at its defaults (5/5/5 window, sync hooks,
                         the mid-run and end-of-fit verdict with the measurement stage, report, picture)
* ``callback-no-measure``: the callback with the measurement stage off (``probe_loader=False,
                         trial_budget_s=0``): what watching costs without the deliberate measuring
* ``callback-outside`` : the callback with its window pushed past the end of the run and the measurement
                         stage off: the always-on path (step timing, sync hooks, memory samples) alone
* ``SimpleProfiler``   : ``Trainer(profiler="simple")``
* ``PyTorchProfiler``  : ``Trainer(profiler="pytorch")``

Every variant also carries a tiny timing callback (first in the list) that records each step's compute
(``on_train_batch_start`` to ``on_train_batch_end``) and each whole step (batch end to batch end).

It prints, per fit length, the median wall time of ``trainer.fit`` and its ratio to ``bare``; then per
variant the fixed cost (ms per fit) and per-step cost (us per step) from a least-squares line through the
median extra time at each length; the worst step after the window against the median step (compute, and
whole step without the epoch boundaries: a deliberate pause such as the mid-run verdict shows there); and
the always-on hooks measured directly (the callback's real hook methods called outside the window).

    python benchmarks/overhead.py [--lengths 400 2000 10000] [--rounds 5] [--no-peers]
    python benchmarks/overhead.py --lengths 200 800 --rounds 2      # a quick look
    python benchmarks/overhead.py --direct 400 --rounds 3           # the fixed cost measured inside a fit
    python benchmarks/overhead.py --child 400 --rounds 3 --against ../old  # the analysis child's CPU per fit
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from lightning_bottleneck import BottleneckCallback

from scenarios import Regressor, in_memory

warnings.filterwarnings("ignore")
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)

#: The callback's default window ends after this many training steps (skip_first 0 + 5 wait + 5 warmup
#: + 5 active); "after the window" starts here.
WINDOW_END = 15
#: ... and records (warmup + active) from this step on.
WINDOW_START = 5
STEPS_PER_EPOCH = 4096 // 64


@contextlib.contextmanager
def quiet() -> Any:
    """Silence the profilers' printed reports and Kineto's C++ log lines (file descriptors 1 and 2)."""
    saved = os.dup(1), os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


class StepClock(pl.Callback):
    """Per-step times: compute (batch start to batch end, this callback's hooks) and whole step."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def on_train_batch_start(self, *args: Any) -> None:
        self.starts.append(time.perf_counter())

    def on_train_batch_end(self, *args: Any) -> None:
        self.ends.append(time.perf_counter())


@dataclass
class Fit:
    seconds: float
    compute_ms: list[float] = field(default_factory=list)  # per step
    whole_ms: list[float] = field(default_factory=list)  # batch end to batch end (step i from i=1)
    pause_step: int | None = None  # the step whose batch end took the mid-run verdict (callback variants)


def run_fit(steps: int, variant: str) -> Fit:
    torch.manual_seed(0)
    model = Regressor(dim=256, width=512, depth=3)
    loader = DataLoader(in_memory(4096, 256), batch_size=64, shuffle=True)
    clock = StepClock()
    callbacks: list[Any] = [clock]
    kwargs: dict[str, Any] = {}
    if variant == "callback":
        callbacks.append(BottleneckCallback(verbose=False))
    elif variant == "callback-no-measure":
        callbacks.append(BottleneckCallback(verbose=False, probe_loader=False, trial_budget_s=0))
    elif variant == "callback-outside":
        callbacks.append(
            BottleneckCallback(skip_first=10 * steps, verbose=False, probe_loader=False, trial_budget_s=0)
        )
    elif variant == "SimpleProfiler":
        kwargs["profiler"] = "simple"
    elif variant == "PyTorchProfiler":
        kwargs["profiler"] = "pytorch"
    elif variant != "bare":
        raise ValueError(f"unknown variant {variant!r}")
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(
            accelerator="cpu",
            max_steps=steps,
            default_root_dir=root,  # default TensorBoard logger and checkpointing under it
            callbacks=callbacks,
            enable_progress_bar=False,
        )
        with quiet():
            t0 = time.perf_counter()
            trainer.fit(model, loader)
            elapsed = time.perf_counter() - t0
    compute = [(e - s) * 1e3 for s, e in zip(clock.starts, clock.ends, strict=False)]
    whole = [(b - a) * 1e3 for a, b in zip(clock.ends, clock.ends[1:], strict=False)]
    pause = None
    for cb in callbacks:
        midrun = getattr(cb, "midrun_report", None)
        if midrun is not None:
            pause = midrun.steps_observed
    return Fit(elapsed, compute, whole, pause)


def after_window(fit: Fit) -> tuple[float, float, float, float]:
    """(median and worst compute ms after the window, median whole ms, worst whole ms after the
    window leaving out the first step of every epoch (the epoch's end, checkpoint and loader restart) and
    the step after the mid-run verdict's batch end (a deliberate pause: see :func:`verdict_pause_ms`))."""
    comp = fit.compute_ms
    whole = {i + 1: ms for i, ms in enumerate(fit.whole_ms)}  # step index -> time since previous end
    # the verdict runs at the batch end of step ``pause_step`` (counted from 1), after StepClock's: its pause
    # lies between that step's end and the next one's, i.e. whole_ms[pause_step - 1], keyed pause_step here
    paused = fit.pause_step if fit.pause_step is not None else -1
    after_whole = [
        ms for i, ms in whole.items() if i >= WINDOW_END and i % STEPS_PER_EPOCH != 0 and i != paused
    ]
    after_comp = comp[WINDOW_END:] or comp
    return (
        statistics.median(after_comp),
        max(after_comp),
        statistics.median(fit.whole_ms),
        max(after_whole) if after_whole else float("nan"),
    )


def verdict_pause_ms(fit: Fit) -> float:
    """Extra ms of the whole step that followed the mid-run verdict's batch end (the verdict, its
    publishing and the measurement stage when the fit is long enough to pay for it) over the median step."""
    if fit.pause_step is None or not 0 < fit.pause_step <= len(fit.whole_ms):
        return 0.0
    return fit.whole_ms[fit.pause_step - 1] - statistics.median(fit.whole_ms)


def run_rounds(lengths: list[int], rounds: int, variants: list[str]) -> dict[int, dict[str, list[Fit]]]:
    out: dict[int, dict[str, list[Fit]]] = {n: {v: [] for v in variants} for n in lengths}
    for r in range(rounds):
        for n in lengths:
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for v in order:
                out[n][v].append(run_fit(n, v))
                print(".", end="", flush=True, file=sys.stderr)
    print(file=sys.stderr)
    return out


def line_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope)."""
    if len(xs) < 2:
        return ys[0], 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return my - slope * mx, slope


def hook_cost_ns(n: int = 100_000) -> float:
    """ns per training step of the always-on path outside the window: the callback's real hook methods
    (batch start, before/after backward, before optimizer step, batch end: step timing, the sync tracker's
    step count, the due-work check, a memory sample every few steps) called as a fit outside its window
    calls them, with the sync hooks installed."""
    from lightning_bottleneck.live.sync_hooks import SyncTracker
    from lightning_bottleneck.measure.memory_trend import MemorySampler

    cb = BottleneckCallback(verbose=False)
    cb._reset()
    cb._active_fit = True
    run = cb._run
    run.memory = MemorySampler()
    run.next_work = run.memory.next_step
    run.tracker = SyncTracker(device_type="cpu")
    run.tracker.install()
    loss = torch.zeros(())
    try:
        cb.on_train_epoch_start(None, None)  # type: ignore[arg-type]
        t0 = time.perf_counter_ns()
        for i in range(n):
            cb.on_train_batch_start(None, None, None, i)  # type: ignore[arg-type]
            cb.on_before_backward(None, None, loss)  # type: ignore[arg-type]
            cb.on_after_backward(None, None)  # type: ignore[arg-type]
            cb.on_before_optimizer_step(None, None, None)  # type: ignore[arg-type]
            cb.on_train_batch_end(None, None, None, None, i)  # type: ignore[arg-type]
        elapsed = time.perf_counter_ns() - t0
    finally:
        run.tracker.uninstall()
    assert not cb._disabled, "a hook failed outside a Trainer: the measurement would be of nothing"
    return elapsed / n


#: Sync-hooked calls Lightning itself makes per training step of this fit (counted with counting shims
#: over the tracker's wrappers on a 200-step fit: Tensor.to 7.1, LightningModule.log 1.0, the rest < 0.3).
LIGHTNING_TO_CALLS_PER_STEP = 7


def sync_hooks_cost_ns(n: int = 20_000) -> float:
    """ns per training step that the installed sync hooks add to the calls Lightning makes every step:
    ``LIGHTNING_TO_CALLS_PER_STEP`` x ``Tensor.to(device)`` from library code (Lightning moving the batch
    and the logged values) and one ``self.log`` from the user's ``training_step``; tracker on minus off,
    interleaved, minimum of rounds."""
    import timeit

    import lightning

    from lightning_bottleneck.live.sync_hooks import SyncTracker

    scope: dict[str, Any] = {}
    exec(compile("def lib_to(t, d):\n    return t.to(d)\n", lightning.__file__, "exec"), scope)
    lib_to = scope["lib_to"]  # a function whose code lives in lightning's tree: classified as library
    t, dev = torch.ones(4), torch.device("cpu")

    def no_log(module: Any, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        return None

    def step(log: Any) -> None:
        for _ in range(LIGHTNING_TO_CALLS_PER_STEP):
            lib_to(t, dev)
        log(None, "train_loss", t)  # called from here: a user frame, as training_step's self.log

    tracker = SyncTracker(device_type="cpu")
    off, on = [], []
    for _ in range(5):
        off.append(min(timeit.repeat(lambda: step(no_log), number=n // 10, repeat=3)))
        tracker.install()
        hooked_log = tracker._log_wrapper(no_log)
        try:
            on.append(min(timeit.repeat(lambda h=hooked_log: step(h), number=n // 10, repeat=3)))
        finally:
            tracker.uninstall()
    return (min(on) - min(off)) / (n // 10) * 1e9


def where_the_work_runs(steps: int, rounds: int) -> None:
    """CPU seconds of the training process's threads other than the training thread (they hold the GIL
    the training thread needs), and of child processes, over a callback fit: the work in the child
    (default) against ``LIGHTNING_BOTTLENECK_IN_PROCESS=1`` (threads of the training process, as before
    issue 18); CPU time, so independent of how loaded the machine is. Also the compute time of the 65
    steps after the window (where the analysis and pictures run) against the fit's median step."""
    import resource

    from lightning_bottleneck.live.offload import IN_PROCESS_ENV

    print(f"where the heavy work runs: {steps}-step callback fit, median of {rounds} rounds")
    rows: dict[str, list[tuple[float, float, float, float, int]]] = {"child": [], "in-process": []}
    for _ in range(rounds):
        for mode in rows:
            if mode == "in-process":
                os.environ[IN_PROCESS_ENV] = "1"
            else:
                os.environ.pop(IN_PROCESS_ENV, None)
            kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc0, main0 = time.process_time(), time.thread_time()
            fit = run_fit(steps, "callback")
            proc1, main1 = time.process_time(), time.thread_time()
            kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            kids = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
            med = statistics.median(fit.compute_ms)
            after = fit.compute_ms[WINDOW_END : WINDOW_END + 65]  # while the analysis and pictures run
            slow = sum(1 for ms in after if ms > 2 * med)
            rows[mode].append(((proc1 - proc0) - (main1 - main0), kids, med, max(after), slow))
    os.environ.pop(IN_PROCESS_ENV, None)
    print(
        f"{'mode':<11} {'CPU s: other threads':>20} {'children':>9} {'median step ms':>15}"
        f" {'worst of the 65 steps after the window':>39} {'steps > 2x median, each round':>30}"
    )
    for mode, vals in rows.items():
        others, kids, med, worst = (statistics.median(v[k] for v in vals) for k in range(4))
        slow_counts = [v[4] for v in vals]
        print(f"{mode:<11} {others:20.3f} {kids:9.3f} {med:15.2f} {worst:39.2f} {slow_counts!s:>30}")


def direct_fixed_cost(steps: int, rounds: int) -> None:
    """The callback's fixed cost measured inside one fit, immune to the machine's drift between fits: wall
    time spent in the callback's own hooks (each ``BottleneckCallback`` hook method timed) beyond the always-on
    per-step part (the median hook time of a step outside the window, times the steps), plus the profiled
    steps' extra compute (window steps over the median step). What it cannot see: the child process's CPU
    competing for a core (printed as CPU seconds) and steps slowed by anything outside the hooks."""
    import functools
    import resource

    from lightning_bottleneck.live.callback import BottleneckCallback as Cb

    spent: dict[str, list[float]] = {}
    originals = {}
    for name in list(vars(Cb)):
        if not (name.startswith("on_") or name in ("setup", "teardown")) or not callable(vars(Cb)[name]):
            continue
        fn = vars(Cb)[name]
        originals[name] = fn

        def timed(*args: Any, __fn: Any = fn, __name: str = name, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return __fn(*args, **kwargs)
            finally:
                spent.setdefault(__name, []).append(time.perf_counter() - t0)

        setattr(Cb, name, functools.wraps(fn)(timed))
    per_step_hooks = ("on_train_batch_start", "on_before_backward", "on_after_backward",
                      "on_before_optimizer_step", "on_train_batch_end")  # fmt: skip
    rows = []
    try:
        for _ in range(rounds):
            spent.clear()
            kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            fit = run_fit(steps, "callback")
            kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            child_cpu = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
            total = sum(sum(v) for v in spent.values())
            # the always-on part: each per-step hook's median call (outside the window) x its calls; the
            # phase-label hooks leave Lightning's hook calls outside the window (no calls there: none)
            always = sum(
                statistics.median(spent[h][WINDOW_END:]) * len(spent[h])
                for h in per_step_hooks
                if len(spent.get(h, ())) > WINDOW_END
            )
            med = statistics.median(fit.compute_ms)
            window_extra = sum(max(0.0, ms - med) for ms in fit.compute_ms[WINDOW_START:WINDOW_END])
            rows.append(
                (total * 1e3, always * 1e3, (total - always) * 1e3 + window_extra, child_cpu, fit.seconds)
            )
            top = sorted(((sum(v) * 1e3, k) for k, v in spent.items()), reverse=True)[:6]
            print("  hooks by wall ms: " + ", ".join(f"{k} {ms:.1f}" for ms, k in top), file=sys.stderr)
    finally:
        for name, fn in originals.items():
            setattr(Cb, name, fn)
    print(f"\ndirect fixed cost, {steps}-step callback fit, {rounds} rounds (median):")
    for label, k in (("time in the callback's hooks, ms", 0), ("of which the always-on per-step path, ms", 1),
                     ("fixed cost: the rest + the profiled steps' extra compute, ms", 2),
                     ("child process CPU, s (at lower priority, beside training)", 3)):  # fmt: skip
        print(f"  {label:<62} {statistics.median(r[k] for r in rows):9.2f}")


def print_markdown(
    results: dict[int, dict[str, list[Fit]]],
    lengths: list[int],
    variants: list[str],
    costs: dict[str, tuple[float, float]],
) -> None:
    """The README's "What it costs" table: each variant's fixed and per-step cost, its slowdown at each
    fit length, and the worst step after the window against the median step (longest fit)."""
    n_max = max(lengths)
    head = " | ".join(f"{n} steps" for n in lengths)
    print(
        f"\n| variant | fixed ms/fit | us/step | {head} | worst compute step after the window / median"
        " | worst whole step / median | mid-run verdict pause ms |"
    )
    print("|---" * (6 + len(lengths)) + "|")
    for v in variants:
        ratios = " | ".join(
            f"{statistics.median(f.seconds for f in results[n][v]) / statistics.median(f.seconds for f in results[n]['bare']):.3f}x"
            for n in lengths
        )
        rows = [after_window(f) for f in results[n_max][v]]
        worst = statistics.median(r[1] / r[0] for r in rows)
        worst_whole = statistics.median(r[3] / r[2] for r in rows)
        pause = statistics.median(verdict_pause_ms(f) for f in results[n_max][v])
        fixed, per_step = costs.get(v, (0.0, 0.0))
        print(
            f"| {v} | {fixed:.0f} | {per_step:.1f} | {ratios} | {worst:.2f}x | {worst_whole:.2f}x"
            f" | {pause:.0f} |"
        )


class AlwaysOnSwitch(pl.Callback):
    """Switches the callback's always-on path off and on every training step (from ``SWITCH_FROM`` on): its
    hooks (shadowed by ``None``, which Lightning's hook dispatch skips), the sync hooks (uninstalled) and the
    whole-fit ledger (the user's profiler and Lightning's own methods back, its step feed gone). Each is
    switched only as the fit has it at ``SWITCH_FROM``: the batch hooks are out of Lightning's calls by then
    (the ledger times the steps) and a CPU run's sync hooks are gone after the mid-run verdict. First in the
    callback list, so that the callback's own batch-start hook follows the switch; the time the switching takes
    is recorded and left out."""

    HOOKS = ("on_train_batch_start", "on_before_backward", "on_after_backward", "on_before_optimizer_step",
             "on_train_batch_end", "on_train_epoch_start", "on_validation_start", "on_validation_end")  # fmt: skip
    SWITCH_FROM = 40  # after the window and the mid-run verdict's step

    def __init__(self, cb: BottleneckCallback) -> None:
        self.cb = cb
        self.on = True
        self.states: list[bool] = []
        self.switch_s: list[float] = []
        self._kept: dict[str, Any] = {}
        self._ledger_attrs: list[tuple[Any, str, Any]] = []
        self._tracker_live = False
        self._feed: Any = None

    def _set(self, trainer: Any, on: bool) -> None:
        cb, run = self.cb, self.cb._run
        for h in self.HOOKS:
            if on:
                cb.__dict__.pop(h, None)
                if h in self._kept:
                    cb.__dict__[h] = self._kept[h]
            else:
                cb.__dict__[h] = None
        if run.tracker is not None and self._tracker_live:
            (run.tracker.install if on else run.tracker.uninstall)()
        led = run.ledger
        if led is not None:
            if on:
                for obj, name, val in self._ledger_attrs:
                    object.__setattr__(obj, name, val)
                self._ledger_attrs = []
                trainer.profiler = led.profiler
                led.feed = self._feed
            else:
                led.feed = None
                self._ledger_attrs = [(o, n, vars(o)[n]) for o, n in led._patched if n in vars(o)]
                for o, n, _ in self._ledger_attrs:
                    delattr(o, n)
                trainer.profiler = led.user_profiler
        self.on = on

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        t0 = time.perf_counter()
        step = trainer.global_step
        if step == self.SWITCH_FROM:
            self._kept = {h: self.cb.__dict__[h] for h in self.HOOKS if h in self.cb.__dict__}
            run = self.cb._run
            self._tracker_live = run.tracker is not None and run.tracker.installed
            self._feed = run.ledger.feed if run.ledger is not None else None
        if step >= self.SWITCH_FROM:
            self._set(trainer, step % 2 == 0)
        self.states.append(self.on)
        self.switch_s.append(time.perf_counter() - t0)

    def on_train_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if not self.on:
            self._set(trainer, True)  # the callback's teardown finds what it installed


#: ``--in-fit-model``: the fit the always-on path is switched in. ``mlp``: the 3-layer MLP of the other variants
#: (~5-13 ms steps on the 2-core VM); ``tiny``: a 1-layer model of width 8 on batches of 8 (~1.6 ms steps, most of
#: it Lightning's own per-step Python), where a few microseconds a step are a share of the step that counts.
IN_FIT_MODELS = {"mlp": (256, 512, 3, 4096, 64), "tiny": (8, 8, 1, 6400, 8)}


def always_on_in_fit(steps: int, model_name: str = "mlp") -> tuple[float, float, float, int]:
    """The always-on path's cost per step inside one callback fit, drift-free: switched off and on every
    step (:class:`AlwaysOnSwitch`), each step's whole time (batch end to batch end, the switching left
    out) set against its neighbour's. Returns (median difference us, its ratio to the median step, the
    median step ms, pairs). A tight loop of the hooks (:func:`hook_cost_ns`) runs with warm caches and
    reads ~10x lower than the hooks cost after a CPU step. The switch is made at each batch start, after the
    batch's fetch: the fetch's own profiler action runs in the previous step's state, so the ledger's fetch context
    (about one step mark's cost, 1.7-2.5 us by step_marks.py) lands in the path-off step of each pair and the figure reads the path that much cheaper."""
    dim, width, depth, samples, batch = IN_FIT_MODELS[model_name]
    per_epoch = samples // batch
    torch.manual_seed(0)
    model = Regressor(dim=dim, width=width, depth=depth)
    loader = DataLoader(in_memory(samples, dim), batch_size=batch, shuffle=True)
    cb = BottleneckCallback(verbose=False)
    switch, clock = AlwaysOnSwitch(cb), StepClock()
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(accelerator="cpu", max_steps=steps, default_root_dir=root,
                             callbacks=[switch, cb, clock], enable_progress_bar=False)  # fmt: skip
        with quiet():
            trainer.fit(model, loader)
    ends = clock.ends
    diffs, steps_ms = [], []
    for i in range(switch.SWITCH_FROM + 2, len(ends) - 1, 2):
        if i % per_epoch in (0, 1) or (i + 1) % per_epoch in (0, 1):
            continue  # an epoch boundary (checkpoint, loader restart) in either step of the pair
        on = ends[i] - ends[i - 1] - switch.switch_s[i]
        off = ends[i + 1] - ends[i] - switch.switch_s[i + 1]
        if switch.states[i] and not switch.states[i + 1]:
            diffs.append(on - off)
            steps_ms.append(off * 1e3)
    med_step = statistics.median(steps_ms)
    diff = statistics.median(diffs) * 1e6
    return diff, diff / 1e3 / med_step, med_step, len(diffs)


def compile_package() -> None:
    """Byte-compile the package as ``pip install`` does: an editable install (or ``PYTHONDONTWRITEBYTECODE``)
    would otherwise compile every module the callback or its child imports from source on every run."""
    import compileall

    import lightning_bottleneck

    ok = compileall.compile_dir(str(Path(lightning_bottleneck.__file__).parent), quiet=1)
    print(f"package bytecode: {'compiled' if ok else 'NOT compiled'} (as pip install does)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[400, 2000, 10000], help="fit lengths")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-peers", action="store_true", help="skip SimpleProfiler and PyTorchProfiler")
    parser.add_argument(
        "--no-split",
        action="store_true",
        help="skip callback-no-measure (measurement stage off) and callback-outside (always-on path only)",
    )
    parser.add_argument("--hooks-only", action="store_true", help="only the direct always-on measurement")
    parser.add_argument(
        "--in-fit",
        type=int,
        default=0,
        metavar="STEPS",
        help="only: the always-on path's per-step cost inside one STEPS-step fit, switched every step",
    )
    parser.add_argument(
        "--in-fit-model", choices=sorted(IN_FIT_MODELS), default="mlp", help="the fit --in-fit switches in"
    )
    parser.add_argument(
        "--direct",
        type=int,
        default=0,
        metavar="STEPS",
        help="only: the fixed cost measured inside a STEPS-step fit (time in the callback's hooks)",
    )
    parser.add_argument(
        "--where",
        type=int,
        default=0,
        metavar="STEPS",
        help="only: CPU of other threads vs children, STEPS-step fit",
    )
    parser.add_argument(
        "--child",
        type=int,
        default=0,
        metavar="STEPS",
        help="only: CPU seconds, threads and peak cores of the analysis child per STEPS-step callback fit",
    )
    parser.add_argument("--against", help="with --child: also another checkout of the package, interleaved")
    parser.add_argument("--child-one", type=int, default=0, help=argparse.SUPPRESS)  # one fit (a subprocess)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.child:
        from child_cpu import side_by_side

        side_by_side(args.child, args.rounds, args.against)
        return
    compile_package()
    if args.child_one:
        import json

        from child_cpu import one_fit

        run_fit(20, "bare")
        print(json.dumps(one_fit(args.child_one, run_fit)))
        return
    if args.where:
        run_fit(20, "bare")
        where_the_work_runs(args.where, args.rounds)
        return
    if args.direct:
        run_fit(20, "bare")
        direct_fixed_cost(args.direct, args.rounds)
        return
    if args.in_fit:
        run_fit(20, "bare")
        for r in range(args.rounds):
            diff, share, step_ms, pairs = always_on_in_fit(args.in_fit, args.in_fit_model)
            print(f"always-on path inside a {args.in_fit}-step {args.in_fit_model} fit (round {r + 1}): {diff:.1f} us per step "
                  f"({share:.2%} of the median {step_ms:.2f} ms step), {pairs} adjacent on/off pairs")  # fmt: skip
        return
    if args.hooks_only:
        hook_ns, sync_ns = statistics.median(hook_cost_ns() for _ in range(3)), sync_hooks_cost_ns()
        print(f"hook methods {hook_ns / 1e3:.2f} us, sync hooks {sync_ns / 1e3:.2f} us per step")
        return
    variants = ["bare", "callback"]
    if not args.no_split:
        variants += ["callback-no-measure", "callback-outside"]
    if not args.no_peers:
        variants += ["SimpleProfiler", "PyTorchProfiler"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"CPU cores: {os.cpu_count()}, load average at start: {load:.2f}, torch threads: 1")
    run_fit(20, "bare")  # warm caches and imports once
    results = run_rounds(args.lengths, args.rounds, variants)

    for n in args.lengths:
        base = statistics.median(f.seconds for f in results[n]["bare"])
        print(
            f"\nfit of {n} steps: median of {args.rounds} interleaved rounds (bare step {base / n * 1e3:.2f} ms)"
        )
        print(f"{'variant':<18} {'median s':>9} {'min s':>8} {'vs bare':>8} {'extra ms':>9}")
        for v in variants:
            ts = [f.seconds for f in results[n][v]]
            med = statistics.median(ts)
            print(f"{v:<18} {med:9.3f} {min(ts):8.3f} {med / base:8.3f}x {(med - base) * 1e3:9.0f}")

    print(
        "\ncost from a line through the median extra time at each length (extra = fixed + per_step * steps)"
    )
    print(f"{'variant':<18} {'fixed ms/fit':>12} {'per step us':>12}")
    costs: dict[str, tuple[float, float]] = {}
    for v in variants[1:]:
        xs = [float(n) for n in args.lengths]
        ys = [
            (
                statistics.median(f.seconds for f in results[n][v])
                - statistics.median(f.seconds for f in results[n]["bare"])
            )
            * 1e3
            for n in args.lengths
        ]
        fixed, slope = line_fit(xs, ys)
        costs[v] = (fixed, slope * 1e3)
        print(f"{v:<18} {fixed:12.0f} {slope * 1e3:12.1f}")

    n = max(args.lengths)
    print(f"\nsteps after the window (step {WINDOW_END} on) of the {n}-step fit, median over rounds")
    print(
        f"{'variant':<18} {'compute med ms':>14} {'worst ms':>9} {'worst/med':>9}"
        f" {'whole med ms':>12} {'worst ms':>9} {'worst/med':>9}"
    )
    for v in variants:
        rows = [after_window(f) for f in results[n][v]]
        cm, cw, wm, ww = (statistics.median(r[k] for r in rows) for k in range(4))
        print(f"{v:<18} {cm:14.2f} {cw:9.2f} {cw / cm:9.2f} {wm:12.2f} {ww:9.2f} {ww / wm:9.2f}")
    print("median compute step after the window against bare's in the same round (min / median / max):")
    bare_rounds = [after_window(f)[0] for f in results[n]["bare"]]
    for v in variants[1:]:
        ratios = sorted(after_window(f)[0] / b for f, b in zip(results[n][v], bare_rounds, strict=True))
        print(f"  {v:<18} {ratios[0]:.3f} / {statistics.median(ratios):.3f} / {ratios[-1]:.3f}")

    print_markdown(results, args.lengths, variants, costs)

    hook_ns = statistics.median(hook_cost_ns() for _ in range(3))
    sync_ns = sync_hooks_cost_ns()
    bare_step_ms = statistics.median(f.seconds for f in results[n]["bare"]) / n * 1e3
    print("\nalways-on path per training step, measured directly (outside the window):")
    for label, ns in (
        ("the callback's hook methods", hook_ns),
        (f"sync hooks on Lightning's own calls ({LIGHTNING_TO_CALLS_PER_STEP} .to + 1 self.log)", sync_ns),
        ("total", hook_ns + sync_ns),
    ):
        print(
            f"  {label:<58} {ns / 1e3:6.2f} us = {ns / 1e6 / bare_step_ms * 100:.3f}% of a {bare_step_ms:.2f} ms step"
        )


if __name__ == "__main__":
    main()
