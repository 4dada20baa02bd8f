"""Time and peak memory of ``lightning-bottleneck analyze`` on the slow inputs of the bad-input issue.

Each input is generated in a temporary directory and analysed in a fresh process (wall-clock timeout,
peak resident set from ``getrusage``), side by side with the well-formed trace it derives from, so the
ratios say whether the reader stays linear whatever the spacing, layers or junk in the file:

* ``ones``: ``{"traceEvents": [1,1,1,...]}`` of 4 MB (no event at all);
* ``metadata``: a 100 MB integer array in the metadata (one value over the size bound: an error);
* ``bomb``: a 0.5 MB gzip expanding to one 512 MB event name (an error, in bounded memory);
* ``spaced``: a valid 4.5 MB trace written with ``} ,`` between events, against ``plain`` (``},``);
* ``members``/``double``/``twice``: gzip as 4 KiB concatenated members, gzipped twice, and two gzipped
  copies back to back (two documents: an error), against ``single``.

Usage::

    python benchmarks/bad_inputs.py [--timeout 60]

Figures measured on the shared 2-core machine are noisy (other work comes and goes): compare the
ratios printed in one run, not absolute seconds across runs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from _trace_builders import gpu_training_events  # noqa: E402

# Peak memory from VmHWM (reset by exec; ``ru_maxrss`` is not, and would report the parent's peak).
CHILD = """
import contextlib, io, sys
from lightning_bottleneck.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["analyze", sys.argv[1], "--json"])
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]
print(code, hwm, file=sys.stderr)
"""


def build(d: Path) -> dict[str, Path]:
    events = []
    for i in range(1200):
        for e in gpu_training_events():
            e["ts"] += i * 2000
            events.append(e)
    plain = ('{"traceEvents": [' + ",".join(json.dumps(e) for e in events) + "]}").encode()
    files = {
        "plain": d / "plain.json",
        "spaced": d / "spaced.json",
        "ones": d / "ones.json",
        "metadata": d / "metadata.json",
        "bomb": d / "bomb.json.gz",
        "single": d / "single.json.gz",
        "members": d / "members.json.gz",
        "double": d / "double.json.gz",
        "twice": d / "twice.json.gz",
    }
    files["plain"].write_bytes(plain)
    files["spaced"].write_text('{"traceEvents": [' + " ,".join(json.dumps(e) for e in events) + "]}")
    files["ones"].write_text('{"traceEvents": [' + ",".join(["1"] * 2_000_000) + "]}")
    with files["metadata"].open("w") as fh:
        fh.write('{"junk": [' + ",".join(["1"] * 50_000_000) + '], "traceEvents": []}')
    with gzip.GzipFile(files["bomb"], "wb", compresslevel=9) as gz:
        gz.write(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "')
        for _ in range(512):
            gz.write(b"a" * (1 << 20))
        gz.write(b'", "ts": 1, "dur": 1}]}')
    single = gzip.compress(plain)
    files["single"].write_bytes(single)
    files["members"].write_bytes(
        b"".join(gzip.compress(plain[i : i + 4096]) for i in range(0, len(plain), 4096))
    )
    files["double"].write_bytes(gzip.compress(single))
    files["twice"].write_bytes(single + single)
    return files


def measure(path: Path, timeout: float) -> tuple[str, float, float]:
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        return "timeout", float("inf"), float("nan")
    took = time.perf_counter() - start
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    try:
        code, rss_kb = last.split()
        return f"exit {code}", took, int(rss_kb) / 1024
    except ValueError:
        return f"crash ({proc.returncode})", took, float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = build(Path(tmp))
        rows = {name: measure(path, args.timeout) for name, path in files.items()}
        print(f"{'input':10} {'MB on disk':>10} {'outcome':>10} {'seconds':>8} {'peak MiB':>9}")
        for name, (outcome, took, rss) in rows.items():
            size = files[name].stat().st_size / 1e6
            print(f"{name:10} {size:>10.1f} {outcome:>10} {took:>8.2f} {rss:>9.0f}")
    ratio = rows["spaced"][1] / rows["plain"][1]
    print(f"\nspaced / plain: {ratio:.2f}x;  members / single: {rows['members'][1] / rows['single'][1]:.2f}x")


if __name__ == "__main__":
    main()
