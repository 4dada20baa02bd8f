"""Speed and memory of ``lightning-bottleneck analyze`` vs HolisticTraceAnalysis vs a bare ``json.load``.

For every trace (default: ``../shared/traces``), three measurements run side by side, each in a fresh
Python process so that peak memory is its own:

* ``analyze``: read + summarise + diagnose, exactly what ``lightning-bottleneck analyze --json`` does;
* ``HTA``: ``TraceAnalysis`` load plus ``get_temporal_breakdown`` and ``get_idle_time_breakdown``
  (HolisticTraceAnalysis, in its own virtual environment: pandas & co. never enter ours);
* ``json.load``: ``json.load(gzip.open(path))`` of the same file, the floor for any Python reader.

The runs of one trace are interleaved (json.load, analyze, the ``--before`` analyze, HTA, then again), so
drift on a shared machine hits each alike. Times exclude interpreter start-up and imports (``analyze`` is
also timed end to end as a command).
Memory is the process's peak resident set (VmHWM) minus its resident set after imports, i.e. what the
trace itself costs, compared with the uncompressed JSON size.

Usage::

    python benchmarks/analyze_speed.py [TRACE ...] [--hta-python PATH] [--repeat N]

Large traces: ``--large-mb 256,1024`` generates synthetic traces of those sizes (the steps of
``--large-src`` repeated, see ``make_large_trace.py``) in a temporary directory and measures only them:
analyze time and peak memory against ``json.load`` (skipped above ``--json-load-max-mb``), HTA with
``--hta-large``, and checks that their summaries agree with the source trace's.

``--before REPO`` also times ``analyze`` of another checkout of the package (e.g. the commit before a change)
in the same run, printed under each row with the speed-up and, on large traces, whether both summaries are
identical.

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
from lightning_bottleneck.offline import analyze_paths
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


def _run(
    python: str, code: str, arg: str, env: dict[str, str] | None = None, *extra: str, timeout: float = 900
) -> dict | None:
    try:
        proc = subprocess.run(
            [python, "-c", code, arg, *extra],
            capture_output=True,
            text=True,
            # the checkout on PYTHONPATH: `python -c` puts the working directory first on sys.path
            cwd=(env or {}).get("PYTHONPATH", REPO),
            env=env,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": last[:80]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _measure(python: str, code: str, arg: str, repeat: int, env: dict[str, str] | None = None) -> dict | None:
    return _median([_run(python, code, arg, env) for _ in range(repeat)])


def _interleaved(specs: dict[str, tuple], repeat: int) -> dict[str, dict | None]:
    """``_measure`` of each ``name: (python, code, arg, env)``, one run of each in turn (drift hits all alike)."""
    runs: dict[str, list[dict | None]] = {name: [] for name in specs}
    for _ in range(repeat):
        for name, (python, code, arg, env) in specs.items():
            runs[name].append(_run(python, code, arg, env))
    return {name: _median(r) for name, r in runs.items()}


def _median(runs: list[dict | None]) -> dict | None:
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


# ---- large synthetic traces (--large-mb) ------------------------------------------------------------

# Like ANALYZE, but also writes the per-rank summaries to argv[2] (for the agreement check).
ANALYZE_LARGE = (
    _MEM
    + """
import json, sys, time
import lightning_bottleneck.offline as cli
from lightning_bottleneck.offline import analyze_paths
import lightning_bottleneck.diagnose
import numpy.ma
captured = []
_summarize = cli.summarize_file
def _capture(path):
    s = _summarize(path)
    captured.append(s)
    return s
cli.summarize_file = _capture
base = _mem('VmRSS')
t = time.perf_counter()
report = analyze_paths([sys.argv[1]])
text = report.to_json()
dt = time.perf_counter() - t
peak = _mem('VmHWM')
with open(sys.argv[2], 'w') as fh:
    json.dump([s.to_dict() for s in captured], fh, default=str)
print(json.dumps({"seconds": dt, "peak_mb": peak, "base_mb": base, "primary": report.primary.value}))
"""
)

#: json.load's peak is roughly this many times the JSON text (dicts, str, the raw bytes): used to skip it
#: when the machine could not hold it.
JSON_LOAD_MEM_FACTOR = 10.0
#: Fields whose value depends on where the trace *ends*, not on the steps: expected to move slightly when
#: copies are concatenated (see the agreement check's notes).
BOUNDARY_FIELDS = ("idle_host_wait", "idle_kernel_wait")
BOUNDARY_EXTRA = ("gpu_window",)
AGREE_TOL = 1e-6


def _mem_available_mb() -> float:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("inf")


def _numeric_leaves(value: object, prefix: str = "") -> dict[str, float]:
    """Flatten nested dicts to ``a.b.c -> number`` (bools and non-numbers left out)."""
    out: dict[str, float] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            out.update(_numeric_leaves(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[prefix] = float(value)
    return out


def _agreement(orig: dict, large: dict, copies: int) -> list[str]:
    """Compare the large trace's summary with the source's: per-step metrics must not move."""
    lines = []
    n0, n1 = orig["num_steps"], large["num_steps"]
    ok_n = n1 == n0 * copies
    lines.append(f"num_steps {n1} {'=' if ok_n else '!='} {copies} x {n0}: {'OK' if ok_n else 'MISMATCH'}")
    ok_t = large["step_times_ms"] == orig["step_times_ms"] * copies
    lines.append(f"step_times_ms = source's repeated {copies}x: {'OK' if ok_t else 'MISMATCH'}")
    skip = {"source", "num_steps", "step_times_ms", "extra", *BOUNDARY_FIELDS}
    a = _numeric_leaves({k: v for k, v in orig.items() if k not in skip})
    b = _numeric_leaves({k: v for k, v in large.items() if k not in skip})
    ea = _numeric_leaves({k: v for k, v in orig["extra"].items() if k not in BOUNDARY_EXTRA}, "extra")
    eb = _numeric_leaves({k: v for k, v in large["extra"].items() if k not in BOUNDARY_EXTRA}, "extra")
    a.update(ea)
    b.update(eb)
    missing = sorted(set(a) ^ set(b))
    diffs = {k: abs(a[k] - b[k]) for k in set(a) & set(b)}
    bad = sorted(k for k, d in diffs.items() if d > AGREE_TOL * max(1.0, abs(a[k])))
    worst = max(diffs.values(), default=0.0)
    lines.append(
        f"{len(diffs) - len(bad)}/{len(diffs)} per-step metrics within {AGREE_TOL:g} (max |diff| {worst:.2g})"
        + (": OK" if not bad and not missing else "")
    )
    for k in bad:
        lines.append(f"  MISMATCH {k}: source {a[k]!r}, large {b[k]!r}")
    for k in missing:
        lines.append(f"  MISMATCH {k}: only in {'source' if k in a else 'large'}")
    for k in ("device_busy", "data_wait", "kernels_per_step"):
        if k in a and k in b:
            lines.append(f"  {k}: source {a[k]:.12g}, large {b[k]:.12g}")
    if all(orig.get(k) is not None and large.get(k) is not None for k in BOUNDARY_FIELDS):
        s0 = sum(orig[k] for k in BOUNDARY_FIELDS)
        s1 = sum(large[k] for k in BOUNDARY_FIELDS)
        moved = large["idle_host_wait"] - orig["idle_host_wait"]
        lines.append(
            f"  idle split (boundary-sensitive): host wait {moved:+.2g}, kernel wait "
            f"{large['idle_kernel_wait'] - orig['idle_kernel_wait']:+.2g}; their sum "
            f"{'within' if abs(s1 - s0) <= AGREE_TOL else 'NOT within'} {AGREE_TOL:g} ({abs(s1 - s0):.2g})"
        )
    for k in BOUNDARY_EXTRA:
        if k in orig["extra"] or k in large["extra"]:
            lines.append(
                f"  extra.{k} (whole window, not per step): source {orig['extra'].get(k)}, large {large['extra'].get(k)}"
            )
    return lines


def _parse_mb_list(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes in MB like 256,1024, got {text!r}") from None


def _print_before(b: dict | None, a: dict | None, same: bool | None = None) -> None:
    """One line under a row: ``analyze`` of the ``--before`` checkout, and how much faster this one is."""
    if not b or "error" in b or not a or "error" in a:
        print(f"  before: {(b or {}).get('error', 'fails')}", flush=True)
        return
    agree = "" if same is None else f"; summaries {'identical' if same else 'DIFFER'}"
    print(
        f"  before ({Path(os.environ.get('_BEFORE', '?')).name}): analyze {b['seconds']:.3f} s, peak "
        f"{b['peak_mb'] - b['base_mb']:.0f} MB -> now {b['seconds'] / a['seconds']:.2f}x faster, peak "
        f"{(a['peak_mb'] - a['base_mb']) / max(1e-9, b['peak_mb'] - b['base_mb']):.2f}x{agree}",
        flush=True,
    )


def run_large(args: argparse.Namespace, env: dict[str, str], hta_python: str | None) -> int:
    """Generate traces of ``--large-mb`` sizes from ``--large-src`` and measure analyze / json.load on them."""
    before_env = dict(env, PYTHONPATH=args.before) if args.before else None
    sys.path.insert(0, str(HERE))
    from make_large_trace import make_large_trace  # benchmarks/ is not a package

    src = Path(args.large_src)
    cols = f"{'trace':24} {'MB':>7} {'steps':>5} {'analyze s':>9} {'json.load s':>11} {'an/json':>7} "
    cols += f"{'an peak MB':>10} {'peak/JSON MB':>12} {'json peak MB':>12}"
    if args.hta_large:
        cols += f" {'HTA s':>7} {'HTA peak MB':>11}"
    rows: list[str] = []
    checks: list[tuple[str, list[str]]] = []
    keep = Path(args.large_dir) if args.large_dir else None
    tmp = tempfile.TemporaryDirectory(prefix="large-traces-")
    workdir = keep or Path(tmp.name)
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"free memory: {_mem_available_mb() / 1024:.1f} GiB available; traces in {workdir}", flush=True)

    def measure(label: str, path: Path, size: float, steps_hint: int) -> dict | None:
        out_json = Path(tmp.name) / f"summary-{label}.json"
        a = _run(sys.executable, ANALYZE_LARGE, str(path), env, str(out_json), timeout=args.large_timeout)
        limit_reason = None
        if size > args.json_load_max_mb:
            limit_reason = f"skip>{args.json_load_max_mb:g}"
        elif size * JSON_LOAD_MEM_FACTOR > _mem_available_mb():
            limit_reason = "skip:RAM"
        j = None if limit_reason else _run(sys.executable, JSON_LOAD, str(path), timeout=args.large_timeout)
        h = None
        if args.hta_large and hta_python:
            with tempfile.TemporaryDirectory(prefix="hta-", dir=workdir) as hdir:
                link = Path(hdir) / path.name
                try:
                    os.link(path, link)
                except OSError:
                    shutil.copy(path, link)
                h = _run(hta_python, HTA, hdir, timeout=args.large_timeout)
        ok_a = bool(a) and "error" not in (a or {})
        ok_j = bool(j) and "error" not in (j or {})
        ok_h = bool(h) and "error" not in (h or {})
        a_s = a["seconds"] if ok_a and a else float("nan")
        a_mem = a["peak_mb"] - a["base_mb"] if ok_a and a else float("nan")
        j_s = j["seconds"] if ok_j and j else float("nan")
        j_mem = j["peak_mb"] - j["base_mb"] if ok_j and j else float("nan")
        summary = json.loads(out_json.read_text())[0] if ok_a and out_json.exists() else None
        steps = summary["num_steps"] if summary else steps_hint
        j_cell = f"{j_s:11.2f}" if ok_j else f"{(limit_reason or (j or {}).get('error', 'fails'))[:11]:>11}"
        jm_cell = f"{j_mem:12.0f}" if ok_j else f"{'-':>12}"
        ratio = f"{a_s / j_s:7.2f}" if ok_j and ok_a else f"{'-':>7}"
        row = (
            f"{label[:24]:24} {size:7.1f} {steps:5d} "
            + (f"{a_s:9.2f}" if ok_a else f"{'fails':>9}")
            + f" {j_cell} {ratio} {a_mem:10.0f} {a_mem / size:12.3f} {jm_cell}"
        )
        if args.hta_large:
            if ok_h and h:
                row += f" {h['seconds']:7.2f} {h['peak_mb'] - h['base_mb']:11.0f}"
            else:
                row += f" {((h or {}).get('error') or 'fails')[:7]:>7} {'-':>11}"
        rows.append(row)
        print(row, flush=True)
        if not ok_a and a:
            print(f"  analyze failed: {a.get('error')}", flush=True)
        if before_env is not None:
            out_b = Path(tmp.name) / f"summary-{label}-before.json"
            b = _run(
                sys.executable, ANALYZE_LARGE, str(path), before_env, str(out_b), timeout=args.large_timeout
            )
            _print_before(
                b, a, same=out_b.exists() and out_json.exists() and out_b.read_text() == out_json.read_text()
            )
        if summary is not None:
            summary["_primary"] = a["primary"] if a else None
        return summary

    try:
        print(cols)
        print("-" * len(cols), flush=True)
        orig = measure(f"source ({src.name[:14]})", src, _uncompressed_mb(src), 0)
        for mb in args.large_mb:
            path = workdir / f"large_{mb:g}mb_rank0.json"
            t = time.perf_counter()
            info = make_large_trace(mb, path, src)
            gen_s = time.perf_counter() - t
            print(
                f"  (generated {path.name}: {info.mb:.1f} MB, {info.copies} copies x {info.steps_per_copy} steps, "
                f"{info.events:,} events, in {gen_s:.1f} s)",
                flush=True,
            )
            summary = measure(f"synthetic {mb:g} MB", path, info.mb, info.copies * info.steps_per_copy)
            if orig is not None and summary is not None:
                lines = _agreement(orig, summary, info.copies)
                same = orig["_primary"] == summary["_primary"]
                lines.append(
                    f"verdict: source {orig['_primary']!r}, large {summary['_primary']!r}: {'same' if same else 'DIFFERENT'}"
                )
                checks.append((f"{info.mb:.0f} MB ({info.copies} copies)", lines))
            if keep is None:
                path.unlink(missing_ok=True)
    finally:
        tmp.cleanup()
    print(
        "\nseconds exclude start-up/imports; 'an peak MB' / 'json peak MB' = peak RSS (VmHWM) above the "
        "post-import baseline; 'peak/JSON MB' = analyze's peak over the uncompressed JSON size; the "
        f"source row reads the .json.gz itself. json.load is skipped above --json-load-max-mb "
        f"({args.json_load_max_mb:g}) or when ~{JSON_LOAD_MEM_FACTOR:g}x the JSON would not fit in free RAM."
    )
    if checks:
        print(f"\nagreement of the synthetic traces' summaries with the source's ({src.name}):")
        for title, lines in checks:
            print(f"{title}:")
            for line in lines:
                print(f"  {line}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", help=f"trace files (default: every *.json.gz in {DEFAULT_TRACES})")
    ap.add_argument("--hta-python", help="python of an environment with HolisticTraceAnalysis installed")
    ap.add_argument("--no-hta", action="store_true", help="skip the HolisticTraceAnalysis column")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (median time, max memory)")
    ap.add_argument("--before", metavar="REPO", help="also time analyze of another checkout (side by side)")
    large = ap.add_argument_group(
        "large traces", "synthetic traces made by make_large_trace.py; with --large-mb only this part runs"
    )
    large.add_argument("--large-mb", type=_parse_mb_list, default=[], help="sizes to generate, e.g. 256,1024")
    large.add_argument("--large-src", default=str(DEFAULT_TRACES / "a100_rank3_of8_control.json.gz"))
    large.add_argument("--large-dir", help="keep the generated traces here (default: a temp dir, deleted)")
    large.add_argument("--json-load-max-mb", type=float, default=2048, help="skip json.load above this size")
    large.add_argument("--hta-large", action="store_true", help="also run HTA on them (memory-hungry)")
    large.add_argument("--large-timeout", type=float, default=1800, help="seconds per measurement")
    args = ap.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if args.before:
        args.before = str(Path(args.before).resolve())
        os.environ["_BEFORE"] = args.before
    before_env = dict(env, PYTHONPATH=args.before) if args.before else None
    if args.large_mb:
        hta = ensure_hta_python(args.hta_python) if args.hta_large and not args.no_hta else None
        return run_large(args, env, hta)
    traces = _traces(args)
    if not traces:
        print(f"no traces found (looked in {DEFAULT_TRACES})", file=sys.stderr)
        return 2
    hta_python = None if args.no_hta else ensure_hta_python(args.hta_python)

    header = (
        f"{'trace':34} {'MB':>6} {'json.load':>9} {'analyze':>8} {'cli':>6} {'HTA':>7} "
        f"{'an/json':>7} {'HTA/an':>6} {'an mem':>7} {'mem/MB':>6} {'json mem':>8} {'HTA mem':>7}"
    )
    print(header)
    print("-" * len(header))
    totals = {"json": 0.0, "analyze": 0.0, "hta": 0.0}
    for path in traces:
        size = _uncompressed_mb(path)
        with tempfile.TemporaryDirectory() as tmp:  # HTA wants a directory of rank files
            shutil.copy(path, Path(tmp) / path.name)
            specs: dict[str, tuple] = {"j": (sys.executable, JSON_LOAD, str(path), None)}
            specs["a"] = (sys.executable, ANALYZE, str(path), env)
            if before_env:
                specs["b"] = (sys.executable, ANALYZE, str(path), before_env)
            if hta_python:
                specs["h"] = (hta_python, HTA, tmp, None)
            got = _interleaved(specs, args.repeat)
        j, a, b, h = got["j"], got["a"], got.get("b"), got.get("h")
        wall = _cli_wall(path, args.repeat)
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
        if before_env is not None:
            _print_before(b, a)
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
