"""The semantic sublayer (SES) of one UET host over its PDS: WRITE, READ and SEND messages
between memory regions of the RoCE queue pairs' memory model (``roce.emu.core.memory``:
an address space per host, regions found and checked by key, rxe's order of checks).

* A message is cut into packets of at most ``mtu`` payload bytes, each a standard SES
  request (``uet.ses.std.*``) carrying the message ID (16 bits per PDC), the buffer
  offset (the target address) and memory key (the region's rkey): the first packet (SOM)
  the request length and header data, the others their payload length and message offset,
  so every packet is placed where it belongs whatever order it arrives in.  The last packet
  (EOM) asks for an ACK (AR).
* WRITE and SEND complete at the initiator when the PDS has every packet acknowledged;
  READ when every byte of its response has arrived: the target answers a READ request with
  response-with-data packets (``uet.ses.rsp.*``: the request's message ID, the offset and
  length of each piece) that its end of the PDC sends in its own PSN space.
* A SEND names a receive queue at the target by its resource index (12 bits): it takes
  that queue's next posted receive buffer when the first of its packets arrives (any
  packet: RUD reorders), and completes there when all its bytes have.
* An atomic (``Amo``) is one FETCHING_ATOMIC request with the SES atomic extension header:
  the atomic opcode (SUM: fetch-and-add, its operand the 8-byte payload; CSWAP: compare and
  swap, the compare and swap values in the 36-byte extension) on a UINT64 or INT64, at an
  8-byte aligned address of a region granting remote atomics (the memory model's checks,
  as for RoCE atomics); the value it found comes back as response data, as a READ's does,
  into the initiator's 8 bytes.  Memory is little-endian, as the RoCE queue pairs' atomics
  leave it.
* A rendezvous SEND (``rendezvous``: a SEND longer than that many bytes, 0 never) sends its
  first ``rendezvous`` bytes eagerly as RENDEZVOUS_SEND packets whose rendezvous extension
  header says how many (eager length) and where the rest is (read offset: the initiator's
  address past them; read match bits: its region's key); the target places them in the
  receive buffer the message takes and pulls the rest with a READ of its own end, into the
  same buffer; the receive completes when the READ does, and the SEND when the initiator's
  answer to that READ is acknowledged.
* What the target cannot execute is refused with an SES return code (``REFUSALS``: a
  memory key that maps no region, a range outside it, an access it does not grant, a SEND
  to a resource index with no receive queue or none posted, longer than its buffer, an
  opcode we do not run), counted by code name in ``refused``; the rest of that message's
  data is dropped.  The return code goes back in an SES response: on RUD and ROD as a
  request of the target's end (``pds.Pds._hold``: the refused PSN is acknowledged only once
  the response is), on RUDI in the RUDI response; the initiator completes the message with
  that code (``Completion.status``).  UUD has no response: the target only counts it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from roce.emu.core.constants import Access
from roce.emu.core.memory import AddressSpace, MemoryRegion
from roce.emu.uet.pds import CONNECTIONLESS, Pdc, Pds
from roce.errors import AccessError
from roce.families.uet import codes as t

MSG_ID_MASK = 0xFFFF
RI_MAX = 0xFFF  # the SES header's resource index: 12 bits
JOB_ID = 1  # every host of a run is one job
RC_OK = 1  # SES return code OK
# what failed -> the return code a target answers with (codes.RETURN_CODES names them)
REFUSALS: dict[str, str] = {
    "key": "BAD_MKEY",  # no region has the memory key, or it was invalidated
    "pd": "BAD_MKEY",  # the region is another protection domain's: it maps no buffer here
    "access": "PERM_VIOLATION",  # the region does not grant the access
    "range": "AT_OUT_OF_RANGE",  # the range is outside the region
    "align": "AMO_UNALIGNED",  # an atomic's address is not 8-byte aligned
    "amo-op": "AMO_UNSUPPORTED_OP",  # an atomic opcode other than SUM and CSWAP
    "amo-type": "AMO_UNSUPPORTED_DT",  # a data type other than INT64, UINT64
    "amo-size": "AMO_UNSUPPORTED_SIZE",  # a length other than 8 bytes
    "no-queue": "BAD_INDEX",  # a SEND's resource index has no receive queue
    "no-buffer": "NO_MATCH",  # the receive queue has no buffer posted
    "too-long": "TOO_LONG",  # the SEND is longer than its receive buffer
    "opcode": "UNSUPPORTED_OP",
}
RETURN_CODE: dict[str, int] = {why: t.lookup_name(t.RETURN_CODES, name)  # type: ignore[misc]
                               for why, name in REFUSALS.items()}
FAILED = "FAILED"  # a completion's status when its PDC failed (no return code)


AMO_SUM, AMO_CSWAP = 0x02, 0x0D  # atomic opcodes (codes.AMO_OPCODES): fetch-add, CAS
AMO_TYPES = (0x06, 0x07)  # INT64, UINT64: the 8-byte atomics the memory model runs
AMO_BYTES = 8
# the accesses a remote request needs, as plain ints: an IntFlag's ``&`` runs in Python
_REMOTE_WRITE = int(Access.IBV_ACCESS_REMOTE_WRITE)
_REMOTE_READ = int(Access.IBV_ACCESS_REMOTE_READ)
_REMOTE_ATOMIC = int(Access.IBV_ACCESS_REMOTE_ATOMIC)
_AT, _CS = "uet.ses.atomic_op_ext_hdr.", "uet.ses.comp_swap_ext_hdr."
_RV = "uet.ses.rendv_ext_hdr."
_RV_EAGER = _RV + "eager_length"  # read per SEND packet: one string, not one per packet


@dataclass(frozen=True)
class Amo:
    """An atomic: ``op`` AMO_SUM (add ``operand``) or AMO_CSWAP (``swap`` in when the
    memory holds ``compare``), on a 64-bit integer of data type ``dtype``."""

    op: int = AMO_SUM
    operand: int = 1
    compare: int = 0
    swap: int = 0
    dtype: int = 0x07  # UINT64

    def fields(self) -> dict[str, Any]:
        if self.op == AMO_CSWAP:
            return {_CS + "atomic_opcode": self.op, _CS + "atomic_data_type": self.dtype,
                    _CS + "comp_value": self.compare, _CS + "swap_value": self.swap}
        return {_AT + "atomic_opcode": self.op, _AT + "atomic_data_type": self.dtype}

    def payload(self) -> bytes:
        if self.op == AMO_CSWAP:
            return b""  # the operands are in the extension header
        return (self.operand & 0xFFFFFFFFFFFFFFFF).to_bytes(AMO_BYTES, "little")


class Refused(Exception):
    """The target cannot execute a message: ``why`` a key of ``REFUSALS``."""

    def __init__(self, why: str, text: str) -> None:
        super().__init__(text)
        self.why = why
KINDS = ("write", "read", "send", "atomic")
OPCODES = {"write": t.WRITE, "read": t.READ, "send": t.SEND, "atomic": t.FETCHING_ATOMIC}
RESPONDED = ("read", "atomic")  # complete when their response data has arrived
# what each PDC mode carries: RUDI only idempotent operations (a SEND consumes a receive
# buffer: executed twice it would take two); UUD only WRITEs (nothing would tell a READ that
# its response was lost, and a SEND's lost packet would hold its receive buffer for ever)
# (an atomic is not idempotent either: a fetch-and-add executed twice adds twice)
CARRIES: dict[int, tuple[str, ...]] = {t.RUD_REQ: KINDS, t.ROD_REQ: KINDS,
                                       t.RUDI_REQ: ("write", "read"), t.UUD_REQ: ("write",)}
FINISHED_MAX = MSG_ID_MASK + 1  # RUDI messages remembered as executed: one ID space
# the codes read per packet, as module globals (compiled: no attribute lookup on ``codes``)
_NH_STD, _NH_RSP, _NH_RSP_DATA = t.NH_STD, t.NH_RSP, t.NH_RSP_DATA
_WRITE, _READ, _ATOMIC = t.WRITE, t.READ, t.FETCHING_ATOMIC
_SENDS = (t.SEND, t.RENDEZVOUS_SEND)


def space(pdc: Pdc) -> Any:
    """The message ID space of ``pdc``: its own, or, for RUDI and UUD (no PDC IDs on the
    wire), the peer's: one per pair of hosts."""
    return pdc.peer if pdc.mode in CONNECTIONLESS else pdc.id


@dataclass(eq=False)
class Message:
    """A message in flight at the initiator: its work request, PDC and packets."""

    wr_id: int
    kind: str
    pdc: Pdc
    msg_id: int
    length: int
    packets: int
    local: MemoryRegion
    laddr: int
    acked: int = 0
    received: int = 0  # READ: response bytes arrived
    pieces: set[int] = field(default_factory=set)  # READ: offsets of the pieces arrived
    request_acked: bool = False
    done: bool = False
    pull: int = 0  # rendezvous SEND: bytes the target pulls (0: not a rendezvous)
    pull_packets: int = -1  # the packets of the answer to its READ (-1: not answered yet)
    pull_acked: int = 0
    # a READ of the SES's own (a rendezvous pull): the receive it completes, (wr_id, length,
    # PDC ID, message ID)
    then: tuple[int, int, int, int] | None = None


@dataclass(frozen=True)
class Completion:
    """What SES reports when a message ends."""

    wr_id: int
    kind: str
    ok: bool
    bytes: int
    pdc: int
    msg_id: int
    status: str = "OK"  # OK, the return code's name the target answered with, or FAILED


@dataclass(eq=False)
class Incoming:
    """A message arriving at the target: how many bytes so far, and (SEND) its buffer."""

    length: int
    got: int = 0
    offsets: set[int] = field(default_factory=set)  # pieces placed (RUDI's come again)
    recv: tuple[int, MemoryRegion, int, int] | None = None  # wr_id, region, address, length


class Piece:
    """Bytes [``addr``, ``addr`` + ``n``) of ``region``, read each time the PDS sends them
    (``bytes(piece)``): neither a posted message nor a packet awaiting its ACK holds a copy of
    its data, only the frames on the wire do (an 8,192-host permutation of 1 MiB messages
    would otherwise hold them all)."""

    __slots__ = ("region", "addr", "n")

    def __init__(self, region: MemoryRegion, addr: int, n: int) -> None:
        self.region, self.addr, self.n = region, addr, n

    def __len__(self) -> int:
        return self.n

    def __bytes__(self) -> bytes:
        return bytes(self.region.view(self.addr, self.n))

    def data(self) -> Any:
        """Its bytes as they are now, for a frame built at once: a view of the region's
        buffer (the frame is their one copy), or ``bytes(self)`` when the region has no
        buffer (patterned content)."""
        v = self.region.view(self.addr, self.n)
        return v if type(v) is memoryview else bytes(v)


@dataclass
class SesCounters:
    """What SES counted of messages posted, completed and executed."""

    messages_posted: int = 0
    messages_completed: int = 0
    messages_failed: int = 0
    messages_executed: int = 0  # at the target: every byte of a message placed
    reads_answered: int = 0
    atomics_executed: int = 0
    pulls: int = 0  # rendezvous SENDs' READs a target sent
    repeated: int = 0  # RUDI: pieces that came again, placed again (idempotent)
    refused: dict[str, int] = field(default_factory=dict)  # at the target, by return code
    errors: dict[str, int] = field(default_factory=dict)


class Ses:
    """One host's SES: ``space`` its memory, ``pd`` the protection domain its regions
    belong to; ``pds`` is set once the PDS (which calls this back) exists."""

    __slots__ = ("space", "pd", "mtu", "pds", "next_msg", "reads", "incoming", "recvs",
                 "completions", "recv_completions", "counters", "rendezvous", "pulls",
                 "finished", "refusals", "outstanding")

    def __init__(self, space: AddressSpace, pd: object, mtu: int, rendezvous: int = 0) -> None:
        if not 1 <= mtu <= 0x3FFF:  # a packet's payload length is 14 bits
            raise ValueError(f"SES MTU {mtu}: 1 to {0x3FFF} bytes")
        if not 0 <= rendezvous <= 0xFFFFFFFF:  # the eager length is 32 bits
            raise ValueError(f"rendezvous threshold {rendezvous}: 0 to {0xFFFFFFFF} bytes")
        self.rendezvous = rendezvous
        self.pulls: dict[tuple[Any, int], Message] = {}  # (space, read offset) -> SEND
        self.space = space
        self.pd = pd
        self.mtu = mtu
        self.pds: Pds | None = None
        # keyed by message ID space (``space``: a PDC ID, or a peer for RUDI and UUD)
        self.next_msg: dict[Any, int] = {}  # space -> next message ID
        self.reads: dict[tuple[Any, int], Message] = {}  # (space, message ID) -> READ
        self.incoming: dict[tuple[Any, int], Incoming] = {}  # (space, message ID)
        self.finished: dict[tuple[Any, int], None] = {}  # RUDI: executed, the latest
        self.refusals: dict[tuple[Any, int], int] = {}  # messages refused: return code
        self.outstanding: dict[tuple[Any, int], Message] = {}  # posted, not complete
        # resource index -> its posted receive buffers
        self.recvs: dict[int, deque[tuple[int, MemoryRegion, int, int]]] = {}
        self.completions: list[Completion] = []
        self.recv_completions: list[Completion] = []
        self.counters = SesCounters()

    # -- posting ---------------------------------------------------------------------------

    def post(self, kind: str, pdc: Pdc, wr_id: int, local: MemoryRegion, laddr: int,
             length: int, rkey: int = 0, raddr: int = 0, ri: int = 0,
             amo: Amo = Amo()) -> Message:
        """Post a WRITE (``local`` to ``raddr``/``rkey``), READ (``raddr``/``rkey`` into
        ``local``), SEND (``local`` to the next receive buffer of the target's receive
        queue ``ri``) or atomic (``amo`` at ``raddr``/``rkey``, the value found into the
        ``length``, 8, bytes at ``local``)."""
        if not 0 <= ri <= RI_MAX:
            raise ValueError(f"resource index {ri}: 0 to {RI_MAX} (12 bits)")
        if kind not in KINDS:
            raise ValueError(f"SES operation {kind!r}: one of {', '.join(KINDS)}")
        if kind not in CARRIES[pdc.mode]:
            raise ValueError(f"SES operation {kind!r}: a {t.PDS_TYPES[pdc.mode][0]} PDC "
                             f"carries {', '.join(CARRIES[pdc.mode])}")
        if not local.contains(laddr, length):
            raise AccessError(f"0x{laddr:x}+{length} is outside the local region")
        if kind == "atomic" and length != AMO_BYTES:
            raise ValueError(f"an atomic is {AMO_BYTES} bytes, not {length}")
        assert self.pds is not None
        sp = space(pdc)
        msg_id = self.next_msg.get(sp, 0)
        self.next_msg[sp] = (msg_id + 1) & MSG_ID_MASK
        data = kind in ("write", "send")
        rv = kind == "send" and 0 < self.rendezvous < length and pdc.mode not in CONNECTIONLESS
        eager = self.rendezvous if rv else length  # the bytes sent in the SEND's packets
        packets = max(1, -(-eager // self.mtu)) if data else 1
        m = Message(wr_id, kind, pdc, msg_id, length, packets, local, laddr,
                    pull=length - eager)
        if rv:
            self.pulls[sp, laddr + eager] = m
            pdc.holds += 1  # the PDC stays open until the target has pulled the rest
        self.counters.messages_posted += 1
        self.outstanding[sp, msg_id] = m
        if not data:
            self.reads[sp, msg_id] = m
            pdc.holds += 1  # the PDC stays open until the response has arrived
        mtu, opcode, last = self.mtu, OPCODES[kind], packets - 1
        atomic = kind == "atomic"
        requests = []
        # the fields every packet of the message has, copied for each (a copy of a small
        # dictionary costs less than building it key by key), in the packets' key order
        head = {"uet.pds.nh": _NH_STD, "uet.ses.std.opcode": opcode,
                "uet.ses.std.message_id": msg_id, "uet.ses.std.job_id": JOB_ID,
                "uet.ses.std.buffer_offset": raddr, "uet.ses.std.mem_key_match_bits": rkey,
                "uet.ses.std.resource_index": ri, "uet.ses.std.som": False,
                "uet.ses.std.eom": False, "uet.ses.std.request_length": length}
        for i in range(packets):
            off = i * mtu
            n = (mtu if eager - off > mtu else eager - off) if data else 0
            f = head.copy()
            if i == last:
                f["uet.ses.std.eom"] = True
            if i:
                f["uet.ses.std.payload_length"] = n
                f["uet.ses.std.message_offset"] = off
            else:
                f["uet.ses.std.som"] = True
            if i == last:
                f["uet.pds.flags.ar"] = True  # the last packet of a message: ACK at once
            payload = Piece(local, laddr + off, n) if n else b""
            if atomic:
                f.update(amo.fields())
                payload = amo.payload()
            if rv:
                f.update({"uet.ses.std.opcode": t.RENDEZVOUS_SEND, _RV + "eager_length": eager,
                          _RV + "read_offset": laddr + eager,
                          _RV + "read_match_bits": local.rkey,
                          _RV + "read_resource_index": ri})
            requests.append((f, payload, (m, i)))
        self.pds.submit_all(pdc, requests)
        return m

    def post_recv(self, wr_id: int, region: MemoryRegion, addr: int, length: int,
                  ri: int = 0) -> None:
        """Post a receive buffer on receive queue ``ri`` (a resource index)."""
        if not region.contains(addr, length):
            raise AccessError(f"0x{addr:x}+{length} is outside the receive region")
        if not 0 <= ri <= RI_MAX:
            raise ValueError(f"resource index {ri}: 0 to {RI_MAX} (12 bits)")
        self.recvs.setdefault(ri, deque()).append((wr_id, region, addr, length))

    # -- what the PDS calls back ---------------------------------------------------------------

    def on_acked(self, pdc: Pdc, token: Any) -> None:
        m, _i = token
        if m.done:
            return
        if m.kind in RESPONDED:
            m.request_acked = True
            if m.length == 0:
                self._complete(m, True)
            return
        if _i < 0:  # a packet of the answer to a rendezvous SEND's READ
            m.pull_acked += 1
        else:
            m.acked += 1
        if m.acked == m.packets and (not m.pull or m.pull_acked == m.pull_packets):
            self._complete(m, True)

    def on_failed(self, pdc: Pdc, token: Any) -> None:
        m, _i = token
        if not m.done:
            self._complete(m, False, FAILED)

    def on_error(self, pdc: Pdc, token: Any, rc: int) -> None:
        """The target answered a packet of the message of ``token`` with return code
        ``rc`` (RUDI)."""
        m, _i = token
        if not m.done:
            self._complete(m, False, t.short(t.RETURN_CODES, rc))

    def on_request(self, pdc: Pdc, f: dict[str, Any], payload: bytes) -> int | None:
        nh = f.get("uet.pds.nh")
        if nh == _NH_RSP_DATA:
            self._response(pdc, f, payload)
            return None
        if nh == _NH_RSP:
            self._answered(pdc, f)
            return None
        op = f.get("uet.ses.std.opcode")
        off = 0 if f.get("uet.ses.std.som") else f.get("uet.ses.std.message_offset", 0)
        key = space(pdc), f.get("uet.ses.std.message_id")
        rc = self.refusals.get(key)
        if rc is not None:  # the rest of a refused message: dropped (RUDI: answered again)
            return rc if pdc.mode in CONNECTIONLESS else None
        try:
            if op == _WRITE:
                addr = f["uet.ses.std.buffer_offset"] + off
                mr = self.space.lookup_remote(self.pd, f["uet.ses.std.mem_key_match_bits"],
                                              addr, len(payload),
                                              _REMOTE_WRITE)
                mr.write(addr, payload)
                self._arrived(pdc, f, len(payload))
            elif op == _READ:
                self._answer_read(pdc, f)
            elif op == _ATOMIC:
                self._atomic(pdc, f, payload)
            elif op in _SENDS:
                self._send_data(pdc, f, off, payload)
            else:
                raise Refused("opcode", f"opcode {op}")
        except AccessError as exc:
            return self._refuse(key, exc.check or "key")
        except Refused as exc:
            return self._refuse(key, exc.why)
        return None

    def _refuse(self, key: tuple[Any, int], why: str) -> int:
        rc = RETURN_CODE[why]
        r = self.counters.refused
        r[REFUSALS[why]] = r.get(REFUSALS[why], 0) + 1
        self.incoming.pop(key, None)
        self.refusals[key] = rc
        if len(self.refusals) > FINISHED_MAX:  # one ID space remembered
            del self.refusals[next(iter(self.refusals))]
        return rc

    def _answered(self, pdc: Pdc, f: dict[str, Any]) -> None:
        """An SES response to one of our messages (RUD, ROD): an error completes it."""
        m = self.outstanding.get((space(pdc), f.get("uet.ses.rsp.message_id")))
        rc = f.get("uet.ses.rsp.return_code", RC_OK)
        if m is not None and not m.done and rc != RC_OK:
            self._complete(m, False, t.short(t.RETURN_CODES, rc))
    # -- the target -----------------------------------------------------------------------------

    def _error(self, why: str) -> None:
        e = self.counters.errors
        e[why] = e.get(why, 0) + 1

    def _arrived(self, pdc: Pdc, f: dict[str, Any], n: int) -> None:
        key = space(pdc), f["uet.ses.std.message_id"]
        if key in self.finished:  # RUDI: a piece of a message executed already, again
            self.counters.repeated += 1
            return
        inc = self.incoming.get(key)
        if inc is None:
            inc = self.incoming[key] = Incoming(f["uet.ses.std.request_length"])
        if pdc.mode in CONNECTIONLESS:
            off = 0 if f.get("uet.ses.std.som") else f.get("uet.ses.std.message_offset", 0)
            if off in inc.offsets:
                self.counters.repeated += 1
                return
            inc.offsets.add(off)
        inc.got += n
        if inc.got >= inc.length:
            del self.incoming[key]
            self.counters.messages_executed += 1
            if pdc.mode in CONNECTIONLESS:
                self.finished[key] = None
                if len(self.finished) > FINISHED_MAX:
                    del self.finished[next(iter(self.finished))]

    def _send_data(self, pdc: Pdc, f: dict[str, Any], off: int, payload: bytes) -> None:
        key = space(pdc), f["uet.ses.std.message_id"]
        inc = self.incoming.get(key)
        if inc is None:
            ri = f.get("uet.ses.std.resource_index", 0)
            queue = self.recvs.get(ri)
            if queue is None:
                raise Refused("no-queue", f"resource index {ri} has no receive queue")
            if not queue:
                raise Refused("no-buffer", f"a SEND found no posted receive buffer on "
                                           f"resource index {ri}")
            inc = self.incoming[key] = Incoming(f["uet.ses.std.request_length"],
                                                recv=queue.popleft())
        assert inc.recv is not None
        wr_id, region, addr, length = inc.recv
        if off + len(payload) > length:
            raise Refused("too-long", f"{off + len(payload)} bytes do not fit the receive "
                                      f"buffer of {length}")
        region.write(addr + off, payload)
        if f["uet.ses.std.request_length"] > length:
            raise Refused("too-long", f"{f['uet.ses.std.request_length']} bytes do not fit "
                                      f"the receive buffer of {length}")
        inc.got += len(payload)
        eager = f.get(_RV_EAGER, inc.length)
        if inc.got >= eager and inc.got < inc.length:  # a rendezvous: pull the rest
            del self.incoming[key]
            pull = self.post("read", pdc, -1, region, addr + eager, inc.length - eager,
                             f[_RV + "read_match_bits"], f[_RV + "read_offset"])
            pull.then = (wr_id, inc.length, pdc.id, key[1])
            self.counters.pulls += 1
        elif inc.got >= inc.length:
            del self.incoming[key]
            self.counters.messages_executed += 1
            self.recv_completions.append(Completion(wr_id, "recv", True, inc.length, pdc.id,
                                                    key[1]))

    def _atomic(self, pdc: Pdc, f: dict[str, Any], payload: bytes) -> None:
        """Execute a fetching atomic and answer with the value it found."""
        cswap = _CS + "atomic_opcode" in f
        pre = _CS if cswap else _AT
        op, dtype = f.get(pre + "atomic_opcode"), f.get(pre + "atomic_data_type")
        if op not in (AMO_SUM, AMO_CSWAP):
            raise Refused("amo-op", f"atomic opcode {op}")
        if dtype not in AMO_TYPES:
            raise Refused("amo-type", f"atomic data type {dtype}")
        if f["uet.ses.std.request_length"] != AMO_BYTES or \
                (op == AMO_SUM and len(payload) != AMO_BYTES):
            raise Refused("amo-size", f"an atomic of {f['uet.ses.std.request_length']} bytes")
        addr = f["uet.ses.std.buffer_offset"]
        mr = self.space.lookup_remote(self.pd, f["uet.ses.std.mem_key_match_bits"], addr,
                                      AMO_BYTES, _REMOTE_ATOMIC, atomic=True)
        mem = mr.view(addr, AMO_BYTES)
        old = bytes(mem)
        value = int.from_bytes(old, "little")
        if op == AMO_SUM:
            new = (value + int.from_bytes(payload, "little")) & 0xFFFFFFFFFFFFFFFF
        else:
            new = f[_CS + "swap_value"] if value == f[_CS + "comp_value"] & \
                0xFFFFFFFFFFFFFFFF else value
        mem[:] = (new & 0xFFFFFFFFFFFFFFFF).to_bytes(AMO_BYTES, "little")
        self.counters.messages_executed += 1
        self.counters.atomics_executed += 1
        self._respond(pdc, f["uet.ses.std.message_id"], old)

    def _respond(self, pdc: Pdc, msg_id: int, data: bytes | memoryview,
                 token: Any = None) -> int:
        """Response data (a READ's, an atomic's value) in packets of this end, each copied
        from ``data`` as it is cut (``token``: what their acknowledgements report); how many
        packets."""
        assert self.pds is not None
        length = len(data)
        for off in range(0, length, self.mtu):
            n = min(self.mtu, length - off)
            r = {"uet.pds.nh": t.NH_RSP_DATA, "uet.ses.rsp.return_code": RC_OK,
                 "uet.ses.rsp.message_id": msg_id, "uet.ses.rsp.job_id": JOB_ID,
                 "uet.ses.rsp.read_req_message_id": msg_id,
                 "uet.ses.rsp.payload_length": n, "uet.ses.rsp.mod_length": length,
                 "uet.ses.rsp.message_offset": off}
            if off + n == length:
                r["uet.pds.flags.ar"] = True
            self.pds.submit(pdc, r, bytes(data[off:off + n]), token)
        return -(-length // self.mtu)

    def _answer_read(self, pdc: Pdc, f: dict[str, Any]) -> None:
        length = f["uet.ses.std.request_length"]
        addr = f["uet.ses.std.buffer_offset"]
        mr = self.space.lookup_remote(self.pd, f["uet.ses.std.mem_key_match_bits"], addr,
                                      length, _REMOTE_READ)
        assert self.pds is not None
        msg_id = f["uet.ses.std.message_id"]
        self.counters.reads_answered += 1
        key = space(pdc), msg_id
        if key not in self.finished:  # RUDI: a READ answered again is not executed again
            self.counters.messages_executed += 1
            if pdc.mode in CONNECTIONLESS:
                self.finished[key] = None
                if len(self.finished) > FINISHED_MAX:
                    del self.finished[next(iter(self.finished))]
        m = self.pulls.pop((space(pdc), addr), None)
        if m is not None and m.pull == length and not m.done:  # a rendezvous SEND's rest
            m.pull_packets = self._respond(pdc, msg_id, mr.view(addr, length), (m, -1))
        else:
            self._respond(pdc, msg_id, mr.view(addr, length))

    # -- the initiator's READ responses ----------------------------------------------------------

    def _response(self, pdc: Pdc, f: dict[str, Any], payload: bytes) -> None:
        m = self.reads.get((space(pdc), f.get("uet.ses.rsp.read_req_message_id")))
        if m is None or m.done:
            if pdc.mode in CONNECTIONLESS:  # RUDI: the response to a READ answered again
                self.counters.repeated += 1
            else:
                self._error("a READ response for no outstanding READ")
            return
        off = f.get("uet.ses.rsp.message_offset", 0)
        if off + len(payload) > m.length:
            self._error("a READ response past the READ's length")
            return
        m.local.write(m.laddr + off, payload)
        if off in m.pieces:
            self.counters.repeated += 1
            return
        m.pieces.add(off)
        m.received += len(payload)
        if m.received >= m.length:
            self._complete(m, True)

    def _complete(self, m: Message, ok: bool, status: str = "OK") -> None:
        m.done = True
        self.outstanding.pop((space(m.pdc), m.msg_id), None)
        if m.pull:
            self.pulls.pop((space(m.pdc), m.laddr + m.length - m.pull), None)
            m.pdc.holds -= 1
            if self.pds is not None:
                self.pds.wake(m.pdc)
        if m.kind in RESPONDED:
            self.reads.pop((space(m.pdc), m.msg_id), None)
            m.pdc.holds -= 1
            if self.pds is not None:
                self.pds.wake(m.pdc)
        if m.then is not None:  # the SES's own READ: the receive it completes, if it did
            if ok:
                wr_id, length, pdc_id, msg_id = m.then
                self.counters.messages_executed += 1
                self.recv_completions.append(Completion(wr_id, "recv", True, length, pdc_id,
                                                        msg_id))
            return
        c = self.counters
        if ok:
            c.messages_completed += 1
        else:
            c.messages_failed += 1
        self.completions.append(Completion(m.wr_id, m.kind, ok, m.length, m.pdc.id,
                                           m.msg_id, status))


__all__ = ["CARRIES", "FAILED", "KINDS", "REFUSALS", "RETURN_CODE", "RI_MAX", "Completion",
           "Message", "Refused", "Ses", "SesCounters"]
