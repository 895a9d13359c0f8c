"""The package's shape: no import cycles, rooms import only downwards, modules stay readable.

Every `import` counts, at module level, inside functions and under `TYPE_CHECKING` alike: a cycle hidden in a
function is still a cycle a reader has to untangle. docs/architecture.md draws the rooms checked here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = ("runtime", "radix", "grammar", "lang", "kernels")
MAX_LINES = 450  # beyond this a module needs a one-line reason in its first lines ("Longer than ...")

# room -> the rooms it must never import (the layering of docs/architecture.md)
FORBIDDEN = {
    "sprig.runtime.model": ("sprig.runtime.engine", "sprig.runtime.server", "sprig.runtime.router",
                            "sprig.runtime.bench", "sprig.runtime.distributed", "sprig.lang"),
    "sprig.runtime.distributed": ("sprig.runtime.engine", "sprig.runtime.server", "sprig.runtime.router",
                                  "sprig.runtime.bench", "sprig.lang"),
    "sprig.runtime.engine": ("sprig.runtime.server", "sprig.runtime.router", "sprig.runtime.bench", "sprig.lang"),
    "sprig.runtime.server": ("sprig.runtime.router", "sprig.runtime.bench", "sprig.lang"),
    "sprig.radix": ("sprig.runtime", "sprig.grammar", "sprig.lang", "torch"),
    "sprig.grammar": ("sprig.runtime", "sprig.lang", "fastapi", "starlette"),
    "sprig.kernels": ("sprig.runtime", "sprig.grammar", "sprig.lang", "sprig.radix"),
    "sprig.lang": ("sprig.runtime.server", "sprig.runtime.router", "sprig.kernels"),
}


def module_files() -> dict[str, Path]:
    """Every module of the package by dotted name (`sprig.runtime.engine.core`; packages by their name)."""
    mods = {"sprig": ROOT / "__init__.py"}
    for top in PACKAGE_DIRS:
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(("sprig", *parts))] = path
    return mods


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules `name` imports, resolved to the package's own modules, plus third-party top-level names."""
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            submodules = {f"{target}.{alias.name}" for alias in node.names} & known
            out.update(submodules)
            if len(submodules) < len(node.names):  # a name defined in `target` itself, not only its submodules
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    mods = module_files()
    known = set(mods)
    edges: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets = imports_of(name, path, known)
        own = {t for t in targets if t in known}
        edges[name] = own - {name} | {t for t in targets if t not in known}  # third-party names kept for rooms
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), i.e. the import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_rooms_import_only_downwards() -> None:
    bad = []
    for name, targets in graph().items():
        for room, banned in FORBIDDEN.items():
            if name == room or name.startswith(room + "."):
                bad += [f"{name} -> {t}" for t in targets for b in banned if t == b or t.startswith(b + ".")]
    assert bad == []


def test_modules_stay_short_or_say_why() -> None:
    long = []
    for name, path in module_files().items():
        lines = path.read_text().splitlines()
        if len(lines) > MAX_LINES and not any("Longer than" in line for line in lines[:12]):
            long.append(f"{name}: {len(lines)} lines")
    assert long == []
