"""``inspect``, imported when something first needs it, not at every start of roce.

``dataclasses`` imports ``inspect`` at its top for a single use (the docstring of a class that
has none: every roce class has one), and Cython's compiled dataclasses ask it one question:
``inspect.getfullargspec(dataclasses.field)``, which argument names ``field`` takes.  Importing
``inspect`` brings ``ast`` (whose C module makes ~140 classes), ``dis``, ``tokenize`` and
``linecache``: 7 % of the instructions of a short ``roce emulate`` (bench/RESULTS.md, "roce
against ns-3": the fixed cost).

``install`` puts a stand-in under the name ``inspect`` when nothing has imported the module
yet.  The stand-in answers ``getfullargspec`` for a plain function from the function's own
code (``argspec``: the same seven things ``inspect`` returns, which a test holds equal), and
for anything else, and for every other name, imports the real module, takes its place in
``sys.modules`` and hands over what the real module has.  A module that bound the stand-in
before that (``dataclasses``) reaches the real module through it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from _thread import RLock
from types import FunctionType, ModuleType

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08  # code flags: *args, **kwargs (Include/code.h)


class ArgSpec(tuple):
    """``inspect.FullArgSpec``'s seven fields, in its order, with its names."""

    __slots__ = ()
    _fields = ("args", "varargs", "varkw", "defaults", "kwonlyargs", "kwonlydefaults",
               "annotations")

    @property
    def args(self) -> list[str]:
        return self[0]

    @property
    def varargs(self) -> str | None:
        return self[1]

    @property
    def varkw(self) -> str | None:
        return self[2]

    @property
    def defaults(self) -> tuple | None:
        return self[3]

    @property
    def kwonlyargs(self) -> list[str]:
        return self[4]

    @property
    def kwonlydefaults(self) -> dict[str, Any] | None:
        return self[5]

    @property
    def annotations(self) -> dict[str, Any]:
        return self[6]


def argspec(func: object) -> ArgSpec | None:
    """What ``inspect.getfullargspec(func)`` returns, for a plain Python function with no
    attribute set on it (no ``__signature__``, ``__wrapped__`` or partial method that
    ``inspect`` would read instead of the code), or a plain class made by ``type`` straight
    on ``object`` that defines ``__init__`` as such a function and no ``__new__`` (its
    ``__init__``'s, ``self`` included); None for anything else."""
    if (type(func) is type and func.__mro__ == (func, object)  # type: ignore[attr-defined]
            and "__new__" not in func.__dict__ and "__signature__" not in func.__dict__):
        func = func.__dict__.get("__init__")
    if type(func) is not FunctionType or func.__dict__:
        return None
    code = func.__code__
    names, n, k = code.co_varnames, code.co_argcount, code.co_kwonlyargcount
    at = n + k
    varargs = varkw = None
    if code.co_flags & _CO_VARARGS:
        varargs, at = names[at], at + 1
    if code.co_flags & _CO_VARKEYWORDS:
        varkw = names[at]
    return ArgSpec((list(names[:n]), varargs, varkw, func.__defaults__ or None,
                    list(names[n:n + k]), func.__kwdefaults__ or None,
                    dict(func.__annotations__)))


class _Inspect(ModuleType):
    """Stands for ``inspect`` until something needs more than ``getfullargspec`` of a plain
    function."""

    def getfullargspec(self, func: object) -> Any:
        spec = argspec(func)
        return spec if spec is not None else _real().getfullargspec(func)

    def __getattr__(self, name: str) -> Any:
        return getattr(_real(), name)

    def __dir__(self) -> list[str]:
        return dir(_real())


def _real() -> ModuleType:
    """The real ``inspect``, imported in the stand-in's place the first time it is needed
    (by one thread: the others wait for it)."""
    with _LOCK:
        module = sys.modules.get("inspect")
        if module is _STANDIN:
            del sys.modules["inspect"]
            try:
                module = importlib.import_module("inspect")
            except BaseException:
                sys.modules.setdefault("inspect", _STANDIN)
                raise
        elif module is None:  # taken out by someone else
            module = importlib.import_module("inspect")
    return module


_STANDIN = _Inspect("inspect")
del _STANDIN.__doc__  # the real module's, as every name the stand-in lacks
_LOCK = RLock()


def install() -> None:
    """Put the stand-in in place, unless ``inspect`` is imported already (done when this
    module is imported: ``roce/__init__.py`` imports it first).  It carries the real
    module's spec: the import system reads it at every ``import inspect``, and
    ``importlib.util.find_spec("inspect")`` returns it."""
    if "inspect" in sys.modules:
        return
    spec = importlib.util.find_spec("inspect")
    if spec is None:  # an interpreter without it: nothing to stand for
        return
    _STANDIN.__spec__, _STANDIN.__loader__, _STANDIN.__package__ = spec, spec.loader, ""
    sys.modules.setdefault("inspect", _STANDIN)


def deferred() -> bool:
    """Whether ``inspect`` is still the stand-in (nothing has needed the real module)."""
    return isinstance(sys.modules.get("inspect"), _Inspect)


install()
