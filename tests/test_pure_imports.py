"""The package's layering, checked: the import order is the architecture.

- The layers, from the bottom (:data:`LAYERS`): vocabulary -> report schema -> trace -> analysis -> evidence
  -> measure -> rules -> advice -> diagnose -> output / offline -> live and the entry points. No module
  imports one of a layer above its own, even lazily (two named exceptions: :data:`UPWARD_ALLOWED`).
- ``live/`` (inside a Trainer) and ``measure/`` (timing on the live run) may import torch and lightning;
  every other module imports without them, which is what lets ``lightning-bottleneck analyze`` run anywhere.
- No module imports another that imports it back.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import lightning_bottleneck

ROOT = Path(lightning_bottleneck.__file__).parent
#: Folders whose modules may import torch and lightning.
TORCH_FOLDERS = ("lightning_bottleneck.live", "lightning_bottleneck.measure")
#: The folders the layout promises, each with its role (README "Architecture" and docs/architecture.md).
FOLDERS = ("live", "measure", "trace", "analysis", "evidence", "rules", "advice", "output")
#: Top-level modules: the public entry points, the pipeline, the report schema and the shared vocabulary.
TOP_LEVEL = {
    "__init__",
    "__main__",
    "cli",
    "offline",
    "diagnose",
    "report",
    "categories",
    "vocabulary",
    "thresholds",
    "stats",
    "atomic_write",
    "errors",
    "bootstrap",
    "autotune_record",
}
#: The layers, bottom first: a module may import its own layer and those below, never one above.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("categories", "vocabulary", "thresholds", "stats", "bootstrap", "atomic_write", "errors"),  # vocabulary
    ("report", "autotune_record"),  # the report schema: typed results, exactly the JSON written
    ("trace",),  # parsing
    ("analysis",),  # trace -> summaries
    ("evidence",),  # everything the rules look at, the measurement results included (torch-free)
    ("measure",),  # the probes that fill the evidence on the live run
    ("rules",),  # evidence -> findings, candidates with their predicted savings, the verdict
    ("advice",),  # findings and candidates -> recommendations in words and settings
    ("diagnose",),  # the one pipeline Evidence -> Report
    ("output", "offline"),  # renderers; trace files or run folders -> Report
    ("live", "cli", "__main__", ""),  # inside a Trainer; the command line; the package's public API
)
#: The only imports that go up, both lazy and both to print or load the public entry point: a report prints
#: itself through the text renderer (``str(report)``), and the package's ``BottleneckCallback`` attribute.
UPWARD_ALLOWED = {
    ("lightning_bottleneck.report", "lightning_bottleneck.output.text"),
    ("lightning_bottleneck", "lightning_bottleneck.live.callback"),
}
FRAMEWORKS = ("torch", "lightning", "pytorch_lightning")


def _in_torch_folder(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in TORCH_FOLDERS)


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
    found = {"lightning_bottleneck"}
    for info in pkgutil.walk_packages([str(ROOT)], prefix="lightning_bottleneck."):
        found.add(info.name)
    return found


def _module_file(name: str) -> Path:
    rel = Path(*name.split(".")[1:])
    package = ROOT / rel / "__init__.py"
    return package if package.exists() else (ROOT / rel).with_suffix(".py")


def _imports(name: str) -> set[str]:
    """Every module ``name`` imports, at module level or inside a function; ``TYPE_CHECKING`` blocks aside."""
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            if getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING":
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(alias.name for alias in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)

    Visitor().visit(ast.parse(_module_file(name).read_text()))
    return found


def test_the_tree_is_the_architecture() -> None:
    top = {p.stem for p in ROOT.glob("*.py")}
    assert top == TOP_LEVEL, f"top-level modules {sorted(top - TOP_LEVEL)} belong in a folder"
    folders = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(FOLDERS), folders


def layer_of(name: str) -> int:
    """The index in :data:`LAYERS` of a module of the package (``""`` is the package itself)."""
    parts = name.split(".")[1:]
    head = parts[0] if parts else ""
    for i, layer in enumerate(LAYERS):
        if head in layer:
            return i
    raise AssertionError(f"{name} is in no layer: add it to LAYERS")


def upward_imports() -> dict[str, list[str]]:
    """Every import of a module from a layer above the importer's, the allowed ones aside."""
    modules = _package_modules()
    out: dict[str, list[str]] = {}
    for name in sorted(modules):
        up = sorted(
            m
            for m in _imports(name)
            if m in modules and layer_of(m) > layer_of(name) and (name, m) not in UPWARD_ALLOWED
        )
        if up:
            out[name] = up
    return out


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert upward_imports() == {}


def test_the_layer_check_can_fail() -> None:
    """A rule reaching up into advice (as ``rules/ranking.py`` once did) is seen as going up."""
    assert layer_of("lightning_bottleneck.rules.ranking") < layer_of(
        "lightning_bottleneck.advice.loader_plan"
    )
    assert layer_of("lightning_bottleneck.report") < layer_of("lightning_bottleneck.trace.reader")
    assert layer_of("lightning_bottleneck.evidence.loader_ladder") < layer_of(
        "lightning_bottleneck.measure.stage"
    )
    assert layer_of("lightning_bottleneck.diagnose") < layer_of("lightning_bottleneck.offline")


def test_the_analyze_command_imports_only_what_it_uses(tmp_path: Path) -> None:
    """``python -m lightning_bottleneck analyze`` of a trace loads no measurement probe, no live code, no framework."""
    from _trace_builders import cpu_training_events, write_trace

    trace = write_trace(tmp_path / "t.json", cpu_training_events())
    code = (
        "import json, sys, contextlib, io\n"
        "from lightning_bottleneck.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main(['analyze', {str(trace)!r}])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('lightning_bottleneck', 'torch', 'lightning', 'pytorch_lightning'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "lightning_bottleneck.diagnose" in loaded  # it did analyse
    assert not {
        m for m in loaded if m.startswith(("lightning_bottleneck.measure", "lightning_bottleneck.live"))
    }
    assert not {m for m in loaded if m.split(".")[0] in FRAMEWORKS}


def test_nothing_outside_live_and_measure_imports_torch_or_lightning_even_lazily() -> None:
    offenders = {}
    for name in sorted(_package_modules()):
        if _in_torch_folder(name):
            continue
        bad = {m for m in _imports(name) if m.split(".")[0] in FRAMEWORKS}
        live = {m for m in _imports(name) if m.startswith("lightning_bottleneck.live")}
        if (
            name == "lightning_bottleneck"
        ):  # the lazy ``BottleneckCallback`` attribute, the public entry point
            live.discard("lightning_bottleneck.live.callback")
            live.discard("lightning_bottleneck.live.callback.BottleneckCallback")
        if bad or live:
            offenders[name] = sorted(bad | live)
    assert offenders == {}, offenders


def test_no_import_cycles() -> None:
    modules = _package_modules()
    graph = {name: {m for m in _imports(name) if m in modules and m != name} for name in modules}
    cycles: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = [stack.pop()]
            while component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    assert cycles == [], cycles


def test_the_cycle_check_can_fail(tmp_path: Path) -> None:
    """A report <-> text style cycle (as the tree had before the layout) is seen by ``_imports``."""
    assert "lightning_bottleneck.output.text" in _imports("lightning_bottleneck.report")
    assert "lightning_bottleneck.report" not in _imports("lightning_bottleneck.output.text")


def test_every_module_outside_live_and_measure_imports_without_torch_or_lightning() -> None:
    modules = _package_modules()
    pure = sorted(m for m in modules if not _in_torch_folder(m))
    assert "lightning_bottleneck.cli" in pure and "lightning_bottleneck.trace.reader" in pure
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
        [sys.executable, "-c", _BLOCKED_IMPORT, json.dumps(["lightning_bottleneck.live.callback"])],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    failed = json.loads(out.stdout.strip().splitlines()[-1])
    assert "blocked import of" in failed["lightning_bottleneck.live.callback"]


#: One idea per file (issue 27): no module over this many lines; the callback's hooks only delegate.
MAX_MODULE_LINES = 500
MAX_CALLBACK_LINES = 350


def test_modules_stay_small_and_the_callback_thin() -> None:
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in ROOT.rglob("*.py")}
    assert len(sizes) > 50  # the walk found the package
    too_big = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not too_big, f"split these along their seams (at most {MAX_MODULE_LINES} lines): {too_big}"
    assert sizes["live/callback.py"] < MAX_CALLBACK_LINES
