"""The emulator modules shipped compiled, and how to run their pure-Python form.

The per-packet path of the emulator (event loop, links, switch, NIC, congestion control, the
QP's requester and responder) is plain Python.  ``setup.py`` compiles the modules listed here
with Cython, unchanged: the compiled module and the ``.py`` beside it are one definition in
two forms, the same rules run in C or by the interpreter (docs/architecture.md, "Compiled
modules").  The build records each source's hash (``SOURCES``); a module whose ``.py`` no
longer matches it (edited since the build) is loaded from the ``.py``, with one warning, so
an edit is never hidden by a stale build.  ``ROCE_PURE=1`` in the environment loads the
``.py`` form of every one of them; the twin tests (tests/test_compiled_twins.py) run the same
scenarios both ways and require identical results.

This module imports nothing from ``roce``: ``setup.py`` reads it before anything is built.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings

MODULES = (
    "roce.psn",
    "roce.emu.completer",
    "roce.emu.device",
    "roce.emu.fabric",
    "roce.emu.memory",
    "roce.emu.placement",
    "roce.emu.qp",
    "roce.emu.rack",
    "roce.emu.recovery",
    "roce.emu.requester",
    "roce.emu.responder",
    "roce.emu.selective",
    "roce.emu.unreliable",
    "roce.emu.wire",
    "roce.emu.cc.base",
    "roce.emu.cc.dcqcn",
    "roce.emu.cc.driver",
    "roce.emu.cc.np",
    "roce.emu.cc.timely",
    "roce.emu.net.buffer",
    "roce.emu.net.frames",
    "roce.emu.net.link",
    "roce.emu.net.nic",
    "roce.emu.net.pfc",
    "roce.emu.net.sim",
    "roce.emu.net.stages",
    "roce.emu.net.switch",
)

PURE_ENV = "ROCE_PURE"  # set to 1: load the .py form of MODULES
SOURCES = "_compiled_sources.json"  # written by the build beside this file: module -> hash
_HERE = os.path.dirname(os.path.abspath(__file__))


def source_hash(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def _built() -> dict[str, str]:
    try:
        with open(os.path.join(_HERE, SOURCES)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


class _Chooser(importlib.abc.MetaPathFinder):
    """Decides, for each module of MODULES, which form is loaded: the compiled one when its
    ``.py`` is the one it was built from, else the ``.py`` (always, under ROCE_PURE)."""

    def __init__(self, pure: bool) -> None:
        self.pure = pure
        self.built = {} if pure else _built()
        self.stale: list[str] = []

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name not in MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.origin is None or spec.origin.endswith(".py"):
            return None  # not built (or not found): the normal import
        src = os.path.join(os.path.dirname(spec.origin), name.rpartition(".")[2] + ".py")
        if not os.path.exists(src):
            return None
        if not self.pure:
            if self.built.get(name) == source_hash(src):
                return spec
            self.stale.append(name)
            warnings.warn(f"roce: {name} was edited after it was compiled; running its .py "
                          "form (slower). Rebuild with: pip install -e .", RuntimeWarning,
                          stacklevel=2)
        return importlib.util.spec_from_file_location(name, src)


def install_finder() -> None:
    """Put the chooser ahead of the other finders (once)."""
    if not any(isinstance(f, _Chooser) for f in sys.meta_path):
        sys.meta_path.insert(0, _Chooser(pure_requested()))


def write_sources(root: str) -> None:
    """The build's record of what it compiled (``setup.py`` calls this)."""
    out = {name: source_hash(os.path.join(root, *name.split(".")) + ".py") for name in MODULES}
    with open(os.path.join(root, "roce", SOURCES), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)


def compiled_now() -> dict[str, bool]:
    """For each module of MODULES already imported: whether its compiled form is loaded."""
    out = {}
    for name in MODULES:
        mod = sys.modules.get(name)
        if mod is not None:
            out[name] = not (getattr(mod, "__file__", "") or "").endswith(".py")
    return out


if __name__ == "roce._compiled":  # imported by ``roce/__init__.py`` first; not when setup.py
    install_finder()                 # reads this file for MODULES and ``write_sources``
