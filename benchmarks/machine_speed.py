"""How steady is this machine's speed? The noise floor under every timing the scoreboard compares.

A fixed tiny training step (``nn.Linear(8, 1)``, SGD, one intra-op thread) is timed in blocks of ``--block``
steps, one block every ``--every`` seconds for ``--seconds`` seconds, in this one process. On a quiet machine
the blocks agree within a few percent; on a shared VM whose cores are also other guests' hyperthreads, they do not.
It prints the blocks' quantiles, the ratio of the slow blocks to the fast ones, and the share of blocks more than
20% over the fastest tenth (the tolerance the scoreboard holds a point to is 0.18 in log, ~20%):

    python benchmarks/machine_speed.py                  # 60 s
    python benchmarks/machine_speed.py --seconds 20

A prediction made from timings taken in one such state and checked against a fit that ran in the other is off by
that ratio whatever the model of the run: speed-ups that compare CPU time with time that does not scale with the
CPU (a worker's sleep, a disk write) carry it whole; ratios of two CPU timings taken side by side cancel it.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def block_us(steps: int) -> float:
    """Microseconds per step of the fixed step, over ``steps`` steps."""
    lin = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(lin.parameters(), lr=0.01)
    x = torch.randn(8, 8)
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        lin(x).sum().backward()
        opt.step()
    return (time.perf_counter() - t0) / steps * 1e6


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--every", type=float, default=0.2, help="seconds between blocks")
    p.add_argument("--block", type=int, default=200, help="steps per block")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    block_us(a.block)  # warm-up: the allocator, the autograd graph's first build
    blocks: list[float] = []
    end = time.perf_counter() + a.seconds
    while time.perf_counter() < end:
        blocks.append(block_us(a.block))
        time.sleep(a.every)
    s = sorted(blocks)
    q = statistics.quantiles(s, n=10)
    fast = statistics.median(s[: max(1, len(s) // 10)])
    slow_share = sum(b > 1.2 * fast for b in s) / len(s)
    print(f"{len(s)} blocks of {a.block} steps over {a.seconds:.0f} s: us per step")
    print(
        f"  min {s[0]:.0f}  p10 {q[0]:.0f}  median {statistics.median(s):.0f}  p90 {q[-1]:.0f}  max {s[-1]:.0f}"
    )
    print(
        f"  p90 / p10 = x{q[-1] / q[0]:.2f}; {slow_share:.0%} of the blocks ran more than 20% over the fastest tenth"
    )
    print("  in order: " + " ".join(f"{b:.0f}" for b in blocks))


if __name__ == "__main__":
    main()
