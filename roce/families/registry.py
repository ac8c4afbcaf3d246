"""The protocol-family registry: one place maps link type, EtherType, IP protocol, UDP port,
GRE protocol and ERF record type to the handler that decodes what follows.

Two kinds of handler:

* a **family** decodes a packet into Wireshark-named flat fields (``decode``), and says
  what its one-line columns and ``-V`` lines are (``columns``, ``tree``).  Native
  InfiniBand is one (``roce.families.ib.native``); a toy family in the tests is another.
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
    """The dispatch tables (table, value -> handler name) and the handlers by name."""

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

    def display(self) -> dict[str, str]:
        """Every handler's ``display``: flat name -> format of a field shown in hex."""
        out: dict[str, str] = {}
        for h in self.handlers.values():
            out.update(h.display() if callable(h.display) else h.display)
        return out

    def wireshark_names(self) -> dict[str, tuple[str, ...]]:
        """Every handler's ``wireshark``: Wireshark name -> the flat names it stands for."""
        out: dict[str, tuple[str, ...]] = {}
        for h in self.handlers.values():
            out.update(h.wireshark() if callable(h.wireshark) else h.wireshark)
        return out


REGISTRY = Registry()  # the process-wide one: roce.families.registry() loads its rows


__all__ = ["REGISTRY", "TABLES", "Handler", "Registry", "Unwrapped"]
