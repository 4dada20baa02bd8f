"""Small hand-made Kineto traces for the trace tests (both category schemas, µs or ns timestamps)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

NEW = {"op": "cpu_op", "ann": "user_annotation", "rt": "cuda_runtime", "k": "kernel", "cpy": "gpu_memcpy"}
OLD = {"op": "Operator", "ann": "Operator", "rt": "Runtime", "k": "Kernel", "cpy": "Memcpy"}


def gpu_training_events(schema: dict[str, str] = NEW, scale: float = 1.0) -> list[dict[str, Any]]:
    """Two 1000 µs steps on thread 1; each launches a 300 µs GEMM (tensor cores), a 100 µs NCCL kernel
    overlapping it by 50 µs, and a 5 µs elementwise kernel launched late (a host-wait gap before it)."""
    ev: list[dict[str, Any]] = []
    old = schema is OLD

    def x(cat: str, name: str, ts: float, dur: float, pid: Any = 1, tid: Any = 1, **args: Any) -> None:
        ev.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": pid,
                "tid": tid,
                "ts": ts * scale,
                "dur": dur * scale,
                "args": args,
            }
        )

    corr = 0
    for step in range(2):
        t0 = 1_000_000 + step * 1000
        x(schema["ann"], f"ProfilerStep#{step}", t0, 1000)
        x(schema["ann"], "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 1, 99)
        x(schema["op"], "aten::mm", t0 + 100, 60, **{"External id": 10 + step})
        for name, launch, start, dur in (
            ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_64x3_nn", t0 + 110, t0 + 120, 300),
            ("ncclKernel_AllReduce_RING_LL_Sum_float", t0 + 130, t0 + 370, 100),
            ("void at::native::vectorized_elementwise_kernel<4>", t0 + 700, t0 + 710, 5),
        ):
            corr += 1
            ext = 10 + step if "gemm" in name else 500 + corr  # only the GEMM comes from aten::mm
            x(schema["rt"], "cudaLaunchKernel", launch, 5, correlation=corr, **{"External id": ext})
            kargs: dict[str, Any] = {"correlation": corr, "External id": ext}
            if not old:
                kargs.update(stream=7, device=0)
            x(schema["k"], name, start, dur, pid=0, tid="stream 7" if old else 7, **kargs)
        x(schema["op"], "aten::add", t0 + 800, 8)
        x(schema["op"], "aten::add", t0 + 810, 8)
        x(schema["rt"], "cudaStreamSynchronize", t0 + 900, 50)
    return ev


def write_trace(path: Path, events: list[dict[str, Any]], gz: bool = False, **meta: Any) -> Path:
    doc: dict[str, Any] = {"schemaVersion": 1, **meta, "traceEvents": events}
    text = json.dumps(doc, indent=1)
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def cpu_training_events(
    steps: int = 4, scale: float = 1.0, base_us: float = 1_000_000
) -> list[dict[str, Any]]:
    """``steps`` CPU training steps of 2000 µs on thread 1, each with a 400 µs DataLoader wait, an
    ``aten::addmm`` of 900 µs and ten metadata ops (``aten::view``/``aten::t``/``aten::empty``) of ~1 µs,
    the cheapest ops a profiled step has. ``scale`` multiplies every timestamp and duration: 1e-3 writes a
    millisecond clock as if it were microseconds, 1e3 a (relative) nanosecond one."""
    ev: list[dict[str, Any]] = []

    def x(cat: str, name: str, ts: float, dur: float) -> None:
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts * scale,
                   "dur": dur * scale, "args": {}})  # fmt: skip

    for step in range(steps):
        t0 = base_us + step * 2000
        x("user_annotation", f"ProfilerStep#{step}", t0, 2000)
        x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 1, 400)
        for i, name in enumerate(["aten::view", "aten::t", "aten::empty"] * 3 + ["aten::view"]):
            x("cpu_op", name, t0 + 410 + 3 * i, 0.8 + 0.05 * i)
        x("cpu_op", "aten::addmm", t0 + 450, 900)
        x("cpu_op", "aten::add_", t0 + 1400, 200)
    return ev


def tricky_events(
    repeat: int, name_tail: str = "", args_every: int = 5, more_args: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Events whose strings hold the characters the reader's slicer cuts at: every third name ends in
    ``}, {"ph": "X"}, ] ,`` (+ ``name_tail``), every ``args_every``-th event's args hold a nested ``"},"``."""
    events = gpu_training_events() * repeat
    for i, e in enumerate(events):
        e = dict(e)
        if i % 3 == 0:
            e["name"] = e["name"] + ' }, {"ph": "X"}, ] ,' + name_tail
        if i % args_every == 0:
            e["args"] = {**e.get("args", {}), "Input Dims": [[1, 2], [3, {"a": "},"}]], **(more_args or {})}
        events[i] = e
    return events
