"""The package's layout: modules import only modules below them, so there is no import cycle.

Counted: every import a module makes as it loads, those under ``if TYPE_CHECKING:``
included. Imports inside functions are not: ``video.source`` opens a URL through
``video.ranged`` and ``video.remote``, which read through ``source`` again, and
those modules import each other only when a URL is opened (to untangle: the byte
sources' records in a module below all three).
"""

from __future__ import annotations

import ast
from pathlib import Path

import parallel_loader

PACKAGE = Path(parallel_loader.__file__).parent


def module_name(path: Path) -> str:
    parts = ("parallel_loader", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports as it loads (``TYPE_CHECKING`` blocks too, not functions)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _loading_statements(ast.parse(path.read_text(encoding="utf-8")).body):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            candidates = [target] + [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found.update(c for c in candidates if c in modules and c != name)
    return found


def _loading_statements(body: list[ast.stmt]):
    """The statements run as a module loads: the top level and its ``if``/``try`` blocks, not functions."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.Try):
            for block in (
                node.body,
                node.orelse,
                *(h.body for h in getattr(node, "handlers", ())),
                getattr(node, "finalbody", []),
            ):
                yield from _loading_statements(block)


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


def test_the_package_has_no_import_cycle():
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(f) for f in files}
    # A package imports its own modules to re-export them; those edges point down, not into a cycle.
    graph = {
        module_name(f): {m for m in imports_of(f, modules) if not m.startswith(module_name(f) + ".")} for f in files
    }
    assert (
        "parallel_loader._loader.data_loader" in graph["parallel_loader.train._train"]
    )  # the walk sees relative imports
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


def test_a_cycle_is_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
