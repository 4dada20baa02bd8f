"""The one exception the trace reader raises for unusable input."""

from __future__ import annotations


class TraceError(Exception):
    """A trace file that cannot be analysed: missing, truncated, not JSON, or JSON that is no trace.

    ``str(error)`` is a single line meant for the terminal (the CLI prints it and exits 2).
    """

    def __init__(self, path: object, reason: str) -> None:
        self.path = str(path)
        self.reason = " ".join(str(reason).split())  # always one line
        super().__init__(f"{self.path}: {self.reason}")
