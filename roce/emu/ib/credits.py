"""Credit-based link-level flow control of one InfiniBand port, per virtual lane: ``Credits``.

Sans-I/O: the port that owns it calls ``sent``, ``received``, ``released`` and
``on_packet`` as frames move, asks ``may_send`` before it transmits, and drains the
flow-control packets ``due`` says are owed; ``deadline`` is the one named timer
(``refresh``).  Rules (IBA Vol 1 7.9.4, "Flow control"):

1. Credits count blocks of 64 bytes; a packet of n bytes takes ceil(n / 64) blocks
   (``roce.families.ib.flowcontrol.BLOCK``).
2. The sender keeps FCTBS, the total blocks it sent on the VL since the link came up, mod
   4096, and the credit limit (the last FCCL its peer advertised).  It may send a packet of
   b blocks only while (limit - (FCTBS + b)) mod 4096 <= 2048 (7.9.4.2): never without
   credit.  Before the peer's first flow-control packet it holds no credit (limit = FCTBS).
3. The receiver keeps ABR, the blocks it received on the VL, mod 4096, set to the sender's
   FCTBS whenever a flow-control packet arrives (the link keeps order, so every block sent
   before it has arrived: 7.9.4.3), and advertises FCCL = ABR + the blocks its buffer can
   still take, or ABR + 2048 when it can take more than 2048 (the most the 12-bit counters
   can express).
4. Each flow-control packet carries the port's FCTBS as a sender and its FCCL as a receiver
   for one VL.  One is owed per VL when the link comes up (Op 1, initialization), when the
   receiver releases buffer (a packet left it), and at least every ``refresh_ns`` (IBA's
   flow-control packet timer, 65,536 symbol times; here byte times at the link rate).
   The refresh skips a VL that carried nothing since the last one: its counts have not
   changed, so its packet would repeat the last (and an idle simulated link costs no
   events); every VL still gets one at initialization and on every release.
   Owed packets of one VL coalesce until the port sends one: it is built when sent, with
   the counts of that moment.
5. Batching (``low``): a release owes a packet at once only while the peer runs low, that
   is when the credit it holds beyond what has arrived here (the last FCCL sent - ABR) is
   below ``low`` blocks; otherwise the release waits, owed when an arrival brings that
   credit below ``low`` or at the next refresh, whichever is first.  IBA asks a receiver
   for a flow-control packet at least every 65,536 symbol times and never to grant more
   than its buffer holds (7.9.4.2-7.9.4.3); it does not ask for one per freed packet.  The
   port sets ``low`` to a round trip of its link plus one largest packet: while the peer
   holds that much, it can send through the round trip an update takes (half of it the
   packets in flight, half the update's own flight) and a largest packet's wait for the
   wire, so batching never makes it wait.  ``low`` of the whole buffer (the default)
   owes a packet on every release.
6. A packet that arrives beyond the buffer (more blocks than the receiver advertised) is a
   flow-control violation: counted in ``overflows`` and dropped by the port.  With the
   rules above it never happens; the tests hold it to zero.

VL15 (subnet management) is not flow controlled and has no state here.
"""

from __future__ import annotations

from roce.families.ib import flowcontrol as link

BLOCK = link.BLOCK
MOD = link.MODULUS
# the flow-control packet's word and its two conversions (per packet: module globals here)
OP_SHIFT, FCTBS_SHIFT = link.OP_SHIFT, link.FCTBS_SHIFT
VL_SHIFT, FCCL_SHIFT = link.VL_SHIFT, link.FCCL_SHIFT
OP_NORMAL, OP_INIT = link.OP_NORMAL, link.OP_INIT
_packet, _checked_word = link.packet_fast, link.checked_word_fast
HALF = MOD // 2  # the most credit the counters can express at once (rule 2)
REFRESH_SYMBOLS = 65_536  # IBA 7.9.4: the flow-control packet timer (rule 4)


def blocks(nbytes: int) -> int:
    """Blocks of 64 bytes a packet of ``nbytes`` takes (rule 1)."""
    return -(-nbytes // BLOCK)


def refresh_ns(rate_bps: int) -> int:
    """The flow-control refresh period of a link of ``rate_bps``: 65,536 byte times."""
    return max(1, REFRESH_SYMBOLS * 8 * 1_000_000_000 // max(rate_bps, 1))


class Credits:
    """Per-VL flow-control state of one port (sender toward its peer and receiver from it).

    ``capacity`` is the receive buffer of each data VL in blocks (what this port may grant);
    ``vls`` the number of data VLs (0 .. vls-1)."""

    __slots__ = ("vls", "capacity", "fctbs", "limit", "abr", "used", "owed", "init_owed",
                 "refresh_ns", "next_refresh", "overflows", "packets_sent",
                 "packets_received", "bad_lpcrc", "blocks_sent", "blocks_received",
                 "stalls", "max_used", "_seen", "adv", "low", "batched", "carried")

    def __init__(self, vls: int, capacity_blocks: int, refresh_period_ns: int,
                 low_blocks: int | None = None) -> None:
        if not 1 <= vls <= link.MAX_VL + 1:
            raise ValueError(f"data VLs: 1-{link.MAX_VL + 1}, not {vls}")
        if capacity_blocks < 1:
            raise ValueError("a VL's buffer holds at least one block")
        self.vls = vls
        self.capacity = capacity_blocks
        self.fctbs = [0] * vls  # rule 2, mod 4096
        self.limit = [0] * vls  # no credit until the peer's first packet
        self.abr = [0] * vls  # rule 3, mod 4096
        self.used = [0] * vls  # blocks held in the receive buffer
        self.owed: set[int] = set(range(vls))  # VLs whose flow-control packet is owed
        self.init_owed = set(range(vls))  # ... as initialization (Op 1)
        self.refresh_ns = refresh_period_ns
        self.next_refresh = refresh_period_ns
        self.overflows = 0
        self.packets_sent = 0
        self.packets_received = 0
        self.bad_lpcrc = 0
        self.blocks_sent = [0] * vls  # not wrapped: what the link carried
        self.blocks_received = [0] * vls
        self.stalls = 0  # times a packet waited for credit
        self.max_used = [0] * vls
        self._seen = [0] * vls  # blocks both ways at the last refresh, per VL
        self.adv = [0] * vls  # the FCCL last sent, per VL (rule 5)
        self.low = capacity_blocks if low_blocks is None else low_blocks  # rule 5
        self.batched: set[int] = set()  # VLs with a release not yet owed (rule 5)
        self.carried = 0  # blocks both ways on every VL (``activity``: kept, not summed)

    # -- sender ------------------------------------------------------------------------
    # Per packet: the methods below read the lists and constants into locals first, which
    # the build makes C integers (``roce._compiled.CLASSES``), so their arithmetic runs
    # without a Python integer per step: only values the rules bound (12-bit counters, a
    # packet's bytes and blocks, the blocks a buffer holds, at most what 12 bits grant).
    # What the buffer's size reaches (``capacity``, ``low``: a round trip of the link, more
    # than 64 bits at the longest delay) stays a Python integer.  ``blocks`` is written out
    # in them: -(n // -BLOCK).

    def may_send(self, vl: int, nbytes: int) -> bool:
        """Rule 2: whether a packet of ``nbytes`` on ``vl`` fits the peer's credit."""
        v, n, block, mod, half = vl, nbytes, BLOCK, MOD, HALF
        limit, sent = self.limit[v], self.fctbs[v]
        return (limit - (sent - n // -block)) % mod <= half

    def sent(self, vl: int, nbytes: int) -> None:
        v, n, block, mod = vl, nbytes, BLOCK, MOD
        b = -(n // -block)
        sent = self.fctbs[v]
        self.fctbs[v] = (sent + b) % mod
        self.blocks_sent[v] += b
        self.carried += b

    # -- receiver ----------------------------------------------------------------------

    def fccl(self, vl: int) -> int:
        """Rule 3: the credit limit this port grants on ``vl`` now."""
        v, mod, half = vl, MOD, HALF
        abr, free = self.abr[v], self.capacity - self.used[v]
        grant = half if free > half else free
        return (abr + grant) % mod

    def received(self, vl: int, nbytes: int) -> bool:
        """A data packet arrived on ``vl``: False (counted) when it overflows the buffer."""
        v, n, block, mod = vl, nbytes, BLOCK, MOD
        b = -(n // -block)
        u = self.used[v]
        u += b
        if u > self.capacity:
            self.overflows += 1
            return False
        a = self.abr[v]
        a = (a + b) % mod
        self.abr[v] = a
        self.used[v] = u
        top = self.max_used[v]
        if u > top:
            self.max_used[v] = u
        self.blocks_received[v] += b
        self.carried += b
        if self.batched and vl in self.batched:  # rule 5
            adv = self.adv[v]
            if (adv - a) % mod < self.low:
                self.batched.discard(vl)
                self.owed.add(vl)
        return True

    def released(self, vl: int, nbytes: int) -> None:
        """A packet left the receive buffer: its blocks are free, a packet is owed now or
        batched (rule 5)."""
        v, n, block, mod = vl, nbytes, BLOCK, MOD
        u = self.used[v]
        self.used[v] = u + n // -block
        adv, abr = self.adv[v], self.abr[v]
        if (adv - abr) % mod < self.low:
            self.owed.add(vl)
        else:
            self.batched.add(vl)

    # -- flow-control packets ----------------------------------------------------------

    def take(self) -> bytes | None:
        """The next owed flow-control packet (lowest VL first), or None."""
        owed = self.owed
        if not owed:
            return None
        if len(owed) == 1:  # (the one VL: no search)
            vl = owed.pop()
        else:
            vl = min(owed)
            owed.discard(vl)
        op = OP_NORMAL
        if self.init_owed and vl in self.init_owed:
            self.init_owed.discard(vl)
            op = OP_INIT
        self.packets_sent += 1
        if self.batched:
            self.batched.discard(vl)
        fccl = self.fccl(vl)
        self.adv[vl] = fccl
        sent = self.fctbs[vl]
        op_at, sent_at, vl_at, fccl_at = OP_SHIFT, FCTBS_SHIFT, VL_SHIFT, FCCL_SHIFT
        # ``link.build``'s word, packed here: VL, FCTBS and FCCL are in range by the rules
        return _packet(op << op_at | sent << sent_at | vl << vl_at | fccl << fccl_at)

    def on_packet(self, packet: bytes) -> bool:
        """A flow-control packet from the peer: resynchronize ABR to its FCTBS, take its
        FCCL as the limit.  False when its LPCRC is wrong or it names a VL this port does
        not run (ignored, as a corrupted link packet is)."""
        self.packets_received += 1
        word = _checked_word(packet)
        if word < 0:
            self.bad_lpcrc += 1
            return False
        sent_at, vl_at, fccl_at, mask = FCTBS_SHIFT, VL_SHIFT, FCCL_SHIFT, MOD - 1
        vl = (word >> vl_at) & 0xF
        if vl >= self.vls:
            return False
        self.abr[vl] = (word >> sent_at) & mask
        self.limit[vl] = (word >> fccl_at) & mask
        return True

    # -- the refresh timer -------------------------------------------------------------

    def activity(self) -> int:
        """Blocks this link carried both ways so far (the refresh timer stops when idle)."""
        return self.carried

    def deadline(self) -> int:
        """When the ``refresh`` timer fires next (virtual ns)."""
        return self.next_refresh

    def on_timer(self, now: int) -> None:
        """``refresh``: a flow-control packet is owed on every VL that carried data since
        the last refresh (rule 4) or has a release batched (rule 5)."""
        if now >= self.next_refresh:
            self.owed |= self.batched
            self.batched.clear()
            seen = self._seen
            vls = self.vls
            for vl in range(vls):
                mark = self.blocks_sent[vl] + self.blocks_received[vl]
                if mark != seen[vl]:
                    seen[vl] = mark
                    self.owed.add(vl)
            self.next_refresh = now + self.refresh_ns


__all__ = ["BLOCK", "HALF", "MOD", "Credits", "blocks", "refresh_ns"]
