"""Keep Kineto's ``USDT: ... profiler_start`` / ``profiler_stop`` lines out of the user's terminal.

torch 2.13's Kineto writes one such line to the process's standard error (file descriptor 2, from C++) each time
the profiler starts or stops recording: two lines per profiling window, in the middle of the user's training log,
that say nothing to the user. No setting of torch quiets them (``KINETO_LOG_LEVEL=3``, ``TORCH_CPP_LOG_LEVEL=ERROR``
and ``GLOG_minloglevel=3`` leave them). So the calls into the profiler that start or stop it run with descriptor 2
pointed at a temporary file, and everything written there meanwhile (by any thread, Python or C++) is written back to
the real standard error right after, less the lines Kineto's USDT marks start with: nothing else is lost, only
delayed by the few milliseconds the call takes.

Where standard error has no file descriptor (a notebook's stream object), nothing is redirected: Kineto's lines
then go to the kernel's terminal, not to the notebook. A failure to redirect is never an error: the call runs as is.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

__all__ = ["DROPPED_LINE", "kineto_lines_dropped"]

#: A line Kineto writes around a session: ``USDT:2026-12-03 17:58:47 12953:12953 SyncActivityProfilerHandler.cpp:52]
#: profiler_start`` (torch 2.13, CPU and CUDA builds). Only lines that start so are dropped.
DROPPED_LINE = re.compile(rb"^USDT:\S+ \S+ \d+:\d+ \S+\.cpp:\d+\] profiler_(start|stop)\b")


@contextlib.contextmanager
def kineto_lines_dropped() -> Iterator[None]:
    """Run the body with standard error (descriptor 2) captured; write back all of it but Kineto's USDT lines."""
    try:
        fd = sys.__stderr__.fileno() if sys.__stderr__ is not None else 2
        for stream in (sys.stderr, sys.__stderr__):
            if stream is not None:
                stream.flush()
        saved = os.dup(fd)
        sink = tempfile.TemporaryFile()  # noqa: SIM115 - closed below, after the write-back
        os.dup2(sink.fileno(), fd)
    except Exception:  # no descriptor to redirect (a notebook), or the OS refused: run as is
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            for stream in (sys.stderr, sys.__stderr__):
                if stream is not None:
                    stream.flush()
        os.dup2(saved, fd)
        os.close(saved)
        with contextlib.suppress(Exception):
            sink.seek(0)
            kept = b"".join(
                line for line in sink.read().splitlines(keepends=True) if not DROPPED_LINE.match(line)
            )
            while kept:
                kept = kept[os.write(fd, kept) :]
        sink.close()
