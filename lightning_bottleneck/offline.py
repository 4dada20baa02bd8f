"""The offline library entry point: trace files or run folders in, :class:`Report` out.

``analyze_paths`` is what ``lightning-bottleneck analyze`` does without printing; ``load_run`` what
``compare`` does with each side (a saved report, a trace, or a run folder). Torch-free, like the CLI.

A run folder may hold several runs (``runs/`` with many ``version_N``): traces are grouped by the
directory that holds them (the callback and torch-tb-profiler write one run's ranks side by side), the
newest group is used, and a note says which.

Example::

    from lightning_bottleneck.offline import analyze_paths
    report = analyze_paths(["lightning_logs/version_0"])
    print(report.primary, report.step_time_ms)
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_bottleneck.analysis.ledger import FitLedger
from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.analysis.trace_file import summarize_file
from lightning_bottleneck.errors import TraceError
from lightning_bottleneck.report import Report, read_report
from lightning_bottleneck.trace.reader import find_trace_files, path_kind

__all__ = ["REPORT_FILENAME", "analyze_paths", "load_run", "read_report", "summarize_paths", "trace_files"]

#: The callback's report file name (kept in step with ``callback.REPORT_FILENAME``; not imported: torch).
REPORT_FILENAME = "bottleneck_report.json"


def trace_files(paths: Sequence[str | Path], notes: list[str]) -> list[Path]:
    """The trace files to analyse for ``paths``; for a folder holding several runs, the newest run's."""
    out: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        files = find_trace_files([path], notes)
        if len(files) > 1 and path_kind(path) == "dir":
            files = _newest_run(path, files, notes)
        for f in files:
            out.setdefault(f, None)
    return list(out)


def _newest_run(root: Path, files: list[Path], notes: list[str]) -> list[Path]:
    runs: dict[Path, list[Path]] = {}
    for f in files:
        runs.setdefault(f.parent, []).append(f)
    if len(runs) == 1:
        return files

    def newest(run: Path) -> float:
        return max(_mtime(f) for f in runs[run])

    order = sorted(runs, key=newest, reverse=True)
    others = [_display(r, root) for r in order[1:]]
    shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    notes.append(
        f"{len(runs)} runs under {root}: analysed {_display(order[0], root)} (the newest); "
        f"not analysed: {shown}. Name a run's folder to analyse another."
    )
    return runs[order[0]]


def _mtime(path: Path) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _display(run: Path, root: Path) -> str:
    try:
        rel = run.relative_to(root.resolve())
    except ValueError:
        return str(run)
    return str(rel) if str(rel) != "." else str(root)


def summarize_paths(
    paths: Sequence[str | Path], notes: list[str] | None = None
) -> tuple[list[TraceSummary], list[str], list[str]]:
    """Read and summarise every trace under ``paths``; one summary per file (rank).

    Each trace's columns are dropped as soon as it is summarised, so peak memory is one trace at a time.
    Returns the summaries (sorted by rank), the files read and the notes for the report.
    """
    notes = notes if notes is not None else []
    files = trace_files(paths, notes)
    summaries: list[TraceSummary] = []
    for path in files:
        summary = summarize_file(path)
        _check_timing(summary, path)
        summaries.append(summary)
    unknown = [s for s in summaries if s.rank is None]
    if unknown:
        taken = {s.rank for s in summaries if s.rank is not None}
        free = (r for r in range(len(summaries) + len(taken)) if r not in taken)
        for s in unknown:
            s.rank = next(free)
        notes.append(
            "Rank not recorded in "
            + ", ".join(Path(s.source).name for s in unknown)
            + " (no distributedInfo, no rank<N> in the file name): numbered in file order."
        )
    seen: dict[int | None, str] = {}
    for s in summaries:
        if s.rank in seen:
            notes.append(f"Rank {s.rank} appears twice ({Path(seen[s.rank]).name}, {Path(s.source).name}).")
        seen.setdefault(s.rank, s.source)
    summaries.sort(key=lambda s: s.rank if s.rank is not None else -1)
    return summaries, [str(p) for p in files], notes


def _check_timing(summary: TraceSummary, path: Path) -> None:
    """Steps whose timing cannot be real make an error, never a confident verdict."""
    times = summary.step_times_ms
    if not times:
        return
    if not all(math.isfinite(t) for t in times) or max(times) <= 0:
        raise TraceError(
            path,
            f"invalid timing: the {len(times)} analysed step(s) last {_few_ms(times)}: no timing to analyse",
        )


def _few_ms(times: list[float]) -> str:
    return ", ".join(f"{t:g} ms" for t in times[:3]) + (" ..." if len(times) > 3 else "")


def analyze_paths(paths: Sequence[str | Path], rank: int | None = None) -> Report:
    """The ``analyze`` command without printing: traces (files or run folders) in, :class:`Report` out."""
    from lightning_bottleneck.diagnose import diagnose
    from lightning_bottleneck.evidence import Evidence

    summaries, files, notes = summarize_paths(paths)
    ranks = [s.rank for s in summaries]
    if rank is None:
        rank = 0 if 0 in ranks else int(ranks[0] or 0)
    elif rank not in ranks:
        found = ", ".join(str(r) for r in ranks[:10]) + (" ..." if len(ranks) > 10 else "")
        raise TraceError(
            None, f"--rank {rank}: no trace of rank {rank} among the inputs (ranks found: {found})"
        )
    lead = next(s for s in summaries if s.rank == rank)
    for s in summaries:
        for note in s.notes:
            notes.append(f"rank {s.rank}: {note}")
    ledger, ledger_ranks = run_ledger(paths, files, notes)
    evidence = Evidence(
        summaries=summaries,
        trace_files=files,
        notes=notes,
        rank=rank,
        environment=_environment(lead, len(summaries)),
        ledger=ledger,
        ledger_ranks=ledger_ranks,
    )
    return diagnose(evidence)


def run_ledger(
    paths: Sequence[str | Path], files: Sequence[str | Path], notes: list[str]
) -> tuple[FitLedger | None, list[FitLedger]]:
    """The fit ledger of the run whose traces are analysed, from the callback's report beside them (the
    traces sit in ``<log_dir>/bottleneck/``, the report in ``<log_dir>``); only for run folders: a bare trace
    holds only the profiled window. Returns the (merged) ledger and the per-rank ones."""
    if not any(path_kind(Path(p)) == "dir" for p in paths):
        return None, []
    seen: set[Path] = set()
    for f in files:
        for folder in (Path(f).parent, Path(f).parent.parent):
            candidate = folder / REPORT_FILENAME
            if candidate in seen or not candidate.is_file():
                continue
            seen.add(candidate)
            try:
                data = read_report(candidate).metrics.get("ledger")
                if not isinstance(data, dict):
                    continue
                ranks = [FitLedger.from_dict(d) for d in data.get("ranks") or [] if isinstance(d, dict)]
                ledger = FitLedger.from_dict(data)
            except (TraceError, ValueError, TypeError, KeyError, AttributeError) as exc:
                notes.append(f"the fit ledger in {candidate} could not be read: {exc}")
                continue
            notes.append(f"The fit ledger comes from {candidate} (the callback's report for this run).")
            return ledger, ranks
    return None, []


def _environment(summary: TraceSummary, n_files: int) -> dict[str, Any]:
    env: dict[str, Any] = {"source": "trace", "device": summary.device, "ranks_in_input": n_files}
    if summary.device_name:
        env["device_name"] = summary.device_name
    if summary.world_size is not None:
        env["world_size"] = summary.world_size
    return env


# ---- compare ---------------------------------------------------------------------------------------


def load_run(path: str | Path) -> tuple[Report, str]:
    """One side of ``compare``: a saved report, trace file(s), or a run folder (its newest report, else
    its traces). Returns the report and a line saying what was used."""
    p = Path(path)
    if path_kind(p) == "dir":
        reports = _reports_in(p)
        if reports:
            reports.sort(key=_mtime, reverse=True)
            extra = f" (the newest of {len(reports)} reports)" if len(reports) > 1 else ""
            return read_report(reports[0]), f"report {reports[0]}{extra}"
        notes: list[str] = []
        files = trace_files([p], notes)
        report = analyze_paths(files)
        return report, f"{len(files)} trace file(s) under {p}" + (f"; {' '.join(notes)}" if notes else "")
    if path_kind(p) == "file" and _looks_like_report(p):
        return read_report(p), f"report {p}"
    return analyze_paths([p]), f"trace {p}"


def _reports_in(root: Path) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        found.extend(Path(dirpath) / n for n in filenames if n == REPORT_FILENAME)
    return found


def _looks_like_report(path: Path) -> bool:
    if not path.name.endswith(".json"):
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except (OSError, ValueError):
        return False  # the trace reader says why, in one line
    return b'"schema_version"' in head and b'"traceEvents"' not in head
