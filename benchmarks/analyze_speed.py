"""Speed and memory of ``lightning-bottleneck analyze`` vs HolisticTraceAnalysis vs a bare ``json.load``.

For every trace (default: ``../shared/traces``), three measurements run side by side, each in a fresh
Python process so that peak memory is its own:

* ``analyze``: read + summarise + diagnose, exactly what ``lightning-bottleneck analyze --json`` does;
* ``HTA``: ``TraceAnalysis`` load plus ``get_temporal_breakdown`` and ``get_idle_time_breakdown``
  (HolisticTraceAnalysis, in its own virtual environment: pandas & co. never enter ours);
* ``json.load``: ``json.load(gzip.open(path))`` of the same file, the floor for any Python reader.

Times exclude interpreter start-up and imports (``analyze`` is also timed end to end as a command).
Memory is the process's peak resident set (VmHWM) minus its resident set after imports, i.e. what the
trace itself costs, compared with the uncompressed JSON size.

Usage::

    python benchmarks/analyze_speed.py [TRACE ...] [--hta-python PATH] [--repeat N]

Without ``--hta-python`` a venv is created (once) in ``benchmarks/.hta-venv`` with
``pip install HolisticTraceAnalysis``; ``--no-hta`` skips that column.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_TRACES = REPO.parent / "shared" / "traces"
HTA_VENV = HERE / ".hta-venv"

# Each snippet prints one JSON line: {"seconds": ..., "peak_mb": ..., "base_mb": ...}
_MEM = """
def _mem(key):
    for line in open('/proc/self/status'):
        if line.startswith(key):
            return int(line.split()[1]) / 1024.0
    return float('nan')
"""

JSON_LOAD = (
    _MEM
    + """
import gzip, json, sys, time
path = sys.argv[1]
base = _mem('VmRSS')
t = time.perf_counter()
opener = gzip.open if open(path, 'rb').read(2) == b'\\x1f\\x8b' else open
with opener(path, 'rb') as fh:
    doc = json.load(fh)
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "peak_mb": _mem('VmHWM'), "base_mb": base, "events": len(doc["traceEvents"])}))
"""
)

ANALYZE = (
    _MEM
    + """
import json, sys, time
from lightning_bottleneck.cli import analyze_paths
import lightning_bottleneck.diagnose  # imports before the clock starts, like the others
import numpy.ma  # np.unique imports it lazily on its first call (~17 ms): an import, not analysis
base = _mem('VmRSS')
t = time.perf_counter()
report = analyze_paths([sys.argv[1]])
text = report.to_json()
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "peak_mb": _mem('VmHWM'), "base_mb": base, "primary": report.primary.value}))
"""
)

HTA = (
    _MEM
    + """
import json, logging, sys, time, warnings
warnings.filterwarnings('ignore')
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
base = _mem('VmRSS')
t = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
temporal = analyzer.get_temporal_breakdown(visualize=False)
idle = analyzer.get_idle_time_breakdown(ranks=analyzer.t.get_ranks(), visualize=False)
dt = time.perf_counter() - t
row = temporal.iloc[0]
print(json.dumps({"seconds": dt, "peak_mb": _mem('VmHWM'), "base_mb": base,
                  "idle_pct": float(row["idle_time_pctg"])}))
"""
)


def _run(python: str, code: str, arg: str, env: dict[str, str] | None = None) -> dict | None:
    proc = subprocess.run(
        [python, "-c", code, arg], capture_output=True, text=True, cwd=REPO, env=env, timeout=900
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": last[:80]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _measure(python: str, code: str, arg: str, repeat: int, env: dict[str, str] | None = None) -> dict | None:
    runs = [_run(python, code, arg, env) for _ in range(repeat)]
    ok = [r for r in runs if r and "error" not in r]
    if not ok:
        return runs[0]
    best = dict(ok[0])
    best["seconds"] = statistics.median(r["seconds"] for r in ok)
    best["peak_mb"] = max(r["peak_mb"] for r in ok)
    return best


def _cli_wall(path: Path, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "lightning_bottleneck", "analyze", str(path), "--json"],
            capture_output=True,
            cwd=REPO,
            check=False,
        )
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def ensure_hta_python(explicit: str | None) -> str:
    if explicit:
        return explicit
    python = HTA_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {HTA_VENV} with HolisticTraceAnalysis (once) ...", file=sys.stderr)
        venv.create(HTA_VENV, with_pip=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "HolisticTraceAnalysis"], check=True)
    return str(python)


def _uncompressed_mb(path: Path) -> float:
    with path.open("rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    if not gz:
        return path.stat().st_size / 2**20
    size = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            size += len(chunk)
    return size / 2**20


def _traces(args: argparse.Namespace) -> list[Path]:
    if args.traces:
        return [Path(p) for p in args.traces]
    return sorted(p for p in DEFAULT_TRACES.rglob("*.json.gz"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", help=f"trace files (default: every *.json.gz in {DEFAULT_TRACES})")
    ap.add_argument("--hta-python", help="python of an environment with HolisticTraceAnalysis installed")
    ap.add_argument("--no-hta", action="store_true", help="skip the HolisticTraceAnalysis column")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (median time, max memory)")
    args = ap.parse_args(argv)
    traces = _traces(args)
    if not traces:
        print(f"no traces found (looked in {DEFAULT_TRACES})", file=sys.stderr)
        return 2
    hta_python = None if args.no_hta else ensure_hta_python(args.hta_python)
    env = dict(os.environ, PYTHONPATH=str(REPO))

    header = (
        f"{'trace':34} {'MB':>6} {'json.load':>9} {'analyze':>8} {'cli':>6} {'HTA':>7} "
        f"{'an/json':>7} {'HTA/an':>6} {'an mem':>7} {'mem/MB':>6} {'json mem':>8} {'HTA mem':>7}"
    )
    print(header)
    print("-" * len(header))
    totals = {"json": 0.0, "analyze": 0.0, "hta": 0.0}
    for path in traces:
        size = _uncompressed_mb(path)
        j = _measure(sys.executable, JSON_LOAD, str(path), args.repeat)
        a = _measure(sys.executable, ANALYZE, str(path), args.repeat, env)
        wall = _cli_wall(path, args.repeat)
        h = None
        if hta_python:
            with tempfile.TemporaryDirectory() as tmp:  # HTA wants a directory of rank files
                shutil.copy(path, Path(tmp) / path.name)
                h = _measure(hta_python, HTA, tmp, args.repeat)
        ok_h = bool(h) and "error" not in (h or {})
        a_mem = a["peak_mb"] - a["base_mb"] if a and "error" not in a else float("nan")
        j_mem = j["peak_mb"] - j["base_mb"] if j and "error" not in j else float("nan")
        h_mem = h["peak_mb"] - h["base_mb"] if ok_h and h else float("nan")
        a_s, j_s = a["seconds"] if a else float("nan"), j["seconds"] if j else float("nan")
        h_s = h["seconds"] if ok_h and h else float("nan")
        if ok_h:
            totals["hta"] += h_s
            totals["analyze"] += a_s
            totals["json"] += j_s
        name = path.name if path.parent == DEFAULT_TRACES else f"{path.parent.name}/{path.name}"
        print(
            f"{name[:34]:34} {size:6.1f} {j_s:9.3f} {a_s:8.3f} {wall:6.2f} "
            + (f"{h_s:7.3f}" if ok_h else f"{'fails':>7}")
            + f" {a_s / j_s:7.2f} "
            + (f"{h_s / a_s:6.1f}" if ok_h else f"{'-':>6}")
            + f" {a_mem:7.1f} {a_mem / size:6.2f} {j_mem:8.1f} "
            + (f"{h_mem:7.1f}" if ok_h else f"{'-':>7}")
        )
    if totals["analyze"] > 0:
        print(
            f"\nall traces HTA runs on: analyze {totals['analyze']:.2f} s, json.load {totals['json']:.2f} s, "
            f"HTA {totals['hta']:.2f} s -> {totals['hta'] / totals['analyze']:.1f}x faster than HTA, "
            f"{totals['analyze'] / totals['json']:.2f}x a bare json.load"
        )
    print(
        "\nseconds exclude start-up/imports ('cli' is the whole `python -m lightning_bottleneck analyze "
        "--json` command); memory columns are MB of peak RSS above the post-import baseline; "
        "mem/MB = analyze's peak over the uncompressed JSON size."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
