"""The training process's intra-op threads beside CPU-bound DataLoader workers (``measure/host_threads.py``).

A plain PyTorch loop (no Lightning, no callback) over cpu_transform's dataset (numpy FFTs per sample) with a tiny MLP
step on the CPU: one epoch loaded in-process, then epochs with 2 persistent workers at the process's own intra-op
threads, at one thread (``torch.set_num_threads(1)`` during the run), and at its own count again. On a machine with
few cores the workers lose their cores to the training process's OpenMP threads, which spin between the step's ops.

    python benchmarks/threads_beside_workers.py            # 2 workers, 2 epochs each
    python benchmarks/threads_beside_workers.py --workers 4 --epochs 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from payoff_workloads import HeavyTransformDataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2, help="epochs timed at each setting")
    p.add_argument("--samples", type=int, default=1536)
    args = p.parse_args()
    ds = HeavyTransformDataset(args.samples, 32, 96, 3)
    net = torch.nn.Sequential(
        torch.nn.Linear(32, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 1),
    )
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    def epoch(dl: DataLoader) -> float:
        t0 = time.perf_counter()
        for x, y in dl:
            loss = torch.nn.functional.mse_loss(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return time.perf_counter() - t0

    own = torch.get_num_threads()
    print(
        f"in-process, {own} thread(s): "
        + ", ".join(f"{epoch(DataLoader(ds, batch_size=16)):.2f} s" for _ in range(args.epochs))
    )
    dl = DataLoader(ds, batch_size=16, num_workers=args.workers, persistent_workers=True)
    for threads in (own, 1, own):
        torch.set_num_threads(threads)
        times = [epoch(dl) for _ in range(args.epochs)]
        print(f"{args.workers} workers, {threads} thread(s): " + ", ".join(f"{t:.2f} s" for t in times))
    torch.set_num_threads(own)


if __name__ == "__main__":
    main()
