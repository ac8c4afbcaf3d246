"""Ultra Ethernet Transport (UET): the family that decodes, checks, presents and builds UET
packets, over UDP port 4793 or straight over IP protocol 253 (with the entropy header).

* ``codes``: the numbers and their names; ``layouts``: every header in Construct and the two
  readings (the specification as Wireshark 5.0 reads it, and the reference provider's);
* ``dissect``: bytes to Wireshark-named flat fields; ``checks``: the expert notes;
* ``present``: the one-line Info and the ``-V`` tree; ``uetfields``: every field's column type;
* ``build``: flat field values to bytes, and the frame around them.

Four registry handlers, one per (reading, carriage): ``uet`` (UDP) and ``uet.entropy`` (IP
protocol 253) read the specification; ``uet-ref-prov`` and ``uet-ref-prov.entropy`` the
reference provider's layouts.  ``roce.families.builtin`` maps UDP 4793 and IP protocol 253 to
the first two; ``use_reading`` (``roce decode --uet-layout ref-prov``) points those rows at the
other reading's, and ``-d udp.port==49150,uet`` works as for any family.
"""

from __future__ import annotations

from typing import Any

from roce.families.handler import ColumnSpec, Handler
from roce.families.registry import Registry

UET_PORT = 4793  # UDP destination port (IANA)
REF_PROV_PORT = 49150  # the reference provider's UET_UDP_PORT (uet_pkt_hdr.h)
IPPROTO_UET = 253  # UET straight over IP, with the 4-byte entropy header first
HANDLERS = {("spec", False): "uet", ("spec", True): "uet.entropy",
            ("ref-prov", False): "uet-ref-prov", ("ref-prov", True): "uet-ref-prov.entropy"}
READING_NAMES = ("spec", "ref-prov")


def _decoder(reading: str, entropy: bool) -> Any:
    loaded: list[Any] = []  # the reading's decoder (uetlines.decoder), made on the first packet

    def decode(data: bytes, caplen: int | None = None, origlen: int | None = None) -> Any:
        if not loaded:
            from roce.families.uet import uetlines
            from roce.families.uet.layouts import READINGS

            loaded.append(uetlines.decoder(READINGS[reading], entropy))
        return loaded[0](data, caplen, origlen)

    decode.__name__ = f"decode_{HANDLERS[reading, entropy].replace('-', '_').replace('.', '_')}"
    return decode


_PRESENT: list[Any] = []  # roce.families.uet.present, imported at the first line or tree


def _present() -> Any:
    if not _PRESENT:
        from roce.families.uet import present

        _PRESENT.append(present)
    return _PRESENT[0]


def columns(d: Any) -> tuple[str, str, str, str]:
    return (_PRESENT[0] if _PRESENT else _present()).columns(d)


def tree(d: Any, data: bytes) -> list[str]:
    return _present().tree(d, data)


def field_names() -> tuple[str, ...]:
    from roce.families.uet import uetfields as fields

    return fields.names()


def column_types() -> tuple[ColumnSpec, ...]:
    from roce.families.uet import uetfields as fields

    return fields.column_types()


def handlers() -> list[Handler]:
    """The four handlers (building them imports no layout: that waits for the first packet)."""
    return [Handler(name, decode=_decoder(reading, entropy), columns=columns, tree=tree,
                    fields=field_names, column_types=column_types)
            for (reading, entropy), name in HANDLERS.items()]


def use_reading(reg: Registry, reading: str) -> None:
    """Point every registry row of one UET reading at the other's handler of the same
    carriage (``roce decode --uet-layout``)."""
    if reading not in READING_NAMES:
        from roce.errors import UsageError

        raise UsageError(f"--uet-layout {reading!r}: one of {', '.join(READING_NAMES)}")
    for table, rows in reg.tables.items():
        for value, h in list(rows.items()):
            for (_r, entropy), name in HANDLERS.items():
                if h.name == name:
                    reg.map(table, value, HANDLERS[reading, entropy])


__all__ = ["HANDLERS", "IPPROTO_UET", "READING_NAMES", "REF_PROV_PORT", "UET_PORT",
           "column_types", "columns", "field_names", "handlers", "tree", "use_reading"]
