"""Imports point down only: the layer table of docs/architecture.md ("Layers and data flow"),
read from the page itself, holds for every import in the package, including imports inside
functions (a lazy import is still a dependency).

A module belongs to the row whose package or module prefix names it most closely; an import
of a module in the same row is always allowed.  ``from pkg import sub`` counts as an import of
``pkg.sub`` when ``sub`` is a module, else of ``pkg``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from test_imports import ROOT, _modules, _resolve, _type_checking_nodes

DOC = ROOT.parent / "docs" / "architecture.md"
# The one import that crosses the table on purpose (the page says why): the decoder fuzz
# harness drives ``roce decode`` end to end.
EXCEPTIONS = {("roce.testing.fuzz.decoder", "roce.cli.decode")}


def layer_table(text: str) -> list[tuple[str, list[str], set[str] | None]]:
    """(layer, module prefixes, layers it may import; None: every layer) from the table
    between ``<!-- layers -->`` and ``<!-- /layers -->``."""
    body = text.split("<!-- layers -->", 1)[1].split("<!-- /layers -->", 1)[0]
    rows = [line for line in body.strip().splitlines() if line.startswith("|")][2:]
    table = []
    for row in rows:
        name, modules, may = (cell.strip() for cell in row.strip("|").split("|"))
        # the first backquoted name of a cell, or each one of a comma-separated list; the
        # codec row names its package once and lists its modules in parentheses
        prefixes = re.findall(r"`([\w.]+)`", modules.split("(")[0])
        allowed: set[str] | None
        if may == "every layer":
            allowed = None
        elif may in ("—", "-", ""):
            allowed = set()
        else:
            allowed = {m.strip() for m in may.split(",")}
        table.append((name, prefixes, allowed))
    return table


def imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the roce modules it imports, as the docstring says."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_nodes(tree)
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, is_package, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            else:
                continue
            graph[module].update(t for t in targets if t in modules and t != module)
    return graph


def layer_of(module: str, table: list[tuple[str, list[str], set[str] | None]]) -> str:
    best, length = "", -1
    for name, prefixes, _ in table:
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > length:
                best, length = name, len(p)
    return best


def violations(graph: dict[str, set[str]],
               table: list[tuple[str, list[str], set[str] | None]]) -> list[str]:
    allowed = {name: may for name, _, may in table}
    out = []
    for module, targets in sorted(graph.items()):
        mine = layer_of(module, table)
        for target in sorted(targets):
            theirs = layer_of(target, table)
            may = allowed[mine]
            if theirs == mine or may is None or theirs in may:
                continue
            if (module, target) in EXCEPTIONS:
                continue
            out.append(f"{module} ({mine}) imports {target} ({theirs})")
    return out


@pytest.fixture(scope="module")
def table() -> list[tuple[str, list[str], set[str] | None]]:
    return layer_table(DOC.read_text())


def test_every_module_has_a_layer(table) -> None:
    assert [m for m in _modules() if not layer_of(m, table)] == []
    names = {name for name, _, _ in table}
    for name, _, may in table:  # the table names only its own layers
        assert may is None or may <= names, (name, may - names)


def test_imports_point_down(table) -> None:
    assert violations(imports(_modules()), table) == []


def test_exceptions_are_used(table) -> None:
    graph = imports(_modules())
    assert all(target in graph[module] for module, target in EXCEPTIONS)


def test_a_forbidden_import_fails(table) -> None:
    """The check finds an upward import, a lazy one inside a function included."""
    graph = imports(_modules())
    graph["roce.families.ib.native"] = graph["roce.families.ib.native"] | {"roce.decoder.decode"}
    graph["roce.emu.core.qp"] = graph["roce.emu.core.qp"] | {"roce.analysis.flows"}
    assert violations(graph, table) == [
        "roce.emu.core.qp (emulator) imports roce.analysis.flows (analysis)",
        "roce.families.ib.native (families) imports roce.decoder.decode (decoder)"]


def test_imports_inside_functions_count(tmp_path) -> None:
    """A lazy import in a function body is read like a top-level one."""
    pkg = tmp_path / "roce"
    (pkg / "emu").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "emu" / "__init__.py").write_text("")
    (pkg / "decoder.py").write_text("")
    (pkg / "emu" / "x.py").write_text("def f():\n    from roce import decoder\n")
    mods = {"roce": pkg / "__init__.py", "roce.emu": pkg / "emu" / "__init__.py",
            "roce.decoder": pkg / "decoder.py", "roce.emu.x": pkg / "emu" / "x.py"}
    assert imports(mods)["roce.emu.x"] == {"roce.decoder"}


# What only commands do (docs/architecture.md: "commands ... are the only modules that parse
# a command line, print to the terminal or exit"), checked in every module outside the
# commands' row.  Writing to a stream the caller hands in (``out.write``, ``print(...,
# file=out)``) is not printing to the terminal; reading the actions of a parser a command
# hands in (``roce.emu.grid``) is not parsing.  Each allowed use says why; the test fails
# when one goes stale.
TERMINAL_ALLOWED = {
    # a worker process of a pool (decode -j, sweep -j) stopped by its parent's SIGTERM ends at
    # once, as the signal's default action would, after removing its temporary files: it
    # must not unwind into the task (roce.interrupts.worker)
    ("roce.interrupts", "worker", "os._exit"),
    # the decoder fuzz harness drives ``roce decode`` end to end, its option parser included
    # (the import of roce.cli.decode above), and takes the parser's refusal as a result
    ("roce.testing.fuzz.decoder", "_decode", "argparse.ArgumentParser"),
    ("roce.testing.fuzz.decoder", "_decode", "parse_args"),
    ("roce.testing.fuzz.decoder", "_decode", "SystemExit"),
    # the compiled-twin tests run the interpreted form in a fresh interpreter (ROCE_PURE=1
    # acts at import): specs on stdin, summaries on stdout; a tool of the tests and
    # bench/net_equal.py, not a command
    ("roce.testing.twins", "<module>", "__main__"),
}
# calls that exit, and the argparse calls that build or run a command line
EXITS = ("sys.exit", "exit", "quit", "os._exit")
PARSING = ("ArgumentParser", "add_argument", "add_argument_group", "add_subparsers",
           "add_mutually_exclusive_group", "parse_args", "parse_known_args")


def terminal_uses(path: Path) -> list[tuple[str, str]]:
    """(function, what) for each print to the terminal, exit or command-line parse in a
    module's source."""
    tree = ast.parse(path.read_text(), str(path))
    out: list[tuple[str, str]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = child.name if where == "<module>" else where
            if isinstance(child, ast.Call):
                f = ast.unparse(child.func)
                method = f.rsplit(".", 1)[-1]
                to = next((ast.unparse(k.value) for k in child.keywords if k.arg == "file"),
                          None)
                if f == "print" and to in (None, "sys.stdout", "sys.stderr"):
                    out.append((name, "print"))
                elif f in EXITS:
                    out.append((name, f))
                elif method in PARSING:
                    out.append((name, "argparse.ArgumentParser" if method == "ArgumentParser"
                                else method))
            elif isinstance(child, ast.Name) and child.id == "SystemExit":
                out.append((name, "SystemExit"))
            elif isinstance(child, ast.Attribute) and ast.unparse(child) == "sys.argv":
                out.append((name, "sys.argv"))
            elif isinstance(child, ast.If) and ast.unparse(child.test) in (
                    "__name__ == '__main__'", "'__main__' == __name__"):
                out.append((name, "__main__"))  # the module runs as a program
            visit(child, name)

    visit(tree, "<module>")
    return out


def test_only_commands_print_exit_or_parse_a_command_line(table) -> None:
    found = {(m, fn, what) for m, path in _modules().items()
             if layer_of(m, table) != "commands" for fn, what in terminal_uses(path)}
    assert found - TERMINAL_ALLOWED == set()
    assert TERMINAL_ALLOWED - found == set()  # none stale


def test_a_print_exit_or_parse_is_found(tmp_path) -> None:
    p = tmp_path / "m.py"
    p.write_text("import argparse, os, sys\n"
                 "def f(out):\n    print('x', file=out)\n    out.write('y')\n"
                 "def g():\n    print('y')\n    sys.exit(2)\n"
                 "def h(p):\n    g = p.add_argument_group('x')\n    g.add_argument('--y')\n"
                 "    return argparse.ArgumentParser().parse_args()\n"
                 "def k():\n    try:\n        os._exit(1)\n    except SystemExit:\n"
                 "        print('z', file=sys.stderr)\n    raise SystemExit(sys.argv)\n"
                 "if __name__ == '__main__':\n    k()\n")
    assert terminal_uses(p) == [
        ("g", "print"), ("g", "sys.exit"),
        ("h", "add_argument_group"), ("h", "add_argument"), ("h", "parse_args"),
        ("h", "argparse.ArgumentParser"),
        ("k", "os._exit"), ("k", "SystemExit"), ("k", "print"), ("k", "SystemExit"),
        ("k", "sys.argv"), ("<module>", "__main__")]
