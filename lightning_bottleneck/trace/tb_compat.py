"""Make the traces this package writes read well in torch-tb-profiler (the TensorBoard PyTorch Profiler tab).

torch >= 2.0 tags ``record_function`` spans, the DataLoader's ``enumerate(DataLoader)#...__next__``
among them, with the category ``user_annotation``. torch-tb-profiler 0.4.3 (its latest release) drops
``user_annotation`` events except ``ProfilerStep#``, so its Overview shows 0% DataLoader time even for an
input-bound run. Re-tagging exactly those spans as ``cpu_op`` (the category tb-profiler reads them
from) restores its DataLoader column; names, times and all other events are unchanged, and this
package's reader accepts both categories.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

_DATALOADER_ANNOTATION = re.compile(
    rb'"cat":\s*"user_annotation"(,\s*"name":\s*"enumerate\((?:DataLoader|DataPipe)\)#)'
)


def retag_dataloader_spans(raw: bytes) -> bytes:
    return _DATALOADER_ANNOTATION.sub(rb'"cat": "cpu_op"\1', raw)


def write_trace(raw_json_path: Path, dest: Path) -> Path:
    """Move an exported Chrome trace to ``dest`` (gzip when it ends in .gz), re-tagged for tb-profiler."""
    raw = retag_dataloader_spans(raw_json_path.read_bytes())
    tmp = dest.with_name(dest.name + ".tmp")
    if dest.suffix == ".gz":
        with gzip.open(tmp, "wb", compresslevel=1) as f:  # speed over size: traces are small
            f.write(raw)
    else:
        tmp.write_bytes(raw)
    tmp.replace(dest)
    raw_json_path.unlink(missing_ok=True)
    return dest
