"""A package's re-exported names, each imported from its module when first read (PEP 562).

A package that gathers its modules' names (``from roce.emu.cc import Dcqcn``) would import
every module whenever any one of them is imported; a run needs few of them, and each
import costs start-up time (bench/RESULTS.md, "roce against ns-3": the fixed cost)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(package: str, where: Mapping[str, str]
                 ) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``where`` maps each exported name to
    the module (relative to the package) that defines it."""
    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return sorted(where)

    return __getattr__, __dir__
