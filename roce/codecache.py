"""What every start of roce computes the same way, kept between runs as Python keeps a
module's bytecode: the compiled code of the methods ``dataclasses`` writes for roce's
classes, and the digests of the source files roce checks its builds against.

``dataclasses`` makes each class's ``__init__``, ``__repr__``, ``__eq__`` ... by writing their
source and compiling it, every time the class is created: for the ~60 classes a ``roce
emulate`` run defines, parsing and compiling that source was about 30 % of the run's
instructions (bench/RESULTS.md, "roce against ns-3": the fixed cost).  Here the code object
compiled from each source text is stored in the package's ``__pycache__`` and looked up by
that text the next time, so a class gets exactly the code it would have compiled.

Only classes of roce's own modules are served (``exec``'s globals name the module).  The
same goes for other code roce generates and compiles at run time (``compiled``: the header
codecs, the decoder's plans, UET's encoders and readers).  The file holds one table per
module, each unmarshalled the first time that module asks for code: a command pays for the
classes it defines, not for those of every command run before it on this installation.  The
file is written when the process exits, only if something was compiled, only where Python
would write bytecode (not under ``-B`` or ``PYTHONDONTWRITEBYTECODE``), atomically (a
temporary file renamed over it); a file that cannot be read, is from another Python or is
damaged is ignored and rewritten; one grown past ``CODE_LIMIT`` is written again with only
what the writing process used.  It is a cache: losing it costs the compile, nothing else.

A file's digest (``file_hash``: whether a compiled module or a layout record was built from
the source beside it, roce/_compiled.py and roce/headers.py), and the build's record of them
(``_compiled_sources.json``, read without loading ``json``), is reused while the file's size
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

from roce import _compiled

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

_PACKAGE = __name__.partition(".")[0]
# format 3: a table per module; dataclasses' methods compiled without this module's
# ``from __future__ import annotations`` (format 2 had their annotations as text)
_HEADER = b"roce-startup-cache\n" + MAGIC_NUMBER + b"\x03"
# Bounds: code piles up as sources change (each version of a class adds its methods), and
# every start reads the whole file.  Past CODE_LIMIT bytes the file keeps only the code this
# process used; past HASH_LIMIT paths, no digest.
CODE_LIMIT = 2 << 20
HASH_LIMIT = 4096

_blobs: dict[str, bytes] = {}  # module -> its table as read, not unmarshalled yet
_tables: dict[str, dict[str, CodeType]] = {}  # module -> {source text: code}, in use
_used: dict[str, set[str]] = {}  # module -> the sources this process asked for
_changed: set[str] = set()  # modules whose table gained code here
_hashes: dict[str, tuple[int, int, Any]] = {}  # path -> (size, mtime_ns, digest)
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
        table = marshal.loads(memoryview(data)[len(_HEADER):])  # no copy
    except (EOFError, ValueError, TypeError):
        return
    if not isinstance(table, dict):
        return
    codes, hashes = table.get("code"), table.get("hashes")
    if isinstance(codes, dict):
        _blobs.update((k, v) for k, v in codes.items()
                      if isinstance(k, str) and isinstance(v, bytes))
    if isinstance(hashes, dict):
        _hashes.update((k, v) for k, v in hashes.items()
                       if isinstance(k, str) and isinstance(v, tuple) and len(v) == 3)


def _table(module: str) -> dict[str, CodeType]:
    """``module``'s table, unmarshalled at its first use (empty when absent or damaged)."""
    table = _tables.get(module)
    if table is None:
        table = {}
        blob = _blobs.get(module)
        try:
            loaded = None if blob is None else marshal.loads(blob)
        except (EOFError, ValueError, TypeError):
            loaded = None
        if isinstance(loaded, dict):
            table.update((k, v) for k, v in loaded.items()
                         if isinstance(k, str) and isinstance(v, CodeType))
        _tables[module] = table
        _used[module] = set()
    return table


def compiled(source: str, filename: str, module: str, inherit: bool = True) -> CodeType:
    """``compile(source, filename, "exec")``, served from ``module``'s table when this
    source was compiled by an earlier process (the key holds the filename: it is part of the
    code).  ``inherit``: compiled with roce's future features (``annotations``), as the
    callers' own ``compile`` was; False for the code ``dataclasses`` writes, which its
    module compiles without."""
    global _dirty
    key = source if filename == "<string>" else f"{filename}\0{source}"
    table = _table(module)
    code = table.get(key)
    if code is None:
        code = table[key] = compile(source, filename, "exec", dont_inherit=not inherit)
        _changed.add(module)
        _dirty = True
        stats["compiled"] += 1
    else:
        stats["hits"] += 1
    _used[module].add(key)
    return code


def file_hash(path: str, digest: Callable[[str], Any]) -> Any:
    """``digest(path)``, computed again only when the file's size or mtime changed: a
    source's digest, or what a small file holds (the build's record; anything ``marshal``
    stores)."""
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
    codes = dict(_blobs)  # the tables this process did not change, as they were read
    for module in _changed:
        codes[module] = marshal.dumps(_tables[module])
    if sum(map(len, codes.values())) > CODE_LIMIT:
        codes = {module: marshal.dumps({k: table[k] for k in _used[module]})
                 for module, table in _tables.items() if _used[module]}
    hashes = _hashes if len(_hashes) <= HASH_LIMIT else {}
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
    """``exec`` as ``dataclasses`` calls it, with roce's method sources served compiled.
    Compiled as ``dataclasses`` compiles them, without this module's future features: an
    ``exec`` of text here would give every ``__init__`` its annotations as text."""
    module = globals.get("__name__", "") if type(globals) is dict else ""
    if type(source) is not str or type(module) is not str or not module.startswith(
            _PACKAGE + "."):
        if type(source) is str:
            source = compile(source, "<string>", "exec", dont_inherit=True)
        return builtins.exec(source, globals, locals)
    return builtins.exec(compiled(source, "<string>", module, inherit=False), globals, locals)


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
