"""How long must the loader probe's windows with the step be where autotune confirms the choice on the run?

``probe_loader(run_confirms=True)`` (``BottleneckCallback(autotune=True)``) times each worker count once with the
model's own step, in a window of ``ONE_PASS_WINDOW_S`` (``measure/loader_with_step.py``) once the count's prefetch
queue is drained; the timings only rank the counts, and the run then times the chosen one on its own steps. This
runs the probe as autotune does on a workload of ``benchmarks/payoff_workloads.py`` (its loader and model, at
``--scale`` times its samples, the automatic budget of its 30 s fit), alternating the window lengths given, and
prints for each length the probe's wall time and every probe's rate of the fewest workers timed against in-process
loading: whether a longer window ranks the counts any better for what it costs the first epoch.

    python benchmarks/probe_windows.py                                   # cpu_transform, 0.15 s against 0.08 s
    python benchmarks/probe_windows.py --windows 0.25,0.15,0.08 --rounds 8
    python benchmarks/probe_windows.py --windows 0.15 --no-race       # a fit too short to race: both counts timed
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", default="cpu_transform")
    p.add_argument("--windows", default="0.15,0.08", help="window lengths in seconds, comma-separated")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--scale", type=int, default=12, help="samples an epoch, times the workload's own")
    p.add_argument(
        "--budget", type=float, default=1.34, help="the probe's budget (s): its 30 s fit's automatic one"
    )
    p.add_argument(
        "--no-race",
        action="store_true",
        help="run_races=False: the probe of a fit with too few epochs left to race",
    )
    a = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    import torch
    from payoff_workloads import WORKLOADS, build

    import lightning_bottleneck.measure.loader_probe as probe_mod
    import lightning_bottleneck.measure.loader_with_step as with_step
    from lightning_bottleneck.measure.trials import restored_trial_step

    w = WORKLOADS[a.workload]
    w = dataclasses.replace(w, data={**w.data, "n": int(w.data["n"]) * a.scale})
    if w.one_thread:
        torch.set_num_threads(1)
    model, loader, _, _ = build(w, {})
    windows = [float(x) for x in a.windows.split(",")]
    results: dict[float, list[tuple[float, float | None]]] = {x: [] for x in windows}
    for r in range(a.rounds):
        for window in windows:
            probe_mod.ONE_PASS_WINDOW_S = with_step.ONE_PASS_WINDOW_S = window
            with restored_trial_step(model, 0) as step:
                t = time.perf_counter()
                ladder = probe_mod.probe_loader(
                    loader,
                    budget_s=a.budget,
                    train_step=step,
                    run_confirms=True,
                    cpu_bound_budget_s=a.budget,
                    run_races=not a.no_race,
                )
                elapsed = time.perf_counter() - t
            rates = {rung.num_workers: rung.samples_per_s for rung in ladder.in_training}
            others = sorted(n for n in rates if n)
            ratio = rates[others[0]] / rates[0] if 0 in rates and others and rates[0] > 0 else None
            results[window].append((elapsed, ratio))
            shown = ", ".join(f"{n} workers {v:.0f}/s" for n, v in sorted(rates.items()))
            print(f"round {r + 1} window {window:.2f} s: probe {elapsed:.3f} s; {shown}", flush=True)
    print(f"\n{a.workload}, {a.rounds} probes per window (run_confirms, the step timed with the loader):")
    for window, rows in results.items():
        ratios = sorted(x for _, x in rows if x is not None)
        spread = f"{ratios[0]:.2f}-{ratios[-1]:.2f}x" if ratios else "-"
        print(
            f"  window {window:.2f} s: probe {statistics.median(e for e, _ in rows):.3f} s (median); the fewest "
            f"workers against in-process loading {spread} ({', '.join(f'{x:.2f}' for x in ratios)})"
        )


if __name__ == "__main__":
    main()
