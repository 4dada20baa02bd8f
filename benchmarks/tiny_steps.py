"""What the callback's always-on path costs a fit of sub-millisecond CPU steps, side by side in one run.

The fit: ``nn.Linear(8, 1)`` on 800 in-memory samples, batch 8 (100 steps an epoch, ~0.8 ms a step on a 2-core
VM: Lightning's own per-step Python is most of it), ``self.log`` of the loss each step, one intra-op thread, the
default Trainer (TensorBoard logger, checkpointing), progress bar and model summary off. Variants, each fit in a
fresh process, interleaved over rounds at two lengths (epochs), so that the per-step cost is the slope of the
extra time between the lengths and the fixed cost (window, analysis, verdicts) its intercept:

* ``bare``       : no callback
* ``empty-hooks``: a callback with two empty batch hooks (what Lightning's hook dispatch alone costs a step)
* ``callback``   : ``BottleneckCallback(verbose=False, probe_loader=False, trial_budget_s=0)``: the profiling
                   window, the mid-run and end-of-fit verdicts and the always-on path, without the measurement
                   stage (whose time the report's ledger shows as DIAGNOSIS)
* ``callback@OLD``: the same from another checkout (``--against OLD``), for a before/after in the same run

    python benchmarks/tiny_steps.py [--epochs 5 50] [--rounds 7] [--against ../old-checkout]

``--unused-hook`` measures one no-op hook instead, where the drift between fits cancels: inside one fit with the
callback (its window pushed past the run, so nothing but the always-on path runs), the callback's
``on_before_zero_grad`` (``Callback``'s no-op, which Lightning calls every step with a profiler action unless it is
shadowed: ``live/phase_hooks.UNUSED_HOOKS``) is put back in Lightning's hook calls on every other step; it prints
the median step with and without it, per round (one fit a round, in a fresh process):

    python benchmarks/tiny_steps.py --unused-hook --rounds 3
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

STEPS_PER_EPOCH = 100


def tiny_fit(callbacks: list[Any], epochs: int) -> float:
    """The fit of this module's docstring with ``callbacks``, in this process; its wall seconds."""
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(STEPS_PER_EPOCH * 8, 8), torch.randn(STEPS_PER_EPOCH * 8, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(
            accelerator="cpu",
            max_epochs=epochs,
            default_root_dir=root,
            callbacks=callbacks,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
        )
        t0 = time.perf_counter()
        trainer.fit(Tiny(), loader)
        return time.perf_counter() - t0


def one_fit(variant: str, epochs: int) -> float:
    """One fit of ``variant`` in this process; its wall seconds."""
    import lightning.pytorch as pl

    class EmptyHooks(pl.Callback):
        def on_train_batch_start(self, *args: Any) -> None:
            pass

        def on_train_batch_end(self, *args: Any) -> None:
            pass

    callbacks: list[Any] = []
    if variant == "empty-hooks":
        callbacks.append(EmptyHooks())
    elif variant.startswith("callback"):
        from lightning_bottleneck import BottleneckCallback

        callbacks.append(BottleneckCallback(verbose=False, probe_loader=False, trial_budget_s=0))
    return tiny_fit(callbacks, epochs)


def _run(variant: str, epochs: int, against: str | None) -> float:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if variant.startswith("callback@") and against:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(against).resolve()), env.get("PYTHONPATH", "")])
    else:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]
        )
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", variant, str(epochs)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True, timeout=600)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if variant.startswith("callback") and not str(result["package"]).startswith(
        env["PYTHONPATH"].split(os.pathsep)[0]
    ):
        raise RuntimeError(f"{variant} imported {result['package']}, not the checkout asked for")
    return float(result["fit_s"])


def unused_hook_fit(epochs: int) -> tuple[float, float, int]:
    """One fit of :func:`tiny_fit` with the callback, its ``on_before_zero_grad`` in Lightning's hook calls on every
    other step: (median step with it, median step without it, pairs), seconds; the first 200 steps left out."""
    import lightning.pytorch as pl

    from lightning_bottleneck import BottleneckCallback

    cb = BottleneckCallback(verbose=False, probe_loader=False, trial_budget_s=0, skip_first=10**9)
    steps: dict[bool, list[float]] = {True: [], False: []}

    class Switch(pl.Callback):
        """At each batch start: the step that just ended goes to its hook state's list; the next one's state set."""

        def __init__(self) -> None:
            self.last: float | None = None
            self.hook_in = False
            self.n = 0

        def on_train_batch_start(self, *args: Any) -> None:
            now = time.perf_counter()
            if self.last is not None and self.n > 200:
                steps[self.hook_in].append(now - self.last)
            self.last, self.n = now, self.n + 1
            self.hook_in = self.n % 2 == 1
            if self.hook_in:
                cb.__dict__.pop("on_before_zero_grad", None)  # the class's (Callback's) no-op: called
            else:
                cb.__dict__["on_before_zero_grad"] = None  # shadowed: Lightning skips it

    tiny_fit([Switch(), cb], epochs)
    return statistics.median(steps[True]), statistics.median(steps[False]), len(steps[False])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, nargs=2, default=[5, 50], help="the two fit lengths, in epochs")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--against", default=None, help="another checkout: its callback runs beside this one's")
    p.add_argument("--one", nargs=2, default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--unused-hook", action="store_true", help="one no-op hook, switched every step in one fit"
    )
    p.add_argument("--unused-hook-one", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.unused_hook_one:
        print(json.dumps(unused_hook_fit(a.unused_hook_one)))
        return
    if a.unused_hook:
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]
        )
        for i in range(a.rounds):
            cmd = [sys.executable, str(Path(__file__).resolve()), "--unused-hook-one", str(a.epochs[1])]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True, timeout=600)
            with_hook, without, pairs = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"round {i + 1}: median step with the no-op hook {with_hook * 1e6:.1f} us, without "
                  f"{without * 1e6:.1f} us: {(with_hook - without) * 1e6:+.1f} us a step ({pairs} pairs)", flush=True)  # fmt: skip
        return
    if a.one:
        fit_s = one_fit(a.one[0], int(a.one[1]))
        pkg = sys.modules.get("lightning_bottleneck")
        print(json.dumps({"fit_s": fit_s, "package": getattr(pkg, "__file__", None)}))
        return
    variants = ["bare", "empty-hooks", "callback"] + (
        [f"callback@{Path(a.against).name}"] if a.against else []
    )
    lo, hi = a.epochs
    times: dict[tuple[str, int], list[float]] = {(v, e): [] for v in variants for e in (lo, hi)}
    for _ in range(a.rounds):
        for e in (lo, hi):
            for v in variants:
                times[(v, e)].append(_run(v, e, a.against))
    med = {k: statistics.median(x) for k, x in times.items()}
    steps = (hi - lo) * STEPS_PER_EPOCH
    print(f"{a.rounds} rounds; bare: {med[('bare', lo)]:.3f} s ({lo} epochs), {med[('bare', hi)]:.3f} s ({hi} epochs), "
          f"{med[('bare', hi)] / (hi * STEPS_PER_EPOCH) * 1e6:.0f} us a step")  # fmt: skip
    print("| variant | per step (us) | fixed (ms) | ratio to bare, short fit | ratio to bare, long fit |")
    print("|---|---|---|---|---|")
    for v in variants:
        extra = [med[(v, e)] - med[("bare", e)] for e in (lo, hi)]
        per_step = (extra[1] - extra[0]) / steps
        fixed = extra[0] - per_step * lo * STEPS_PER_EPOCH
        print(f"| {v} | {per_step * 1e6:.1f} | {fixed * 1e3:.0f} | {med[('bare', lo)] / med[(v, lo)]:.3f}x "
              f"| {med[('bare', hi)] / med[(v, hi)]:.3f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
