"""The static import graph of a package (read with ``ast``): cycles, upward imports, private names.

Every ``import`` and ``from ... import`` counts, also one inside a function (a lazy import is an
import all the same); those under ``if TYPE_CHECKING:`` do not (they never run). A private name
is one that starts with ``_`` (not a dunder): taking one from another module, by ``from M import
_x`` or as ``M._x`` on an imported module, is reported, unless ``M._x`` is itself a module (a
module whose own name starts with ``_`` is where shared internals belong).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path


@dataclasses.dataclass
class Graph:
    """Modules (dotted names) of the packages read, their import edges and private uses."""

    files: dict[str, Path]
    edges: dict[str, set[str]]
    private: list[str]  # "importer takes _name from module"

    def cycles(self) -> list[list[str]]:
        """The strongly connected components of more than one module (Tarjan)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on: set[str] = set()
        out: list[list[str]] = []
        counter = [0]

        def visit(v: str) -> None:
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on.add(v)
            for w in sorted(self.edges.get(v, ())):
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

        for v in sorted(self.files):
            if v not in index:
                visit(v)
        return out


def _module_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                skip.update(id(sub) for sub in ast.walk(stmt))
    return skip


def read(*roots: Path) -> Graph:
    """The import graph of the packages at ``roots`` (folders holding an ``__init__.py``)."""
    files = {_module_name(root, p): p for root in roots for p in sorted(root.rglob("*.py"))}
    compiled = {  # compiled extensions (cvfl_theory._kernels): modules, though not .py files
        f"{_module_name(root, p.parent / '__init__.py')}.{p.name.split('.')[0]}"
        for root in roots
        for p in root.rglob("*.so")
    } | {
        f"{_module_name(root, p.parent / '__init__.py')}.{p.stem}"
        for root in roots
        for p in root.rglob("*.pyi")
    }
    modules = set(files) | compiled
    edges: dict[str, set[str]] = {m: set() for m in files}
    private: list[str] = []
    for mod, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_nodes(tree)
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        aliases: dict[str, str] = {}  # local name -> module it is bound to
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in modules:
                        edges[mod].add(a.name)
                        aliases[a.asname or a.name] = a.name
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for a in node.names:
                    full = f"{target}.{a.name}"
                    if full in modules:
                        edges[mod].add(full)
                        aliases[a.asname or a.name] = full
                    elif target in modules:
                        edges[mod].add(target)
                        if a.name.startswith("_") and not a.name.startswith("__"):
                            private.append(f"{mod} takes {a.name} from {target}")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and f"{aliases[node.value.id]}.{node.attr}" not in modules
                and aliases[node.value.id] != mod
            ):
                private.append(f"{mod} takes {node.attr} from {aliases[node.value.id]}")
    for m in edges:
        edges[m].discard(m)
        edges[m] &= set(files)  # edges to compiled modules lead nowhere
    return Graph(files, edges, sorted(set(private)))


def upward(graph: Graph, package: str, floors: dict[str, int]) -> list[str]:
    """Imports from a lower floor to a higher one (``floors``: subpackage name -> floor).

    A module of ``package`` outside every floor (the package's own ``__init__``, its public face)
    is above them all: no floor may import it.
    """
    top = max(floors.values()) + 1

    def floor(m: str) -> int | None:
        if m == package:
            return top
        if not m.startswith(package + "."):
            return None
        return floors.get(m.split(".")[1], top)

    out = []
    for src, targets in sorted(graph.edges.items()):
        fs = floor(src)
        if fs is None or src == package:
            continue
        for dst in sorted(targets):
            fd = floor(dst)
            if fd is not None and fd > fs:
                out.append(f"{src} imports {dst}")
    return out
