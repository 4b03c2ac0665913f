"""The package's layout: layers that import only those below them, no import cycle, small modules.

Every import of one of the package's modules counts, wherever it is made: at the
top, under ``if TYPE_CHECKING:``, or inside a function. Only optional third-party
modules (``LAZY``) may be imported inside a function. ``LAYERS`` is the table of
the layers from the bottom; docs/architecture.md draws the same table.
"""

from __future__ import annotations

import ast
from pathlib import Path

import parallel_loader

PACKAGE = Path(parallel_loader.__file__).parent

# From the bottom. A module belongs to the entry with the longest prefix that names it or a package above it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core: checks, interrupt-safe locks, the queue, the thread pool, telemetry", ("parallel_loader._core",)),
    ("faults: errors, error budget, error sink, quarantine, results", ("parallel_loader._faults",)),
    ("data: the yield-function protocol, batching, Keras sources", ("parallel_loader._data",)),
    ("video, pure: what a file's frames are, a source's key and URL rules", ("parallel_loader.video._base",)),
    ("video, byte sources: local file, object, ranged reads", ("parallel_loader.video._bytes",)),
    ("video, media: frames, pixels, one clip", ("parallel_loader.video._media",)),
    ("video, indexes: from packets, by scanning, the store, the cache", ("parallel_loader.video._indexes",)),
    ("video, reading: local and remote", ("parallel_loader.video._read",)),
    ("video, sample lists and sampling", ("parallel_loader.video._samples",)),
    ("video, datasets", ("parallel_loader.video._datasets",)),
    ("video, public", ("parallel_loader.video", "parallel_loader.video.remote", "parallel_loader.video.index")),
    ("calls: threads, worker processes, shared-memory batches", ("parallel_loader._calls",)),
    ("loader: plan, dispatch, delivery, options, state, autotune", ("parallel_loader._loader",)),
    ("loader, public", ("parallel_loader.sharding", "parallel_loader.ray")),
    (
        "video commands (the check runs files through a loader)",
        ("parallel_loader.video._commands", "parallel_loader.video.check", "parallel_loader.video.index.__main__"),
    ),
    (
        "tensorflow (imported lazily)",
        (
            "parallel_loader.tensorflow",
            "parallel_loader.tf_data",
            "parallel_loader.tf_startup",
            "parallel_loader.keras",
        ),
    ),
    ("train: Train and its progress", ("parallel_loader.train",)),
    ("tools: the synthetic data set", ("parallel_loader.sample_data",)),
    ("the package's names", ("parallel_loader",)),
]

# The modules a user imports; every other module path has a component with a leading underscore.
PUBLIC = {
    "parallel_loader",
    "parallel_loader.keras",
    "parallel_loader.ray",
    "parallel_loader.sample_data",
    "parallel_loader.sharding",
    "parallel_loader.tensorflow",
    "parallel_loader.tf_data",
    "parallel_loader.tf_startup",
    "parallel_loader.train",
    "parallel_loader.video",
    "parallel_loader.video.check",
    "parallel_loader.video.index",
    "parallel_loader.video.index.__main__",
    "parallel_loader.video.remote",
}

# Optional third-party modules, imported only where used (an extra may not be installed).
LAZY = {"aiohttp", "botocore", "fsspec", "keras", "ray", "s3fs", "tensorflow", "tf_keras"}

MAX_MODULE_LINES = 450
MAX_CLASS_LINES = 350


def module_name(path: Path) -> str:
    parts = ("parallel_loader", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_in(path: Path, name: str | None = None) -> list[tuple[str, list[str], bool]]:
    """Each import in ``path`` (the module ``name``): the module named, the names taken, whether in a function."""
    name = module_name(path) if name is None else name
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.rsplit(".", child.level - 1)[0] if child.level > 1 else package
                    target = f"{base}.{child.module}" if child.module else base
                else:
                    target = child.module or ""
                found.append((target, [alias.name for alias in child.names], inner))
            elif isinstance(child, ast.Import):
                found.extend((alias.name, [], inner) for alias in child.names)
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def package_imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports, anywhere in it."""
    found: set[str] = set()
    for target, names, _ in imports_in(path):
        candidates = [target] + [f"{target}.{n}" for n in names]
        found.update(c for c in candidates if c in modules and c != module_name(path))
    return found


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of the entry with the longest prefix naming ``module``, or -1."""
    best, best_length = -1, -1
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = rank, len(prefix)
    return best


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (the modules in order, the first repeated last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


FILES = sorted(PACKAGE.rglob("*.py"))
MODULES = {module_name(f) for f in FILES}
# A package imports its own modules to re-export them: those edges point down, into the package.
GRAPH = {
    module_name(f): {m for m in package_imports(f, MODULES) if not m.startswith(module_name(f) + ".")} for f in FILES
}


def test_the_walk_sees_relative_imports_and_imports_inside_functions(tmp_path):
    assert "parallel_loader._loader.data_loader" in GRAPH["parallel_loader.train._train"]
    module = tmp_path / "m.py"
    module.write_text("import os\n\ndef f():\n    from .x import y\n    import tensorflow\n")
    found = imports_in(module, "pkg.m")
    assert found == [("os", [], False), ("pkg.x", ["y"], True), ("tensorflow", [], True)]


def test_the_package_has_no_import_cycle_counting_imports_inside_functions():
    assert find_cycle(GRAPH) is None, f"import cycle: {' -> '.join(find_cycle(GRAPH) or [])}"


def test_a_cycle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_every_module_is_in_one_layer_and_every_layer_holds_a_module():
    assert [m for m in sorted(MODULES) if layer_of(m) < 0] == []
    held = {layer_of(m) for m in MODULES}
    assert [LAYERS[i][0] for i in range(len(LAYERS)) if i not in held] == []


def test_each_layer_imports_only_the_layers_below_it():
    upward = [
        f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
        for m, targets in GRAPH.items()
        for t in sorted(targets)
        if layer_of(t) > layer_of(m)
    ]
    assert upward == []


def test_a_layer_that_imports_upward_is_caught():
    assert layer_of("parallel_loader._core.fifo_queue") < layer_of("parallel_loader._loader.data_loader")
    assert layer_of("parallel_loader.video._datasets.dataset") < layer_of("parallel_loader._calls.worker_processes")
    assert layer_of("parallel_loader.video.index.__main__") > layer_of("parallel_loader.video.index")


def test_only_optional_third_party_modules_are_imported_inside_functions():
    lazy = [
        f"{module_name(f)}: {target}"
        for f in FILES
        for target, _, inner in imports_in(f)
        if inner and target.split(".")[0] not in LAZY
    ]
    assert lazy == []


def test_every_module_outside_the_public_surface_has_a_leading_underscore():
    exposed = [m for m in sorted(MODULES - PUBLIC) if not any(part.startswith("_") for part in m.split(".")[1:])]
    assert exposed == []
    assert PUBLIC <= MODULES


def test_no_module_or_class_is_too_long_to_read():
    long_modules, long_classes = [], []
    for f in FILES:
        text = f.read_text(encoding="utf-8")
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            long_modules.append(f"{module_name(f)}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and (size := node.end_lineno - node.lineno + 1) > MAX_CLASS_LINES:
                long_classes.append(f"{module_name(f)}.{node.name}: {size} lines")
    assert long_modules == [] and long_classes == []
