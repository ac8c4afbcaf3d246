"""The package's module graph has no cycles, its module names are unique, and every module
imports (tests/test_layers.py holds the layering).

Every ``import`` statement counts, also those inside functions (a lazy import is still a
dependency: it hides a cycle rather than removing it); only ``if TYPE_CHECKING:`` blocks are
left out.  docs/architecture.md gives the layering this enforces.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "roce"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the roce modules it imports (a ``from pkg import name`` that names a
    submodule counts as an import of that submodule)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_nodes(tree)
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, is_package, node)
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                if t in modules and t != module:
                    graph[module].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
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
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _package_parents(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def test_no_import_cycles() -> None:
    graph = edges(_modules())
    # A package's __init__ importing its own submodules is how a package exposes them; a
    # submodule importing its parent package back is the cycle we look for, so only the
    # parent -> child edge is dropped.
    for module in graph:
        graph[module] = {t for t in graph[module] if module not in _package_parents(t)}
    assert cycles(graph) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_base_names_are_unique() -> None:
    """No two modules share a base name (``cli.py`` five times told nothing); the commands in
    roce/cli/ are named after the command they are (``roce/cli/decode.py`` is ``roce decode``)
    and are the one exemption, with the package ``__init__`` files."""
    seen: dict[str, list[str]] = {}
    for module, path in _modules().items():
        if path.name == "__init__.py" or module.startswith("roce.cli."):
            continue
        seen.setdefault(path.stem, []).append(module)
    assert {name: mods for name, mods in seen.items() if len(mods) > 1} == {}


def test_every_module_imports() -> None:
    """Every module imports (the graph above is read from source; this runs it)."""
    for module in sorted(_modules()):
        if module == "roce.__main__":
            continue  # runs the CLI: it is meant for ``python -m roce``
        if module.startswith("roce.testing."):
            pytest.importorskip("hypothesis")
        importlib.import_module(module)


def test_every_public_error_is_importable_from_roce() -> None:
    """Every RoceError subclass a module defines is one of roce's own names: errors are
    written in roce/errors.py once and exported from ``roce``."""
    import roce
    from roce.errors import RoceError

    public = set()
    for module in sorted(_modules()):
        if module == "roce.__main__" or module.startswith("roce.testing."):
            continue
        mod = importlib.import_module(module)
        for name, obj in vars(mod).items():
            if (isinstance(obj, type) and issubclass(obj, RoceError) and not name.startswith("_")
                    and obj.__module__ == module and module != "roce.errors"):
                public.add(f"{module}.{name}")
    # control-flow exceptions the emulator core raises and catches itself are not public
    internal = {"roce.emu.core.responder.Reject", "roce.emu.core.placement.Refused"}
    assert public - internal == set()
    for name in ("RoceError", "UsageError", "InputError", "VerificationError", "DecodeError",
                 "NotRoCE", "FilterError", "CaptureError", "InterfaceError", "TransportError",
                 "OOBError", "RemoteError", "QPStateError", "RecoveryError", "AccessError"):
        assert issubclass(getattr(roce, name), RoceError) and name in roce.__all__
