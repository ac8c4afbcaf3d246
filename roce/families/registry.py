"""The protocol-family registry: one place maps link type, EtherType, IP protocol, UDP port,
GRE protocol and ERF record type to the handler that decodes what follows.

Two kinds of handler:

* a **family** decodes a packet into Wireshark-named flat fields (``decode``), and says
  what its one-line columns and ``-V`` lines are (``columns``, ``tree``).  Native
  InfiniBand is one (``roce.families.ib``); a toy family in the tests is another.
* a **tunnel** unwraps an inner frame (``unwrap``): ERF records, GRE, ERSPAN II/III,
  VXLAN (``roce.families.tunnels``, ``roce.families.erf``).  The inner frame is
  dispatched again, so RoCE mirrored in ERSPAN in VXLAN decodes.

RoCE itself is the family named ``roce`` (``roce.families.roce``): its rows say which
link types, EtherTypes and UDP port are RoCE; its decoding stays the compiled walk and scan,
which run first on every frame of those link types (no per-packet Python for plain RoCE).
The registry is consulted only for what that walk calls "not RoCE", and for link types
RoCE does not own.

Adding a family: one module with a ``Handler`` and its rows, registered with
``REGISTRY.add(handler, ("udp.port", 5555))`` (from anywhere, e.g. a plugin), or through
the ``roce.families`` entry-point group (a callable that takes the registry).
``roce decode -d udp.port==4792,roce`` adds a row for one run, as tshark's decode-as.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from roce.errors import UsageError
from roce.families.handler import Handler, Unwrapped

TABLES = ("linktype", "ethertype", "ip.proto", "udp.port", "gre.proto", "erf.type")


@dataclass
class Registry:
    tables: dict[str, dict[int, Handler]] = field(
        default_factory=lambda: {t: {} for t in TABLES})
    handlers: dict[str, Handler] = field(default_factory=dict)

    def add(self, handler: Handler, *rows: tuple[str, int]) -> None:
        """Register ``handler`` (by name) and map each (table, value) row to it."""
        self.handlers[handler.name] = handler
        for table, value in rows:
            self.map(table, value, handler.name)

    def map(self, table: str, value: int, name: str) -> None:
        if table not in self.tables:
            raise UsageError(f"no dispatch table {table!r} (tables: {', '.join(TABLES)})")
        if name not in self.handlers:
            raise UsageError(f"no protocol family named {name!r} (known: "
                             f"{', '.join(sorted(self.handlers))})")
        self.tables[table][value] = self.handlers[name]

    def remove(self, name: str) -> None:
        """Forget a handler and every row pointing at it."""
        handler = self.handlers.pop(name, None)
        for table in self.tables.values():
            for value in [v for v, h in table.items() if h is handler]:
                del table[value]

    def lookup(self, table: str, value: int) -> Handler | None:
        return self.tables[table].get(value)

    def decode_as(self, spec: str) -> tuple[str, int, str]:
        """Parse and apply ``udp.port==4792,roce`` (tshark's ``-d`` syntax)."""
        left, sep, name = spec.partition(",")
        table, eq, value = left.partition("==")
        if not sep or not eq:
            raise UsageError(f"-d {spec!r}: expected TABLE==VALUE,FAMILY "
                             "(e.g. udp.port==4792,roce)")
        try:
            number = int(value.strip(), 0)
        except ValueError:
            raise UsageError(f"-d {spec!r}: {value!r} is not a number") from None
        self.map(table.strip(), number, name.strip())
        return table.strip(), number, name.strip()

    def field_names(self) -> frozenset[str]:
        return frozenset(n for h in self.handlers.values()
                         for n in (h.fields() if callable(h.fields) else h.fields))


REGISTRY = Registry()
_LOADED = [False, False]  # built-in rows registered, entry-point plugins loaded


def registry(plugins: bool = True) -> Registry:
    """The process-wide registry with the built-in families, and (``plugins``) those of the
    ``roce.families`` entry points.  Scanning entry points costs ~15 ms: the plain-RoCE
    paths ask without plugins (a plugin's rows are found on the per-frame path)."""
    if not _LOADED[0]:
        _LOADED[0] = True
        from roce.families import builtin

        builtin.register(REGISTRY)
    if plugins and not _LOADED[1]:
        _LOADED[1] = True
        if may_have_plugins():
            _load_plugins(REGISTRY)
    return REGISTRY


def may_have_plugins() -> bool:
    """Whether an installed distribution may declare a ``roce.families`` entry point: a look
    at the ``entry_points.txt`` of the distributions on ``sys.path`` (where importlib.metadata
    finds them), which spares runs without plugins the ~10 ms import of importlib.metadata.
    True when unsure (a zip on the path, a finder of distributions of another kind)."""
    import os
    import sys
    from importlib.machinery import PathFinder

    if any(getattr(f, "find_distributions", None) is not None and f is not PathFinder
           for f in sys.meta_path):
        return True
    for entry in sys.path:
        where = entry or "."
        if os.path.isfile(where):
            return True
        try:
            names = os.listdir(where)
        except OSError:
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(where, name, "entry_points.txt"),
                          encoding="utf-8", errors="replace") as fh:
                    if "roce.families" in fh.read():
                        return True
            except OSError:
                pass
    return False


def _load_plugins(reg: Registry) -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group="roce.families"):
        ep.load()(reg)


__all__ = ["REGISTRY", "TABLES", "Handler", "Registry", "Unwrapped", "may_have_plugins",
           "registry"]
