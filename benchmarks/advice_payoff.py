"""Does the first recommendation pay off when followed? The project's scoreboard (issues 8 and 9).

For each workload (``benchmarks/payoff_workloads.py``):

1. train it once with the *current* ``BottleneckCallback`` (separate process) and read
   ``bottleneck_report.json``: the verdict and ``recommendations[0].settings``;
2. re-measure samples/s WITHOUT the callback (steady-state; the input and rest-of-fit workloads: over the whole
   fit, as the report's ``expected_speedup`` is), in separate processes, interleaved (baseline, the applied
   advice, then every candidate single change, round after round), and take the median of ``--repeats``
   rounds (workloads measured over the fit: at least WHOLE_FIT_MIN_REPEATS);
3. print a table: workload, verdict, first advice, applied speed-up, the best single change the sweep found
   and its speed-up, and whether the goal holds: applied >= 0.97x and applied >= sqrt(best) (at least half
   of the best change's speed-up in log terms). "Best" is at least 1.0 (leaving the run alone).

    python benchmarks/advice_payoff.py                                   # the main set (slow: minutes)
    python benchmarks/advice_payoff.py --workloads io_wait,worker_restart --repeats 3
    python benchmarks/advice_payoff.py --held-out                        # the held-out set
    python benchmarks/advice_payoff.py --json payoff.json                # also write the figures

Advice whose settings need a code change (or that has no settings) counts as "not applied", 1.00x.
Timings on a shared machine are noisy: read ratios near 1.0 as "no change".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from payoff_workloads import HELD_OUT, MAIN, WORKLOADS  # noqa: E402

# The goal of issues 8 and 9: the applied advice is not slower than this (3%: the noise band
# `lightning-bottleneck compare` uses) ...
NOT_SLOWER = 0.97
# ... and wins at least this share of the best single change's speed-up in log terms.
LOG_SHARE_OF_BEST = 0.5
# The number printed next to the advice is what the user gets (issue 19): |log(predicted / applied)| at most
# this (20%: log 1.2 = 0.18); where the report gave a range instead, applied falls inside it (same slack).
PREDICTION_LOG_ERROR = 0.18
# Whole-fit workloads (the rest of the fit) are 1-2 s fits whose wall time varies 10-20% between consecutive
# runs on the project's 2-core VM (docs/benchmarks.md): their median takes at least this many rounds.
WHOLE_FIT_MIN_REPEATS = 5


@dataclass
class Outcome:
    workload: str
    verdict: str = "?"
    confidence: float = 0.0
    advice: str = "-"
    settings: dict[str, Any] = field(default_factory=dict)
    applied: bool = False
    note: str = ""
    predicted: float | None = None  # the first advice's expected_speedup
    predicted_range: tuple[float, float] | None = None  # its expected_speedup_range, when it gave one
    rates: dict[str, list[float]] = field(default_factory=dict)  # label -> samples/s per round

    def median(self, label: str) -> float:
        vals = [v for v in self.rates.get(label, []) if not math.isnan(v)]
        return statistics.median(vals) if vals else float("nan")

    def speedup(self, label: str) -> float:
        return self.median(label) / self.median("baseline")

    @property
    def applied_speedup(self) -> float:
        return self.speedup("advice") if self.applied else 1.0

    @property
    def best(self) -> tuple[str, float]:
        cands = [(k, self.speedup(k)) for k in self.rates if k not in ("baseline", "advice")]
        cands = [(k, s) for k, s in cands if not math.isnan(s)]
        if self.applied and not math.isnan(self.applied_speedup):
            cands.append((_label(self.settings), self.applied_speedup))
        best = max(cands, key=lambda kv: kv[1], default=("(leave it)", 1.0))
        return best if best[1] > 1.0 else ("(leave it)", 1.0)

    @property
    def goal(self) -> bool:
        a, b = self.applied_speedup, self.best[1]
        return a >= NOT_SLOWER and math.log(max(a, 1e-9)) >= LOG_SHARE_OF_BEST * math.log(b) - 1e-9

    @property
    def prediction_error(self) -> float | None:
        """|log(predicted / applied)|; None when not applied or nothing was predicted."""
        a = self.applied_speedup
        if not self.applied or self.predicted is None or math.isnan(a) or a <= 0:
            return None
        return abs(math.log(self.predicted / a))

    @property
    def prediction_ok(self) -> bool | None:
        """The applied speed-up is within 20% of the point, or inside the range (20% slack) when given."""
        err = self.prediction_error
        if err is None:
            return None
        if self.predicted_range is not None:
            lo, hi = self.predicted_range
            a = self.applied_speedup
            return math.log(lo) - PREDICTION_LOG_ERROR <= math.log(a) <= math.log(hi) + PREDICTION_LOG_ERROR
        return err <= PREDICTION_LOG_ERROR

    def predicted_text(self) -> str:
        if self.predicted_range is not None:
            return f"{self.predicted_range[0]:.2f}-{self.predicted_range[1]:.2f}x"
        return "-" if self.predicted is None else f"{self.predicted:.2f}x"

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "verdict": self.verdict,
            "confidence": self.confidence,
            "advice": self.advice,
            "settings": self.settings,
            "applied": self.applied,
            "note": self.note,
            "rates": self.rates,
            "applied_speedup": self.applied_speedup,
            "best": list(self.best),
            "goal": self.goal,
            "predicted": self.predicted,
            "predicted_range": None if self.predicted_range is None else list(self.predicted_range),
            "prediction_error": self.prediction_error,
            "prediction_ok": self.prediction_ok,
        }


def placed(rec: dict[str, Any]) -> dict[str, Any]:
    """The recommendation's settings, each key prefixed with where it goes when that is not the Trainer or the
    train loader (``{"ModelCheckpoint.every_n_train_steps": 50}``: payoff_workloads.py puts it there)."""
    settings = dict(rec.get("settings") or {})
    where = rec.get("where")
    if not where or where == "Trainer":
        return settings
    return {f"{where}.{k}": v for k, v in settings.items()}


def _label(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items()) or "(none)"


def _child(
    workload: str, mode: str, settings: dict[str, Any], out: Path, timeout: float, loader_plan: bool = False
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(HERE / "payoff_workloads.py"),
        "--workload",
        workload,
        "--mode",
        mode,
        "--settings",
        json.dumps(settings),
        "--out",
        str(out),
    ]
    if loader_plan:
        cmd.append("--loader-plan")
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{workload} {mode} {settings}: exit {proc.returncode}: {' | '.join(tail)}")
    if mode == "callback":
        return json.loads((out / "bottleneck_report.json").read_text(encoding="utf-8"))
    return json.loads((out / "result.json").read_text(encoding="utf-8"))


def evaluate(
    name: str, repeats: int, tmp: Path, timeout: float, log: Any, loader_plan: bool = False
) -> Outcome:
    o = Outcome(name)
    report = _child(name, "callback", {}, tmp / name / "callback", timeout, loader_plan)
    o.verdict = str(report.get("primary"))
    o.confidence = float(report.get("confidence") or 0.0)
    recs = report.get("recommendations") or []
    plan_file = tmp / name / "callback" / "loader_plan.json"
    if loader_plan and plan_file.is_file():
        plan = json.loads(plan_file.read_text(encoding="utf-8"))
        log("  " + plan["text"].replace("\n", "\n  "))
        if plan["plan"]["recommendations"]:
            # preview of the wiring: the measured loader advice goes first when the plan has any
            recs = plan["plan"]["recommendations"] + [r for r in recs if r.get("kind") != "input"]
            o.verdict += " (+plan)"
    if recs:
        o.advice = str(recs[0].get("title", "?"))
        o.settings = placed(recs[0])
        pred, span = recs[0].get("expected_speedup"), recs[0].get("expected_speedup_range")
        o.predicted = float(pred) if isinstance(pred, (int, float)) else None
        if isinstance(span, list) and len(span) == 2:
            o.predicted_range = (float(span[0]), float(span[1]))
    configs: dict[str, dict[str, Any]] = {"baseline": {}}
    if o.settings:
        configs["advice"] = o.settings
    for cand in WORKLOADS[name].candidates:
        if cand != o.settings:
            configs[_label(cand)] = cand
    if WORKLOADS[name].over_fit:
        # 1-4 s fits vary 10-20% between consecutive runs on a small VM: more rounds (each is cheap)
        repeats = max(repeats, WHOLE_FIT_MIN_REPEATS)
    for r in range(repeats):
        for label, settings in configs.items():
            try:
                res = _child(name, "measure", settings, tmp / name / f"r{r}", timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as err:
                log(f"  {label}: failed ({err})")
                o.rates.setdefault(label, []).append(float("nan"))
                continue
            o.rates.setdefault(label, []).append(float(res["samples_per_s"]))
            if label == "advice" and res.get("unapplied"):
                o.note = "not applied: " + ", ".join(res["unapplied"])
            log(f"  round {r + 1} {label}: {res['samples_per_s']:.1f} samples/s")
    o.applied = bool(o.settings) and not o.note
    if not recs:
        o.note = "no advice"
    elif not o.settings:
        o.note = "advice needs a code change: not applied"
    return o


def table(outcomes: list[Outcome]) -> str:
    head = ["workload", "verdict", "first advice (settings)", "predicted", "applied", "|log(pred/appl)|",
            "best single change", "best", "goal"]  # fmt: skip
    rows = [head]
    for o in outcomes:
        best_label, best = o.best
        advice = f"{o.advice} ({_label(o.settings)})" if o.settings else o.advice
        applied = f"{o.applied_speedup:.2f}x" + ("" if o.applied else "*")
        rows.append(
            [
                o.workload,
                f"{o.verdict} {o.confidence:.0%}",
                advice[:70],
                o.predicted_text(),
                applied,
                _prediction_cell(o),
                best_label[:40],
                f"{best:.2f}x",
                "yes" if o.goal else "NO",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    notes = [f"  * {o.workload}: {o.note}" for o in outcomes if o.note]
    return "\n".join(lines + (["  (* = advice not applied, counted as 1.00x)", *notes] if notes else []))


def _prediction_cell(o: Outcome) -> str:
    err = o.prediction_error
    if err is None:
        return "-"
    return f"{err:.2f}" + ("" if o.prediction_ok else " NO") + (" (range)" if o.predicted_range else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="", help=f"comma-separated subset of {', '.join(WORKLOADS)}")
    p.add_argument("--held-out", action="store_true", help=f"the held-out set: {', '.join(HELD_OUT)}")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds per setting (median; >= 1)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per child process")
    p.add_argument("--json", default="", help="also write the figures to this file")
    p.add_argument("--quiet", action="store_true")
    p.add_argument(
        "--loader-plan",
        action="store_true",
        help="preview: probe the loader after the callback's fit and put the measured loader plan's advice first",
    )
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error(f"--repeats must be >= 1, got {a.repeats}")
    names = [n for n in a.workloads.split(",") if n] or list(HELD_OUT if a.held_out else MAIN)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        p.error(f"unknown workload(s) {unknown}; choose from {sorted(WORKLOADS)}")

    def log(msg: str) -> None:
        if not a.quiet:
            print(msg, file=sys.stderr, flush=True)

    outcomes: list[Outcome] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="advice_payoff_") as tmp:
        for name in names:
            log(f"{name}: {WORKLOADS[name].what}")
            try:
                outcomes.append(evaluate(name, a.repeats, Path(tmp), a.timeout, log, a.loader_plan))
            except (RuntimeError, subprocess.TimeoutExpired) as err:
                log(f"  skipped: {err}")
                outcomes.append(Outcome(name, note=f"failed: {err}"))
    print(table(outcomes))
    print(
        f"{len(outcomes)} workloads, median of {a.repeats} interleaved rounds each "
        f"(measured over the whole fit: {max(a.repeats, WHOLE_FIT_MIN_REPEATS)}), "
        f"{time.perf_counter() - t0:.0f} s; goal: applied >= {NOT_SLOWER}x and >= sqrt(best)"
    )
    judged = [o for o in outcomes if o.prediction_ok is not None]
    print(
        f"predicted within 20% (|log(pred/applied)| <= {PREDICTION_LOG_ERROR}, or inside the range given): "
        f"{sum(bool(o.prediction_ok) for o in judged)} of {len(judged)} applied"
    )
    if a.json:
        Path(a.json).write_text(json.dumps([o.to_dict() for o in outcomes], indent=2), encoding="utf-8")
    return 0 if all(o.goal for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
