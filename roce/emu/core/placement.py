"""Placing an RDMA WRITE at a responder, and the packet length rules: one copy for RC and UC.

RC and UC responders take WRITEs by the same rules (IBA 9.7.5.1.x and 9.7.4; rxe
``rxe_resp.c``: ``check_length``, ``check_rkey``, ``write_data_in``); they differ only in
what a broken rule costs: RC answers with a NAK and moves the QP to ERR, UC drops the
message silently.  So the rules raise ``Refused`` and each responder reacts its way.
"""

from __future__ import annotations

from roce.emu.core.constants import Access
from roce.emu.core.memory import AccessError
from roce.errors import RoceError

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

_REMOTE_WRITE = int(Access.IBV_ACCESS_REMOTE_WRITE)


class Refused(RoceError):
    """A request broke a rule; ``access`` for a key/range/permission failure (RC: NAK
    remote access error), otherwise a malformed request (RC: NAK invalid request)."""

    def __init__(self, why: str, access: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.access = access


def check_length(pkt: Any, mtu: int) -> None:
    """rxe ``check_length``: First and Middle packets carry exactly one path MTU, Last and
    Only at most one."""
    n = pkt.payload_len
    if not pkt.ends and n != mtu or n > mtu:  # First, Middle: full
        raise Refused(f"{pkt.op} carries {n} bytes, MTU is {mtu}")


class WriteCursor:
    """Where the RDMA WRITE under way on a QP has got to: its RETH and the bytes left."""

    __slots__ = ("va", "rkey", "left", "offset")

    def __init__(self) -> None:
        self.va = self.rkey = self.left = self.offset = 0

    def take(self, qp: Any, pkt: Any, first: bool, last: bool) -> None:
        """Check and place one WRITE packet's payload (raises ``Refused``)."""
        dev = qp.device
        memory = dev.memory
        n = pkt.payload_len
        if first:
            reth = pkt.ext["reth"]
            self.va, self.rkey, self.left = reth["va"], reth["r_key"], reth["dmalen"]
            self.offset = 0
            if last and n != self.left:
                raise Refused("WRITE Only length differs from DMA length")
            if self.left:  # rxe checks the whole [va, va + DMA length) on the first packet
                try:
                    memory.lookup_remote(qp.pd, self.rkey, self.va, self.left, _REMOTE_WRITE)
                except AccessError as e:
                    raise Refused(e.why, access=True) from None
        if n > self.left:
            raise Refused("WRITE data beyond its DMA length")
        if n:
            addr = self.va + self.offset
            try:
                mr = memory.lookup_remote(qp.pd, self.rkey, addr, n, _REMOTE_WRITE)
            except AccessError as e:
                raise Refused(e.why, access=True) from None
            mr.write_from(addr, pkt.frame, pkt.payload_at, n)
        self.offset += n
        self.left -= n
        if last and self.left:
            raise Refused("WRITE ended before its DMA length")
