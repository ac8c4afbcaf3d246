"""What every start of roce computes the same way, kept between runs as Python keeps a
module's bytecode: the compiled code of the methods ``dataclasses`` writes for roce's
classes, and the digests of the source files roce checks its builds against.

``dataclasses`` makes each class's ``__init__``, ``__repr__``, ``__eq__`` ... by writing their
source and compiling it, every time the class is created: for the ~60 classes a ``roce
emulate`` run defines, parsing and compiling that source was about 30 % of the run's
instructions (bench/RESULTS.md, "roce against ns-3": the fixed cost).  Here the code object
compiled from each source text is stored in the package's ``__pycache__`` and looked up by
that text the next time, so a class gets exactly the code it would have compiled.

Only classes of roce's own modules are served (``exec``'s globals name the module); the
file is written when the process exits, only if something was compiled, only where Python
would write bytecode (not under ``-B`` or ``PYTHONDONTWRITEBYTECODE``), atomically (a
temporary file renamed over it); a file that cannot be read, is from another Python or is
damaged is ignored and rewritten.  It is a cache: losing it costs the compile, nothing else.

A file's digest (``file_hash``: whether a compiled module or a layout record was built from
the source beside it, roce/_compiled.py and roce/headers.py) is reused while the file's size
and modification time in nanoseconds are the ones it was computed for, the test Python's
own bytecode cache makes (at a second's resolution).
"""

from __future__ import annotations

import atexit
import builtins
import marshal
import os
import sys
from collections.abc import Callable
from importlib.util import MAGIC_NUMBER
from types import CodeType
from typing import Any

from roce import _compiled

_PACKAGE = __name__.partition(".")[0]
_HEADER = b"roce-startup-cache\n" + MAGIC_NUMBER
LIMIT = 4096  # entries kept; past it the file starts again from this process's (bounded)

_codes: dict[str, CodeType] = {}
_used: set[str] = set()
_hashes: dict[str, tuple[int, int, str]] = {}  # path -> (size, mtime_ns, digest)
stats = {"hits": 0, "compiled": 0, "hashed": 0}
_dirty = False


def path() -> str:
    """Where the cache is kept: beside this package's bytecode (under ``PYTHONPYCACHEPREFIX``
    when one is set, as the bytecode is)."""
    here = os.path.dirname(os.path.abspath(__file__))
    name = f"startup.{sys.implementation.cache_tag}.marshal"
    if sys.pycache_prefix:
        return os.path.join(sys.pycache_prefix, here.lstrip(os.sep), name)
    return os.path.join(here, "__pycache__", name)


def _load(where: str) -> None:
    try:
        with open(where, "rb") as f:
            data = f.read()
    except OSError:
        return
    if not data.startswith(_HEADER):
        return
    try:
        table = marshal.loads(data[len(_HEADER):])
    except (EOFError, ValueError, TypeError):
        return
    if not isinstance(table, dict):
        return
    codes, hashes = table.get("code"), table.get("hashes")
    if isinstance(codes, dict):
        _codes.update((k, v) for k, v in codes.items()
                      if isinstance(k, str) and isinstance(v, CodeType))
    if isinstance(hashes, dict):
        _hashes.update((k, v) for k, v in hashes.items()
                       if isinstance(k, str) and isinstance(v, tuple) and len(v) == 3)


def file_hash(path: str, digest: Callable[[str], str]) -> str:
    """``digest(path)``, computed again only when the file's size or mtime changed."""
    global _dirty
    st = os.stat(path)
    entry = _hashes.get(path)
    if entry is not None and entry[0] == st.st_size and entry[1] == st.st_mtime_ns:
        return entry[2]
    value = digest(path)
    _hashes[path] = (st.st_size, st.st_mtime_ns, value)
    _dirty = True
    stats["hashed"] += 1
    return value


def _save() -> None:
    if not _dirty or sys.dont_write_bytecode:
        return
    where = path()
    codes = _codes if len(_codes) <= LIMIT else {k: _codes[k] for k in _used}
    hashes = _hashes if len(_hashes) <= LIMIT else {}
    tmp = f"{where}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(where), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(_HEADER + marshal.dumps({"code": codes, "hashes": hashes}))
        os.replace(tmp, where)
    except OSError:  # read-only install, full disk: the next run compiles again
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _exec(source: Any, globals: Any = None, locals: Any = None, /) -> None:
    """``exec`` as ``dataclasses`` calls it, with roce's method sources served compiled."""
    global _dirty
    if (type(source) is not str or type(globals) is not dict
            or not str(globals.get("__name__", "")).startswith(_PACKAGE + ".")):
        return builtins.exec(source, globals, locals)
    code = _codes.get(source)
    if code is None:
        code = compile(source, "<string>", "exec")  # what exec(source) compiles
        _codes[source] = code
        _dirty = True
        stats["compiled"] += 1
    else:
        stats["hits"] += 1
    _used.add(source)
    return builtins.exec(code, globals, locals)


def install() -> None:
    """Serve ``dataclasses``' method sources from the cache (once per process)."""
    import dataclasses

    if getattr(dataclasses, "exec", None) is _exec:
        return
    dataclasses.exec = _exec  # the module's global: its calls of exec find this first


_load(path())
atexit.register(_save)
install()
_compiled.cache_hashes(file_hash)
