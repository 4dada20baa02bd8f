"""Write a file so that a reader sees the old content or the whole new one, never half of it.

A new file is created exclusively beside the target (``mkstemp``: nothing planted at a predictable name, such
as a symlink at ``<path>.tmp``, is followed), filled, then renamed over the target; on any failure (a full
disk, a read-only mount) the temporary file is removed and the error propagates.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomically(path: str | Path, data: bytes) -> Path:
    """Replace ``path`` with ``data``; the file is as readable as any new file (``0o666 & ~umask``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), 0o666 & ~_umask())  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
