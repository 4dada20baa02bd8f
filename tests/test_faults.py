"""Fault cases for the callback: each runs a real tiny fit with the fault and compares with the same run
without the callback (what the user's run and state look like) and checks that the tool's output (the
report, the terminal summary, the TensorBoard text) is not lost and that nothing half-written stays behind.

The cases come from issue 11's "Callback, 43 fault cases" (those that harmed the run or lost the output)
and issue 12's empty Ctrl-C note.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from lightning_bottleneck import BottleneckCallback
from lightning_bottleneck.categories import Category
from lightning_bottleneck.report import Report, StepTime

from conftest import quiet_trainer

CB = {"wait": 1, "warmup": 1, "active": 2, "verbose": False}
REPORT = "bottleneck_report.json"


def tiny() -> tuple[Any, DataLoader]:
    import scenarios

    torch.manual_seed(0)
    return scenarios.Regressor(), DataLoader(scenarios.in_memory(256, 32), batch_size=8)


@pytest.fixture(autouse=True)
def _info_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)


def fit(root: Path, callbacks: list, max_steps: int = 6, model: Any = None, **trainer_kwargs: Any) -> Any:
    default_model, loader = tiny()
    trainer = quiet_trainer(root, callbacks, max_steps=max_steps, limit_val_batches=0, **trainer_kwargs)
    trainer.fit(model if model is not None else default_model, loader)
    return trainer


def said(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> str:
    """What the user saw: stdout, stderr and Lightning's info log."""
    text = "".join(capfd.readouterr()) + caplog.text
    caplog.clear()
    return text


def test_setup_skips_the_object_scan_when_no_profiler_session_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 18: the scan for a waiting torch.profiler session costs ~50 ms per fit; torch's step tracker says
    whether any ``profile`` was constructed and not exited, and the callback's own window leaves no entry."""
    from lightning_bottleneck.live import profiler_window

    steps = torch.autograd.profiler.KinetoStepTracker._step_dict
    monkeypatch.delitem(
        steps, "ProfilerStep", raising=False
    )  # whatever an earlier test left (put back after)
    scans: list[int] = []
    real = profiler_window._profile_objects
    monkeypatch.setattr(profiler_window, "_profile_objects", lambda: scans.append(1) or real())
    for run in ("first", "second"):
        cb = BottleneckCallback(**CB)
        trainer = quiet_trainer(tmp_path / run, [cb], max_steps=6, limit_val_batches=0)
        trainer.fit(*tiny())
        assert cb.report is not None and cb.report.steps_profiled == 2
        assert "ProfilerStep" not in steps  # the window's stop erased its entry, as profile.__exit__ would
    assert scans == []
    prof = torch.profiler.profile()  # constructed, never entered: the scan runs (and finds it not started)
    try:
        assert not profiler_window.profiler_in_use() and scans == [1]
    finally:
        torch.autograd.profiler.KinetoStepTracker.erase_step_count("ProfilerStep")
        del prof


def leftovers(root: Path) -> list[str]:
    """Half-written files: report temporaries and partial traces."""
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.name.endswith((".tmp", ".partial")) or ".tmp" in p.name
    )


# ---------------------------------------------------------------------------------- 1. a user's profiler
def test_a_users_own_profiler_session_is_left_intact(tmp_path: Path) -> None:
    def profiled(root: Path, callbacks: list) -> int:
        trainer = quiet_trainer(root, callbacks, max_steps=6, limit_val_batches=0)
        model, loader = tiny()
        with torch.profiler.profile() as prof:
            trainer.fit(model, loader)
        assert trainer.global_step == 6
        return len(prof.events())

    without = profiled(tmp_path / "without", [])
    cb = BottleneckCallback(**CB)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with_cb = profiled(tmp_path / "with", [cb])
    assert without > 100
    assert 0.8 * without <= with_cb <= 1.25 * without, (without, with_cb)
    ours = [w for w in caught if "BottleneckCallback" in str(w.message)]
    assert len(ours) == 1 and "profiler" in str(ours[0].message), [str(w.message) for w in ours]
    assert cb.report is None and not (tmp_path / "with" / REPORT).exists()
    assert not torch._C._autograd._profiler_enabled()


SCHEDULED = """
import sys, warnings, torch
sys.path[:0] = [{tests!r}, {examples!r}]
import lightning.pytorch as pl, scenarios
from torch.utils.data import DataLoader
from conftest import quiet_trainer
from lightning_bottleneck import BottleneckCallback

class Stepper(pl.Callback):  # the user's own step() of their scheduled profiler
    def __init__(self, prof):
        self.prof = prof
    def on_train_batch_end(self, *args):
        self.prof.step()

with_callback = sys.argv[1] == "with"
ours = [BottleneckCallback(wait=1, warmup=1, active=2, verbose=False)] if with_callback else []
prof = torch.profiler.profile(schedule=torch.profiler.schedule(wait=3, warmup=1, active=3))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with prof:
        trainer = quiet_trainer({root!r}, ours + [Stepper(prof)], max_steps=8, limit_val_batches=0)
        trainer.fit(scenarios.Regressor(), DataLoader(scenarios.in_memory(256, 32), batch_size=8))
print("RESULT", len(prof.events()), trainer.global_step, sum("BottleneckCallback" in str(w.message) for w in caught))
"""


def test_a_users_scheduled_profiler_still_waiting_is_left_intact(tmp_path: Path) -> None:
    """A scheduled session in its wait steps at setup is invisible to the autograd profiler's state; both
    sessions recording at once crashed the process (SIGSEGV in torch 2.13): run in a child process."""
    import sys

    tests = Path(__file__).resolve().parent
    script = tmp_path / "scheduled.py"
    script.write_text(
        SCHEDULED.format(tests=str(tests), examples=str(tests.parent / "examples"), root=str(tmp_path))
    )
    results = {}
    for run in ("without", "with"):
        done = subprocess.run([sys.executable, str(script), run], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (run, done.returncode, done.stderr[-1500:])
        line = [x for x in done.stdout.splitlines() if x.startswith("RESULT")][-1]
        results[run] = [int(v) for v in line.split()[1:]]
    (events_without, steps_without, _), (events_with, steps_with, warned) = (
        results["without"],
        results["with"],
    )
    assert steps_without == steps_with == 8
    assert events_without > 100 and 0.8 * events_without <= events_with <= 1.25 * events_without, results
    assert warned == 1


ONE_RANK_PROFILED = """
import contextlib, os, sys, torch
sys.path[:0] = [{tests!r}, {examples!r}]
import lightning.pytorch as pl, scenarios
from torch.utils.data import DataLoader
from lightning_bottleneck import BottleneckCallback

rank = int(os.environ.get("LOCAL_RANK", "0"))
cb = BottleneckCallback(wait=1, warmup=1, active=2, verbose=False, gather_timeout=30)
trainer = pl.Trainer(
    accelerator="cpu", devices=2, strategy="ddp", max_steps=6, limit_val_batches=0, logger=False,
    enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
    default_root_dir={root!r}, callbacks=[cb],
)
with (torch.profiler.profile() if rank == 1 else contextlib.nullcontext()) as prof:  # rank 1 only
    trainer.fit(scenarios.Regressor(), DataLoader(scenarios.in_memory(256, 32), batch_size=8))
events = len(prof.events()) if prof is not None else -1
print(f"RESULT {{rank}} {{trainer.global_step}} {{events}} {{int(cb.report is not None)}}", flush=True)
if torch.distributed.is_initialized():  # not left to interpreter exit: a CI run once aborted there (SIGABRT,
    torch.distributed.destroy_process_group()  # "terminate called without an active exception")
"""


def test_a_users_profiler_on_one_rank_makes_every_rank_stand_down(tmp_path: Path) -> None:
    """Standing down on one rank only would leave the others alone in the callback's collectives."""
    import sys

    tests = Path(__file__).resolve().parent
    script = tmp_path / "one_rank.py"
    script.write_text(
        ONE_RANK_PROFILED.format(
            tests=str(tests), examples=str(tests.parent / "examples"), root=str(tmp_path)
        )
    )
    env = {**os.environ, "PL_DISABLE_FORK": "1", "OMP_NUM_THREADS": "1"}
    env.pop("LIGHTNING_BOTTLENECK", None)
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
        start_new_session=True,  # rank 1 is a child of rank 0: a hang is ended as a group
    )
    try:
        out, err = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("the ranks hung (one stood down, the other waited in a collective)")
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert done.returncode == 0, done.stderr[-2000:]
    results = sorted(line.split()[1:] for line in done.stdout.splitlines() if line.startswith("RESULT"))
    assert [r[0] for r in results] == ["0", "1"], done.stdout[-1000:]
    assert all(r[1] == "6" and r[3] == "0" for r in results), results  # trained; no analysis anywhere
    assert int(results[1][2]) > 100  # the user's session on rank 1 has its events
    assert done.stderr.count("BottleneckCallback stands down") == 1
    assert not (tmp_path / REPORT).exists()


# ---------------------------------------------------------------------------------- 2. two callbacks
def test_two_callbacks_one_analysis(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    without = fit(tmp_path / "without", [])
    first, second = BottleneckCallback(**CB), BottleneckCallback(**CB)
    trainer = fit(tmp_path / "with", [first, second])
    assert trainer.global_step == without.global_step == 6
    assert first.report is not None and second.report is None
    assert (tmp_path / "with" / REPORT).is_file()
    assert said(capfd, caplog).count("stands down") == 1
    assert any("stood down" in n for n in first.report.notes)


def test_env_var_with_a_callback_in_the_code_trains_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LIGHTNING_BOTTLENECK", "wait=1,warmup=1,active=2,verbose=false")
    in_code = BottleneckCallback(**CB)
    trainer = fit(tmp_path, [in_code])
    ours = [c for c in trainer.callbacks if isinstance(c, BottleneckCallback)]
    assert len(ours) == 2 and ours[0] is in_code  # the entry point did add its own
    assert trainer.global_step == 6
    assert in_code.report is not None and ours[1].report is None


# ---------------------------------------------------------------------------------- 3. the user's patch
@pytest.mark.parametrize(
    ("owner", "name"),
    [(torch.Tensor, "item"), (torch.Tensor, "cpu"), (torch.cuda, "synchronize")],
    ids=["Tensor.item", "Tensor.cpu", "cuda.synchronize"],
)
def test_a_users_patch_made_during_fit_survives_the_end_of_fit(tmp_path: Path, owner: Any, name: str) -> None:
    import scenarios

    had_own = name in vars(owner)  # Tensor.item lives on TensorBase: the patch shadows it
    original = vars(owner).get(name)
    patched: list[Any] = []

    def restore() -> None:
        if had_own:
            setattr(owner, name, original)
        elif name in vars(owner):
            delattr(owner, name)

    class Patching(scenarios.Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if batch_idx == 2:
                current = getattr(owner, name)

                def users(*args: Any, **kwargs: Any) -> Any:
                    return current(*args, **kwargs)

                setattr(owner, name, users)
                patched.append(users)
            return super().training_step(batch, batch_idx)

    try:
        for run, callbacks in (("without", []), ("with", [BottleneckCallback(**CB)])):
            restore()
            fit(tmp_path / run, callbacks, model=Patching())
            assert vars(owner)[name] is patched[-1], run
        assert torch.tensor(3.0).item() == 3.0
    finally:
        restore()


# ---------------------------------------------------------------------------------- 4. a bad baseline
GOOD = {
    "schema_version": 1,
    "primary": "input",
    "confidence": 0.9,
    "steps_observed": 10,
    "steps_profiled": 4,
    "step_time_ms": {"median": 5.0, "p90": 6.0, "samples": [5.0, 5.0, 6.0]},
    "breakdown": {"data_wait": 0.6},
}


@pytest.mark.parametrize(
    "content",
    [
        "[1, 2]",
        '"a string"',
        json.dumps({**GOOD, "step_time_ms": {"median": "1", "p90": 2.0}}),
        json.dumps(GOOD).replace("5.0, 5.0", "NaN, 5.0"),
        json.dumps({**GOOD, "step_time_ms": {"median": 0.0, "p90": 0.0, "samples": [0.0]}}),
        json.dumps({**GOOD, "breakdown": {"data_wait": "x"}}),
        "{not json",
        None,  # missing file
    ],
    ids=["list", "string", "str-median", "nan", "zero-median", "str-share", "not-json", "missing"],
)
def test_a_bad_baseline_is_a_note_never_a_lost_report(
    tmp_path: Path, content: str | None, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    baseline = tmp_path / "baseline.json"
    if content is not None:
        baseline.write_text(content)
    cb = BottleneckCallback(**{**CB, "verbose": True, "baseline": str(baseline)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fit(tmp_path / "run", [cb])
    assert trainer.global_step == 6
    assert not [w for w in caught if "disabled itself" in str(w.message)]
    data = json.loads((tmp_path / "run" / REPORT).read_text())
    assert any("baseline" in n for n in data["notes"]), data["notes"]
    assert "lightning-bottleneck:" in said(capfd, caplog)
    assert list((tmp_path / "run" / "bottleneck").glob("events.out.tfevents.*"))  # the TensorBoard text


# ---------------------------------------------------------------------------------- 5. cannot write
def _mount_tmpfs(where: Path, options: str) -> None:
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode()[:100]}")


@pytest.fixture(params=["not-a-directory", "read-only-fs"])
def unwritable(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A report path that cannot be written, even by root: under a file, or on a read-only mount."""
    if request.param == "not-a-directory":
        blocker = tmp_path / "a_file"
        blocker.write_text("not a directory")
        yield blocker / REPORT
        return
    mount = tmp_path / "ro"
    _mount_tmpfs(mount, "ro,size=64k")
    try:
        yield mount / REPORT
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_unwritable_report_path_still_prints_the_summary(
    tmp_path: Path, unwritable: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    without = fit(tmp_path / "without", [])
    cb = BottleneckCallback(**{**CB, "verbose": True, "report_path": str(unwritable)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fit(tmp_path / "with", [cb])
    assert trainer.global_step == without.global_step == 6 and cb.report is not None
    assert "lightning-bottleneck:" in said(capfd, caplog)
    messages = [str(w.message) for w in caught]
    assert any("could not write its report" in m for m in messages), messages
    assert not [m for m in messages if "disabled itself" in m]
    assert leftovers(tmp_path) == []
    assert list((tmp_path / "with" / "bottleneck").glob("events.out.tfevents.*"))  # the TensorBoard text


@pytest.fixture(params=[12, 0], ids=["12KiB-free", "full"])
def full_disk(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A 64 KiB tmpfs filled to all but ``param`` KiB (root only; skipped elsewhere): with 12 KiB the
    traces fail half-way and the report fits, with none the report cannot be written either."""
    mount = tmp_path / "small"
    _mount_tmpfs(mount, "size=64k")
    try:
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        os.truncate(mount / "filler", max(0, (mount / "filler").stat().st_size - request.param * 1024))
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_full_disk_prints_the_summary_and_leaves_no_partial_files(
    tmp_path: Path, full_disk: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    without = fit(tmp_path / "without", [])
    cb = BottleneckCallback(
        **{
            **CB,
            "verbose": True,
            "report_path": str(full_disk / REPORT),
            "output_dir": str(full_disk / "traces"),
        }
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fit(tmp_path / "with", [cb])
    assert trainer.global_step == without.global_step == 6
    assert cb.report is not None
    assert "lightning-bottleneck:" in said(capfd, caplog)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "disabled itself" in m], messages
    assert leftovers(full_disk) == []
    report = full_disk / REPORT
    if report.exists():  # what is there is whole
        json.loads(report.read_text())
    else:  # and when nothing could be written, the user is told
        assert any("could not write its report" in m for m in messages), messages


# ---------------------------------------------------------------------------------- 6. planted symlink
def test_the_report_does_not_follow_a_planted_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / (REPORT + ".tmp")).symlink_to(victim)
    cb = BottleneckCallback(**CB)
    fit(tmp_path, [cb])
    assert victim.read_text() == "precious"
    assert json.loads((tmp_path / REPORT).read_text())["steps_observed"] == 6
    assert (tmp_path / (REPORT + ".tmp")).is_symlink()  # not ours: left as it was
    assert not [
        p for p in tmp_path.iterdir() if p.name.startswith(REPORT) and p.name not in {REPORT, REPORT + ".tmp"}
    ]


# ---------------------------------------------------------------------------------- 7. keep the evidence
def test_a_second_fit_of_zero_steps_keeps_the_good_report(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    model, loader = tiny()
    plain = quiet_trainer(tmp_path / "without", [], max_steps=6, limit_val_batches=0)
    plain.fit(model, loader)
    plain.fit(model, loader)
    cb = BottleneckCallback(**{**CB, "verbose": True})
    trainer = quiet_trainer(tmp_path / "with", [cb], max_steps=6, limit_val_batches=0)
    model, loader = tiny()
    trainer.fit(model, loader)
    first = json.loads((tmp_path / "with" / REPORT).read_text())
    assert first["steps_observed"] == 6
    said(capfd, caplog)
    trainer.fit(model, loader)  # max_steps already reached: trains 0 steps
    assert trainer.global_step == plain.global_step == 6
    assert json.loads((tmp_path / "with" / REPORT).read_text()) == first
    beside = tmp_path / "with" / "bottleneck_report.1.json"
    assert json.loads(beside.read_text())["steps_observed"] == 0
    assert str(beside) in said(capfd, caplog)
    trainer.fit(model, loader)  # again: the callback replaces its own empty report, nothing piles up
    assert json.loads((tmp_path / "with" / REPORT).read_text()) == first
    assert not (tmp_path / "with" / "bottleneck_report.2.json").exists()


def test_logger_false_never_overwrites_an_earlier_runs_report_silently(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    fit(tmp_path, [BottleneckCallback(**CB)])
    first = (tmp_path / REPORT).read_text()
    said(capfd, caplog)
    second = BottleneckCallback(**{**CB, "verbose": True})
    fit(tmp_path, [second], max_steps=8)
    assert (tmp_path / REPORT).read_text() == first
    beside = tmp_path / "bottleneck_report.1.json"
    assert json.loads(beside.read_text())["steps_observed"] == 8
    assert str(beside) in said(capfd, caplog)


def test_the_same_callback_refits_with_evidence_replace_its_own_report(tmp_path: Path) -> None:
    cb = BottleneckCallback(**CB)
    model, loader = tiny()
    trainer = quiet_trainer(tmp_path, [cb], max_steps=6, limit_val_batches=0)
    trainer.fit(model, loader)
    trainer.fit_loop.epoch_loop.max_steps = 12
    trainer.fit(model, loader)
    assert json.loads((tmp_path / REPORT).read_text())["steps_observed"] == 6  # the second fit's own steps
    assert not (tmp_path / "bottleneck_report.1.json").exists()


# ---------------------------------------------------------------------------------- 8. strict JSON
def test_report_json_is_strict_json_whatever_the_numbers() -> None:
    import numpy as np

    report = Report(
        primary=Category.UNKNOWN,
        confidence=float("nan"),
        steps_observed=3,
        steps_profiled=0,
        step_time_ms=StepTime(float("inf"), float("-inf"), [1.0, float("nan")]),
        breakdown={"data_wait": float("nan")},
        metrics={"a": [float("inf"), np.float32("nan"), np.float64(2.5), np.int64(3)], "b": {"c": -math.inf}},
    )

    def reject(name: str) -> Any:
        raise ValueError(name)

    data = json.loads(report.to_json(), parse_constant=reject)
    assert data["confidence"] is None and data["step_time_ms"]["median"] is None
    assert data["step_time_ms"]["samples"] == [1.0, None]
    assert data["breakdown"]["data_wait"] is None
    assert data["metrics"] == {"a": [None, None, 2.5, 3], "b": {"c": None}}


# ---------------------------------------------------------------------------------- 12. Ctrl-C note
def test_keyboard_interrupt_note_has_no_empty_message(tmp_path: Path) -> None:
    import scenarios

    class Interrupted(scenarios.Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if batch_idx == 3:
                raise KeyboardInterrupt
            return super().training_step(batch, batch_idx)

    cb = BottleneckCallback(**CB)
    previous = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit):
            fit(tmp_path, [cb], model=Interrupted())
    finally:
        signal.signal(signal.SIGINT, previous)
    notes = json.loads((tmp_path / REPORT).read_text())["notes"]
    assert "fit interrupted (KeyboardInterrupt)" in notes, notes
    assert not [n for n in notes if n.rstrip().endswith(":")]


@pytest.mark.parametrize(
    ("error", "note"),
    [
        (KeyboardInterrupt(), "fit interrupted (KeyboardInterrupt)"),
        (ValueError(), "fit ended by ValueError"),
        (ValueError("  "), "fit ended by ValueError"),
        (ValueError("user\nbug"), "fit ended by ValueError: user bug"),
    ],
)
def test_exit_note_omits_an_empty_message(error: BaseException, note: str) -> None:
    from lightning_bottleneck.live.publishing import exit_note

    assert exit_note(error) == note
