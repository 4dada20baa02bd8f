"""Make the traces this package writes read well in torch-tb-profiler (the TensorBoard PyTorch Profiler tab).

torch >= 2.0 tags ``record_function`` spans, the DataLoader's ``enumerate(DataLoader)#...__next__``
among them, with the category ``user_annotation``. torch-tb-profiler 0.4.3 (its latest release) drops
``user_annotation`` events except ``ProfilerStep#``, so its Overview shows 0% DataLoader time even for an
input-bound run. Re-tagging exactly those spans as ``cpu_op`` (the category tb-profiler reads them
from) restores its DataLoader column; names, times and all other events are unchanged, and this
package's reader accepts both categories.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import tempfile
from pathlib import Path

_DATALOADER_ANNOTATION = re.compile(
    rb'"cat":\s*"user_annotation"(,\s*"name":\s*"enumerate\((?:DataLoader|DataPipe)\)#)'
)


def retag_dataloader_spans(raw: bytes) -> bytes:
    return _DATALOADER_ANNOTATION.sub(rb'"cat": "cpu_op"\1', raw)


def write_trace(raw_json_path: Path, dest: Path) -> Path:
    """Move an exported Chrome trace to ``dest`` (gzip when it ends in .gz), re-tagged for tb-profiler.

    Written through a new file created exclusively beside ``dest`` and renamed; on any failure (a full
    disk) neither that file nor ``raw_json_path`` stays behind, and the error propagates.
    """
    tmp: str | None = None
    try:
        raw = retag_dataloader_spans(raw_json_path.read_bytes())
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
        with os.fdopen(fd, "wb") as fh:
            if dest.suffix == ".gz":
                with gzip.GzipFile(dest.name[: -len(".gz")], "wb", 1, fh) as gz:  # speed over size
                    gz.write(raw)
            else:
                fh.write(raw)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
        tmp = None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        with contextlib.suppress(OSError):
            raw_json_path.unlink(missing_ok=True)
    return dest
