"""The two measurements behind issue 19's range bounds, side by side in one run.

    python benchmarks/prediction_bounds.py                 # the hook after-effect (seconds)
    python benchmarks/prediction_bounds.py --compile       # also torch.compile of the tiny_ops step, cold and warm
    python benchmarks/prediction_bounds.py --saves         # also each checkpoint save of checkpoint_heavy
    python benchmarks/prediction_bounds.py --validation    # also the rest of val_slow_loader's fit with/without

* ``HOOK_INDIRECT_MAX_SHARE``: the heavy_callback workload's model stepped back-to-back, then with the
  workload's callback work (two sorts of 100k floats) after every step and after every 10th; prints the step's
  median, the wall time per iteration and how much slower the step runs after the hook (against its own time).
* ``OVERHEAD_RECOVERABLE_MAX`` / ``COMPILE_S_PER_OP``: the tiny_ops step (forward+backward) eager and compiled,
  with an empty Inductor cache in a child process (a user's first compile) and then a warm one; prints the
  compile seconds, the share of the step compile removed and seconds per traced aten op.
* ``SAVE_SPREAD_RANGE_MIN``: the checkpoint_heavy workload's fit (128 MB checkpoints, a save every 5 steps), each in
  a fresh process as users run it: bare twice, then with the callback, and bare with a save every 40 steps (the
  advice); prints every save's wall seconds in order (the first of a process is often the slowest).
* ``VALIDATION_INDIRECT_MAX_SHARE``: the val_slow_loader workload's fit (validation every 10 batches) and the
  advised one (every 100), bare, each in a fresh process, three rounds; prints the validation runs' wall time and
  the rest of the fit, and how much faster the rest ran without the validations avoided (against their time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from payoff_workloads import TinyOps, cpu_work


def _mlp_step() -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    net = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 1))
    return net, torch.optim.Adam(net.parameters()), torch.randn(16, 32), torch.randn(16, 1)


def hook_after_effect(steps: int = 300) -> None:
    torch.set_num_threads(1)  # as the whole-fit workloads run
    net, opt, x, y = _mlp_step()

    def run(every: int) -> tuple[float, float]:
        times = []
        t0 = time.perf_counter()
        for i in range(steps):
            t = time.perf_counter()
            loss = nn.functional.mse_loss(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t)
            if every and i % every == 0:
                cpu_work(2)
        return statistics.median(times) * 1e3, (time.perf_counter() - t0) / steps * 1e3

    t = time.perf_counter()
    for _ in range(100):
        cpu_work(2)
    hook_ms = (time.perf_counter() - t) / 100 * 1e3
    print(f"hook (2 sorts of 100k floats): {hook_ms:.2f} ms")
    for r in range(3):
        alone, alone_it = run(0)
        every, every_it = run(1)
        tenth, tenth_it = run(10)
        after = every - alone
        print(
            f"round {r + 1}: step back-to-back {alone:.2f} ms, after the hook every step {every:.2f} ms "
            f"(+{after:.2f} ms = {after / hook_ms:.2f}x the hook's time), every 10th {tenth:.2f} ms; "
            f"per iteration {alone_it:.2f} / {every_it:.2f} / {tenth_it:.2f} ms"
        )


def _compile_child(out: str) -> None:
    torch.set_num_threads(2)
    model = TinyOps(16, 200)
    x, y = torch.randn(32, 16), torch.randn(32, 1)

    def step(b: tuple[torch.Tensor, torch.Tensor]) -> None:
        model.training_step(b, 0).backward()

    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        step((x, y))
    step((x, y))
    t = time.perf_counter()
    for _ in range(20):
        step((x, y))
    eager = (time.perf_counter() - t) / 20
    compiled = torch.compile(step)
    t = time.perf_counter()
    compiled((x, y))
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(20):
        compiled((x, y))
    fast = (time.perf_counter() - t) / 20
    Path(out).write_text(
        json.dumps({"ops": Count.n, "compile_s": compile_s, "eager": eager, "compiled": fast})
    )


def compile_time() -> None:
    with tempfile.TemporaryDirectory() as cache:
        for label, env in (
            ("cold", {"TORCHINDUCTOR_CACHE_DIR": cache, "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
                      "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}),
            ("warm", {"TORCHINDUCTOR_CACHE_DIR": cache}),
        ):  # fmt: skip
            out = Path(cache) / f"{label}.json"
            subprocess.run(
                [sys.executable, __file__, "--compile-child", str(out)], env={**os.environ, **env}, check=True
            )
            d = json.loads(out.read_text())
            print(
                f"compile ({label} cache): {d['compile_s']:.1f} s for {d['ops']} aten ops "
                f"({(d['compile_s'] - 5.0) / d['ops']:.3f} s/op above a 5 s start-up); step {d['eager'] * 1e3:.1f} -> "
                f"{d['compiled'] * 1e3:.1f} ms ({1 - d['compiled'] / d['eager']:.0%} removed)"
            )


def _saves_child(mode: str, settings: str, out: str) -> None:
    import payoff_workloads as pw
    from lightning.pytorch.callbacks import ModelCheckpoint

    each: list[float] = []
    save = ModelCheckpoint._save_checkpoint

    def timed(self: ModelCheckpoint, trainer: object, filepath: str) -> None:
        t = time.perf_counter()
        save(self, trainer, filepath)  # type: ignore[arg-type]
        each.append(time.perf_counter() - t)

    ModelCheckpoint._save_checkpoint = timed  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as d:
        pw.run("checkpoint_heavy", mode, json.loads(settings), Path(d))
        fit_s = json.loads((Path(d) / "result.json").read_text())["fit_s"]
    Path(out).write_text(json.dumps({"saves": each, "fit_s": fit_s}))


def _validation_child(settings: str, out: str) -> None:
    import payoff_workloads as pw
    from lightning.pytorch.loops.evaluation_loop import _EvaluationLoop

    runs: list[float] = []
    run = _EvaluationLoop.run

    def timed(self: _EvaluationLoop) -> object:
        t = time.perf_counter()
        r = run(self)
        runs.append(time.perf_counter() - t)
        return r

    _EvaluationLoop.run = timed  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as d:
        pw.run("val_slow_loader", "measure", json.loads(settings), Path(d))
        fit_s = json.loads((Path(d) / "result.json").read_text())["fit_s"]
    Path(out).write_text(json.dumps({"runs": runs, "fit_s": fit_s}))


def validation_after_effect(rounds: int = 3) -> None:
    with tempfile.TemporaryDirectory() as d:
        for r in range(rounds):
            got = []
            for settings in ("{}", '{"val_check_interval": 100}'):
                out = Path(d) / "v.json"
                subprocess.run(
                    [sys.executable, __file__, "--validation-child", settings, str(out)],
                    check=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                got.append(json.loads(out.read_text()))
            (b, a) = got
            rest_b, rest_a = b["fit_s"] - sum(b["runs"]), a["fit_s"] - sum(a["runs"])
            avoided = sum(b["runs"]) - sum(a["runs"])
            print(
                f"val_slow_loader round {r + 1}: every 10 batches {len(b['runs'])} validations "
                f"{sum(b['runs']):.3f} s + rest {rest_b:.3f} s; every 100 {len(a['runs'])} validation(s) "
                f"{sum(a['runs']):.3f} s + rest {rest_a:.3f} s; the rest ran {rest_b - rest_a:+.3f} s faster "
                f"({(rest_b - rest_a) / avoided:.2f}x of the {avoided:.3f} s of validation avoided)"
            )


def save_spread() -> None:
    runs = (
        ("bare", "measure", "{}"),
        ("bare", "measure", "{}"),
        ("callback", "callback", "{}"),
        ("bare, every 40", "measure", '{"ModelCheckpoint.every_n_train_steps": 40}'),
    )
    with tempfile.TemporaryDirectory() as d:
        for i, (label, mode, settings) in enumerate(runs):
            out = Path(d) / f"{i}.json"
            subprocess.run(
                [sys.executable, __file__, "--saves-child", mode, settings, str(out)],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            r = json.loads(out.read_text())
            saves = r["saves"]
            print(
                f"checkpoint_heavy {label}: fit {r['fit_s']:.2f} s, {len(saves)} saves "
                f"{min(saves):.3f}-{max(saves):.3f} s (max/min {max(saves) / min(saves):.2f}): "
                + " ".join(f"{s:.3f}" for s in saves)
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compile", action="store_true", help="also time torch.compile of the tiny_ops step")
    p.add_argument("--saves", action="store_true", help="also time each checkpoint save of checkpoint_heavy")
    p.add_argument("--validation", action="store_true", help="also the rest of val_slow_loader's fit")
    p.add_argument("--compile-child", default="", help=argparse.SUPPRESS)
    p.add_argument("--validation-child", nargs=2, default=None, help=argparse.SUPPRESS)
    p.add_argument("--saves-child", nargs=3, default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.compile_child:
        _compile_child(a.compile_child)
        return
    if a.saves_child:
        _saves_child(*a.saves_child)
        return
    if a.validation_child:
        _validation_child(*a.validation_child)
        return
    np.random.seed(0)
    hook_after_effect()
    if a.compile:
        compile_time()
    if a.saves:
        save_spread()
    if a.validation:
        validation_after_effect()


if __name__ == "__main__":
    main()
