"""Per-call cost of the sync hooks: the same calls with the tracker off, on, and installed-but-paused.

Interleaved repetitions (off / on / paused in turn, several rounds) so that frequency drift and cache
effects hit all three alike; the minimum per-call time of each is reported, with the delta to "off".

    python benchmarks/sync_hook_overhead.py [--number 20000] [--rounds 7]

Target (issue 3): about 1 us or less added per intercepted call, ~0 for calls that are not syncs.
"""

from __future__ import annotations

import argparse
import os
import timeit
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

from lightning_bottleneck.live.sync_hooks import SyncTracker

torch.set_num_threads(1)
SCALAR = torch.tensor(1.5)
SMALL = torch.ones(4)

CASES: dict[str, tuple[str, Callable[[], object]]] = {
    # name: (what it is, the call)
    "Tensor.item": ("sync", lambda: SCALAR.item()),
    "Tensor.tolist": ("sync", lambda: SMALL.tolist()),
    "Tensor.__format__": ("sync", lambda: format(SCALAR, ".3f")),
    'Tensor.to("cpu")': ("sync", lambda: SMALL.to("cpu")),
    "Tensor.to(dtype)": ("passes through the .to wrapper", lambda: SMALL.to(torch.float32)),
    "Tensor.add": ("not patched", lambda: SMALL.add(1)),
}


def per_call_ns(fn: Callable[[], object], number: int) -> float:
    return timeit.Timer(fn).timeit(number) / number * 1e9


def measure(number: int, rounds: int) -> dict[str, dict[str, float]]:
    best: dict[str, dict[str, float]] = {name: {} for name in CASES}
    tracker = SyncTracker("cpu")
    for _ in range(rounds):
        for mode in ("off", "on", "paused"):
            if mode != "off":
                tracker.install()
                if mode == "paused":
                    tracker.pause()
            try:
                for name, (_, fn) in CASES.items():
                    ns = per_call_ns(fn, number)
                    best[name][mode] = min(ns, best[name].get(mode, float("inf")))
            finally:
                tracker.uninstall()
    return best


def _noop(x: object) -> object:
    return x


def calibration_ns(number: int) -> float:
    """This machine's cost of one empty Python function call: scale the deltas by it across machines."""
    return min(per_call_ns(lambda: _noop(SCALAR), number) for _ in range(5)) - min(
        per_call_ns(lambda: SCALAR, number) for _ in range(5)
    )


def main() -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=fmt)
    parser.add_argument("--number", type=int, default=20000, help="calls per timing")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved off/on/paused rounds")
    args = parser.parse_args()
    best = measure(args.number, args.rounds)
    print(f"torch {torch.__version__}, {args.rounds} rounds x {args.number} calls, min ns/call")
    print(f"calibration: one empty Python function call costs {calibration_ns(args.number):.0f} ns here")
    header = f"{'call':<20} {'kind':<32} {'off':>8} {'on':>8} {'delta':>8} {'paused':>8} {'delta':>8}"
    print(header)
    print("-" * len(header))
    for name, (kind, _) in CASES.items():
        b = best[name]
        print(
            f"{name:<20} {kind:<32} {b['off']:8.0f} {b['on']:8.0f} {b['on'] - b['off']:+8.0f} "
            f"{b['paused']:8.0f} {b['paused'] - b['off']:+8.0f}"
        )


if __name__ == "__main__":
    main()
