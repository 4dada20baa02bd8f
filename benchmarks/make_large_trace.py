"""Write a synthetic but realistic large Kineto trace by repeating the steps of a real one.

The source trace (default: ``../shared/traces/a100_rank3_of8_control.json.gz``, a new-schema A100 training
trace with ``ProfilerStep#N``, ``cpu_op``, ``cuda_runtime``, ``kernel``, ``gpu_memcpy`` and flow events) is
copied N times, each copy shifted in time by one period (its span plus a small gap), with its
``ProfilerStep#N`` numbers, ``External id`` / ``correlation`` / flow ``id`` / ``Profiler Event Index`` /
``Sequence number`` values offset so that ids stay unique and every link (runtime call -> kernel, flow
start -> flow end, op -> launch) stays consistent inside its copy. The text of each event keeps its
original formatting (only the numbers change), so bytes per event match what Kineto writes.

Top-level metadata (``schemaVersion``, ``deviceProperties``, ``distributedInfo``, ...) and the once-only
events (``ph: "M"`` metadata, the global instants, the profiler's ``Trace`` span, stretched over all
copies) appear once. The output is written copy by copy: memory is a few times the *source* trace, never
the output.

Usage::

    python benchmarks/make_large_trace.py --mb 256 [--src TRACE] [--out PATH]

or ``from make_large_trace import make_large_trace``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_SRC = HERE.parent.parent / "shared" / "traces" / "a100_rank3_of8_control.json.gz"

_WS = re.compile(r"\s*")
_NUMBER = r"(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)"
#: Keys whose integer values are ids: offset per copy (one stride shared by all, since Kineto reuses the
#: correlation id as the runtime call's External id and as the flow id).
_ID_KEYS = ("External id", "external id", "correlation", "id", "Ev Idx")
#: Keys that are counters of their own (offset by their own stride).
_COUNTER_KEYS = ("Profiler Event Index", "Sequence number")
_SLOT = re.compile(
    r'"(ts|'
    + "|".join(re.escape(k) for k in _ID_KEYS + _COUNTER_KEYS)
    + r')": '
    + _NUMBER
    + r'|"ProfilerStep#(\d+)"'
)


@dataclass
class LargeTraceInfo:
    path: str
    source: str
    copies: int
    steps_per_copy: int
    events: int  # events written (all phases)
    bytes: int
    period_us: float  # time shift between copies, in the source's time unit

    @property
    def mb(self) -> float:
        return self.bytes / 2**20


def _read_text(path: Path) -> str:
    with path.open("rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    with gzip.open(path, "rt", encoding="utf-8") if gz else path.open(encoding="utf-8") as fh:
        return fh.read()


def _split(text: str) -> tuple[str, list[tuple[int, int, dict[str, Any]]], str]:
    """(text up to and including ``"traceEvents": [``, [(start, end, event)], text after its ``]``)."""
    dec = json.JSONDecoder()
    pos = _WS.match(text, 0).end()  # type: ignore[union-attr]
    if text[pos : pos + 1] != "{":
        raise ValueError("source trace must be a JSON object with 'traceEvents'")
    pos += 1
    while True:
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        key, pos = dec.raw_decode(text, pos)
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if text[pos] != ":":
            raise ValueError("malformed source trace")
        pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
        if key == "traceEvents":
            if text[pos] != "[":
                raise ValueError("'traceEvents' is not an array")
            head = text[: pos + 1]
            pos += 1
            spans = []
            while True:
                pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
                if text[pos] == "]":
                    return head, spans, text[pos + 1 :]
                event, end = dec.raw_decode(text, pos)
                spans.append((pos, end, event))
                pos = _WS.match(text, end).end()  # type: ignore[union-attr]
                if text[pos] == ",":
                    pos += 1
        _, pos = dec.raw_decode(text, pos)
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if text[pos] != ",":
            raise ValueError("source trace has no 'traceEvents'")
        pos += 1


def _once(event: Any) -> bool:
    """Events written once, not per copy: metadata, global instants, the profiler's own span."""
    if not isinstance(event, dict):
        return True
    return (
        event.get("ph") == "M"
        or event.get("cat") == "Trace"
        or (event.get("ph") == "i" and event.get("s") == "g")
        or not isinstance(event.get("ts"), (int, float))
    )


class _Template:
    """The repeated events' text split at every number to rewrite: static pieces and typed slots."""

    def __init__(self, text: str) -> None:
        pieces: list[str] = []
        values: list[int | float] = []
        kinds: list[str] = []  # "ts" | "id" | "step" | a counter key
        last = 0
        for m in _SLOT.finditer(text):
            key, number, step = m.group(1), m.group(2), m.group(3)
            if step is not None:
                start, end, value, kind = m.start(3), m.end(3), int(step), "step"
            else:
                start, end = m.start(2), m.end(2)
                is_int = re.fullmatch(r"-?\d+", number) is not None
                value = int(number) if is_int else float(number)
                kind = "ts" if key == "ts" else "id" if key in _ID_KEYS else key
                if kind != "ts" and not is_int:
                    continue  # a non-integer "id": leave it
            pieces.append(text[last:start])
            values.append(value)
            kinds.append(kind)
            last = end
        pieces.append(text[last:])
        self.pieces, self.values, self.kinds = pieces, values, kinds

    def strides(self) -> dict[str, int]:
        """Per kind, the offset between copies that keeps values of different copies disjoint."""
        out: dict[str, int] = {}
        for kind in set(self.kinds) - {"ts"}:
            vals = [int(v) for v, k in zip(self.values, self.kinds) if k == kind]
            out[kind] = max(vals) - min(0, min(vals)) + 1 if kind != "step" else max(vals) - min(vals) + 1
        return out

    def render(self, copy: int, shift: dict[str, int | float]) -> str:
        if copy == 0:
            slots = [str(v) for v in self.values]
        else:
            delta = {k: d * copy for k, d in shift.items()}
            slots = [str(v + delta[k]) for v, k in zip(self.values, self.kinds)]
        out = [""] * (2 * len(self.pieces) - 1)
        out[0::2] = self.pieces
        out[1::2] = slots
        return "".join(out)


def make_large_trace(
    mb: float, out: str | Path | None = None, src: str | Path = DEFAULT_SRC, gap_fraction: float = 0.002
) -> LargeTraceInfo:
    """Write a trace of about ``mb`` MiB (uncompressed JSON, whole copies of ``src``) and describe it.

    ``out`` defaults to a new file in a fresh temporary directory (the caller deletes it).
    """
    src = Path(src)
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="large-trace-")) / f"large_{int(mb)}mb_rank0.json"
    out = Path(out)
    text = _read_text(src)
    head, spans, tail = _split(text)
    repeat = [(s, e, ev) for s, e, ev in spans if not _once(ev)]
    once = [(s, e, ev) for s, e, ev in spans if _once(ev)]
    if not repeat:
        raise ValueError(f"{src}: no timed events to repeat")
    sep = ",\n  "
    template = _Template(sep.join(text[s:e] for s, e, _ in repeat))
    t0 = min(float(ev["ts"]) for _, _, ev in repeat)
    t1 = max(float(ev["ts"]) + float(ev.get("dur") or 0) for _, _, ev in repeat)
    span = t1 - t0
    period: int | float = math.ceil(span * (1 + gap_fraction)) if span >= 1 else 1
    strides = template.strides()
    shift: dict[str, int | float] = {"ts": period, **strides}
    steps_per_copy = strides.get("step", 0)
    del text, spans

    first = template.render(0, shift).encode()
    fixed = len(head.encode()) + len(tail.encode()) + sum(e - s + len(sep) for s, e, _ in once)
    copies = max(1, round((mb * 2**20 - fixed) / (len(first) + len(sep))))
    total = 0
    with out.open("wb") as fh:
        total += fh.write(head.encode())
        total += fh.write(b"\n  ")
        total += fh.write(first)
        del first
        for k in range(1, copies):
            total += fh.write(sep.encode())
            total += fh.write(template.render(k, shift).encode())
        for _, _, ev in once:
            ev = dict(ev)
            if ev.get("cat") == "Trace" and isinstance(ev.get("dur"), (int, float)):
                ev["dur"] = ev["dur"] + (copies - 1) * period
            elif ev.get("ph") == "i" and isinstance(ev.get("ts"), (int, float)) and ev["ts"] >= t1:
                ev["ts"] = ev["ts"] + (copies - 1) * period
            total += fh.write((sep + json.dumps(ev)).encode())
        total += fh.write(b"\n  ]")
        total += fh.write(tail.encode())
    return LargeTraceInfo(
        path=str(out),
        source=str(src),
        copies=copies,
        steps_per_copy=steps_per_copy,
        events=copies * len(repeat) + len(once),
        bytes=total,
        period_us=float(period),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, required=True, help="target size, MiB of uncompressed JSON")
    ap.add_argument(
        "--src", default=str(DEFAULT_SRC), help=f"trace whose steps are repeated (default {DEFAULT_SRC})"
    )
    ap.add_argument("--out", help="output .json path (default: a new temporary directory)")
    args = ap.parse_args(argv)
    info = make_large_trace(args.mb, args.out, args.src)
    print(json.dumps({**asdict(info), "mb": round(info.mb, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
