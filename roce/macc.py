"""MAC Control frames: IEEE 802.3x PAUSE and IEEE 802.1Qbb Priority-based Flow Control (PFC).

This module owns the MAC Control frames: their layouts (defined in Construct in
``roce.maccdefs``, read as ``roce.headers`` reads its own), their field names (Wireshark's
``macc`` protocol: ``macc.opcode``, ``macc.pause_time``, ``macc.cbfc.enbv``,
``macc.cbfc.enbv.c0``..``c7``, ``macc.cbfc.pause_time.c0``..``c7``), and the frame codec
the simulated switches and NICs use: ``build_pfc``, ``build_pause``, ``parse_macc`` and
``quanta_to_ns``.

Protocol facts (docs/protocol.md "MAC Control: PAUSE and PFC": IEEE 802.3 Annex 31B,
IEEE 802.1Qbb clause 36; Wireshark ``packet-maccontrol.c``):

* destination MAC 01:80:C2:00:00:01, EtherType 0x8808, then a 16-bit opcode;
* opcode 0x0001 PAUSE: one 16-bit ``pause_time`` that pauses the whole link;
* opcode 0x0101 PFC (Wireshark: "Class Based Flow Control [CBFC] Pause"): a 16-bit class
  enable vector whose upper 8 bits are 0 and whose bit *n* (LSB = 0) enables class *n*,
  then 8 16-bit pause times, class 0 first.  A time of 0 for an enabled class resumes it
  (XON); a disabled class's time is ignored;
* a pause quantum is 512 bit times at the link's rate: 0xFFFF quanta last 335.5 us at
  100 Gb/s;
* the frame is padded with zeros to the 60-byte Ethernet minimum (64 with the FCS; like
  every frame roce builds, ours carry no FCS).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from roce.errors import DecodeError, UsageError
from roce.headers import ENCODERS, SIZE_OF, Layout, compile_codec, recorded
from roce.headers import LAYOUTS as HEADER_LAYOUTS
from roce.locate import ETHERTYPE_MACC, ETHERTYPE_VLAN, MAX_VLAN_TAGS

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

PFC_DST_MAC: bytes = bytes.fromhex("0180c2000001")
OPCODE_PAUSE = 0x0001
OPCODE_PFC = 0x0101
QUANTUM_BITS = 512  # one pause quantum, in bit times (802.3 31B.2)
MAX_QUANTA = 0xFFFF
MIN_FRAME = 60  # Ethernet minimum without the FCS
PROTOCOL = "macc"  # Wireshark's protocol (field-name prefix)
TITLE = "MAC Control"

# -- layouts (roce.maccdefs) ---------------------------------------------------------------------

LAYOUTS: dict[str, Layout] = recorded("roce.maccdefs")
HEADERS = tuple(LAYOUTS)  # the header names (flat-field prefixes)
# 802.1Q priorities = PFC classes: one pause time each after the CBFC's enable vector
PRIORITIES = range(len(LAYOUTS["macc.cbfc"].fields) - 1)

# The body each opcode carries.
BODY = {OPCODE_PAUSE: "macc.pause", OPCODE_PFC: "macc.cbfc"}
OPCODE_NAMES = {OPCODE_PAUSE: "Pause", OPCODE_PFC: "Class Based Flow Control [CBFC] Pause"}


class _Codecs(dict):  # type: ignore[type-arg]
    """Header name -> generated decoder (or encoder), compiled on first use: every roce
    command imports this module, few meet a MAC Control frame."""

    def __init__(self, which: int) -> None:
        super().__init__()
        self.which = which

    def __missing__(self, name: str) -> Callable[..., Any]:
        pair = compile_codec(LAYOUTS[name])
        _DEC[name], _ENC[name] = pair
        return pair[self.which]


_DEC: dict[str, Callable[[bytes, int], dict]] = _Codecs(0)
_ENC: dict[str, Callable[[dict], bytes]] = _Codecs(1)
ETH_LAYOUT = HEADER_LAYOUTS["eth"]
_ETH = ETH_LAYOUT.size
_VLAN = SIZE_OF["vlan"]
_ETH_TYPE = ETH_LAYOUT.field("type").byte_offset  # a VLAN tag's type sits _VLAN further
_OPC = LAYOUTS["macc"].size


def flat_name(header: str, field: str) -> str:
    """The Wireshark name of a field: ``macc.`` + field, except the vector's bits, which are
    ``macc.cbfc.enbv.cN``."""
    return f"{header}.{field}" if header == "macc.cbfc.enbv" else f"{PROTOCOL}.{field}"


_KEYS = {h: tuple(flat_name(h, f.name) for f in lay.fields) for h, lay in LAYOUTS.items()}
# The flat names the codec and the decoder use, from the layouts.
OPCODE_KEY = _KEYS["macc"][0]  # macc.opcode
PAUSE_TIME_KEY = _KEYS["macc.pause"][0]  # macc.pause_time
ENBV_KEY = _KEYS["macc.cbfc"][0]  # macc.cbfc.enbv
CLASS_TIME_KEYS = _KEYS["macc.cbfc"][1:]  # macc.cbfc.pause_time.c0 .. c7
CLASS_BIT_KEYS = tuple(reversed(_KEYS["macc.cbfc.enbv"][1:]))  # macc.cbfc.enbv.c0 .. c7
_ENBV = LAYOUTS["macc.cbfc"].fields[0]
_TIMES = tuple(f.name for f in LAYOUTS["macc.cbfc"].fields[1:])
_ETH_SRC, _ETH_DST = (ETH_LAYOUT.field(n) for n in ("src", "dst"))
# Every flat field name, in layout order (the decoder, filters and -G fields read this).
FIELD_NAMES: tuple[str, ...] = tuple(
    flat_name(h, f.name) for h, lay in LAYOUTS.items() for f in lay.fields
    if not (h == "macc.cbfc.enbv" and f.name == "reserved"))


# -- the frame as a value ----------------------------------------------------------------------


@dataclass(frozen=True)
class MacControl:
    """A decoded MAC Control frame.

    ``times`` holds 8 quanta, class 0 first.  For PFC they are the frame's 8 pause times
    and ``enable_vector`` its class-enable vector.  For PAUSE ``enable_vector`` is 0 and
    ``times[0]`` is ``pause_time`` (the rest 0): ``class_times()`` gives what the frame
    means per class either way.  Opcodes other than these two carry ``enable_vector`` 0 and
    zero times.  ``src`` and ``dst`` are the 6-byte MAC addresses.
    """

    opcode: int
    enable_vector: int
    times: tuple[int, ...]
    src: bytes
    dst: bytes

    @property
    def is_pfc(self) -> bool:
        return self.opcode == OPCODE_PFC

    @property
    def is_pause(self) -> bool:
        return self.opcode == OPCODE_PAUSE

    def class_times(self) -> dict[int, int]:
        """Priority -> quanta for each class the frame acts on (0 = XON): the enabled
        classes of a PFC frame, all 8 for a PAUSE frame, none otherwise."""
        if self.opcode == OPCODE_PFC:
            return {p: self.times[p] for p in PRIORITIES if self.enable_vector >> p & 1}
        if self.opcode == OPCODE_PAUSE:
            return dict.fromkeys(PRIORITIES, self.times[0])
        return {}


# -- building ----------------------------------------------------------------------------------


def _mac(value: bytes | str, what: str) -> bytes:
    if isinstance(value, str):
        try:
            value = bytes.fromhex(value.replace(":", "").replace("-", ""))
        except ValueError:
            raise UsageError(f"{what} MAC {value!r} is not a MAC address") from None
    if len(value) != 6:
        raise UsageError(f"{what} MAC {value!r} is not 6 bytes")
    return bytes(value)


def _quanta(value: int, what: str) -> int:
    if not isinstance(value, int) or not 0 <= value <= MAX_QUANTA:
        raise UsageError(f"{what}: pause time {value!r} is not 0..{MAX_QUANTA} quanta")
    return value


def _frame(src_mac: bytes | str, opcode: int, body: bytes) -> bytes:
    eth = ENCODERS["eth"]({"dst": PFC_DST_MAC, "src": _mac(src_mac, "source"),
                           "type": ETHERTYPE_MACC})
    out = eth + _ENC["macc"]({"opcode": opcode}) + body
    return out + bytes(MIN_FRAME - len(out))


def build_pfc(src_mac: bytes, times: Mapping[int, int]) -> bytes:
    """A PFC frame from ``src_mac`` pausing each priority in ``times`` for its quanta.

    Every priority given has its enable bit set, also with quanta 0 (XON for that class);
    the others are disabled with time 0.
    """
    enbv = 0
    values: dict[str, int] = dict.fromkeys(_TIMES, 0)
    for prio, quanta in times.items():
        if prio not in PRIORITIES:
            raise UsageError(f"PFC priority {prio!r} is not 0..7")
        values[_TIMES[prio]] = _quanta(quanta, f"priority {prio}")
        enbv |= 1 << prio
    values[_ENBV.name] = enbv
    return _frame(src_mac, OPCODE_PFC, _ENC["macc.cbfc"](values))


def build_pause(src_mac: bytes, quanta: int) -> bytes:
    """An 802.3x PAUSE frame from ``src_mac`` pausing the link for ``quanta``."""
    return _frame(src_mac, OPCODE_PAUSE,
                  _ENC["macc.pause"]({"pause_time": _quanta(quanta, "PAUSE")}))


# -- parsing -----------------------------------------------------------------------------------


def macc_offset(frame: bytes) -> int:
    """Offset of the opcode in an Ethernet frame whose (last) EtherType is MAC Control,
    after up to two VLAN tags (as ``roce.locate.walk`` reads them); -1 for any other
    frame."""
    off = _ETH_TYPE
    for _ in range(MAX_VLAN_TAGS + 1):
        if len(frame) < off + 2:
            return -1
        etype = (frame[off] << 8) | frame[off + 1]
        if etype == ETHERTYPE_MACC:
            return off + 2
        if etype not in ETHERTYPE_VLAN:
            return -1
        off += _VLAN
    return -1


def decode_fields(frame: bytes, off: int) -> dict[str, Any]:
    """The flat ``macc.*`` fields of the MAC Control header at ``off``; raises DecodeError
    (naming the header and the offset where bytes run out) when the frame is cut short."""
    out, error = decode_partial(frame, off)
    if error is not None:
        raise error
    return out


def decode_partial(frame: bytes, off: int) -> tuple[dict[str, Any], DecodeError | None]:
    """The flat fields as far as the frame holds them, and the DecodeError saying where it
    was cut short (None for a whole header)."""
    n = len(frame)
    out: dict[str, Any] = {PROTOCOL: True}
    if n < off + _OPC:
        return out, DecodeError(f"MAC Control opcode cut short at byte {off}: "
                                f"{max(n - off, 0)} of {_OPC} bytes", "macc", off)
    out.update(zip(_KEYS["macc"], _DEC["macc"](frame, off).values()))
    opcode: int = out[OPCODE_KEY]
    body = BODY.get(opcode)
    if body is None:
        return out, None
    pos = off + _OPC
    size = LAYOUTS[body].size
    if n < pos + size:
        return out, DecodeError(f"{OPCODE_NAMES[opcode]} body cut short at byte {pos}: "
                                f"{n - pos} of {size} bytes", body, pos)
    out.update(zip(_KEYS[body], _DEC[body](frame, pos).values()))
    if body == "macc.cbfc":
        # the vector's bits, from the vector's bytes (the reserved high byte is no field)
        at = pos + _ENBV.byte_offset
        bits = _DEC["macc.cbfc.enbv"](frame[at:at + _ENBV.bits // 8], 0)
        del bits["reserved"]
        out.update(zip(_KEYS["macc.cbfc.enbv"][1:], bits.values()))
    return out, None


def parse_macc(frame: bytes) -> MacControl | None:
    """Decode an Ethernet frame as MAC Control; None when it is not one (another
    EtherType); ``roce.errors.DecodeError`` when it is one but cut short."""
    off = macc_offset(frame)
    if off < 0:
        return None
    f: dict[str, Any] = decode_fields(frame, off)
    src = frame[_ETH_SRC.byte_offset:_ETH_SRC.byte_offset + _ETH_SRC.bits // 8]
    dst = frame[_ETH_DST.byte_offset:_ETH_DST.byte_offset + _ETH_DST.bits // 8]
    opcode = f[OPCODE_KEY]
    if opcode == OPCODE_PFC:
        times = tuple(f[k] for k in CLASS_TIME_KEYS)
        return MacControl(opcode, f[ENBV_KEY], times, src, dst)
    if opcode == OPCODE_PAUSE:
        return MacControl(opcode, 0, (f[PAUSE_TIME_KEY], *(0,) * 7), src, dst)
    return MacControl(opcode, 0, (0,) * 8, src, dst)


def quanta_to_ns(quanta: int, rate_bps: float) -> float:
    """How long ``quanta`` pause quanta (512 bit times each) last at ``rate_bps``, in ns."""
    if rate_bps <= 0:
        raise UsageError(f"link rate {rate_bps!r} b/s must be positive")
    # one product of integers, one division: correctly rounded for integer rates
    return quanta * QUANTUM_BITS * 1_000_000_000 / rate_bps


__all__ = ["BODY", "ETHERTYPE_MACC", "FIELD_NAMES", "LAYOUTS", "MacControl", "OPCODE_NAMES",
           "OPCODE_PAUSE", "OPCODE_PFC", "PFC_DST_MAC", "PRIORITIES", "build_pause",
           "build_pfc", "decode_fields", "decode_partial", "macc_offset", "parse_macc",
           "quanta_to_ns", "OPCODE_KEY", "PAUSE_TIME_KEY", "ENBV_KEY", "CLASS_TIME_KEYS",
           "CLASS_BIT_KEYS"]
