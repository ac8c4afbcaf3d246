"""The responder harness's *cases*: requests whose outcome is known, one builder each.

A builder gets a ``CaseEnv`` (the harness, the target QP's slot and the facts of the moment)
and returns an ``Outcome``: the frame, the answers a correct RC responder in a receiving
state gives (the error classes of rxe's responder, rxe_resp.c, as docs/protocol.md
"Responder rules (RC)" tabulates them: a PSN-sequence NAK, an invalid-request NAK, a
remote-access NAK, an RNR NAK), how far the expected PSN moves,
whether the QP goes to ERR and the bytes that must land.  ``ResponderFuzzer._case`` picks a
builder from ``CASES`` and adjusts the outcome for UC, UD and non-receiving QPs (they never
answer).  A new case is one function and one line in ``CASES``; its name shows up in run
summaries as ``case <name>``.

Builders draw from the harness's generator in a fixed order: a seed replays the same run.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roce.headers import (
    NAK_INVALID_REQUEST,
    NAK_PSN_SEQUENCE_ERROR,
    NAK_REMOTE_ACCESS_ERROR,
    SIZE_OF,
)
from roce.psn import PSN_MASK

if TYPE_CHECKING:
    from roce.testing.fuzz.dut import ResponderFuzzer, Slot

QKEY = 0x11111111  # the Q_Key of the harness's UD QPs


def nak(code: int, psn: int) -> tuple:
    return ("nak", code, psn)


@dataclass
class CaseEnv:
    """What a builder needs: the harness, the target slot and what it holds now."""

    h: ResponderFuzzer
    s: Slot
    rng: random.Random
    e: int  # the slot's expected PSN
    posted: int  # receive WQEs posted to it
    wqe_len: int  # the length of the receive WQE a SEND takes (0: none)
    mtu: int
    rw: Any  # the MR with full access a valid request addresses (roce.emu.core.verbs.MR)
    i_rw: int  # its index in the harness's MR table

    @property
    def ud(self) -> bool:
        from roce.emu.core.constants import QPType

        return self.s.qp_type == QPType.IBV_QPT_UD

    @property
    def noaccess(self) -> bool:
        return self.s.name.endswith("noaccess")


@dataclass
class Outcome:
    """A case's frame and what a correct receiving RC responder makes of it."""

    frame: bytes
    answers: list[tuple]  # ("ack", psn) ("nak", code, psn) ("rnr", psn) ("read", psn, data)
    # ("atomic_ack", psn, orig); an empty list: no answer at all
    advance: int = 0  # how far the expected PSN moves
    to_error: bool = False
    optional: bool = False  # the answers may also be absent (a repeated PSN-sequence NAK)
    writes: tuple[int, int, bytes] | None = None  # (mr index, offset, data) that must land


CaseBuilder = Callable[[CaseEnv], Outcome]


def send_ok(c: CaseEnv) -> Outcome:
    # a UD receive buffer starts with the 40-byte GRH of the datagram
    n = c.rng.randint(0, min(c.wqe_len or c.mtu, c.mtu) - (SIZE_OF["grh"] if c.ud else 0))
    frame = c.h.request(c.s, "SEND_ONLY", c.e, c.rng.randbytes(n))
    if c.posted:
        return Outcome(frame, [("ack", c.e)], 1)
    return Outcome(frame, [("rnr", c.e)])


def send_first(c: CaseEnv) -> Outcome:
    # a message left unfinished: the slot is re-armed (RESET) before its next case, which
    # must find no message under way (rxe clears resp.opcode on reset)
    frame = c.h.request(c.s, "SEND_FIRST", c.e, c.rng.randbytes(c.mtu))
    c.s.clean = False
    if not c.posted:
        return Outcome(frame, [("rnr", c.e)])
    if c.wqe_len < c.mtu:
        return Outcome(frame, [nak(NAK_INVALID_REQUEST, c.e)], to_error=True)
    return Outcome(frame, [("ack", c.e)], 1)


def ud_bad_qkey(c: CaseEnv) -> Outcome:
    return Outcome(c.h.request(c.s, "SEND_ONLY", c.e, b"x", **{"deth.q_key": QKEY ^ 1}), [])


def write_ok(c: CaseEnv) -> Outcome:
    rng, rw = c.rng, c.rw
    n = rng.randint(1, 256)
    off = rng.randrange(rw.length - n + 1)
    data = rng.randbytes(n)
    frame = c.h.request(c.s, "RDMA_WRITE_ONLY", c.e, data, va=rw.addr + off, rkey=rw.rkey,
                         dmalen=n)
    if c.noaccess:
        return Outcome(frame, [nak(NAK_INVALID_REQUEST, c.e)], 1, to_error=True)
    return Outcome(frame, [("ack", c.e)], 1, writes=(c.i_rw, off, data))


def read_ok(c: CaseEnv) -> Outcome:
    rng, rw = c.rng, c.rw
    n = rng.choice((0, 1, rng.randint(1, 3 * c.mtu)))
    n = min(n, rw.length)
    off = rng.randrange(rw.length - n + 1)
    frame = c.h.request(c.s, "RDMA_READ_REQUEST", c.e, va=rw.addr + off, rkey=rw.rkey,
                         dmalen=n)
    if c.noaccess:
        return Outcome(frame, [nak(NAK_INVALID_REQUEST, c.e)], to_error=True)
    return Outcome(frame, [("read", c.e, bytes(rw.buf[off:off + n]))],
                   max(1, -(-n // c.mtu)))


def atomic_ok(c: CaseEnv) -> Outcome:
    rng, rw = c.rng, c.rw
    off = rng.randrange(rw.length // 8) * 8
    orig = int.from_bytes(rw.buf[off:off + 8], "little")
    frame = c.h.request(c.s, rng.choice(("FETCH_ADD", "COMPARE_SWAP")), c.e,
                         va=rw.addr + off, rkey=rw.rkey, swap=rng.getrandbits(64),
                         compare=rng.choice((orig, rng.getrandbits(64))))
    if c.noaccess:
        return Outcome(frame, [nak(NAK_INVALID_REQUEST, c.e)], to_error=True)
    return Outcome(frame, [("atomic_ack", c.e, orig)], 1)


def psn_ahead(c: CaseEnv) -> Outcome:
    k = c.rng.choice((1, 2, c.rng.randint(1, 1 << 23)))
    frame = c.h.request(c.s, "SEND_ONLY", c.e + k, b"ahead")
    # one PSN-sequence NAK per gap: a repeated one may stay silent (rxe_resp.c
    # resp.sent_psn_nak)
    out = Outcome(frame, [nak(NAK_PSN_SEQUENCE_ERROR, c.e)], optional=c.s.nak_sent)
    c.s.nak_sent = True
    return out


def duplicate(c: CaseEnv) -> Outcome:
    rng, rw = c.rng, c.rw
    k = rng.choice((1, 2, rng.randint(1, (1 << 23) - 1)))
    if rng.random() < 0.5:
        frame = c.h.request(c.s, "SEND_ONLY", c.e - k, b"dup")
    else:
        frame = c.h.request(c.s, "RDMA_WRITE_ONLY", c.e - k, b"dupe", va=rw.addr,
                             rkey=c.h.bad_rkey(rw), dmalen=4)
    # a duplicate SEND/WRITE is ACKed with the last PSN done, its rkey unchecked
    # (rxe_resp.c duplicate_request)
    return Outcome(frame, [("ack", (c.e - 1) & PSN_MASK)])


def _bad_write(c: CaseEnv, case: str) -> Outcome:
    rng, h = c.rng, c.h
    n = rng.randint(1, 64)
    mr = {"ro_write": h.mr_ro, "other_pd": h.mr_other}.get(case, h.mr_rw).mr
    va, rkey = mr.addr + rng.randrange(mr.length - n + 1), mr.rkey
    if case == "bad_rkey":
        rkey = h.bad_rkey(mr)
    elif case == "oob_write":
        va = rng.choice((mr.addr - n - rng.randint(1, 64),  # wholly below
                         mr.addr - rng.randint(1, n),  # straddling the start
                         mr.addr + mr.length - n + rng.randint(1, n),  # the end
                         mr.addr + mr.length + rng.randint(0, 4096),  # beyond
                         (1 << 64) - rng.randint(1, n)))  # wrapping 2^64
        va &= (1 << 64) - 1
    frame = h.request(c.s, "RDMA_WRITE_ONLY", c.e, rng.randbytes(n), va=va, rkey=rkey,
                       dmalen=n)
    return Outcome(frame, [nak(NAK_REMOTE_ACCESS_ERROR, c.e)], to_error=True)


def bad_rkey(c: CaseEnv) -> Outcome:
    return _bad_write(c, "bad_rkey")


def oob_write(c: CaseEnv) -> Outcome:
    return _bad_write(c, "oob_write")


def ro_write(c: CaseEnv) -> Outcome:
    return _bad_write(c, "ro_write")


def other_pd(c: CaseEnv) -> Outcome:
    return _bad_write(c, "other_pd")


def _bad_atomic(c: CaseEnv, misaligned: bool) -> Outcome:
    rng, rw = c.rng, c.rw
    off = rng.randrange(rw.length // 8 - 1) * 8
    if misaligned:
        off += rng.randint(1, 7)
        rkey, code = rw.rkey, NAK_INVALID_REQUEST
    else:
        rkey, code = c.h.bad_rkey(rw), NAK_REMOTE_ACCESS_ERROR
    frame = c.h.request(c.s, rng.choice(("FETCH_ADD", "COMPARE_SWAP")), c.e,
                         va=rw.addr + off, rkey=rkey, swap=1, compare=0)
    return Outcome(frame, [nak(code, c.e)], to_error=True)


def misaligned_atomic(c: CaseEnv) -> Outcome:
    return _bad_atomic(c, misaligned=True)


def atomic_bad_rkey(c: CaseEnv) -> Outcome:
    return _bad_atomic(c, misaligned=False)


def _bad_read(c: CaseEnv, out_of_bounds: bool) -> Outcome:
    rng, rw = c.rng, c.rw
    n = rng.randint(1, 2 * c.mtu)
    if out_of_bounds:
        va, rkey = rw.addr + rw.length - n + rng.randint(1, n), rw.rkey
    else:
        va, rkey = rw.addr, c.h.bad_rkey(rw)
    frame = c.h.request(c.s, "RDMA_READ_REQUEST", c.e, va=va, rkey=rkey, dmalen=n)
    return Outcome(frame, [nak(NAK_REMOTE_ACCESS_ERROR, c.e)], to_error=True)


def read_bad_rkey(c: CaseEnv) -> Outcome:
    return _bad_read(c, out_of_bounds=False)


def read_oob(c: CaseEnv) -> Outcome:
    return _bad_read(c, out_of_bounds=True)


def no_first(c: CaseEnv) -> Outcome:
    ident = c.rng.choice(("SEND_MIDDLE", "SEND_LAST", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_LAST"))
    size = c.mtu if ident.endswith("MIDDLE") else c.rng.randint(1, 64)
    frame = c.h.request(c.s, ident, c.e, c.rng.randbytes(size))
    return Outcome(frame, [nak(NAK_INVALID_REQUEST, c.e)], to_error=True)


def zero_len_bad_rkey(c: CaseEnv) -> Outcome:
    # a zero-length WRITE needs no valid rkey (rxe_resp.c check_rkey, IBA C9-88)
    frame = c.h.request(c.s, "RDMA_WRITE_ONLY", c.e, b"", va=c.rng.getrandbits(64),
                         rkey=c.h.bad_rkey(c.rw), dmalen=0)
    return Outcome(frame, [("ack", c.e)], 1)


def oversize(c: CaseEnv) -> Outcome:
    rng, rw = c.rng, c.rw
    ident = rng.choice(("SEND_ONLY", "RDMA_WRITE_ONLY"))
    frame = c.h.request(c.s, ident, c.e, rng.randbytes(c.mtu + rng.choice((1, 4, 100))),
                         va=rw.addr, rkey=rw.rkey, dmalen=c.mtu + 1)
    if ident == "SEND_ONLY" and not c.posted:
        return Outcome(frame, [("rnr", c.e)])
    return Outcome(frame, [nak(NAK_INVALID_REQUEST, c.e)], to_error=True)


def dma_beyond(c: CaseEnv) -> Outcome:
    # a first packet that fits the MR, of a WRITE whose DMA length does not
    rng, rw = c.rng, c.rw
    frame = c.h.request(c.s, "RDMA_WRITE_FIRST", c.e, rng.randbytes(c.mtu),
                         va=rw.addr + rw.length - c.mtu, rkey=rw.rkey,
                         dmalen=c.mtu + rng.randint(1, 4 * c.mtu))
    return Outcome(frame, [nak(NAK_REMOTE_ACCESS_ERROR, c.e)], to_error=True)


def write_len_mismatch(c: CaseEnv) -> Outcome:
    rng, rw = c.rng, c.rw
    n = rng.randint(1, 64)
    frame = c.h.request(c.s, "RDMA_WRITE_ONLY", c.e, rng.randbytes(n), va=rw.addr,
                         rkey=rw.rkey, dmalen=n + rng.choice((1, 7, 1000)))
    return Outcome(frame, [nak(NAK_INVALID_REQUEST, c.e)], to_error=True)


def recv_overflow(c: CaseEnv) -> Outcome:
    """A SEND longer than the receive buffer, shorter than the MTU."""
    frame = c.h.request(c.s, "SEND_ONLY", c.e, c.rng.randbytes(
        c.rng.randint(min(c.wqe_len, c.mtu - 1) + 1, c.mtu)))
    if c.posted and c.wqe_len < c.mtu:
        return Outcome(frame, [nak(NAK_INVALID_REQUEST, c.e)], to_error=True)
    if c.posted:
        return Outcome(frame, [("ack", c.e)], 1)
    return Outcome(frame, [("rnr", c.e)])


# name -> builder.  RC and UC slots draw from ``GENERAL`` (this order, which a seed depends
# on); UD slots and the RC slot without remote access rights from their own short lists.
CASES: dict[str, CaseBuilder] = {
    "send_ok": send_ok,
    "write_ok": write_ok,
    "read_ok": read_ok,
    "atomic_ok": atomic_ok,
    "psn_ahead": psn_ahead,
    "duplicate": duplicate,
    "bad_rkey": bad_rkey,
    "oob_write": oob_write,
    "ro_write": ro_write,
    "other_pd": other_pd,
    "misaligned_atomic": misaligned_atomic,
    "atomic_bad_rkey": atomic_bad_rkey,
    "read_bad_rkey": read_bad_rkey,
    "read_oob": read_oob,
    "no_first": no_first,
    "zero_len_bad_rkey": zero_len_bad_rkey,
    "oversize": oversize,
    "write_len_mismatch": write_len_mismatch,
    "recv_overflow": recv_overflow,
    "send_first": send_first,
    "dma_beyond": dma_beyond,
    "ud_bad_qkey": ud_bad_qkey,
}
UD_CASES = ("send_ok", "ud_bad_qkey")
NOACCESS_CASES = ("write_ok", "read_ok", "atomic_ok")
GENERAL = tuple(name for name in CASES if name != "ud_bad_qkey")  # a Q_Key needs a UD QP
# cases whose data lands on a receiving UC QP too (UC answers nothing but writes)
LANDS_WITHOUT_ANSWER = ("write_ok", "send_ok")
