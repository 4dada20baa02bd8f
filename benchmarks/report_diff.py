"""Report-by-report diff between two versions of the package on the same inputs: does a refactor change a verdict?

Two kinds of input, both deterministic:

* every trace in ``../shared/traces`` (and its two-rank run folder) plus the tests' synthetic traces (a
  microsecond, a millisecond and a nanosecond clock), analysed offline (``analyze_paths``);
* every ``diagnose(...)`` call the pure test modules make on evidence they build (no training: the ranking,
  predictions, rules and advice, registry and time-unit tests), keyed by test id and call index.

The base version is checked out with ``git worktree`` into a temporary folder and both run in child processes
with their own ``PYTHONPATH``. Output: one line per changed field path with how many reports it changed in, and
the verdicts, first advice and confidence of every report side by side where any of them changed.

    python benchmarks/report_diff.py --base d705fab
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
PURE_TESTS = [
    "tests/test_ranking.py",
    "tests/test_predictions.py",
    "tests/test_rules_advice.py",
    "tests/test_registry.py",
    "tests/test_time_unit.py",
]
#: Tests whose evidence comes from a real fit (timing noise): left out of the comparison.
TRAINED = ("test_a_cpu_bound_loader_is_timed_with_the_real_step", "test_too_few_steps_is_unknown")

TRACES = r"""
import json, pathlib, sys
sys.path.insert(0, sys.argv[3])
from _trace_builders import cpu_training_events, gpu_training_events, write_trace
from lightning_bottleneck.offline import analyze_paths
shared, tmp, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), {}
inputs = sorted(shared.glob("*.json.gz")) + [p for p in [shared / "two_ranks_of128"] if p.exists()]
for name, scale in (("cpu", 1.0), ("cpu_ms", 1e-3), ("cpu_ns", 1e3), ("gpu", 1.0), ("gpu_ms", 1e-3)):
    builder = cpu_training_events if name.startswith("cpu") else gpu_training_events
    inputs.append(write_trace(tmp / f"{name}.json", builder(scale=scale)))
for path in inputs:
    try:
        d = analyze_paths([path]).to_dict()
    except Exception as err:
        d = {"error": f"{type(err).__name__}: {err}"}
    out["trace:" + path.name] = d
print(json.dumps(out, default=str))
"""

PLUGIN = r"""
import json, os
import pytest
import lightning_bottleneck.diagnose as D

_orig, _now, _out = D.diagnose, {"id": None, "n": 0}, {}

def _wrapped(evidence):
    report = _orig(evidence)
    _out[f"{_now['id']}#{_now['n']}"] = report.to_dict()
    _now["n"] += 1
    return report

D.diagnose = _wrapped

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _now["id"], _now["n"] = item.nodeid, 0

def pytest_sessionfinish(session):
    with open(os.environ["REPORT_DIFF_OUT"], "w") as f:
        json.dump(_out, f, default=str)
"""

#: Fields that name where an input was, not what was concluded.
VOLATILE = re.compile(r"/(trace_files|metrics/trace/source)(\[\d+\])?$")


def _reports(tree: Path, tmp: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    (tmp / "traces").mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        [sys.executable, "-c", TRACES, str(SHARED), str(tmp / "traces"), str(tree / "tests")],
        capture_output=True, text=True, check=True, env=env, cwd=tmp,
    )  # fmt: skip
    reports: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    (tmp / "plugin").mkdir(exist_ok=True)
    (tmp / "plugin" / "report_diff_plugin.py").write_text(PLUGIN)
    dump = tmp / "diagnose.json"
    env = {**env, "PYTHONPATH": f"{tmp / 'plugin'}{os.pathsep}{tree}", "REPORT_DIFF_OUT": str(dump)}
    tests = [t for t in PURE_TESTS if (tree / t).exists()]
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "report_diff_plugin", *tests],
        capture_output=True, text=True, env=env, cwd=tree,
    )  # fmt: skip
    if dump.exists():
        calls = json.loads(dump.read_text())
        reports.update({k: v for k, v in calls.items() if not any(t in k for t in TRAINED)})
    return reports


def _diff(a: Any, b: Any, path: str, out: list[tuple[str, str]]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append(("added", f"{path}/{k}"))
            elif k not in b:
                out.append(("removed", f"{path}/{k}"))
            else:
                _diff(a[k], b[k], f"{path}/{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out)
    elif a != b and not VOLATILE.search(path):
        out.append(("changed", path))


def _headline(r: dict[str, Any]) -> str:
    if "error" in r:
        return r["error"]
    recs = r.get("recommendations") or []
    first = f"{recs[0].get('settings')} {recs[0].get('expected_speedup')}" if recs else "-"
    return f"{r.get('primary')} {r.get('confidence')} | {first}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the git revision to compare the working tree against")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        base = tmp / "base"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(base), args.base], cwd=ROOT, check=True
        )
        try:
            before = _reports(base, tmp / "before")
            after = _reports(ROOT, tmp / "after")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    common = sorted(set(before) & set(after))
    fields: Counter[tuple[str, str]] = Counter()
    headlines = []
    for key in common:
        out: list[tuple[str, str]] = []
        _diff(before[key], after[key], "", out)
        for kind, path in set(out):
            fields[(kind, re.sub(r"\[\d+\]", "[]", path))] += 1
        if _headline(before[key]) != _headline(after[key]):
            headlines.append((key, _headline(before[key]), _headline(after[key])))
    print(f"{len(common)} reports on the same inputs ({len(before)} before, {len(after)} after)")
    print(f"verdict, confidence or first advice changed in {len(headlines)}:")
    for key, b, a in headlines:
        print(f"  {key}\n    before: {b}\n    after:  {a}")
    print("fields that differ (reports):" if fields else "no field differs")
    for (kind, path), n in sorted(fields.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:3d}  {kind:8s} {path}")


if __name__ == "__main__":
    main()
