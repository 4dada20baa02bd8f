"""The package's layering, checked: everything but the live-run side imports without torch or lightning.

Replaces the "pure (no torch)" claims module docstrings used to make. A new module is pure unless it is
listed in ``LIVE_SIDE`` below (and says why it needs torch or lightning).
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import lightning_bottleneck

#: Modules that run inside a live Trainer and need torch and/or lightning.
LIVE_SIDE = {
    "lightning_bottleneck.callback",  # the Lightning callback itself
    "lightning_bottleneck.profiler_window",  # torch.profiler
    "lightning_bottleneck.publishing",  # TensorBoardLogger, rank_zero_info
    "lightning_bottleneck.distributed",  # torch.distributed
    "lightning_bottleneck.run_inspection",  # reads the Trainer and its DataLoader
    "lightning_bottleneck.sync_hooks",  # patches torch.Tensor methods
    "lightning_bottleneck.loader_probe",  # builds and times DataLoaders
    "lightning_bottleneck.trials",  # runs forward+backward on the live model
    "lightning_bottleneck.verdict_outputs",  # the loggers' scalars and TensorBoardLogger images
    "lightning_bottleneck.callback_options",  # raises lightning's MisconfigurationException
    "lightning_bottleneck.verdict_cycle",  # reads the Trainer; torch.cuda memory and OOM types
}

#: Layers the brief requires to be pure, checked by name so a move cannot drop them silently.
MUST_BE_PURE = {
    "lightning_bottleneck",
    "lightning_bottleneck.__main__",
    "lightning_bottleneck.cli",
    "lightning_bottleneck.compare",
    "lightning_bottleneck.diagnose",
    "lightning_bottleneck.evidence",
    "lightning_bottleneck.render",
    "lightning_bottleneck.report",
    "lightning_bottleneck.vocabulary",
    "lightning_bottleneck.analysis.steps",
    "lightning_bottleneck.analysis.trace_metrics",
    "lightning_bottleneck.analysis.communication",
    "lightning_bottleneck.analysis.trace_file",
    "lightning_bottleneck.rules",
    "lightning_bottleneck.advice",
    "lightning_bottleneck.trace.reader",
}

_BLOCKED_IMPORT = r"""
import importlib, importlib.abc, json, sys

BLOCKED = ("torch", "lightning", "pytorch_lightning")

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked import of {name}")
        return None

sys.meta_path.insert(0, Blocker())
failed = {}
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except SystemExit:  # __main__ runs the CLI (its imports are done by then)
        pass
    except Exception as err:  # report every failure, not just the first
        failed[name] = f"{type(err).__name__}: {err}"
print(json.dumps(failed))
"""


def _package_modules() -> set[str]:
    root = Path(lightning_bottleneck.__file__).parent
    found = {"lightning_bottleneck"}
    for info in pkgutil.walk_packages([str(root)], prefix="lightning_bottleneck."):
        found.add(info.name)
    return found


def test_every_module_but_the_live_side_imports_without_torch_or_lightning() -> None:
    modules = _package_modules()
    assert modules >= LIVE_SIDE, LIVE_SIDE - modules
    assert modules >= MUST_BE_PURE, MUST_BE_PURE - modules
    pure = sorted(modules - LIVE_SIDE)
    out = subprocess.run(
        [sys.executable, "-c", _BLOCKED_IMPORT, json.dumps(pure)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    failed = json.loads(out.stdout.strip().splitlines()[-1])
    assert failed == {}, failed


def test_the_blocker_does_block() -> None:
    """The check above can fail: a live-side module does not import under the blocker."""
    out = subprocess.run(
        [sys.executable, "-c", _BLOCKED_IMPORT, json.dumps(["lightning_bottleneck.callback"])],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    failed = json.loads(out.stdout.strip().splitlines()[-1])
    assert "blocked import of" in failed["lightning_bottleneck.callback"]
