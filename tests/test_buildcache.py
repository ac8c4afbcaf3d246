"""What a build rebuilds (roce/_buildcache.py): the key of a built module follows everything it
is made of, the cache hands back exactly what was stored, and a compiled module an earlier
build left beside a .py that is no longer compiled is never loaded (roce/_compiled.py)."""

from __future__ import annotations

import importlib.machinery
import os
import sys

import pytest

from roce import _buildcache as bc
from roce import _compiled

COMMANDS = {"compile": ["gcc", "-fPIC"], "link": ["gcc", "-shared"],
            "extra_compile_args": ["-O1", "-g0"], "define_macros": []}


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A source tree with a C file that includes a local header (relative paths, as a build
    runs in its source tree)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inc").mkdir()
    (tmp_path / "mod.c").write_text('#include "Python.h"\n#include "inc/a.h"\n'
                                    '#include <stdio.h>\nint f(void) { return A; }\n')
    (tmp_path / "inc" / "a.h").write_text('#include "b.h"\n#define A B\n')
    (tmp_path / "inc" / "b.h").write_text("#define B 1\n")
    return tmp_path


def key(commands=COMMANDS, compiler="gcc 12.2.0", include_dirs=()) -> str:
    return bc.extension_key("pkg.mod", ["mod.c"], include_dirs, commands, compiler)


def test_local_headers_are_followed_and_system_ones_left_out(tree) -> None:
    assert bc.local_headers("mod.c") == [os.path.join("inc", "a.h"), os.path.join("inc", "b.h")]


def test_the_key_is_stable(tree) -> None:
    assert key() == key()
    assert len(key()) == 64


@pytest.mark.parametrize("change", ["source", "header", "flag", "link", "compiler", "python"])
def test_the_key_changes_with_what_the_module_is_made_of(tree, monkeypatch, change) -> None:
    before = key()
    commands = {k: list(v) for k, v in COMMANDS.items()}
    compiler = "gcc 12.2.0"
    if change == "source":
        (tree / "mod.c").write_text((tree / "mod.c").read_text() + "int g;\n")
    elif change == "header":
        (tree / "inc" / "b.h").write_text("#define B 2\n")
    elif change == "flag":
        commands["extra_compile_args"] = ["-O2", "-g0"]
    elif change == "link":
        commands["link"] = ["gcc", "-shared", "-fopenmp"]
    elif change == "compiler":
        compiler = "gcc 14.1.0"
    else:
        monkeypatch.setattr(bc, "python_tag", lambda: ["3.99", "cpython-399", ".so", "x"])
    assert key(commands, compiler) != before


def test_include_directories_count_by_the_headers_found_in_them(tree) -> None:
    (tree / "venv-include").mkdir()  # a build environment's, holding nothing we include
    assert key(include_dirs=["venv-include"]) == key()


def test_the_cython_fingerprint_follows_files_version_and_options(tree) -> None:
    (tree / "m.py").write_text("x = 1\n")
    (tree / "m.pxd").write_text("cdef class A:\n    pass\n")
    files = ["m.py", "m.pxd"]
    fp = bc.cython_fingerprint("3.3.1", {"binding": True}, files)
    assert fp == bc.cython_fingerprint("3.3.1", {"binding": True}, files)
    assert fp != bc.cython_fingerprint("3.3.2", {"binding": True}, files)
    assert fp != bc.cython_fingerprint("3.3.1", {"binding": False}, files)
    (tree / "m.pxd").write_text("cdef class A:\n    cdef object b\n")
    assert fp != bc.cython_fingerprint("3.3.1", {"binding": True}, files)


def test_a_hit_copies_what_was_stored(tree) -> None:
    cache = bc.Cache(str(tree / "cache"))
    built = tree / "build" / "mod.so"
    built.parent.mkdir()
    built.write_bytes(b"\x7fELF module")
    dest = tree / "lib" / "mod.so"
    assert not cache.fetch("pkg.mod", "k1", str(dest))  # nothing stored yet
    cache.store("pkg.mod", "k1", str(built))
    assert cache.fetch("pkg.mod", "k1", str(dest))
    assert dest.read_bytes() == b"\x7fELF module"
    assert not cache.fetch("pkg.mod", "k2", str(tree / "other.so"))  # another key: a miss
    assert not (tree / "other.so").exists()


def test_an_altered_entry_is_not_used(tree) -> None:
    cache = bc.Cache(str(tree / "cache"))
    built = tree / "mod.so"
    built.write_bytes(b"module")
    cache.store("pkg.mod", "k1", str(built))
    (tree / "cache" / "pkg.mod" / "k1.so").write_bytes(b"modulX")  # not what was stored
    dest = tree / "out.so"
    assert not cache.fetch("pkg.mod", "k1", str(dest)) and not dest.exists()
    (tree / "cache" / "pkg.mod" / "k1.json").write_text("{")  # nor a torn record
    assert not cache.fetch("pkg.mod", "k1", str(dest))


def test_the_cache_keeps_the_entries_used_last(tree) -> None:
    cache = bc.Cache(str(tree / "cache"))
    built = tree / "mod.so"
    for i in range(bc.KEEP + 2):
        built.write_bytes(b"v%d" % i)
        cache.store("pkg.mod", f"k{i}", str(built))
        t = 1_000_000 + i
        os.utime(tree / "cache" / "pkg.mod" / f"k{i}.so", (t, t))
    cache.prune("pkg.mod")
    left = sorted(os.listdir(tree / "cache" / "pkg.mod"))
    kept = [f"k{i}" for i in range(2, bc.KEEP + 2)]
    assert left == sorted([f"{k}.json" for k in kept] + [f"{k}.so" for k in kept])


def test_the_cache_can_be_moved_or_turned_off(monkeypatch) -> None:
    monkeypatch.delenv(bc.CACHE_ENV, raising=False)
    assert bc.cache_dir("build/ext-cache") == "build/ext-cache"
    monkeypatch.setenv(bc.CACHE_ENV, "0")
    assert bc.cache_dir("build/ext-cache") is None
    monkeypatch.setenv(bc.CACHE_ENV, "/var/cache/roce")
    assert bc.cache_dir("build/ext-cache") == "/var/cache/roce"


def _fake_extension(tmp_path, name: str) -> str:
    """An extension-module file name for ``name`` (never loaded: the tests only find it)."""
    return str(tmp_path / (name + importlib.machinery.EXTENSION_SUFFIXES[0]))


def test_a_leftover_compiled_module_is_listed_and_not_loaded(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "roce" / "emu"
    pkg.mkdir(parents=True)
    (pkg / "gone.py").write_text("FORM = 'py'\n")
    (pkg / "kept.py").write_text("FORM = 'py'\n")
    (pkg / "plain.py").write_text("FORM = 'py'\n")
    leftover = _fake_extension(pkg, "gone")
    open(leftover, "wb").close()
    open(_fake_extension(pkg, "kept"), "wb").close()
    open(_fake_extension(tmp_path / "roce", "_native"), "wb").close()  # no .py beside it
    monkeypatch.setattr(_compiled, "MODULES", ("roce.emu.kept",))
    assert _compiled.leftover_builds(str(tmp_path)) == [leftover]
    chooser = _compiled._Chooser(pure=False)
    assert chooser.find_spec("roce.emu.gone", [str(pkg)]).origin == str(pkg / "gone.py")
    # a module never compiled: the .py the normal import finds; one built from a .pyx (no .py
    # beside it) and one that does not exist: left to the normal import
    assert chooser.find_spec("roce.emu.plain", [str(pkg)]).origin == str(pkg / "plain.py")
    assert chooser.find_spec("roce._native", [str(tmp_path / "roce")]) is None
    assert chooser.find_spec("roce.emu.other", [str(pkg)]) is None  # no such module
    assert chooser.find_spec("json", None) is None  # not roce's: the normal import


def test_no_compiled_module_here_is_a_leftover() -> None:
    root = os.path.dirname(os.path.dirname(_compiled.__file__))
    assert _compiled.leftover_builds(root) == []
    # every compiled module loaded so far is one the build makes from the .py beside it
    # (MODULES), or has no .py beside it (_fastpath, the TWINS)
    loaded = {name: m.__file__ for name, m in list(sys.modules.items())
              if name.startswith("roce.") and isinstance(getattr(m, "__loader__", None),
                                                         importlib.machinery.ExtensionFileLoader)}
    assert not [name for name, path in loaded.items() if name not in _compiled.MODULES
                and os.path.exists(os.path.join(os.path.dirname(path),
                                                name.rpartition(".")[2] + ".py"))]


def test_a_new_cc_module_is_compiled_unless_the_rule_excludes_it(tmp_path) -> None:
    for name in ("__init__", "params", "timely", "dcqcn", "newalgo"):
        (tmp_path / f"{name}.py").write_text("")
    (tmp_path / "dcqcn.pxd").write_text("")
    assert _compiled._cc_modules(str(tmp_path)) == ["roce.emu.cc.dcqcn", "roce.emu.cc.newalgo"]
    here = [m for m in _compiled.MODULES if m.startswith("roce.emu.cc.")]
    assert here == _compiled._cc_modules() and "roce.emu.cc.timely" not in here
