"""The one exception the trace reader (and the offline command line) raises for unusable input."""

from __future__ import annotations


def one_line(text: str) -> str:
    """``text`` with control characters (a newline in a file name, say) escaped: safe on one terminal line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _shorten(path: str, keep: int = 80) -> str:
    """A path of hundreds of characters keeps its head and tail (the error line stays readable)."""
    return path if len(path) <= 2 * keep + 3 else f"{path[:keep]}...{path[-keep:]}"


class TraceError(Exception):
    """Input that cannot be analysed: missing, truncated, not JSON, JSON that is no trace, invalid timing.

    ``str(error)`` is a single line meant for the terminal (the CLI prints it and exits 2). ``path`` is
    None for errors that concern no one file (``--rank 5`` when no trace is rank 5).
    """

    def __init__(self, path: object | None, reason: str) -> None:
        self.path = _shorten(one_line(str(path))) if path is not None else None
        self.reason = one_line(" ".join(str(reason).split()))  # always one line
        super().__init__(f"{self.path}: {self.reason}" if self.path is not None else self.reason)
