"""``lightning-bottleneck`` command line: analyse traces offline, compare two runs, run a script profiled.

``analyze PATH... [--json] [--rank N]`` reads Kineto / Chrome-trace JSON from any PyTorch program (files,
or run folders searched recursively, one rank per file) and prints the same report the live callback
writes. ``compare BEFORE AFTER [--json] [--fail-if-slower PCT]`` puts two runs (saved reports, traces or
run folders) side by side and says whether the change helped beyond run-to-run noise. ``run SCRIPT
[ARGS...]`` runs an unmodified Lightning script with the callback attached through the
``LIGHTNING_BOTTLENECK`` entry point.

Every bad input exits 2 with one line on stderr; ``--json`` output is always strict JSON.

This module must stay importable without torch or lightning (start-up speed; machines without a GPU
stack): it only uses the offline library (trace reader, numpy analysis core, pure-Python rules); ``run``
starts the script in a child process.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_bottleneck.errors import TraceError, one_line
from lightning_bottleneck.offline import analyze_paths, load_run
from lightning_bottleneck.output.compare import compare_runs, render_comparison, slower_beyond
from lightning_bottleneck.trace.reader import path_kind

PROG = "lightning-bottleneck"
EXIT_OK = 0
#: ``compare --fail-if-slower``: AFTER is slower than BEFORE beyond noise and the given percentage.
EXIT_SLOWER = 1
EXIT_BAD_INPUT = 2
#: A bug of ours (not the input's): one line, and ``LIGHTNING_BOTTLENECK_DEBUG=1`` shows the traceback.
EXIT_INTERNAL = 3
DEBUG_ENV = "LIGHTNING_BOTTLENECK_DEBUG"

EPILOG = """\
examples:
  lightning-bottleneck analyze lightning_logs/version_0/    # a run folder: its traces are found
  lightning-bottleneck analyze runs/ --json > report.json   # the newest run under runs/
  lightning-bottleneck analyze rank0.json.gz rank1.json.gz --rank 1
  lightning-bottleneck compare before/ after/bottleneck_report.json --fail-if-slower 5
  lightning-bottleneck run train.py --max_epochs 1          # profile an unmodified script
  lightning-bottleneck run --wait 2 --active 10 --report-path r.json train.py

exit status: 0 done; 1 compare --fail-if-slower tripped; 2 bad input (one line on stderr);
3 an internal error (one line; LIGHTNING_BOTTLENECK_DEBUG=1 shows the traceback).
"""

#: ``run``'s flags: (flag, callback option, type, help). Kept here (not read from the callback) so the
#: command line never imports torch; ``autoload`` checks the names against the callback's signature.
RUN_OPTIONS: tuple[tuple[str, str, type, str], ...] = (
    ("--wait", "wait", int, "training steps before the profiler warms up (default 5)"),
    ("--warmup", "warmup", int, "steps the profiler runs but discards (default 5)"),
    ("--active", "active", int, "steps recorded and analysed (default 5)"),
    ("--repeat", "repeat", int, "profiling cycles (default 1)"),
    ("--skip-first", "skip_first", int, "steps ignored before the first cycle (default 0)"),
    ("--report-path", "report_path", str, "the JSON report (default <log_dir>/bottleneck_report.json)"),
    ("--output-dir", "output_dir", str, "where traces go (default <log_dir>/bottleneck)"),
    ("--baseline", "baseline", str, "a previous run's report: say whether the change helped"),
    ("--gather-timeout", "gather_timeout", float, "seconds rank zero waits for other ranks (default 120)"),
)
RUN_SWITCHES: tuple[tuple[str, str, bool, str], ...] = (
    ("--record-shapes", "record_shapes", True, "record op input shapes (costs more in the window)"),
    ("--profile-memory", "profile_memory", True, "record allocations (costs more in the window)"),
    ("--with-stack", "with_stack", True, "record Python stacks (the most expensive option)"),
    ("--no-track-syncs", "track_syncs", False, "do not time host-device synchronisations"),
    ("--autotune", "autotune", True, "apply the measured DataLoader setting mid-fit; kept if faster"),
)


class _Parser(argparse.ArgumentParser):
    """argparse that exits 2 with a one-line message (its default prints the usage too)."""

    def error(self, message: str) -> Any:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {one_line(message)}\n")


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("lightning-bottleneck")
    except Exception:
        from lightning_bottleneck import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Tell why PyTorch (Lightning) training is slow, from its traces.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    analyze = sub.add_parser(
        "analyze",
        help="analyse Kineto/Chrome-trace JSON files or run folders",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    analyze.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="trace file(s) (.json, .json.gz) or run folders, searched recursively; files there that are "
        "not traces are skipped with a note, and of several runs the newest is used",
    )
    analyze.add_argument(
        "--json", action="store_true", help="print the report as JSON (the callback's schema)"
    )
    analyze.add_argument("--markdown", action="store_true", help="print the report as Markdown")
    analyze.add_argument(
        "--verbose",
        action="store_true",
        help="print every evidence line, note and how each figure was obtained (default: at most 12 lines)",
    )
    analyze.add_argument(
        "--rank", type=int, default=None, help="rank whose verdict leads the report (default 0)"
    )
    compare = sub.add_parser(
        "compare",
        help="compare two runs: did the change help, beyond noise?",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare.add_argument(
        "before",
        metavar="BEFORE",
        help="the run before the change: a bottleneck_report.json, trace file(s) or a run folder",
    )
    compare.add_argument("after", metavar="AFTER", help="the run after the change (same kinds as BEFORE)")
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON")
    compare.add_argument(
        "--fail-if-slower",
        type=float,
        default=None,
        metavar="PCT",
        help=f"exit {EXIT_SLOWER} when AFTER is slower than BEFORE by more than PCT percent beyond "
        "run-to-run noise (the whole confidence interval of the step-time ratio above 1 + PCT/100): a CI gate",
    )
    run = sub.add_parser(
        "run",
        help="run an unmodified Lightning script with the callback attached and print the verdict",
        description="Run SCRIPT with BottleneckCallback attached to every Trainer (through the "
        "LIGHTNING_BOTTLENECK entry point); the verdict is printed when fit ends. Options go before SCRIPT; "
        "everything after it goes to the script.",
        epilog="example: lightning-bottleneck run --wait 2 --active 10 train.py --max_epochs 1",
    )
    for flag, _, kind, text in RUN_OPTIONS:
        run.add_argument(flag, type=kind, default=None, help=text)
    for flag, _, _, text in RUN_SWITCHES:
        run.add_argument(flag, action="store_true", help=text)
    run.add_argument("script", metavar="SCRIPT", help="the Python training script")
    run.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS", help="the script's arguments")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return run_script(args)
        code, out = _execute(args)
    except TraceError as exc:
        return _error(str(exc), EXIT_BAD_INPUT)
    except RecursionError:
        return _error("input nested too deeply", EXIT_BAD_INPUT)
    except MemoryError:
        return _error("input too large for the memory available", EXIT_BAD_INPUT)
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        return _error(
            f"internal error ({type(exc).__name__}: {exc}); please report it with the input "
            f"(set {DEBUG_ENV}=1 for the traceback)",
            EXIT_INTERNAL,
        )
    _print(out)
    return code


def _execute(args: argparse.Namespace) -> tuple[int, str]:
    if args.command == "analyze":
        report = analyze_paths(args.paths, rank=args.rank)
        if args.json:
            return EXIT_OK, strict_json(report.to_dict())
        if args.markdown:
            from lightning_bottleneck.output.text import render_markdown

            return EXIT_OK, render_markdown(report)
        from lightning_bottleneck.output.text import render_text

        return EXIT_OK, render_text(report, full=args.verbose)
    before, before_source = load_run(args.before)
    after, after_source = load_run(args.after)
    result = compare_runs(before, after)
    result["before_source"], result["after_source"] = before_source, after_source
    out = strict_json(result) if args.json else render_comparison(result)
    code = EXIT_OK
    if args.fail_if_slower is not None and slower_beyond(result, args.fail_if_slower):
        code = EXIT_SLOWER
        _error_line(f"AFTER is slower than BEFORE beyond noise and {args.fail_if_slower:g}%: failing")
    return code, out


def strict_json(obj: Any) -> str:
    """JSON that any parser accepts: NaN and infinities (which JSON has not) become null."""
    return json.dumps(_finite(obj), indent=2, allow_nan=False, default=str)


def _finite(obj: Any, depth: int = 0) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if depth > 200:
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): _finite(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v, depth + 1) for v in obj]
    return obj


def _error(message: str, code: int) -> int:
    _error_line(f"error: {message}")
    return code


def _error_line(message: str) -> None:
    print(f"{PROG}: {one_line(message)}", file=sys.stderr)


def _print(text: str) -> None:
    """Print; a reader that went away (``| head``) is not an error."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python's recipe: point stdout at devnull so the interpreter's final flush does not fail again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass


# ---- run ---------------------------------------------------------------------------------------------


def run_script(args: argparse.Namespace) -> int:
    """``run SCRIPT [ARGS...]``: the script in a child Python with ``LIGHTNING_BOTTLENECK`` set."""
    script = Path(args.script)
    if path_kind(script) != "file":
        raise TraceError(script, "no such script (give the training script's path)")
    options: list[str] = []
    for flag, name, _, _ in RUN_OPTIONS:
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is None:
            continue
        text = str(value)
        if "," in text or "=" in text:
            raise TraceError(None, f"{flag} {text!r}: a value may not hold ',' or '='")
        options.append(f"{name}={text}")
    for flag, name, value, _ in RUN_SWITCHES:
        if getattr(args, flag[2:].replace("-", "_")):
            options.append(f"{name}={str(value).lower()}")
    env = dict(os.environ)
    env["LIGHTNING_BOTTLENECK"] = ",".join(options) if options else "1"
    command = [sys.executable, str(script), *args.script_args]
    try:
        code = subprocess.call(command, env=env)
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        raise TraceError(script, f"cannot run: {exc.strerror or exc}") from None
    if code != 0:
        _error_line(f"{script} exited with status {code}")
    if args.report_path and path_kind(Path(args.report_path)) == "file":
        _error_line(f"verdict: {_primary_of(Path(args.report_path))} (report: {args.report_path})")
    return code


def _primary_of(path: Path) -> str:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return str(data.get("primary", "unknown")) if isinstance(data, dict) else "unknown"
    except (OSError, ValueError, RecursionError):
        return "unreadable report"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
