"""Publishing a finished report on global rank zero: baseline comparison, JSON file, TensorBoard text, log.

Called by the callback once the report exists; every function here is safe to call again later (a
mid-run verdict and the end-of-fit verdict go through the same path).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_bottleneck.output.text import render_markdown, render_text, render_unchanged
from lightning_bottleneck.report import Report, read_report
from lightning_bottleneck.vocabulary import NAMESPACE

__all__ = [
    "TEXT_TAG",
    "choose_report_path",
    "compare_with_baseline",
    "exit_note",
    "has_tensorboard_logger",
    "publish",
    "write_tensorboard_text",
    "write_text_beside_traces",
]

#: The TensorBoard Text-tab tag of the report.
TEXT_TAG = NAMESPACE + "report"


def publish(
    trainer: Any,
    report: Report,
    *,
    report_file: Path | None,
    trace_dir: Path | None,
    baseline: str | None = None,
    verbose: bool | None = None,
    explicit_path: bool = False,
    owner: object = None,
    unchanged: bool = False,
    text_in_child: bool = False,
) -> Path | None:
    """Compare with ``baseline`` (if any), print the summary, write the JSON report and the TensorBoard text.

    Each step stands alone: a bad baseline is a note, a report that cannot be written (read-only, full
    disk) is one warning after the summary was printed, and the TensorBoard text is still written. The
    report never replaces one at the same path that has more evidence (see :func:`choose_report_path`).
    Returns where the report went, or None.

    Args:
        explicit_path: ``report_file`` is the user's ``report_path`` (not the default in the log dir).
        owner: who publishes (the callback): it may replace the reports it wrote itself.
        verbose: None prints the short answer, True the full detail, False nothing.
        unchanged: the end-of-fit verdict and first advice are those printed mid-run: a short summary is printed.
        text_in_child: without a TensorBoard logger, the Text-tab event is left to the child process (the
            caller sends it with the picture: :func:`~lightning_bottleneck.live.verdict_outputs.publish_picture`).
    """
    if baseline is not None:
        compare_with_baseline(report, baseline)
    target = choose_report_path(report, report_file, explicit_path, owner) if report_file else None
    if verbose is not False:  # first: whatever fails below, the user has the verdict
        if unchanged:
            text = render_unchanged(report, report_path=target)
        else:
            text = render_text(report, full=bool(verbose), report_path=target)
        rank_zero_info(text)
    written: Path | None = None
    if target is not None:
        try:
            written = report.write(target)
            _remember(written, owner)
        except Exception as err:
            rank_zero_warn(f"BottleneckCallback could not write its report to {target} ({_reason(err)}).")
    try:
        write_tensorboard_text(trainer, report, trace_dir, leave_to_child=text_in_child)
    except Exception as err:
        rank_zero_warn(f"BottleneckCallback could not write its report to TensorBoard ({_reason(err)}).")
    return written


def choose_report_path(report: Report, default: Path, explicit_path: bool, owner: object = None) -> Path:
    """Where ``report`` goes: ``default``, or beside it (``bottleneck_report.1.json``, ...) when writing
    there would replace a report with more evidence by one without (a second ``fit`` that trained 0
    steps) or, at the default path, silently replace an earlier run's report (``logger=False`` runs share
    ``default_root_dir``). ``owner`` may always replace its own reports that have no more evidence (a
    second fit, a mid-run verdict followed by the end-of-fit one). A report written beside says so in its
    notes, and so in the summary."""
    try:
        first_why = _why_not(default, report, owner, explicit_path)
        if first_why is None:
            return default
        for n in range(1, _MAX_BESIDE):
            candidate = default.with_name(f"{default.stem}.{n}{default.suffix}")
            if _why_not(candidate, report, owner, False) is None:
                report.notes.append(f"{default.name} {first_why}, kept; this report is {candidate}.")
                return candidate
    except Exception:
        pass
    return default


#: How many ``name.N.json`` are tried beside a default path that is taken.
_MAX_BESIDE = 10_000


def _why_not(path: Path, report: Report, owner: object, explicit_path: bool) -> str | None:
    """Why ``report`` may not replace what ``path`` holds, or None when it may."""
    if not path.exists():
        return None
    owned = _WRITTEN.get(str(path)) == (id(owner), _stamp(path))
    if _evidence(report) > 0 and (explicit_path or owned):
        return None  # replacing is allowed whatever the file holds: no need to read it (~10-30 ms)
    earlier = _read_quietly(path)
    if earlier is None:
        return None  # not a report that can be read (a torn write, say): nothing to keep
    if _evidence(earlier) > 0 and _evidence(report) == 0:
        return "holds a report with more evidence (this one timed and profiled no step)"
    if not explicit_path and not owned:
        return "holds an earlier run's report"
    return None


def _evidence(report: Report) -> int:
    return max(report.steps_observed, 0) + max(report.steps_profiled, 0)


def _read_quietly(path: Path) -> Report | None:
    try:
        return read_report(path)
    except Exception:
        return None


#: Reports this process wrote: path -> (id of the publisher, file stamp when written).
_WRITTEN: dict[str, tuple[int, tuple[int, int, int]]] = {}


def _stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _remember(path: Path, owner: object) -> None:
    with contextlib.suppress(OSError):
        _WRITTEN[str(path)] = (id(owner), _stamp(path))


def _reason(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def compare_with_baseline(report: Report, baseline: str) -> None:
    """Put the before/after comparison with a previous run's report in ``report`` (metrics and notes).

    Never raises: a baseline that is missing, unreadable or not a valid report (a list, a string
    median, NaN) becomes a note saying why, and the report goes on without a comparison.
    """
    from lightning_bottleneck.output.compare import compare_runs

    try:
        before = read_report(str(baseline))
        comparison = compare_runs(before, report)
        verdict = comparison["verdict"]
    except Exception as err:
        reason = getattr(err, "reason", None) or str(err) or type(err).__name__
        report.notes.append(f"baseline {baseline!s} could not be read ({reason}); no comparison.")
        return
    report.metrics["comparison"] = comparison
    report.notes.insert(0, f"Compared with {baseline!s}: {verdict}")


def exit_note(exception: BaseException) -> str:
    """The report's note for an exception that ended fit: ``fit interrupted (KeyboardInterrupt)``,
    ``fit ended by ValueError: user bug`` (the message is omitted when empty, cut at 200 characters)."""
    name = type(exception).__name__
    if isinstance(exception, KeyboardInterrupt):
        return f"fit interrupted ({name})"
    message = " ".join(str(exception).split())[:200]
    return f"fit ended by {name}: {message}" if message else f"fit ended by {name}"


def has_tensorboard_logger(trainer: Any) -> bool:
    return any(isinstance(logger, TensorBoardLogger) for logger in trainer.loggers)


def write_tensorboard_text(
    trainer: Any, report: Report, trace_dir: Path | None, leave_to_child: bool = False
) -> None:
    """The report in TensorBoard's Text tab: the run's TensorBoard logger, else a writer next to the traces
    (``leave_to_child``: that one is the child process's to write)."""
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_text(TEXT_TAG, render_markdown(report), global_step=trainer.global_step)
            logger.experiment.flush()
            return
    # No TensorBoard logger: still put the verdict next to the traces for TensorBoard to show.
    if trace_dir is None or leave_to_child:
        return
    write_text_beside_traces(trace_dir, render_markdown(report), trainer.global_step)


def write_text_beside_traces(trace_dir: Path, markdown: str, step: int) -> None:
    """The Text-tab event in ``trace_dir``, with torch's writer, in this process."""
    from torch.utils.tensorboard import SummaryWriter

    trace_dir.mkdir(parents=True, exist_ok=True)
    writer = SummaryWriter(log_dir=str(trace_dir))
    try:
        writer.add_text(TEXT_TAG, markdown, global_step=step)
    finally:
        writer.close()
