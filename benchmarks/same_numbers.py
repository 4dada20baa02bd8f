"""Every number ``analyze`` gives, compared between this checkout and another (e.g. the commit before a change).

For each trace (default: every ``*.json.gz`` in ``../shared/traces`` and the tests' own traces, written by
``tests/_trace_builders.py`` into a temporary directory), each checkout runs in its own process (``PYTHONPATH``
set to it) and dumps the trace's summary (``TraceSummary.to_dict()``: every metric the rules see) and the
report (``Report.to_dict()``: verdict, confidence, breakdown, evidence, advice, notes); the two dumps must be
equal, to the last digit. Exit 1 when any differs.

Usage::

    python benchmarks/same_numbers.py --against ../old-checkout [TRACE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_TRACES = REPO.parent / "shared" / "traces"

DUMP = """
import json, sys
import lightning_bottleneck.trace.reader as reader
print("reader:", reader.__file__, file=sys.stderr)
from lightning_bottleneck.analysis.trace_file import summarize_file
from lightning_bottleneck.offline import analyze_paths
out = {}
for path in sys.argv[1:]:
    try:
        summary = summarize_file(path).to_dict()
        report = analyze_paths([path]).to_dict()
        out[path] = {"summary": summary, "report": report}
    except Exception as err:
        out[path] = {"error": f"{type(err).__name__}: {err}"}
print(json.dumps(out, sort_keys=True, default=str))
"""


def tests_traces(tmp: Path) -> list[str]:
    """The tests' own traces (tests/_trace_builders.py): both schemas, CPU-only, a scaled clock."""
    sys.path.insert(0, str(REPO / "tests"))
    from _trace_builders import NEW, OLD, cpu_training_events, gpu_training_events, write_trace

    return [
        str(write_trace(tmp / "new_schema.json", gpu_training_events(NEW) * 20)),
        str(write_trace(tmp / "old_schema.json.gz", gpu_training_events(OLD) * 20, gz=True)),
        str(write_trace(tmp / "cpu_rank2.json", cpu_training_events())),
        str(write_trace(tmp / "scaled.json", gpu_training_events(scale=1000.0) * 5)),
    ]


def dump(repo: str, paths: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=repo)
    proc = subprocess.run(
        # cwd: `python -c` puts the working directory first on sys.path, before PYTHONPATH
        [sys.executable, "-c", DUMP, *paths],
        capture_output=True,
        text=True,
        env=env,
        cwd=repo,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{repo}: {proc.stderr.strip().splitlines()[-1:]}")
    print(next((ln for ln in proc.stderr.splitlines() if ln.startswith("reader:")), "reader: ?"))
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*")
    ap.add_argument(
        "--against", required=True, help="the other checkout (a directory with lightning_bottleneck/)"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = args.traces or sorted(str(p) for p in DEFAULT_TRACES.rglob("*.json.gz"))
        if not args.traces:
            paths += tests_traces(Path(tmp))
        ours = dump(str(REPO), paths)
        theirs = dump(str(Path(args.against).resolve()), paths)
        bad = 0
        for path in paths:
            a, b = ours[path], theirs[path]
            same = a == b
            bad += not same
            what = "error" if "error" in a else f"{len(json.dumps(a))} chars of summary + report"
            print(f"{'identical' if same else 'DIFFERENT'}  {Path(path).name:40} ({what})")
            if not same and "summary" in a and "summary" in b:
                for part in ("summary", "report"):
                    keys = sorted(k for k in set(a[part]) | set(b[part]) if a[part].get(k) != b[part].get(k))
                    if keys:
                        print(f"    {part} differs in: {', '.join(keys)[:300]}")
    print(f"\n{len(paths) - bad} of {len(paths)} traces: every number identical to {args.against}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
