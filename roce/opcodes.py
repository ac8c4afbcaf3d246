"""The BTH opcode table: the one place where opcode facts are written.

Every other part of roce (packet codec, decoder, fast path tables, Scapy layers, hypothesis
strategies, the emulator's packet builder) derives what it needs from ``OPCODES``.

The table is built from the RC rows (IBA Vol 1 ch. 9, table 38; Linux rxe ``rxe_opcode.c``)
by the per-transport rules of docs/protocol.md:

- UC takes the SEND and RDMA WRITE rows at 0x20 + code;
- RD takes rows 0x00..0x14 at 0x40 + code; requests get RDETH then DETH in front of the RC
  headers, responses RDETH only; RD adds RESYNC (0x55);
- UD has SEND Only (0x64) and SEND Only with Immediate (0x65), with DETH;
- XRC takes rows 0x00..0x17 at 0xA0 + code; requests get XRCETH in front;
- CNP is 0x81 on RoCE, with 16 reserved bytes and no payload (RoCEv2 Annex A17.9.2), and
  0x80 on native InfiniBand, BTH alone (IBA table 38, Annex A10.3.2; Linux hfi1 ``return_cnp``).

Each row says on which links it is valid (``Opcode.links``): every row on both, except the two
CNPs, each on its own link.  ``OPCODES`` holds every row; ``ROCE_OPCODES`` and ``IB_OPCODES``
are the rows one link's walk accepts (docs/protocol.md "Native InfiniBand").

Adding an opcode is adding one row to ``_RC_ROWS`` or ``_EXTRA_ROWS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Transport(str, Enum):
    RC = "RC"
    UC = "UC"
    RD = "RD"
    UD = "UD"
    CNP = "CNP"
    XRC = "XRC"


class Link(str, Enum):
    """The link families a BTH travels on: RoCE (Ethernet, IP/UDP or GRH) and native IB."""

    ROCE = "roce"
    IB = "ib"


_BOTH = frozenset(Link)


class Operation(str, Enum):
    SEND = "send"
    RDMA_WRITE = "write"
    RDMA_READ = "read"
    READ_RESPONSE = "read_response"
    ACK = "ack"
    ATOMIC_ACK = "atomic_ack"
    ATOMIC = "atomic"
    FLUSH = "flush"
    ATOMIC_WRITE = "atomic_write"
    RESYNC = "resync"
    CNP = "cnp"


class Position(str, Enum):
    FIRST = "first"
    MIDDLE = "middle"
    LAST = "last"
    ONLY = "only"


_RESPONSES = frozenset({Operation.READ_RESPONSE, Operation.ACK, Operation.ATOMIC_ACK})


@dataclass(frozen=True, slots=True)
class Opcode:
    """One BTH opcode and what follows BTH on the wire."""

    code: int
    ident: str  # RC_RDMA_WRITE_ONLY: what Scapy users and Python code spell
    iba_name: str  # "RC RDMA WRITE Only": the spec's wording
    short_name: str  # "RC RDMA Write Only": Wireshark's Info column
    transport: Transport
    operation: Operation
    position: Position
    headers: tuple[str, ...]  # extended headers after BTH, in wire order
    payload: bool  # may carry payload bytes
    payload_len: int | None = None  # fixed payload length when the opcode dictates one
    immediate: bool = False
    invalidate: bool = False
    links: frozenset[Link] = _BOTH  # the links whose walk accepts this opcode
    # derived once from ``operation`` and ``position`` (read per packet: an Enum's hash is a
    # Python call, and a test of a tuple of them compares strings)
    is_request: bool = field(init=False, repr=False, compare=False)
    is_response: bool = field(init=False, repr=False, compare=False)
    starts: bool = field(init=False, repr=False, compare=False)  # First or Only
    ends: bool = field(init=False, repr=False, compare=False)  # Last or Only

    def __post_init__(self) -> None:
        response = self.operation in _RESPONSES
        object.__setattr__(self, "is_response", response)  # frozen: set once, here
        object.__setattr__(self, "is_request", not response)
        object.__setattr__(self, "starts", self.position in (Position.FIRST, Position.ONLY))
        object.__setattr__(self, "ends", self.position in (Position.LAST, Position.ONLY))

    @property
    def slug(self) -> str:
        """CLI spelling: ``rc-rdma-write-only``."""
        return self.ident.lower().replace("_", "-")

    def __str__(self) -> str:
        return self.short_name


_F, _M, _L, _O = Position.FIRST, Position.MIDDLE, Position.LAST, Position.ONLY
_SEND, _WRITE = Operation.SEND, Operation.RDMA_WRITE

# RC rows: code, IDENT suffix, IBA name, Wireshark name, operation, position, headers,
# payload, flags ("imm", "inv", or a fixed payload length).
_RC_ROWS: tuple[tuple, ...] = (
    (0x00, "SEND_FIRST", "SEND First", "Send First", _SEND, _F, (), True),
    (0x01, "SEND_MIDDLE", "SEND Middle", "Send Middle", _SEND, _M, (), True),
    (0x02, "SEND_LAST", "SEND Last", "Send Last", _SEND, _L, (), True),
    (0x03, "SEND_LAST_WITH_IMMEDIATE", "SEND Last with Immediate", "Send Last Immediate",
     _SEND, _L, ("immdt",), True, "imm"),
    (0x04, "SEND_ONLY", "SEND Only", "Send Only", _SEND, _O, (), True),
    (0x05, "SEND_ONLY_WITH_IMMEDIATE", "SEND Only with Immediate", "Send Only Immediate",
     _SEND, _O, ("immdt",), True, "imm"),
    (0x06, "RDMA_WRITE_FIRST", "RDMA WRITE First", "RDMA Write First", _WRITE, _F, ("reth",),
     True),
    (0x07, "RDMA_WRITE_MIDDLE", "RDMA WRITE Middle", "RDMA Write Middle", _WRITE, _M, (), True),
    (0x08, "RDMA_WRITE_LAST", "RDMA WRITE Last", "RDMA Write Last", _WRITE, _L, (), True),
    (0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", "RDMA WRITE Last with Immediate",
     "RDMA Write Last Immediate", _WRITE, _L, ("immdt",), True, "imm"),
    (0x0A, "RDMA_WRITE_ONLY", "RDMA WRITE Only", "RDMA Write Only", _WRITE, _O, ("reth",), True),
    (0x0B, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", "RDMA WRITE Only with Immediate",
     "RDMA Write Only Immediate", _WRITE, _O, ("reth", "immdt"), True, "imm"),
    (0x0C, "RDMA_READ_REQUEST", "RDMA READ Request", "RDMA Read Request", Operation.RDMA_READ,
     _O, ("reth",), False),
    (0x0D, "RDMA_READ_RESPONSE_FIRST", "RDMA READ response First", "RDMA Read Response First",
     Operation.READ_RESPONSE, _F, ("aeth",), True),
    (0x0E, "RDMA_READ_RESPONSE_MIDDLE", "RDMA READ response Middle",
     "RDMA Read Response Middle", Operation.READ_RESPONSE, _M, (), True),
    (0x0F, "RDMA_READ_RESPONSE_LAST", "RDMA READ response Last", "RDMA Read Response Last",
     Operation.READ_RESPONSE, _L, ("aeth",), True),
    (0x10, "RDMA_READ_RESPONSE_ONLY", "RDMA READ response Only", "RDMA Read Response Only",
     Operation.READ_RESPONSE, _O, ("aeth",), True),
    (0x11, "ACKNOWLEDGE", "Acknowledge", "Acknowledge", Operation.ACK, _O, ("aeth",), False),
    (0x12, "ATOMIC_ACKNOWLEDGE", "ATOMIC Acknowledge", "Atomic Acknowledge",
     Operation.ATOMIC_ACK, _O, ("aeth", "atomicacketh"), False),
    (0x13, "COMPARE_SWAP", "CmpSwap", "Compare Swap", Operation.ATOMIC, _O, ("atomiceth",),
     False),
    (0x14, "FETCH_ADD", "FetchAdd", "Fetch Add", Operation.ATOMIC, _O, ("atomiceth",), False),
    (0x16, "SEND_LAST_WITH_INVALIDATE", "SEND Last with Invalidate", "Send Last Invalidate",
     _SEND, _L, ("ieth",), True, "inv"),
    (0x17, "SEND_ONLY_WITH_INVALIDATE", "SEND Only with Invalidate", "Send Only Invalidate",
     _SEND, _O, ("ieth",), True, "inv"),
    (0x1C, "FLUSH", "FLUSH", "Flush", Operation.FLUSH, _O, ("feth", "reth"), False),
    (0x1D, "ATOMIC_WRITE", "ATOMIC WRITE", "Atomic Write", Operation.ATOMIC_WRITE, _O, ("reth",),
     True, 8),
)

# Rows that are not derived from an RC row: code, transport, IDENT suffix, IBA name,
# Wireshark-style name, operation, position, headers, payload, flags (as above, or the
# one link the row is valid on).
_EXTRA_ROWS: tuple[tuple, ...] = (
    (0x55, Transport.RD, "RESYNC", "RESYNC", "Resync", Operation.RESYNC, _O, ("rdeth", "deth"),
     False),
    (0x64, Transport.UD, "SEND_ONLY", "SEND Only", "Send Only", _SEND, _O, ("deth",), True),
    (0x65, Transport.UD, "SEND_ONLY_WITH_IMMEDIATE", "SEND Only with Immediate",
     "Send Only Immediate", _SEND, _O, ("deth", "immdt"), True, "imm"),
    (0x80, Transport.CNP, "CNP_IB", "Congestion Notification Packet (InfiniBand)", "CNP",
     Operation.CNP, _O, (), False, Link.IB),
    (0x81, Transport.CNP, "CNP", "Congestion Notification Packet", "CNP", Operation.CNP, _O,
     ("cnp",), False, Link.ROCE),
)

_TRANSPORT_BASE = {Transport.UC: 0x20, Transport.RD: 0x40, Transport.XRC: 0xA0}


def _rows_for(transport: Transport, rc_code: int, operation: Operation) -> bool:
    if transport is Transport.UC:
        return operation in (_SEND, _WRITE) and rc_code <= 0x0B
    if transport is Transport.RD:
        return rc_code <= 0x14
    return rc_code <= 0x17  # XRC


def _transport_headers(transport: Transport, is_request: bool) -> tuple[str, ...]:
    if transport is Transport.RD:
        return ("rdeth", "deth") if is_request else ("rdeth",)
    if transport is Transport.XRC and is_request:
        return ("xrceth",)
    return ()


def _make(code: int, transport: Transport, ident: str, iba: str, short: str,
          operation: Operation, position: Position, headers: tuple[str, ...], payload: bool,
          *flags: object) -> Opcode:
    fixed = next((f for f in flags if type(f) is int), None)
    links = frozenset(f for f in flags if isinstance(f, Link)) or _BOTH
    prefix = "" if transport is Transport.CNP else f"{transport.value} "
    full_ident = ident if transport is Transport.CNP else f"{transport.value}_{ident}"
    return Opcode(code=code, ident=full_ident,
                  iba_name=prefix + iba, short_name=prefix + short, transport=transport,
                  operation=operation, position=position, headers=headers, payload=payload,
                  payload_len=fixed, immediate="imm" in flags, invalidate="inv" in flags,
                  links=links)


def _build() -> dict[int, Opcode]:
    table: dict[int, Opcode] = {}
    for code, ident, iba, short, op, pos, hdrs, payload, *flags in _RC_ROWS:
        table[code] = _make(code, Transport.RC, ident, iba, short, op, pos, hdrs, payload, *flags)
        for transport, base in _TRANSPORT_BASE.items():
            if _rows_for(transport, code, op):
                extra = _transport_headers(transport, op not in _RESPONSES)
                table[base + code] = _make(base + code, transport, ident, iba, short, op, pos,
                                           extra + hdrs, payload, *flags)
    for code, transport, ident, iba, short, op, pos, hdrs, payload, *flags in _EXTRA_ROWS:
        table[code] = _make(code, transport, ident, iba, short, op, pos, hdrs, payload, *flags)
    return dict(sorted(table.items()))


OPCODES: dict[int, Opcode] = _build()
ROCE_OPCODES: dict[int, Opcode] = {c: op for c, op in OPCODES.items() if Link.ROCE in op.links}
IB_OPCODES: dict[int, Opcode] = {c: op for c, op in OPCODES.items() if Link.IB in op.links}

def _names() -> dict[str, Opcode]:
    """Every spelling a user may type for an opcode: number, ident, slug, names, with or
    without "rdma" ("rc-write-only"), case-insensitive.  RoCE's rows first, so that a name two
    rows share ("CNP") means RoCE's.  Built at the first lookup by name, not at every start."""
    names: dict[str, Opcode] = {}
    for op in sorted(OPCODES.values(), key=lambda o: Link.ROCE not in o.links):
        for name in (op.ident, op.slug, op.iba_name, op.short_name):
            key = name.lower().replace("_", " ").replace("-", " ")
            names.setdefault(key, op)
            names.setdefault(key.replace("rdma ", ""), op)
    return names


_BY_NAME: dict[str, Opcode] = {}  # _names(), once a name is looked up


def lookup(opcode: int | str | Opcode) -> Opcode:
    """Return the table row for an opcode number, name or row; KeyError names what is wrong."""
    if isinstance(opcode, Opcode):
        return opcode
    hit = _SEEN.get(opcode)
    if hit is not None:
        return hit
    if isinstance(opcode, int):
        try:
            return OPCODES[opcode]
        except KeyError:
            raise KeyError(f"unknown BTH opcode 0x{opcode:02x}") from None
    text = str(opcode).strip()
    try:
        return OPCODES[int(text, 0)]
    except (ValueError, KeyError):
        pass
    key = text.lower().replace("_", " ").replace("-", " ")
    if not _BY_NAME:
        _BY_NAME.update(_names())
    try:
        op = _BY_NAME[key]
    except KeyError:
        raise KeyError(f"unknown opcode name {text!r}") from None
    if len(_SEEN) < 1024:
        _SEEN[opcode] = op
    return op


_SEEN: dict[object, Opcode] = {}  # spellings already looked up



def _cnp_of(link: Link) -> int:
    (code,) = (c for c, op in OPCODES.items() if op.transport is Transport.CNP and link in op.links)
    return code


# Each link's one CNP opcode, taken from its row rather than written again: RoCE's (RoCEv2
# Annex A17.9.2) and native InfiniBand's (IBA table 38, Annex A10.3.2).
CNP_OPCODE: int = _cnp_of(Link.ROCE)
IB_CNP_OPCODE: int = _cnp_of(Link.IB)
CNP_OPCODES: frozenset[int] = frozenset((CNP_OPCODE, IB_CNP_OPCODE))


def transport_of(code: int) -> Transport | None:
    """Transport from opcode bits 7:5 (None for a reserved prefix)."""
    return {0: Transport.RC, 1: Transport.UC, 2: Transport.RD, 3: Transport.UD,
            4: Transport.CNP, 5: Transport.XRC}.get(code >> 5)
