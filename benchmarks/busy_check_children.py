"""Whose CPU is a compiler's? The busy-machine check around a ``torch.compile`` of a small model (issue 19).

Inductor compiles C++ in child processes (``g++``/``cc1plus``) that exit before the check's second snapshot.
Counting only *live* children (the check before issue 19) puts their CPU on "other processes" and calls a
quiet machine busy ("trials ran while other processes took the CPUs ... compile 0.84x"); counting every
descendant, the exited ones included (``getrusage(RUSAGE_CHILDREN)`` plus psutil's live descendants), it is
this run's own. Prints both accountings side by side:

    python benchmarks/busy_check_children.py

On a shared machine the "others" figures include the other users' load; the difference between the two
lines is the compiler's CPU alone.
"""

from __future__ import annotations

import os
import resource
import tempfile
import time

# a cold compile, as in a user's first run: a fresh Inductor cache (a warm one compiles almost nothing)
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor_cold_"))

import torch

from lightning_bottleneck.measure.contention import assess, take_snapshot


def main() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    x = torch.randn(32, 64)
    start, r0 = take_snapshot(), resource.getrusage(resource.RUSAGE_CHILDREN)
    compiled = torch.compile(model)
    compiled(x).sum().backward()
    end, r1 = take_snapshot(), resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = end.wall_s - start.wall_s
    reaped = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    own_self = end.cpu_s - start.cpu_s
    own_all = own_self + (end.children_cpu_s - start.children_cpu_s)
    busy = (end.cpus_busy_s or 0.0) - (start.cpus_busy_s or 0.0)
    print(
        f"compile window {wall:.1f} s: this process {own_self:.1f} CPU-s, exited children {reaped:.1f} CPU-s"
    )
    print(f"machine busy {busy / wall:.2f} cores")
    print(
        f"others, exited children counted as others (before): {(busy - (own_all - reaped)) / wall:.2f} cores"
    )
    print(f"others, every descendant ours (now):                {(busy - own_all) / wall:.2f} cores")
    print(f"verdict now: {assess(start, end)}")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"{time.perf_counter() - t0:.0f} s")
