"""Which JSON decoder for trace events: the stdlib ``json``, orjson, msgspec untyped, msgspec with the schema.

The trace's events are cut into JSON arrays of 3000 events (about the reader's 1 Mi-character slices) and each
decoder decodes all of them (best of ``--repeat``; orjson only if installed). What the reader uses is the
last: msgspec decoding into ``trace/fast_events.py``'s structs, which skips every field the analysis does not
read instead of building it as Python objects.

    python benchmarks/decoders.py [TRACE] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT = HERE.parent.parent / "shared" / "traces" / "a100_rank3_of8_control.json.gz"


def best(decode: Callable[[str], Any], chunks: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for chunk in chunks:
            decode(chunk)
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", default=str(DEFAULT))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import msgspec

    from lightning_bottleneck.trace.fast_events import decode_events

    with gzip.open(args.trace, "rt") if args.trace.endswith(".gz") else open(args.trace) as fh:
        events = json.load(fh)["traceEvents"]
    chunks = [json.dumps(events[i : i + 3000]) for i in range(0, len(events), 3000)]
    decoders: dict[str, Callable[[str], Any]] = {"json.loads": json.loads}
    try:
        import orjson

        decoders["orjson.loads"] = orjson.loads
    except ImportError:
        print("(orjson not installed: pip install orjson to compare it)")
    decoders["msgspec.json.decode (untyped)"] = msgspec.json.decode
    decoders["msgspec, fast_events schema"] = decode_events
    mb = sum(map(len, chunks)) / 2**20
    print(f"{Path(args.trace).name}: {len(events):,} events, {mb:.1f} MB of JSON in {len(chunks)} slices")
    base = None
    for name, decode in decoders.items():
        seconds = best(decode, chunks, args.repeat)
        base = base or seconds
        print(f"  {name:<32} {seconds:7.3f} s  {base / seconds:5.1f}x json.loads")


if __name__ == "__main__":
    main()
