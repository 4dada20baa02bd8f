"""Typed results: what the package concludes, and exactly the JSON it writes (schema_version 1) and reads back
(:func:`read_report`: every field checked, a one-line :class:`~lightning_bottleneck.errors.TraceError` otherwise).

``str(report)`` renders the terminal summary, like
``torch.utils.benchmark.Measurement`` knows how to print itself.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_bottleneck.atomic_write import write_atomically
from lightning_bottleneck.autotune_record import AutotuneRecord
from lightning_bottleneck.categories import Category, FindingKind, PredictionKind, Provenance, Severity
from lightning_bottleneck.errors import TraceError
from lightning_bottleneck.stats import percentile

SCHEMA_VERSION = 1

#: A saved report is kilobytes; anything far bigger is not one (and is not read whole into memory).
MAX_REPORT_BYTES = 64 << 20


#: Per-step samples kept in a saved report (enough for a stable bootstrap interval; a window of up to a
#: few thousand steps is kept whole, longer ones evenly thinned).
MAX_STEP_SAMPLES = 4096


@dataclass
class StepTime:
    """Step time in milliseconds: median, p90, and the per-step samples they came from (for comparisons
    that know about noise; reports written before version 0.2 have none)."""

    median: float
    p90: float
    samples: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "median": round(self.median, 4),
            "p90": round(self.p90, 4),
            "samples": [round(float(x), 4) for x in _thin(self.samples, MAX_STEP_SAMPLES)],
        }

    @classmethod
    def from_samples(cls, samples_ms: list[float]) -> StepTime | None:
        if not samples_ms:
            return None
        s = sorted(samples_ms)
        return cls(median=percentile(s, 50.0), p90=percentile(s, 90.0), samples=list(samples_ms))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepTime:
        return cls(float(d["median"]), float(d["p90"]), [float(x) for x in d.get("samples") or []])


def _thin(values: list[float], limit: int) -> list[float]:
    """At most ``limit`` of ``values``, evenly spaced (the distribution is kept, the order too)."""
    if len(values) <= limit:
        return list(values)
    step = len(values) / limit
    return [values[int(i * step)] for i in range(limit)]


@dataclass
class Finding:
    kind: FindingKind
    severity: Severity
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    location: str | None = None  # "file.py:LINE" when the finding points at user code

    def __post_init__(self) -> None:
        self.kind = FindingKind(self.kind)  # also accepts the kind's value

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "severity": self.severity.value,
            "summary": self.summary,
            "evidence": self.evidence,
            "location": self.location,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(
            FindingKind(d["kind"]),
            Severity(d["severity"]),
            d["summary"],
            dict(d.get("evidence") or {}),
            d.get("location"),
        )


@dataclass
class Recommendation:
    """One change to make. ``measured_speedup`` comes from a trial on this run's own model or loader;
    ``expected_speedup`` is the predicted whole-run speed-up (measured or estimated, see ``method`` and
    ``basis``); ``saved_ms_per_step`` is the time it saves per training step, amortised over the run (a
    one-off cost such as compile time included), ``saved_s`` over the whole run when its length is known."""

    kind: str  # the Category it addresses
    title: str
    detail: str
    settings: dict[str, Any] = field(default_factory=dict)
    snippet: str = ""  # copy-pasteable code
    expected_speedup: float | None = None  # predicted whole-run speed-up when followed (None: not estimated)
    evidence: dict[str, Any] = field(
        default_factory=dict
    )  # what the estimate rests on (e.g. a loader ladder)
    measured_speedup: float | None = None  # the trial's own speed-up of the part it measured (fwd+bwd)
    method: Provenance | None = None  # how the saving was obtained; None: not ranked
    basis: str = ""  # how the saving was measured or estimated, in words
    saved_ms_per_step: float | None = None
    saved_s: float | None = None
    # where the whole-run speed-up cannot be predicted within 20%: the range it will fall in and why
    # (then shown instead of the point; ``expected_speedup`` stays the model's best guess)
    expected_speedup_range: tuple[float, float] | None = None
    uncertainty: str = ""
    # where ``settings`` go: "Trainer", "ModelCheckpoint", "val DataLoader", "self.log", a callback's class;
    # None: the train DataLoader / the Trainer / the model, as the setting's name says (the in-step advice)
    where: str | None = None
    # what the printed figure is (advice/ranked.py): a measured point, a measured range (hi/lo <= 1.44) or a bound
    # ("up to" the range's high end); None: no figure (or a report written before the kinds)
    prediction_kind: PredictionKind | None = None
    # a bound on what the point may leave out (a saving bounded from this run's timings, not measured): the point
    # stays the prediction, "up to X" said beside it; None when the point stands alone
    speedup_ceiling: float | None = None
    # the stable id of the rule's lever this advice words (``loader:<advice>``, ``fit:<where>:<setting>``): how the
    # ranking's candidate is joined to it inside the pipeline; not written to the JSON (None once read back)
    lever: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "title": self.title,
            "detail": self.detail,
            "settings": self.settings,
            "snippet": self.snippet,
            "expected_speedup": _r(self.expected_speedup, 3),
            "evidence": self.evidence,
            "measured_speedup": _r(self.measured_speedup, 3),
            "method": None if self.method is None else self.method.value,
            "basis": self.basis,
            "saved_ms_per_step": _r(self.saved_ms_per_step, 4),
            "saved_s": _r(self.saved_s, 3),
            "expected_speedup_range": None
            if self.expected_speedup_range is None
            else [round(float(x), 3) for x in self.expected_speedup_range],
            "uncertainty": self.uncertainty,
            "where": self.where,
            "prediction_kind": None if self.prediction_kind is None else self.prediction_kind.value,
            "speedup_ceiling": _r(self.speedup_ceiling, 3),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Recommendation:
        return cls(
            d["kind"],
            d["title"],
            d["detail"],
            dict(d.get("settings") or {}),
            d.get("snippet", ""),
            _f(d.get("expected_speedup")),
            dict(d.get("evidence") or {}),
            _f(d.get("measured_speedup")),
            Provenance(d["method"]) if d.get("method") else None,
            str(d.get("basis") or ""),
            _f(d.get("saved_ms_per_step")),
            _f(d.get("saved_s")),
            _range(d.get("expected_speedup_range")),
            str(d.get("uncertainty") or ""),
            d.get("where"),
            PredictionKind(d["prediction_kind"]) if d.get("prediction_kind") else None,
            _f(d.get("speedup_ceiling")),
        )

    @property
    def figure(self) -> float | None:
        """The number printed next to the advice: the point for a prediction, the high end for a bound."""
        if self.prediction_kind == PredictionKind.BOUND and self.expected_speedup_range is not None:
            return self.expected_speedup_range[1]
        return self.expected_speedup

    @property
    def speedup_text(self) -> str:
        """The figure with its kind in a word: ``"2.64x (measured)"``, ``"1.80x (measured, 1.62-1.95x)"``,
        ``"up to 5.37x (not measured)"``; empty when there is none. Why a range or a bound: :attr:`speedup_reason`."""
        kind, point = self.prediction_kind, self.expected_speedup
        if kind is None:
            return self._legacy_speedup_text()
        if kind == PredictionKind.BOUND:
            top = self.figure
            return "" if top is None else f"up to {top:.2f}x (not measured)"
        if point is None:
            return ""
        if kind == PredictionKind.MEASURED_RANGE and self.expected_speedup_range is not None:
            lo, hi = self.expected_speedup_range
            return f"{point:.2f}x (measured, {lo:.2f}-{hi:.2f}x)"
        if self.speedup_ceiling is not None and self.speedup_ceiling > point:
            return f"{point:.2f}x (measured, up to {self.speedup_ceiling:.2f}x)"
        return f"{point:.2f}x (measured)"

    @property
    def speedup_reason(self) -> str:
        """How the figure was obtained and, for a range or a bound, why it is one (the HTML, ``verbose=True``)."""
        parts = []
        ranged = (
            self.prediction_kind == PredictionKind.BOUND
            or self.expected_speedup_range is not None
            or self.speedup_ceiling is not None
        )
        if ranged and self.uncertainty:
            parts.append(self.uncertainty)
        if self.basis and self.basis not in parts:
            parts.append(f"{self.method}: {self.basis}" if self.method else self.basis)
        if self.measured_speedup is not None:
            parts.append(f"the trial measured {self.measured_speedup:.2f}x on the training step")
        return "; ".join(parts)

    def _legacy_speedup_text(self) -> str:
        """A report written before the prediction kinds (read back by ``compare``/``analyze``)."""
        if self.measured_speedup is not None:
            text = f"measured {self.measured_speedup:.2f}x"
            if self.expected_speedup is not None:
                text += f", {self.expected_speedup:.2f}x on the whole step"
            return text
        if self.expected_speedup_range is not None:
            lo, hi = self.expected_speedup_range
            return f"expected {lo:.2f}x to {hi:.2f}x"
        if self.expected_speedup is not None:
            return f"expected {self.expected_speedup:.2f}x"
        return ""


def _r(x: float | None, digits: int) -> float | None:
    return None if x is None else round(float(x), digits)


def _f(x: Any) -> float | None:
    return None if x is None else float(x)


def _range(x: Any) -> tuple[float, float] | None:
    if isinstance(x, (list, tuple)) and len(x) == 2:
        return float(x[0]), float(x[1])
    return None


@dataclass
class RankSummary:
    rank: int
    primary: Category
    breakdown: dict[str, float]
    step_time_ms: StepTime | None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rank": self.rank,
            "primary": self.primary.value,
            "breakdown": _round_shares(self.breakdown),
            "step_time_ms": self.step_time_ms.to_dict() if self.step_time_ms else None,
        }
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankSummary:
        st = d.get("step_time_ms")
        extra = {k: v for k, v in d.items() if k not in {"rank", "primary", "breakdown", "step_time_ms"}}
        return cls(
            int(d["rank"]),
            Category(d["primary"]),
            dict(d.get("breakdown") or {}),
            StepTime.from_dict(st) if st else None,
            extra,
        )


@dataclass
class Report:
    primary: Category
    confidence: float
    steps_observed: int
    steps_profiled: int
    step_time_ms: StepTime | None
    breakdown: dict[str, float]
    findings: list[Finding] = field(default_factory=list)
    recommendations: list[Recommendation] = field(default_factory=list)
    ranks: list[RankSummary] = field(default_factory=list)
    stragglers: list[int] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    trace_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # caveats (short window, fallbacks, missing ranks)
    metrics: dict[str, Any] = field(default_factory=dict)  # the raw evidence the verdict used
    autotune: AutotuneRecord | None = None  # BottleneckCallback(autotune=True) only (autotune_record.py)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "schema_version": SCHEMA_VERSION,
            "primary": self.primary.value,
            "confidence": round(self.confidence, 3),
            "steps_observed": self.steps_observed,
            "steps_profiled": self.steps_profiled,
            "step_time_ms": self.step_time_ms.to_dict() if self.step_time_ms else None,
            "breakdown": _round_shares(self.breakdown),
            "findings": [f.to_dict() for f in self.findings],
            "recommendations": [r.to_dict() for r in self.recommendations],
            "ranks": [r.to_dict() for r in self.ranks],
            "stragglers": list(self.stragglers),
            "environment": self.environment,
            "trace_files": list(self.trace_files),
            "notes": list(self.notes),
            "metrics": self.metrics,
        }
        if self.autotune is not None:  # the key only when autotune was on: other reports stay as they were
            out["autotune"] = self.autotune.to_dict()
        return out

    def to_json(self, indent: int | None = 2) -> str:
        """Strict JSON (RFC 8259): a non-finite number (NaN, Infinity) becomes ``null``."""
        return json.dumps(_finite(self.to_dict()), indent=indent, default=str, allow_nan=False)

    def write(self, path: str | Path) -> Path:
        """Write the report atomically: a new file created exclusively beside ``path``, then renamed.

        Nothing planted at a predictable temporary name (a symlink at ``<path>.tmp``) is followed, and
        on any failure (a full disk, say) the temporary file is removed: ``path`` holds either the old
        report or the whole new one.
        """
        return write_atomically(path, (self.to_json() + "\n").encode("utf-8"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Report:
        st = d.get("step_time_ms")
        return cls(
            primary=Category(d["primary"]),
            confidence=float(d["confidence"]),
            steps_observed=int(d["steps_observed"]),
            steps_profiled=int(d["steps_profiled"]),
            step_time_ms=StepTime.from_dict(st) if st else None,
            breakdown=dict(d.get("breakdown") or {}),
            findings=[Finding.from_dict(f) for f in d.get("findings", [])],
            recommendations=[Recommendation.from_dict(r) for r in d.get("recommendations", [])],
            ranks=[RankSummary.from_dict(r) for r in d.get("ranks", [])],
            stragglers=[int(r) for r in d.get("stragglers", [])],
            environment=dict(d.get("environment") or {}),
            trace_files=list(d.get("trace_files", [])),
            notes=list(d.get("notes", [])),
            metrics=dict(d.get("metrics") or {}),
            autotune=AutotuneRecord.from_dict(d["autotune"]) if isinstance(d.get("autotune"), dict) else None,
        )

    @classmethod
    def read(cls, path: str | Path) -> Report:
        """A saved report, checked field by field (:func:`read_report`)."""
        return read_report(path)

    def __str__(self) -> str:
        from lightning_bottleneck.output.text import render_text

        return render_text(self)


def _finite(value: Any) -> Any:
    """``value`` with every non-finite number (also numpy's) replaced by None, containers walked."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        x = float(value)
        return x if math.isfinite(x) else None
    return value


def _umask() -> int:
    """The process umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _round_shares(shares: dict[str, float]) -> dict[str, float]:
    return {k: round(float(v), 4) for k, v in shares.items()}


def ledger_cause(report: Report, ledger: Any) -> str | None:
    """The fit part a ``rest_of_fit`` verdict blames: the rest-of-fit finding's ``part`` (its evidence), else
    the ledger's largest part outside the training step; None for any other verdict."""
    if report.primary != Category.REST_OF_FIT:
        return None
    for f in report.findings:
        if f.kind == FindingKind.REST_OF_FIT and f.evidence.get("part"):
            return str(f.evidence["part"])
    part = ledger.largest_outside_part() if ledger is not None else None
    return str(part) if part is not None else None


def read_report(path: str | Path) -> Report:
    """A saved ``bottleneck_report.json``, checked field by field; :class:`TraceError` if it is not one."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            raw = fh.read(MAX_REPORT_BYTES + 1)
    except OSError as exc:
        raise TraceError(p, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_REPORT_BYTES:
        raise TraceError(p, f"not a lightning-bottleneck report: over {MAX_REPORT_BYTES >> 20} MiB")
    try:
        data = json.loads(raw.decode("utf-8-sig"), parse_constant=_reject_constant)
    except RecursionError:
        raise TraceError(p, "not a lightning-bottleneck report: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise TraceError(p, f"not a lightning-bottleneck report: {exc}") from None
    problem = _report_problem(data)
    if problem:
        raise TraceError(p, f"not a lightning-bottleneck report: {problem}")
    try:
        return Report.from_dict(data)
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
        raise TraceError(p, f"not a lightning-bottleneck report ({exc.__class__.__name__}: {exc})") from None


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a report holds")


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _report_problem(data: Any) -> str | None:
    """What makes ``data`` no report the comparison can use, or None."""
    if not isinstance(data, dict):
        return f"the top level is a {type(data).__name__}, not an object"
    if "schema_version" not in data:
        return "no schema_version"
    if data.get("primary") not in {c.value for c in Category}:
        return f"primary {str(data.get('primary'))[:40]!r} is not a verdict"
    for key in ("confidence", "steps_observed", "steps_profiled"):
        if not _number(data.get(key)):
            return f"{key} is not a finite number"
    st = data.get("step_time_ms")
    if st is not None:
        if not isinstance(st, dict) or not all(_number(st.get(k)) and st[k] >= 0 for k in ("median", "p90")):
            return "step_time_ms needs finite, non-negative median and p90"
        samples = st.get("samples", [])
        if not isinstance(samples, list) or not all(_number(x) and x >= 0 for x in samples):
            return "step_time_ms.samples must be a list of finite, non-negative numbers"
    breakdown = data.get("breakdown", {})
    if not isinstance(breakdown, dict) or not all(
        isinstance(k, str) and _number(v) for k, v in breakdown.items()
    ):
        return "breakdown must map names to finite numbers"
    for key in ("findings", "recommendations", "ranks", "stragglers", "trace_files", "notes"):
        if not isinstance(data.get(key, []), list):
            return f"{key} is not a list"
    for key in ("environment", "metrics"):
        if not isinstance(data.get(key, {}), dict):
            return f"{key} is not an object"
    return None
