"""A RoCE packet as data: parse frames, build frames, craft packets.

``Packet`` holds one dict of field values per header, in wire order (``eth``, ``vlan``,
``ip``/``ipv6``/``grh``, ``udp``, ``bth``, the extended headers the opcode dictates), then
payload, pad and ICRC.  Fields left ``None`` are filled when the frame is built: lengths,
checksum, PadCnt, pad, UDP source port and ICRC.  A parsed packet keeps the values it found,
so ``to_bytes()`` gives back the very same frame, bad ICRC and odd pad included.

Layouts come from ``roce.headers``; what follows BTH comes from ``roce.opcodes``.
"""

from __future__ import annotations

import operator

from roce import fast
from roce.errors import DecodeError
from roce.headers import DECODERS, ENCODERS, LAYOUTS, SIZE_OF, syndrome_type, syndrome_value
from roce.icrc import L3_GRH, L3_IPV4, L3_IPV6, to_trailer
from roce.locate import (
    BAD_L3_LENGTH,
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    ETHERTYPE_ROCEV1,
    GRH_NEXT_BTH,
    HEADER_IDS,
    L2_HEADERS,
    LINKTYPE_ETHERNET,
    OK,
    ROCE_PORT,
    Walk,
    explain,
)
from roce.opcodes import OPCODES, Opcode, Transport, lookup

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

_L2_NAME = L2_HEADERS
_L3_NAME = {L3_IPV4: "ip", L3_IPV6: "ipv6", L3_GRH: "grh"}
_VLAN_NAMES = ("vlan", "vlan2")
_ETYPE_KEY = {"eth": "type", "sll": "etype", "sll2": "etype", "vlan": "etype", "vlan2": "etype"}
# One-field headers whose field is named like the header (ImmDt, IETH): flat key "immdt".
_SINGLE = frozenset(n for n, lay in LAYOUTS.items()
                    if len(lay.fields) == 1 and lay.fields[0].name == n)

# rxe: UDP source port = 0xC000 | 14-bit hash of the QPN (hash_32 with the golden ratio).
_GOLDEN_RATIO_32 = 0x61C88647


def udp_source_port(qpn: int) -> int:
    """Flow-entropy UDP source port for a QP number, as Linux rxe derives it."""
    return 0xC000 | ((((qpn * _GOLDEN_RATIO_32) & 0xFFFFFFFF) >> 18) & 0x3FFF)


class Packet:
    """One RoCE packet: headers (dicts of fields), payload, pad and ICRC.

    A parsed packet decodes its headers on first use and keeps its frame: ``to_bytes()``
    returns that frame until ``headers`` (or an attribute) is touched through the public
    properties, after which the frame is rebuilt from the values, so edits take effect.
    """

    __slots__ = ("_headers", "_payload", "_pad", "_icrc", "_trailer", "linktype", "walk",
                 "_frame", "_shared")

    def __init__(self, headers: dict[str, dict[str, Any]], payload: bytes = b"",
                 pad: bytes | None = None, icrc: int | None = None, trailer: bytes = b"",
                 linktype: int = LINKTYPE_ETHERNET) -> None:
        self._headers: dict[str, dict[str, Any]] | None = headers
        self._payload = bytes(payload)
        self._pad = pad
        self._icrc = icrc
        self._trailer = trailer
        self.linktype = linktype
        self.walk: Walk | None = None
        self._frame: bytes | None = None
        self._shared = False  # header dicts shared with craft()'s templates: copy on access

    # -- lazy decoding; public setters and ``headers`` drop the cached frame ---------------

    def _hdrs(self) -> dict[str, dict[str, Any]]:
        h = self._headers
        if h is None:
            h = self._headers = _decode_headers(self._frame, self.walk, self.linktype)
        return h

    @property
    def headers(self) -> dict[str, dict[str, Any]]:
        h = self._hdrs()
        if self._shared:
            h = self._headers = {k: dict(v) for k, v in h.items()}
            self._shared = False
        self._frame = None  # the caller may edit the dicts: rebuild from them from now on
        return h

    @headers.setter
    def headers(self, value: dict[str, dict[str, Any]]) -> None:
        self._headers, self._frame = value, None

    payload = property(lambda self: self._payload,
                       lambda self, v: self._set("_payload", bytes(v)))
    pad = property(lambda self: self._pad, lambda self, v: self._set("_pad", v))
    icrc = property(lambda self: self._icrc, lambda self, v: self._set("_icrc", v))
    trailer = property(lambda self: self._trailer, lambda self, v: self._set("_trailer", v))

    def _set(self, name: str, value: Any) -> None:
        self._hdrs()
        setattr(self, name, value)
        self._frame = None

    # -- views ------------------------------------------------------------------------------

    @property
    def bth(self) -> dict[str, Any]:
        return self.headers["bth"]

    @property
    def opcode(self) -> Opcode:
        return OPCODES[self._hdrs()["bth"]["opcode"]]

    @property
    def roce_version(self) -> int:
        return 1 if "grh" in self._hdrs() else 2

    @property
    def l3(self) -> str:
        h = self._hdrs()
        for name in ("ip", "ipv6", "grh"):
            if name in h:
                return name
        return ""

    def __getitem__(self, header: str) -> dict[str, Any]:
        return self.headers[header]

    def __contains__(self, header: str) -> bool:
        return header in self._hdrs()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Packet) and self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        bth = self._hdrs()["bth"]
        op = OPCODES.get(bth.get("opcode"))
        name = op.short_name if op else f"opcode 0x{bth.get('opcode', 0):02x}"
        return (f"<roce.Packet {name} QP=0x{bth.get('destqp') or 0:06x} PSN={bth.get('psn')}"
                f" payload={len(self._payload)}B>")

    def copy(self) -> Packet:
        h = self._hdrs()
        return Packet({k: dict(v) for k, v in h.items()}, self._payload, self._pad,
                      self._icrc, self._trailer, self.linktype)

    # -- building ---------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The frame: lengths, checksum, PadCnt, pad and ICRC filled where they are None."""
        if self._frame is not None:
            return self._frame
        return _build(self)[0]

    def __bytes__(self) -> bytes:
        return self.to_bytes()

    def _built(self) -> tuple[bytes, Walk]:
        if self._frame is not None and self.walk is not None:
            return self._frame, self.walk
        return _build(self)

    @property
    def expected_icrc(self) -> int:
        """The ICRC this packet should carry (computed over its bytes)."""
        frame, w = self._built()
        return fast.icrc_of(frame, w)

    @property
    def stored_icrc(self) -> int:
        frame, w = self._built()
        return int.from_bytes(frame[w.icrc_off:w.l4_end], "big")

    @property
    def icrc_valid(self) -> bool:
        frame, w = self._built()
        return fast.icrc_of(frame, w) == int.from_bytes(frame[w.icrc_off:w.l4_end], "big")

    # -- the flat field view ----------------------------------------------------------------

    def fields(self) -> dict[str, Any]:
        """Flat dict keyed by decoder field names: ``bth.psn``, ``reth.va``, ``icrc`` ..."""
        out: dict[str, Any] = {}
        for h, values in self._hdrs().items():
            if h in _SINGLE:
                out[h] = values[h]
                continue
            out[h] = True
            for k, v in values.items():
                out[f"{h}.{k}"] = v
        aeth = self._hdrs().get("aeth")
        if aeth is not None and aeth.get("syndrome") is not None:
            syn = aeth["syndrome"]
            kind, value = syndrome_type(syn), syndrome_value(syn)
            out["aeth.syndrome.reserved"] = syn >> 7
            out["aeth.syndrome.opcode"] = kind
            key = ("credit_count", "timer", "reserved_value", "error_code")[kind]
            out[f"aeth.syndrome.{key}"] = value
        out["payload.len"] = len(self._payload)
        out["roce.version"] = self.roce_version
        if self.walk is not None and self.walk.status != OK:  # cut short by the capture
            out["frame.len"] = self.walk.payload_off + len(self._payload)
            return out
        frame, w = self._built()
        out["icrc"] = int.from_bytes(frame[w.icrc_off:w.l4_end], "big")
        out["icrc.valid"] = fast.icrc_of(frame, w) == out["icrc"]
        out["frame.len"] = len(frame)
        return out


_L3_KIND = {"ip": L3_IPV4, "ipv6": L3_IPV6, "grh": L3_GRH}
_ETHERTYPE = {"ip": ETHERTYPE_IPV4, "ipv6": ETHERTYPE_IPV6, "grh": ETHERTYPE_ROCEV1}
_UDP_SIZE, _BTH_SIZE = SIZE_OF["udp"], SIZE_OF["bth"]


def _build(p: Packet) -> tuple[bytes, Walk]:
    """Assemble the frame, filling None fields; returns the frame and where headers are."""
    h = p._hdrs()
    bth = h["bth"]
    payload = p._payload
    padcnt = bth.get("padcnt")
    if padcnt is None:
        padcnt = -len(payload) & 3
        bth = {**bth, "padcnt": padcnt}
    pad = p._pad if p._pad is not None else bytes(padcnt)
    op = OPCODES.get(bth.get("opcode"))
    ext = b"".join([ENCODERS[n](h.get(n, {})) for n in op.headers]) if op is not None else b""
    transport = ENCODERS["bth"](bth) + ext + payload + pad
    l3 = "ip" if "ip" in h else "ipv6" if "ipv6" in h else "grh"
    l2 = _L2_NAME.get(p.linktype)
    vlans = 0
    if l2 is None:
        raw_l2 = b""
    elif "vlan" not in h:
        values = h[l2]
        key = _ETYPE_KEY[l2]
        if values.get(key) is None:
            values = {**values, key: _ETHERTYPE[l3]}
        raw_l2 = ENCODERS[l2](values)
    else:
        chain = [l2] + [v for v in _VLAN_NAMES if v in h]
        vlans = len(chain) - 1
        parts = []
        for i, name in enumerate(chain):
            values = h.get(name, {})
            key = _ETYPE_KEY[name]
            if values.get(key) is None:
                values = {**values, key: 0x8100 if i < vlans else _ETHERTYPE[l3]}
            parts.append(ENCODERS["vlan" if name in _VLAN_NAMES else name](values))
        raw_l2 = b"".join(parts)
    l3_values = h[l3]
    fix_len = l3_values.get(_L3_LEN[l3]) is None
    fix_sum = l3 == "ip" and l3_values.get("checksum") is None
    options = b""
    if l3 == "ip":
        options = l3_values.get("options") or b""
        if fix_len or fix_sum or l3_values.get("ihl") is None:
            l3_values = {**l3_values, "len": _given(l3_values.get("len"), 0),
                         "checksum": _given(l3_values.get("checksum"), 0),
                         "ihl": _given(l3_values.get("ihl"), 5 + len(options) // 4)}
    elif fix_len:
        l3_values = {**l3_values, _L3_LEN[l3]: 0}
    raw_l3 = ENCODERS[l3](l3_values) + options
    raw_udp = b""
    fix_udp = False
    if l3 != "grh":
        udp = h["udp"]
        fix_udp = udp.get("length") is None
        if fix_udp or udp.get("srcport") is None:
            srcport = udp.get("srcport")
            udp = {**udp, "length": _given(udp.get("length"), 0),
                   "srcport": udp_source_port(bth.get("destqp") or 0) if srcport is None
                   else srcport}
        raw_udp = ENCODERS["udp"](udp)
    frame = fast.assemble(raw_l2, raw_l3, _L3_KIND[l3], raw_udp, transport, p._icrc,
                          p._trailer, fix_len, fix_sum, fix_udp)
    l3_off = len(raw_l2)
    bth_off = l3_off + len(raw_l3) + len(raw_udp)
    payload_off = bth_off + _BTH_SIZE + len(ext)
    icrc_off = bth_off + len(transport)
    w = tuple.__new__(Walk, (OK, vlans, _L3_KIND[l3], l3_off, len(raw_l3),
                             l3_off + len(raw_l3) if raw_udp else -1, bth_off, bth["opcode"],
                             payload_off, payload_off + len(payload), icrc_off, icrc_off + 4,
                             0, 0, 0, 0))
    return frame, w


_L3_LEN = {"ip": "len", "ipv6": "plen", "grh": "paylen"}


def _given(value: Any, default: Any) -> Any:
    """``value`` unless it is None: an explicit 0 is a value (fuzzers send ihl=0 on purpose)."""
    return default if value is None else value


# -- parsing ------------------------------------------------------------------------------------


def parse(frame: bytes, linktype: int = LINKTYPE_ETHERNET, udp_port: int = ROCE_PORT,
          partial: bool = False) -> Packet:
    """Decode one frame into a Packet.

    Raises ``NotRoCE`` for frames that are not RoCE and ``DecodeError`` (with ``.header`` and
    ``.offset``) for malformed ones.  With ``partial=True`` a frame cut short by the capture
    (its L3 length claims more than was captured) decodes as far as its headers go; such a
    packet has ``payload`` cut short and ``icrc`` None.
    """
    frame = bytes(frame)
    w = fast.walk(frame, linktype, udp_port)
    if w.status != OK:
        if not (partial and w.status == BAD_L3_LENGTH and w.payload_off >= 0):
            raise explain(w)
    return _from_walk(frame, w, linktype)


def _from_walk(frame: bytes, w: Walk, linktype: int) -> Packet:
    p = Packet.__new__(Packet)
    p._headers = None
    p._shared = False
    p.linktype = linktype
    p.walk = w
    if w.status != OK:  # partial: everything after the headers is what was captured
        p._payload, p._pad, p._icrc, p._trailer = frame[w.payload_off:], b"", None, b""
        p._frame = None
        p._headers = _decode_headers(frame, w, linktype)
        return p
    p._payload = frame[w.payload_off:w.pad_off]
    p._pad = frame[w.pad_off:w.icrc_off]
    p._icrc = int.from_bytes(frame[w.icrc_off:w.l4_end], "big")
    p._trailer = frame[w.l4_end:]
    p._frame = frame
    return p


def decode_headers_reference(frame: bytes | None, w: Walk | None,
                             linktype: int) -> dict[str, dict[str, Any]]:
    """Every header of a walked frame as dicts of fields (``fast.decode_headers`` is the
    compiled twin)."""
    assert frame is not None and w is not None
    headers: dict[str, dict[str, Any]] = {}
    l2 = _L2_NAME.get(linktype)
    if l2 is not None:
        headers[l2] = DECODERS[l2](frame, 0)
        off = SIZE_OF[l2]
        for i in range(w.vlans):
            headers[_VLAN_NAMES[i]] = DECODERS["vlan"](frame, off)
            off += SIZE_OF["vlan"]
    l3 = _L3_NAME[w.l3_kind]
    headers[l3] = DECODERS[l3](frame, w.l3_off)
    if l3 == "ip" and w.l3_len > SIZE_OF["ip"]:
        headers["ip"]["options"] = frame[w.l3_off + SIZE_OF["ip"]:w.l3_off + w.l3_len]
    if w.udp_off >= 0:
        headers["udp"] = DECODERS["udp"](frame, w.udp_off)
    bth = DECODERS["bth"](frame, w.bth_off)
    headers["bth"] = bth
    pos = w.bth_off + _BTH_SIZE
    for name in OPCODES[bth["opcode"]].headers:
        if pos + SIZE_OF[name] > len(frame):
            break
        headers[name] = DECODERS[name](frame, pos)
        pos += SIZE_OF[name]
    return headers


_decode_headers = fast.decode_headers or decode_headers_reference


# -- crafting -----------------------------------------------------------------------------------

# Short names accepted by craft(), mapped to header.field.  Anything else may be given as
# "header.field" (or "header_field") or as a field name unique among the packet's headers.
ALIASES: dict[str, str] = {
    "smac": "eth.src", "dmac": "eth.dst", "sport": "udp.srcport", "dport": "udp.dstport",
    "dqpn": "bth.destqp", "qpn": "bth.destqp", "pkey": "bth.p_key", "ackreq": "bth.a",
    "solicited": "bth.se", "migreq": "bth.m", "rkey": "r_key", "dma_len": "dmalen",
    "length": "dmalen", "qkey": "deth.q_key", "sqpn": "deth.srcqp", "src_qp": "deth.srcqp",
    "imm": "immdt", "imm_data": "immdt", "invalidate_rkey": "ieth", "inv_rkey": "ieth",
    "swap": "atomiceth.swapdt", "add": "atomiceth.swapdt", "compare": "atomiceth.cmpdt",
    "orig": "atomicacketh.origremdt", "ttl": "ip.ttl", "hlim": "ipv6.hlim",
}


def field_width(name: str) -> tuple[str, int] | None:
    """(``header.field``, width in bits) of the integer header field a ``craft`` key names
    (``psn``, ``bth.psn``, ``reth_va``, an alias such as ``dqpn``; ``icrc``); for a name
    several headers share (``va``) the name itself and the widest; None when no header has
    such an integer field.  Option parsers check values against it (``roce.options``)."""
    key = ALIASES.get(name, name)
    if key == "icrc":
        return key, len(to_trailer(0)) * 8
    header, dot, field = key.partition(".")
    if not dot:
        header, field = "", key
        for h in LAYOUTS:  # "reth_va" spelling
            if key.startswith(h + "_"):
                header, field = h, key[len(h) + 1:]
                break
    found = {f"{h}.{f.name}": f.bits for h, lay in LAYOUTS.items()
             if not header or h == header
             for f in lay.fields if f.name == field and f.kind != "addr"}
    if not found and not header and key in _SINGLE:
        found = {key: LAYOUTS[key].fields[0].bits}  # one-field headers: "immdt", "ieth"
    if not found:
        return None
    return (next(iter(found)) if len(found) == 1 else key), max(found.values())


def craft(opcode: int | str | Opcode, payload: bytes | None = None, *, payload_size: int = 0,
          ipv6: bool = False, roce_version: int = 2, vlan: int | None = None,
          vlan_priority: int = 0, src: str | None = None, dst: str | None = None,
          ecn: int | str | None = None, dscp: int = 0, **fields: Any) -> Packet:
    """Build a Packet for ``opcode`` (number or name) with defaults for everything not given.

    ``fields`` take ``header.field`` names (``reth.va``), underscore forms (``reth_va``),
    unique field names (``psn``, ``va``, ``msn``) or the ``ALIASES`` (``dqpn``, ``rkey``).
    Lengths, checksum, PadCnt, pad, UDP source port and ICRC are computed unless given.
    """
    op = OPCODES[opcode] if type(opcode) is int and opcode in OPCODES else lookup(opcode)
    if payload is None:
        payload = bytes(op.payload_len if op.payload_len is not None else payload_size)
    l3 = "grh" if roce_version == 1 else "ipv6" if ipv6 else "ip"
    template = _TEMPLATES.get((op.code, l3))
    if template is None:
        template = _TEMPLATES[(op.code, l3)] = _template(op, l3)
    # Only the dicts craft() writes to are copied here; the Packet copies the rest the first
    # time its caller reaches for ``headers``.
    headers = dict(template)
    copied: set[str] = set()
    if vlan is not None:
        headers = {"eth": headers.pop("eth"),
                   "vlan": {"priority": vlan_priority, "dei": 0, "id": vlan, "etype": None},
                   **headers}
    if ecn is not None or dscp or src is not None or dst is not None:
        headers[l3] = dict(headers[l3])
        copied.add(l3)
    if ecn is not None or dscp:
        bits = _ECN.get(str(ecn).lower(), ecn) if ecn is not None else 0
        if l3 == "ip":
            headers["ip"]["dsfield.dscp"], headers["ip"]["dsfield.ecn"] = dscp, int(bits)
        else:
            headers[l3]["tclass"] = (dscp << 2) | int(bits)
    if src is not None:
        headers[l3]["sgid" if l3 == "grh" else "src"] = src
    if dst is not None:
        headers[l3]["dgid" if l3 == "grh" else "dst"] = dst
    icrc = fields.pop("icrc", None)
    if icrc is not None:
        icrc = field_value("icrc", "icrc", icrc)
    pad = fields.pop("pad", None)
    if pad is not None and not isinstance(pad, (bytes, bytearray)):
        raise TypeError(f"craft(): pad is the pad's bytes, not {pad!r} (bth.padcnt sets "
                        "its length)")
    for key, value in fields.items():
        where = _RESOLVED.get((op.code, l3, key))
        if where is None:
            where = _RESOLVED[(op.code, l3, key)] = _resolve(key, headers)
        name = where[0]
        if name not in copied:
            headers[name] = dict(headers[name])
            copied.add(name)
        headers[name][where[1]] = field_value(name, where[1], value)
    p = Packet(headers, payload, pad, icrc)
    p._shared = len(copied) < len(headers)
    return p


_ECN = {"ce": 3, "ect0": 2, "ect1": 1, "not-ect": 0}
_TEMPLATES: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}
_RESOLVED: dict[tuple[int, str, str], tuple[str, str]] = {}


def _template(op: Opcode, l3: str) -> dict[str, dict[str, Any]]:
    """Default header values for an opcode; None marks what the builder computes."""
    headers: dict[str, dict[str, Any]] = {
        "eth": {"dst": "02:00:00:00:00:02", "src": "02:00:00:00:00:01", "type": None}}
    if l3 == "grh":
        headers["grh"] = {"ipver": 6, "tclass": 0, "flowlabel": 0, "paylen": None,
                          "nxthdr": GRH_NEXT_BTH, "hoplmt": 64, "sgid": "fe80::1",
                          "dgid": "fe80::2"}
    elif l3 == "ipv6":
        headers["ipv6"] = {"version": 6, "tclass": 0, "flow": 0, "plen": None, "nxt": 17,
                           "hlim": 64, "src": "fd00::1", "dst": "fd00::2"}
    else:
        headers["ip"] = {"version": 4, "ihl": None, "dsfield.dscp": 0, "dsfield.ecn": 0,
                         "len": None, "id": 0, "flags.rb": 0, "flags.df": 1, "flags.mf": 0,
                         "frag_offset": 0, "ttl": 64, "proto": 17, "checksum": None,
                         "src": "10.0.0.1", "dst": "10.0.0.2"}
    if l3 != "grh":
        headers["udp"] = {"srcport": None, "dstport": ROCE_PORT, "length": None,
                          "checksum": 0}
    headers["bth"] = {"opcode": op.code, "se": False, "m": False, "padcnt": None, "tver": 0,
                      "p_key": 0xFFFF, "fecn": False, "becn": op.transport is Transport.CNP,
                      "reserved": 0, "destqp": 0, "a": False, "reserved7": 0, "psn": 0}
    for name in op.headers:
        headers[name] = DECODERS[name](bytes(SIZE_OF[name]), 0)
    return headers


_ADDRESS = {48: "a MAC address", 32: "an IPv4 address", 128: "an IPv6 address (or GID)"}
_VLAN_HEADERS = {"vlan2": "vlan"}  # a second tag has the first one's layout


def field_value(header: str, field: str, value: Any) -> Any:
    """``value`` if ``header.field`` can hold it, else TypeError (the wrong kind of value:
    a flag or an address for a number, a number of several bits given as True/False, text
    that is no address for an address) or ValueError (a number out of the field's range).

    Numbers fit the field's width (``roce.headers``); a one-bit field also takes True and
    False; an address field takes its address as text (a MAC, an IPv4 or an IPv6
    address), as bytes of its length or as a number that fits; None leaves the field for
    the builder to fill (lengths, checksums, PadCnt, the UDP source port, the ICRC)."""
    if value is None:
        return None
    name = f"{header}.{field}" if header != field else header
    if header == "icrc":
        bits, kind = len(to_trailer(0)) * 8, "int"
    else:
        f = LAYOUTS[_VLAN_HEADERS.get(header, header)].field(field)
        bits, kind = f.bits, f.kind
    if kind == "addr":
        what = _ADDRESS.get(bits, f"an address of {bits} bits")
        if isinstance(value, bool) or not isinstance(value, (str, bytes, bytearray, int)):
            raise TypeError(f"{name} takes {what}, not {_shown(value)}")
        if isinstance(value, (bytes, bytearray)):
            if len(value) * 8 != bits:
                raise ValueError(f"{name} takes {what}: {bits // 8} bytes, not {len(value)}")
            return bytes(value)
        if isinstance(value, int):
            if not 0 <= value < 1 << bits:
                raise ValueError(f"{name} = {value:#x} does not fit in {bits} bits")
            return value
        try:
            f.encode(value)
        except (ValueError, OSError, TypeError):
            raise TypeError(f"{name} takes {what}, not {value!r}") from None
        return value
    if isinstance(value, bool):
        if bits != 1:
            raise TypeError(f"{name} is a number of {bits} bits, not a flag "
                            f"({_shown(value)})")
        return value
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} takes a number (0..{(1 << bits) - 1:#x}), not "
                        f"{value!r}") from None
    if not 0 <= number < 1 << bits:
        raise ValueError(f"{name} = {number:#x} does not fit in {bits} bits")
    return value


def _shown(value: Any) -> str:
    """A value as a message shows it (flags as a command line spells them)."""
    return str(value).lower() if isinstance(value, bool) else repr(value)


def resolve_field(headers: dict[str, dict[str, Any]], key: str) -> tuple[str, str]:
    """(header, field) that a ``craft`` key names among ``headers`` (a packet's): the
    rules of ``craft``'s ``fields``.  TypeError when none does (a header's name, such as
    ``vlan``, names no field)."""
    return _resolve(key, headers)


def _resolve(key: str, headers: dict[str, dict[str, Any]]) -> tuple[str, str]:
    name = ALIASES.get(key, key)
    if "." in name:
        header, _, field = name.partition(".")
        if header in headers and field in headers[header]:
            return header, field
        if header == "ip" and "ip" not in headers:
            raise TypeError(f"craft(): {key!r} is an IPv4 field; this packet has no IPv4 header")
    if name in _SINGLE and name in headers:
        return name, name
    for header in headers:  # "reth_va" spelling
        if name.startswith(header + "_") and name[len(header) + 1:] in headers[header]:
            return header, name[len(header) + 1:]
    owners = [h for h in reversed(headers) if name in headers[h]]
    if owners:
        return owners[0], name  # innermost wins: psn -> bth, va -> reth
    raise TypeError(f"craft(): no field {key!r} in {', '.join(headers)}")


def icrc_of_frame(frame: bytes, linktype: int = LINKTYPE_ETHERNET,
                  udp_port: int = ROCE_PORT) -> int:
    """The ICRC a frame should carry (raises like ``parse`` if it is not RoCE)."""
    w = fast.walk(frame, linktype, udp_port)
    if w.status != OK:
        raise explain(w)
    return fast.icrc_of(frame, w)


__all__ = ["Packet", "parse", "craft", "udp_source_port", "icrc_of_frame", "DecodeError",
           "HEADER_IDS", "field_value", "resolve_field"]
