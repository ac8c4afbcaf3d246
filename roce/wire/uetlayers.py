"""Scapy layers for Ultra Ethernet Transport, generated from the UET layouts
(``roce.families.uet.layouts``): one ``Packet`` class per layout of each reading, fields in
wire order with the layout's widths, names the layout's field names with ``_`` for ``.``
(``psn``, ``std_opcode``, ``ack_sack_bitmap``).  Nothing about a layout is written here.

Classes are ``UET_<LAYOUT KEY>`` (``UET_PROLOGUE`` is the PDS prologue, ``UET_RUD_ROD``,
``UET_ACK_EXT``, ``UET_STD``, ``UET_STD_SOM``...); where the reference provider's layout
differs, its class has ``_REF_PROV`` after (``UET_RENDV_REF_PROV``).  ``LAYERS`` maps
(reading, layout key) to the class.

Dissection follows the family's own decoder: the first UET layer (after UDP 4793, or the
entropy header after IP protocol 253) asks ``roce.families.uet.dissect`` which layouts the
packet holds and each layer hands over to the next of them, in the reading chosen with
``use_reading`` (``"spec"`` unless told).  Building stacks layers as usual::

    IP()/UDP()/UET_PROLOGUE(type=2, nh=3, flags=0x08)/UET_RUD_ROD(psn=5, ...)/UET_STD(...)

``UDP()/UET_PROLOGUE()`` gets destination port 4793 and checksum 0; ``IP()/UET_ENTROPY()``
protocol 253.  Importing this module binds; ``unbind()`` takes the bindings out again.
"""

from __future__ import annotations

from typing import Any

from scapy.fields import BitField
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Packet, Raw, bind_bottom_up, bind_top_down, split_layers

from roce.families.uet import IPPROTO_UET, UET_PORT, dissect
from roce.families.uet import codes as t
from roce.families.uet.layouts import READINGS, Header

_reading = ["spec"]


def use_reading(name: str) -> None:
    """Dissect with the layouts of ``name`` (``spec`` or ``ref-prov``)."""
    if name not in READINGS:
        raise ValueError(f"no UET reading {name!r} (one of {', '.join(READINGS)})")
    _reading[0] = name


def field_name(layout_name: str) -> str:
    name = layout_name.replace(".", "_")
    return f"uet_{name}" if hasattr(Packet, name) else name


class _UETLayer(Packet):
    """What every UET layer does: hand over to the next layout of the packet."""

    _uet_key = ""

    def _chain(self) -> tuple[tuple[str, ...], int]:
        """(the packet's layout keys, this layer's index in them)."""
        layer: Any = self
        depth = 0
        while isinstance(layer.underlayer, _UETLayer):
            layer, depth = layer.underlayer, depth + 1
        return layer.uet_chain, depth

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        chain, i = self._chain()
        if i + 1 < len(chain):
            return LAYERS[_reading[0], chain[i + 1]]
        return Raw


class _UETFirst(_UETLayer):
    """The first UET layer: reads the whole packet once to learn its layouts."""

    uet_chain: tuple[str, ...] = ()
    _entropy = False

    def pre_dissect(self, s: bytes) -> bytes:
        d = dissect.decode(s, entropy=self._entropy, reading=READINGS[_reading[0]])
        # TSS packets: after the PDS comes ciphertext, which stays Raw
        self.uet_chain = d.headers
        return s


def _tss_or_pds(cls: type[Packet], _pkt: bytes | None = None, *args: Any,
                **kw: Any) -> type[Packet]:
    """After UDP: a TSS header when the first 5 bits say so (type 1), else the PDS."""
    return UET_TSS if _pkt and _pkt[0] >> 3 == t.TSS_TYPE else cls


def _class_name(key: str, reading: str, shared: bool) -> str:
    name = "UET_" + key.upper().replace(".", "_")
    return name if shared else f"{name}_{reading.upper().replace('-', '_')}"


def _make(h: Header, name: str, first: bool) -> type[Packet]:
    fields = [BitField(field_name(f.name), 0, f.bits) for f in h.layout.fields]
    base = _UETFirst if first else _UETLayer
    ns: dict[str, Any] = {"name": f"UET {h.key}", "fields_desc": fields, "_uet_key": h.key,
                          "__module__": __name__,
                          "__doc__": f"UET {h.key} ({h.size} bytes), from "
                                     "roce.families.uet.layouts."}
    if h.key == "entropy":
        ns["_entropy"] = True
    return type(name, (base,), ns)


def _layers() -> dict[tuple[str, str], type[Packet]]:
    out: dict[tuple[str, str], type[Packet]] = {}
    spec, ref = READINGS["spec"], READINGS["ref-prov"]
    for reading in (spec, ref):
        for key, h in reading.headers.items():
            other = (ref if reading is spec else spec).headers.get(key)
            shared = other is not None and other.layout == h.layout
            if shared and (spec.name, key) in out:
                out[reading.name, key] = out[spec.name, key]
                continue
            first = key in ("entropy", "prologue", "tss")
            out[reading.name, key] = _make(h, _class_name(key, reading.name, shared
                                                          or reading is spec), first)
    return out


LAYERS = _layers()
globals().update({cls.__name__: cls for cls in LAYERS.values()})
UET_PROLOGUE = LAYERS["spec", "prologue"]
UET_TSS = LAYERS["spec", "tss"]
UET_ENTROPY = LAYERS["spec", "entropy"]
# Scapy asks a class's own dispatch_hook (not an inherited one) which class to make
UET_PROLOGUE.dispatch_hook = classmethod(_tss_or_pds)  # type: ignore[attr-defined]

_bound = [False]


def bind() -> None:
    """UDP 4793 and IP protocol 253 dissect into these layers; building sets them."""
    if _bound[0]:
        return
    bind_bottom_up(UDP, UET_PROLOGUE, dport=UET_PORT)
    bind_top_down(UDP, UET_PROLOGUE, dport=UET_PORT, chksum=0)
    bind_top_down(UDP, UET_TSS, dport=UET_PORT, chksum=0)
    bind_bottom_up(IP, UET_ENTROPY, proto=IPPROTO_UET)
    bind_top_down(IP, UET_ENTROPY, proto=IPPROTO_UET)
    bind_bottom_up(IPv6, UET_ENTROPY, nh=IPPROTO_UET)
    bind_top_down(IPv6, UET_ENTROPY, nh=IPPROTO_UET)
    _bound[0] = True


def unbind() -> None:
    if not _bound[0]:
        return
    split_layers(UDP, UET_PROLOGUE, dport=UET_PORT)
    split_layers(UDP, UET_TSS, dport=UET_PORT)
    split_layers(IP, UET_ENTROPY, proto=IPPROTO_UET)
    split_layers(IPv6, UET_ENTROPY, nh=IPPROTO_UET)
    _bound[0] = False


def flat_fields(pkt: Packet) -> dict[str, Any]:
    """The UET layers of ``pkt`` as ``roce decode``'s flat fields (raw layout values)."""
    out: dict[str, Any] = {}
    reading = READINGS[_reading[0]]
    layer = pkt
    while layer and not isinstance(layer, _UETLayer):
        layer = layer.payload
    while isinstance(layer, _UETLayer):
        h = reading.headers[layer._uet_key]
        for key, f in zip(h.keys, h.layout.fields):
            out[key] = layer.getfieldval(field_name(f.name))
        layer = layer.payload
    return out


bind()

__all__ = ["LAYERS", "UET_ENTROPY", "UET_PROLOGUE", "UET_TSS", "bind", "field_name",
           "flat_fields", "unbind", "use_reading"]
