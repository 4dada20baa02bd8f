"""Kineto's ``USDT: ... profiler_start/stop`` lines stay out of the user's terminal; nothing else written to standard
error is lost (issue 28 item 5)."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from lightning_bottleneck.live.stderr_filter import DROPPED_LINE, kineto_lines_dropped

from conftest import fit_scenario

USDT = b"USDT:2026-12-03 17:58:47 12953:12953 SyncActivityProfilerHandler.cpp:52] profiler_start\n"


def test_only_kinetos_lines_are_dropped_and_the_rest_comes_back_in_order(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with kineto_lines_dropped():
        os.write(2, b"before\n" + USDT + b"USDT: a user's own line\n")
        thread = threading.Thread(target=lambda: os.write(2, b"from a thread\n"))
        thread.start()
        thread.join()
        print("from python", file=sys.stderr)
        os.write(2, USDT.replace(b"start", b"stop").replace(b":52]", b":59]") + b"after\n")
    os.write(2, b"outside\n")
    err = capfd.readouterr().err
    assert "profiler_start" not in err and "profiler_stop" not in err, err
    lines = err.splitlines()
    assert "from python" in lines, (
        err
    )  # pytest's sys.stderr is its own stream: its place in the order is pytest's
    assert [line for line in lines if line != "from python"] == [
        "before",
        "USDT: a user's own line",
        "from a thread",
        "after",
        "outside",
    ], err


def test_the_body_raising_still_restores_standard_error(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RuntimeError, match="boom"), kineto_lines_dropped():
        os.write(2, b"kept\n" + USDT)
        raise RuntimeError("boom")
    os.write(2, b"restored\n")
    assert capfd.readouterr().err.splitlines() == ["kept", "restored"]


def test_a_fit_prints_no_kineto_lines(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The window's profiler starts and stops within the fit; torch 2.13 writes a USDT line each time."""
    _, cb = fit_scenario("input", tmp_path, callback_kwargs={"verbose": True})
    assert cb.report is not None and cb.report.steps_profiled > 0
    err = capfd.readouterr().err
    assert not any(DROPPED_LINE.match(line.encode()) for line in err.splitlines()), err
    assert "USDT" not in err, err
