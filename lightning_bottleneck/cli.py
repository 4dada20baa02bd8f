"""``lightning-bottleneck`` command line: analyse profiler traces offline, compare two runs.

``analyze PATH... [--json] [--rank N]`` reads Kineto / Chrome-trace JSON from any PyTorch program (files,
directories searched recursively, one rank per file) and prints the same report the live callback
writes. ``compare BEFORE AFTER [--json]`` puts two runs (trace paths or saved ``report.json`` files)
side by side. Bad input exits 2 with one line on stderr.

This module must stay importable without torch or lightning (start-up speed; machines without a GPU
stack): it only uses the trace reader, the numpy analysis core and the pure-Python rules.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_bottleneck.analysis.summary import TraceSummary
from lightning_bottleneck.analysis.trace_file import summarize_file
from lightning_bottleneck.compare import compare_runs, render_comparison
from lightning_bottleneck.report import Report
from lightning_bottleneck.trace.errors import TraceError
from lightning_bottleneck.trace.reader import find_trace_files

PROG = "lightning-bottleneck"
EXIT_OK = 0
EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with a one-line message (its default prints the usage too)."""

    def error(self, message: str) -> Any:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Tell why PyTorch (Lightning) training is slow, from its traces.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    analyze = sub.add_parser("analyze", help="analyse Kineto/Chrome-trace JSON files or directories")
    analyze.add_argument(
        "paths", nargs="+", metavar="PATH", help="trace file(s) or directories (.json, .json.gz)"
    )
    analyze.add_argument(
        "--json", action="store_true", help="print the report as JSON (the callback's schema)"
    )
    analyze.add_argument("--markdown", action="store_true", help="print the report as Markdown")
    analyze.add_argument(
        "--rank", type=int, default=None, help="rank whose verdict leads the report (default 0)"
    )
    compare = sub.add_parser("compare", help="compare two runs: traces or saved report.json files")
    compare.add_argument("before", metavar="BEFORE")
    compare.add_argument("after", metavar="AFTER")
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "analyze":
            report = analyze_paths(args.paths, rank=args.rank)
            if args.json:
                out = report.to_json()
            elif args.markdown:
                from lightning_bottleneck.render import render_markdown

                out = render_markdown(report)
            else:
                from lightning_bottleneck.render import render_text

                out = render_text(report)
        else:
            result = compare_runs(load_run(args.before), load_run(args.after))
            out = json.dumps(result, indent=2) if args.json else render_comparison(result)
    except TraceError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(out)
    return EXIT_OK


# ---- analyze -----------------------------------------------------------------------------------------


def summarize_paths(paths: Sequence[str | Path]) -> tuple[list[TraceSummary], list[str], list[str]]:
    """Read and summarise every trace under ``paths``; one summary per file (rank).

    Each trace's columns are dropped as soon as it is summarised, so peak memory is one trace at a time.
    """
    files = find_trace_files(paths)
    summaries: list[TraceSummary] = []
    notes: list[str] = []
    for path in files:
        summaries.append(summarize_file(path))
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


def analyze_paths(paths: Sequence[str | Path], rank: int | None = None) -> Report:
    """The ``analyze`` command without printing: traces in, :class:`Report` out."""
    from lightning_bottleneck.diagnose import diagnose
    from lightning_bottleneck.evidence import Evidence

    summaries, files, notes = summarize_paths(paths)
    ranks = [s.rank for s in summaries]
    if rank is None:
        rank = 0 if 0 in ranks else int(ranks[0] or 0)
    elif rank not in ranks:
        found = ", ".join(str(r) for r in ranks)
        raise TraceError(rank, f"no trace for rank {rank} (ranks found: {found})")
    lead = next(s for s in summaries if s.rank == rank)
    for s in summaries:
        for note in s.notes:
            notes.append(f"rank {s.rank}: {note}")
    evidence = Evidence(
        summaries=summaries,
        trace_files=files,
        notes=notes,
        rank=rank,
        environment=_environment(lead, len(summaries)),
    )
    return diagnose(evidence)


def _environment(summary: TraceSummary, n_files: int) -> dict[str, Any]:
    env: dict[str, Any] = {"source": "trace", "device": summary.device, "ranks_in_input": n_files}
    if summary.device_name:
        env["device_name"] = summary.device_name
    if summary.world_size is not None:
        env["world_size"] = summary.world_size
    return env


# ---- compare ---------------------------------------------------------------------------------------


def load_run(path: str | Path) -> Report:
    """A saved ``report.json`` (``schema_version`` at the top), or trace file(s) analysed on the fly."""
    p = Path(path)
    if p.is_file() and p.name.endswith(".json") and _looks_like_report(p):
        try:
            return Report.read(p)
        except (ValueError, KeyError, TypeError) as exc:
            raise TraceError(
                p, f"not a lightning-bottleneck report ({exc.__class__.__name__}: {exc})"
            ) from None
    return analyze_paths([p])


def _looks_like_report(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(4096)
    return b'"schema_version"' in head and b'"traceEvents"' not in head


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
