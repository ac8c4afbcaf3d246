"""The responder harness: frames injected into an emulated device under test (DUT) with RC,
UC and UD queue pairs in every state, next to a real emulated peer whose valid traffic runs
over a simulated fabric.  The invariants are listed in ``ResponderFuzzer``'s docstring; the
requests with known outcomes are the builders of ``responder_cases``.
"""

from __future__ import annotations

import random
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from roce import fast
from roce.errors import UsageError
from roce.headers import LAYOUTS, NAK_PSN_SEQUENCE_ERROR
from roce.locate import OK
from roce.opcodes import OPCODES, Transport, lookup
from roce.packet import craft
from roce.psn import PSN_MASK
from roce.testing.fuzz import dut_cases as cases
from roce.testing.fuzz import ranges
from roce.testing.fuzz.answers import answers_match, describe_answer, format_answers
from roce.testing.fuzz.corpus import Saved
from roce.testing.fuzz.dut_cases import QKEY, nak
from roce.testing.fuzz.frame_fields import dest_qp, eth_dst, icrc_ok, mac_bytes, set_dest_qp
from roce.testing.fuzz.results import Failure, Summary, exc_line
from roce.testing.mutate import Mutator, get_field, header_offsets, random_frame

NAME = "responder"

RESPONDER_CHECKS: tuple[str, ...] = ("exception", "write-outside-grant", "answer", "transition",
                                     "valid-traffic", "emitted-malformed")
SLOT_STATES = ("RESET", "INIT", "RTR", "RTS", "ERR")
TARGET_MTU = 1024
RECV_WQES = (1024, 300)  # each arm posts two receive WQEs of these sizes in one half...
RECV_SLOT = 2 * sum(RECV_WQES)  # ...of the target QP's receive area, the halves by turns
PHANTOM_MAC, PHANTOM_IP, PHANTOM_QPN = "02:00:00:00:00:fe", "10.0.0.254", 0xABCDE
LIVE_DEPTH = 4  # valid work requests the peer keeps outstanding per QP
VALID_DEADLINE_NS = 2_000_000_000  # a valid RC WR not complete after this much virtual time


@dataclass(eq=False)
class MRInfo:
    """An MR as the harness registered it: what the grant oracle trusts (not the emulator's
    own key checks, which are under test)."""

    name: str
    mr: Any  # roce.emu.core.verbs.MR
    pd: Any
    access: int
    shadow: bytes = b""


@dataclass(eq=False)
class Slot:
    """A target QP on the DUT that the harness keeps in one state."""

    name: str  # "RC/RTS"
    qp: Any
    qp_type: Any
    state: str
    cq: Any
    region: int  # offset of its receive buffers in the recv MR
    access: int
    epsn: int = 0  # the harness's model of the responder's expected PSN
    clean: bool = False  # only requests with known outcomes since the last arm
    nak_sent: bool = False
    arms: int = 0  # times armed: the receive buffers alternate halves, so a write into a
    # WQE from before the last RESET lands outside what is posted now
    # wr_id -> (mr index, offset, length) of the receive WQEs posted and not yet completed
    posted: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    write_ctx: list[tuple[int, int, int]] = field(default_factory=list)  # (mr index, off, n)


@dataclass
class Expect:
    """What a semantic case must produce: answers as tuples, and the QP state after."""

    case: str
    answers: list[tuple]  # ("ack", psn) ("nak", code, psn) ("rnr", psn) ("read", psn, data)
    # ("atomic_ack", psn, orig) ; an empty list: no answer at all
    to_error: bool = False
    optional: bool = False  # the answers may also be absent (a repeated PSN-sequence NAK)
    writes: tuple[int, int, bytes] | None = None  # (mr index, offset, data) that must land


class ResponderFuzzer:
    """Frames injected into an emulated device under test (DUT), next to valid traffic.

    The DUT holds RC, UC and UD queue pairs in each of RESET, INIT, RTR, RTS and ERR (kept
    there: re-armed through RESET when something moves them), an RC QP without remote
    access rights, and one live QP of each type connected to a real emulated peer that
    keeps SEND / WRITE / READ / atomic traffic running over the simulated fabric.

    Each step injects one frame: a *case* with a known expected outcome (a valid request,
    bad rkey, out-of-bounds, misaligned atomic, PSN ahead, duplicate, missing first packet,
    no receive WQE, oversize...), a structure-aware mutant (ICRC fixed up or not) of a
    request aimed at a target QP, random bytes, or one of the harmless kinds (duplicate,
    PSN ahead, bad ICRC, malformed) aimed at a live QP.  Checks (``RESPONDER_CHECKS``):

    - ``exception``: nothing raises out of ``Device.receive`` or the fabric;
    - ``write-outside-grant``: a shadow copy of every DUT MR; bytes may change only inside
      ranges a request legitimately grants (a RETH/AtomicETH range lying wholly inside an
      MR whose rkey, PD and access allow it, on a QP in a receiving state with the right;
      the receive buffers posted to the QP for a SEND);
    - ``answer``: for cases, exactly the frames rxe's error class says (ACK, NAK code and
      PSN, RNR NAK, READ response data, atomic original value) and the state after (ERR
      or unchanged); for any frame, UC/UD QPs and QPs outside RTR/RTS never answer;
    - ``transition``: QP state changes are in ``roce.emu.core.states.TRANSITIONS`` or to ERR,
      and a received frame moves only an RC QP, only from a receiving state, only to ERR;
    - ``valid-traffic``: every valid work request of the peer completes successfully;
    - ``emitted-malformed``: every frame the DUT sends walks and carries a good ICRC.
    """

    name = NAME

    def __init__(self, seed: int, skip: Iterable[str] = ()) -> None:
        self.seed = seed
        self.skip = frozenset(skip)
        unknown = self.skip - set(RESPONDER_CHECKS)
        if unknown:
            raise UsageError(f"unknown checks {sorted(unknown)}; known: "
                             f"{', '.join(RESPONDER_CHECKS)}")
        self.rng = random.Random(f"responder:{seed}")
        self.mutator = Mutator(self.rng)
        self.summary = Summary(self.name, seed)
        self.step_no = 0
        self.recent: deque[bytes] = deque(maxlen=8)  # frames delivered lately, for reports
        self.grants: list[tuple[int, int, int]] = []  # (mr index, offset, length)
        self.step_failures: list[tuple[str, str]] = []  # every failure of the current step
        # per live QP: RETH ranges of recent WRITE first packets (Middle/Last continue them)
        self._live_ctx: dict[int, list[tuple[int, int, int]]] = {}
        self._wr = 0
        self._build()

    # -- the world ------------------------------------------------------------------------

    def _build(self) -> None:
        from roce.emu import (
            CQ,
            MR,
            PD,
            QP,
            Access,
            Fabric,
            QPAttr,
            QPInitAttr,
            QPType,
            connect,
        )
        from roce.emu.core.constants import QPState

        self.QPState = QPState
        A = Access
        full = int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE
                   | A.IBV_ACCESS_REMOTE_READ | A.IBV_ACCESS_REMOTE_ATOMIC)
        self.full = full
        rng = self.rng
        fab = self.fab = Fabric(seed=self.seed)
        peer = self.peer = fab.add_host("peer", "10.0.0.1")
        dut = self.dut = fab.add_host("dut", "10.0.0.2")
        fab.connect(peer, dut)
        fab.record(self)
        self.dev = dut.device
        self.pd, self.pd_other = PD(dut), PD(dut)
        self.mrs: list[MRInfo] = []

        def reg(name: str, pd: Any, size: int, access: int) -> MRInfo:
            mr = MR(pd, size, access, key=rng.randrange(256))
            mr.write(rng.randbytes(size))
            info = MRInfo(name, mr, pd, access, bytes(mr.buf))
            self.mrs.append(info)
            return info

        self.mr_rw = reg("rw", self.pd, 4096, full)
        self.mr_ro = reg("ro", self.pd, 4096,
                         int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_REMOTE_READ))
        self.mr_other = reg("other-pd", self.pd_other, 4096, full)
        self.mr_live = reg("live", self.pd, 4096 + 8 * 1024, full)
        self.mr_recv = reg("recv", self.pd, RECV_SLOT * 24, int(A.IBV_ACCESS_LOCAL_WRITE))
        # the peer: a requester with its own buffers
        ppd = PD(peer)
        self.p_src = MR(ppd, 8192, full)
        self.p_src.write(rng.randbytes(8192))
        self.p_dst = MR(ppd, 8192, full)
        self.p_cq = CQ(peer)
        init = QPInitAttr
        self.live: dict[str, tuple[Any, Any, Any]] = {}  # type -> (peer QP, DUT QP, DUT CQ)
        for qt in (QPType.IBV_QPT_RC, QPType.IBV_QPT_UC, QPType.IBV_QPT_UD):
            cq = CQ(dut)
            pq = QP(ppd, init(qp_type=qt, send_cq=self.p_cq, recv_cq=self.p_cq))
            dq = QP(self.pd, init(qp_type=qt, send_cq=cq, recv_cq=cq))
            if qt == QPType.IBV_QPT_UD:
                for q in (pq, dq):
                    q.to_init(QPAttr(qkey=QKEY))
                    q.to_rtr(QPAttr())
                    q.to_rts(QPAttr(sq_psn=rng.randrange(1 << 24)))
            else:
                connect(pq, dq, path_mtu=TARGET_MTU, psn_a=rng.randrange(1 << 24),
                        psn_b=rng.randrange(1 << 24), timeout=8, retry_cnt=7, rnr_retry=7,
                        min_rnr_timer=1, max_rd_atomic=4)
            self.live[qt.name[-2:]] = (pq, dq, cq)
        self.live_posted: dict[int, dict[int, tuple[int, int, int]]] = {
            dq.qp_num: {} for _, dq, _ in self.live.values()}
        self.outstanding: dict[int, tuple[int, str]] = {}  # peer wr_id -> (posted at, what)
        self.live_recv_next = 0
        # target QPs
        self.slots: list[Slot] = []
        region = 0
        for qt in (QPType.IBV_QPT_RC, QPType.IBV_QPT_UC, QPType.IBV_QPT_UD):
            for state in SLOT_STATES:
                cq = CQ(dut)
                qp = QP(self.pd, init(qp_type=qt, send_cq=cq, recv_cq=cq))
                self.slots.append(Slot(f"{qt.name[-2:]}/{state}", qp, qt, state, cq, region,
                                        full))
                region += RECV_SLOT
        cq = CQ(dut)
        qp = QP(self.pd, init(qp_type=QPType.IBV_QPT_RC, send_cq=cq, recv_cq=cq))
        self.slots.append(Slot("RC/RTS-noaccess", qp, QPType.IBV_QPT_RC, "RTS", cq, region,
                                int(A.IBV_ACCESS_LOCAL_WRITE)))
        self.by_qpn = {s.qp.qp_num: s for s in self.slots}
        self.live_qpns = {dq.qp_num for _, dq, _ in self.live.values()}
        for s in self.slots:
            self._arm(s)
        self._post_live_recvs()
        self._snapshot_states()

    # -- target QPs -------------------------------------------------------------------------

    def _arm(self, s: Slot) -> None:
        """Bring a target QP to its state through RESET, with a fresh ePSN and two receive
        WQEs; from here on its responder's state is known to the harness."""
        from roce.emu import AHAttr, QPAttr, QPAttrMask, QPType, RecvWR

        qp = s.qp
        S = self.QPState
        if qp.qp_state != S.IBV_QPS_RESET:
            qp.modify(QPAttr(qp_state=S.IBV_QPS_RESET), QPAttrMask.IBV_QP_STATE)
        s.posted.clear()
        s.write_ctx.clear()
        s.epsn = self.rng.randrange(1 << 24)
        s.clean = True
        s.nak_sent = False
        if s.state == "RESET":
            self._drain_cq(s)
            return
        ud = s.qp_type == QPType.IBV_QPT_UD
        qp.to_init(QPAttr(qkey=QKEY) if ud else QPAttr(qp_access_flags=s.access))
        if s.state == "ERR":
            qp.modify(QPAttr(qp_state=S.IBV_QPS_ERR), QPAttrMask.IBV_QP_STATE)
            self._drain_cq(s)
            return
        s.arms += 1
        off = s.region + (s.arms % 2) * (RECV_SLOT // 2)
        for size in RECV_WQES:
            self._wr += 1
            qp.post_recv(RecvWR(wr_id=self._wr, sg_list=[self.mr_recv.mr.sge(off, size)]))
            s.posted[self._wr] = (self.index(self.mr_recv), off, size)
            off += size
        if s.state == "INIT":
            return
        if ud:
            qp.to_rtr(QPAttr())
        else:
            qp.to_rtr(QPAttr(path_mtu=TARGET_MTU, dest_qp_num=PHANTOM_QPN, rq_psn=s.epsn,
                             max_dest_rd_atomic=4, min_rnr_timer=1,
                             ah_attr=AHAttr(dmac=PHANTOM_MAC, dip=PHANTOM_IP)))
        if s.state == "RTR":
            return
        if ud:
            qp.to_rts(QPAttr(sq_psn=0))
        else:
            qp.to_rts(QPAttr(sq_psn=0, timeout=8, retry_cnt=1, rnr_retry=1, max_rd_atomic=4))

    def _drain_cq(self, s: Slot) -> None:
        for wc in s.cq.poll(1 << 20):
            s.posted.pop(wc.wr_id, None)

    def _snapshot_states(self) -> None:
        self.states = {qpn: qp.state for qpn, qp in self.dev.qps.items()}

    # -- granted ranges ---------------------------------------------------------------------

    def write(self, frame: bytes, ts_ns: int | None = None) -> None:
        """The fabric's recorder hook: every delivered frame passes here first."""
        self.recent.append(frame)
        if eth_dst(frame) == mac_bytes(self.dut.mac):
            self._grant(frame)

    def _mr_range(self, qp: Any, rkey: int, va: int, length: int,
                  need: int) -> tuple[int, int, int] | None:
        """The (mr index, offset, length) a request may touch, by the harness's own table."""
        if length <= 0 or not int(qp.core.attr.qp_access_flags) & need:
            return None
        for i, m in enumerate(self.mrs):
            mr = m.mr
            if mr.rkey == rkey and m.pd is qp.pd and m.access & need and \
                    mr.addr <= va and va + length <= mr.addr + mr.length:
                return (i, va - mr.addr, length)
        return None

    def _grant(self, frame: bytes) -> None:
        """Add what this frame may legitimately write to the DUT's memory."""
        from roce.emu.core.constants import Access
        from roce.emu.core.states import CAN_RECEIVE

        w = fast.walk(frame)
        if w.status != OK or not icrc_ok(frame, w):
            return
        qpn = dest_qp(frame, w)
        core = self.dev.qps.get(qpn)
        if core is None or core.state not in CAN_RECEIVE:
            return
        op = OPCODES[w.opcode]
        if op.transport is not core.transport:
            return
        qp = self._verbs_qp(qpn)
        if qp is None:
            return
        slot = self.by_qpn.get(qpn)
        posted = slot.posted if slot is not None else self.live_posted.get(qpn, {})
        operation = op.operation.value
        if operation == "send":
            self.grants.extend(posted.values())
            return
        ctx = slot.write_ctx if slot is not None else self._live_ctx.setdefault(qpn, [])
        at = dict(header_offsets(frame, w))
        if operation == "write":
            if "reth" in at:
                r = _fields(frame, at["reth"], "reth")
                g = self._mr_range(qp, r["r_key"], r["va"], r["dmalen"],
                                   int(Access.IBV_ACCESS_REMOTE_WRITE))
                if op.position.value == "only" and w.pad_off - w.payload_off != r["dmalen"]:
                    g = None  # rxe check_length: an Only packet carries its whole DMA length
                if g is not None and g not in ctx:
                    ctx.append(g)
                    del ctx[:-8]
            self.grants.extend(ctx)
        elif operation == "atomic":
            a = _fields(frame, at["atomiceth"], "atomiceth")
            if a["va"] % 8 == 0:
                g = self._mr_range(qp, a["r_key"], a["va"], 8,
                                   int(Access.IBV_ACCESS_REMOTE_ATOMIC))
                if g is not None:
                    self.grants.append(g)

    def index(self, m: MRInfo) -> int:
        """``m``'s index in the MR table (what grants and ``Outcome.writes`` name)."""
        return self.mrs.index(m)

    def _verbs_qp(self, qpn: int) -> Any:
        slot = self.by_qpn.get(qpn)
        if slot is not None:
            return slot.qp
        for _, dq, _ in self.live.values():
            if dq.qp_num == qpn:
                return dq
        return None

    def _check_memory(self, frames: list[bytes], context: dict[str, Any]) -> None:
        for i, m in enumerate(self.mrs):
            cur = bytes(m.mr.buf)
            if cur == m.shadow:
                continue
            allowed = [(off, off + n) for j, off, n in self.grants if j == i]
            for lo, hi in ranges.changed(m.shadow, cur):
                outside = [(a, b) for a, b in ranges.subtract((lo, hi), allowed)]
                if outside:
                    a, b = outside[0]
                    self._fail("write-outside-grant",
                               f"MR {m.name} bytes {a}..{b - 1} changed; granted "
                               f"{ranges.describe(allowed)}", frames, context)
                    break
            m.shadow = cur
        self.grants.clear()

    # -- states -------------------------------------------------------------------------------

    def _check_states(self, frames: list[bytes], context: dict[str, Any],
                      by_frame: bool) -> None:
        from roce.emu.core.constants import QPType
        from roce.emu.core.states import CAN_RECEIVE, TRANSITIONS

        S = self.QPState
        for qpn, qp in self.dev.qps.items():
            old, new = self.states.get(qpn, qp.state), qp.state
            if old == new:
                continue
            if (old, new) not in TRANSITIONS and new != S.IBV_QPS_ERR:
                self._fail("transition", f"QP 0x{qpn:x} went {old.name} -> {new.name}: not in "
                           "the transition table", frames, context)
            elif by_frame and not (qp.qp_type == QPType.IBV_QPT_RC and new == S.IBV_QPS_ERR
                                   and old in CAN_RECEIVE):
                self._fail("transition", f"a received frame moved {qp.qp_type.name} QP "
                           f"0x{qpn:x} {old.name} -> {new.name}", frames, context)
        self._snapshot_states()

    # -- failures -----------------------------------------------------------------------------

    def _fail(self, check: str, detail: str, frames: list[bytes],
              context: dict[str, Any]) -> None:
        if check in self.skip:
            return
        self.step_failures.append((check, detail))
        ctx = {"seed": self.seed, "step": self.step_no, **context}
        self.summary.add_failure(Failure(self.name, check, detail, list(frames), context=ctx))

    # -- valid traffic --------------------------------------------------------------------------

    def _post_live_recvs(self) -> None:
        from roce.emu import RecvWR

        for key in ("RC", "UC", "UD"):
            _, dq, cq = self.live[key]
            posted = self.live_posted[dq.qp_num]
            for wc in cq.poll(1 << 20):
                posted.pop(wc.wr_id, None)
            while len(posted) < 8 and dq.qp_state in (self.QPState.IBV_QPS_RTS,
                                                      self.QPState.IBV_QPS_RTR):
                self._wr += 1
                off = 4096 + (self.live_recv_next % 8) * 1024
                self.live_recv_next += 1
                dq.post_recv(RecvWR(wr_id=self._wr, sg_list=[self.mr_live.mr.sge(off, 1024)]))
                posted[self._wr] = (self.index(self.mr_live), off, 1024)

    def _post_valid(self) -> None:
        from roce.emu import AH, AHAttr, SendWR, WROpcode

        rng = self.rng
        now = self.fab.now
        pending = Counter(what.split()[0] for _, what in self.outstanding.values())
        for key in ("RC", "UC", "UD"):
            pq, dq, _ = self.live[key]
            if pending[key] >= LIVE_DEPTH or rng.random() < 0.5:
                continue
            if pq.qp_state != self.QPState.IBV_QPS_RTS:
                continue
            self._wr += 1
            n = rng.randint(1, 1000 if key != "UD" else TARGET_MTU - 40 - 24)
            sge = self.p_src.sge(rng.randrange(8192 - n), n)
            kinds = ("send", "write", "read", "faa") if key == "RC" else (
                ("send", "write") if key == "UC" else ("send",))
            kind = rng.choice(kinds)
            live = self.mr_live.mr
            if kind == "send":
                wr = SendWR(wr_id=self._wr, opcode=WROpcode.IBV_WR_SEND, sg_list=[sge])
                if key == "UD":
                    wr.ah = AH(pq.pd, AHAttr(dip=self.dut.ip))
                    wr.remote_qpn, wr.remote_qkey = dq.qp_num, QKEY
            elif kind == "write":
                wr = SendWR(wr_id=self._wr, opcode=WROpcode.IBV_WR_RDMA_WRITE, sg_list=[sge],
                            remote_addr=live.addr + rng.randrange(4096 - n), rkey=live.rkey)
            elif kind == "read":
                wr = SendWR(wr_id=self._wr, opcode=WROpcode.IBV_WR_RDMA_READ,
                            sg_list=[self.p_dst.sge(0, n)],
                            remote_addr=live.addr + rng.randrange(4096 - n), rkey=live.rkey)
            else:
                wr = SendWR(wr_id=self._wr, opcode=WROpcode.IBV_WR_ATOMIC_FETCH_AND_ADD,
                            sg_list=[self.p_dst.sge(0, 8)],
                            remote_addr=live.addr + rng.randrange(4096 // 8) * 8,
                            rkey=live.rkey, compare_add=rng.getrandbits(64))
            pq.post_send(wr)
            self.outstanding[self._wr] = (now, f"{key} {kind} {n}")

    def _poll_valid(self, final: bool = False) -> None:
        from roce.emu import WCStatus

        for wc in self.p_cq.poll(1 << 20):
            what = self.outstanding.pop(wc.wr_id, None)
            if what is None:
                continue  # a receive completion on the peer (none are posted)
            self.summary.counts["valid work completed"] += 1
            if wc.status != WCStatus.IBV_WC_SUCCESS:
                self._fail("valid-traffic", f"valid {what[1]} completed with "
                           f"{WCStatus(wc.status).name}", list(self.recent), {})
        now = self.fab.now
        for wr_id, (t, what) in list(self.outstanding.items()):
            if final or now - t > VALID_DEADLINE_NS:
                self._fail("valid-traffic", f"valid {what} posted at {t} ns never completed "
                           f"(now {now} ns)", list(self.recent), {})
                del self.outstanding[wr_id]

    # -- injection ------------------------------------------------------------------------------

    def _inject(self, frame: bytes, context: dict[str, Any]) -> list[bytes]:
        """Deliver ``frame`` to the DUT now; return what it answered (the fabric sends it)."""
        dev = self.dev
        self.recent.append(frame)
        self._grant(frame)
        start = len(dev.tx)
        try:
            dev.receive(self.fab.now, frame)
        except Exception as exc:  # noqa: BLE001 - the finding
            self._fail("exception", "Device.receive raised " + exc_line(exc), [frame],
                       context)
        answers = dev.tx[start:]
        if answers:
            dev.kick()
        return answers

    def step(self) -> None:
        self.step_no += 1
        self.step_failures = []
        rng = self.rng
        self._post_live_recvs()
        self._post_valid()
        before = self.fab.now
        try:
            self.fab.run(until=before + rng.choice((500, 2_000, 10_000, 50_000)))
        except Exception as exc:  # noqa: BLE001
            self._fail("exception", "the fabric raised " + exc_line(exc), list(self.recent),
                       {"phase": "fabric"})
        self._check_states(list(self.recent), {"phase": "fabric"}, by_frame=False)
        self._check_memory(list(self.recent), {"phase": "fabric"})
        self._poll_valid()
        self._check_live()
        r = rng.random()
        if r < 0.40:
            kind = "case"
            slot = self._pick_slot()
            frame, expect = self._case(slot)
        elif r < 0.80:
            kind = "mutant"
            slot, frame = self._mutant()
            expect = None
        elif r < 0.85:
            kind, slot, expect = "random", None, None
            seen = [f for f in self.recent if f]  # frames on the wire lately, either way
            if seen and rng.random() < 0.5:
                frame = self._retarget(self.mutator.mutate(rng.choice(seen)).frame)
            else:
                frame = random_frame(rng)
        else:
            kind = "live"
            frame, expect = self._live_case()
            slot = None
        self.summary.inputs += 1
        self.summary.counts[f"injected {kind}"] += 1
        context = {"kind": kind, "slot": slot.name if slot else "-",
                   "case": expect.case if expect else "-"}
        self._snapshot_states()
        w = fast.walk(frame)
        qpn = dest_qp(frame, w) if w.status == OK else -1
        target = self.dev.qps.get(qpn)
        state_before = target.state if target is not None else None
        answers = self._inject(frame, context)
        self._check_generic(frame, answers, target, state_before, context)
        if expect is not None:
            self._check_expect(frame, answers, expect, slot, target, state_before, context)
        self._check_states([frame, *answers], context, by_frame=True)
        self._check_memory([frame, *answers], context)
        for s in self.slots:
            self._drain_cq(s)  # completed receive WQEs no longer grant their buffers
            if s.qp.qp_state.name[8:] != s.state or (not s.clean and rng.random() < 0.2):
                self._arm(s)
        self._snapshot_states()

    # -- expectations ---------------------------------------------------------------------------

    def _check_generic(self, frame: bytes, answers: list[bytes], target: Any,
                       state_before: Any, context: dict[str, Any]) -> None:
        from roce.emu.core.constants import QPType
        from roce.emu.core.states import CAN_RECEIVE

        for a in answers:
            w = fast.walk(a)
            if w.status != OK or not icrc_ok(a, w):
                self._fail("emitted-malformed", f"the DUT sent a frame that does not walk "
                           f"(status {w.status}) or has a bad ICRC", [frame, a], context)
        if not answers or target is None:
            return
        if target.qp_type != QPType.IBV_QPT_RC:
            self._fail("answer", f"{target.qp_type.name} QP answered a request "
                       f"({len(answers)} frames)", [frame, *answers], context)
        elif state_before not in CAN_RECEIVE:
            self._fail("answer", f"RC QP in {state_before.name} answered "
                       f"({len(answers)} frames)", [frame, *answers], context)

    def _check_expect(self, frame: bytes, answers: list[bytes], e: Expect, slot: Slot | None,
                      target: Any, state_before: Any, context: dict[str, Any]) -> None:
        self.summary.counts[f"case {e.case}"] += 1
        got = [describe_answer(a) for a in answers]
        want = e.answers
        ok = answers_match(got, want) or (e.optional and not got)
        S = self.QPState
        state_after = target.state if target is not None else None
        if target is not None:
            if e.to_error and state_after != S.IBV_QPS_ERR:
                ok = False
            if not e.to_error and state_after != state_before:
                ok = False
        if not ok:
            self._fail("answer", f"{e.case} on {slot.name if slot else 'live'}: expected "
                       f"{format_answers(want)}{' (or nothing)' if e.optional else ''}"
                       f"{' and ERR' if e.to_error else ''}, got {format_answers(got)} state "
                       f"{state_after.name[8:] if state_after is not None else '-'}",
                       [frame, *answers], context)
            if slot is not None:
                slot.clean = False
        if e.writes is not None and "answer" not in self.skip:
            i, off, data = e.writes
            now = bytes(self.mrs[i].mr.buf[off:off + len(data)])
            if now != data:
                self._fail("answer", f"{e.case}: MR {self.mrs[i].name} at {off} does not "
                           "hold the written data", [frame, *answers], context)

    # -- building requests ----------------------------------------------------------------------

    def request(self, slot: Slot, ident: str, psn: int, payload: bytes = b"",
                ackreq: bool = True, **fields: Any) -> bytes:
        """A request from the phantom peer to ``slot``'s QP: ``ident`` without its transport
        (``SEND_ONLY``) in the slot's transport (UD: always a SEND Only with the harness's
        Q_Key; UC has no READ or atomics, so those go out as RC rows); ``fields`` the
        opcode's headers do not have are left out."""
        from roce.emu.core.constants import QPType

        prefix = {QPType.IBV_QPT_RC: "RC", QPType.IBV_QPT_UC: "UC",
                  QPType.IBV_QPT_UD: "UD"}[slot.qp_type]
        if prefix == "UD":
            ident = "SEND_ONLY"
            fields = {"deth.q_key": QKEY, "deth.srcqp": 0x77, **{
                k: v for k, v in fields.items() if k.startswith("deth")}}
        try:
            op = lookup(f"{prefix}_{ident}")
        except KeyError:  # UC has no READ or atomics: the RC row, a wrong transport
            op = lookup(f"RC_{ident}")
        have = {f"{h}.{f.name}" for h in op.headers for f in LAYOUTS[h].fields} | {
            f.name for h in op.headers for f in LAYOUTS[h].fields}
        have |= {alias for alias in ("rkey", "swap", "compare") if
                 ("reth" in op.headers or "atomiceth" in op.headers)}
        fields = {k: v for k, v in fields.items() if k in have}
        return craft(op, payload, dmac=self.dut.mac, smac=PHANTOM_MAC,
                     src=PHANTOM_IP, dst=self.dut.ip, dqpn=slot.qp.qp_num, psn=psn & PSN_MASK,
                     ackreq=ackreq, **fields).to_bytes()

    def bad_rkey(self, mr: Any) -> int:
        """An rkey that must not open ``mr``."""
        rng = self.rng
        if rng.random() < 0.5:
            return mr.rkey ^ rng.randint(1, 255)  # the right MR, the wrong key byte
        return rng.choice((0, 0xFFFFFFFF, (0x7F << 8) | (mr.rkey & 0xFF), rng.getrandbits(32)))

    def _case(self, s: Slot) -> tuple[bytes, Expect]:
        """A request with a known outcome for target QP ``s``: a builder of
        ``responder_cases.CASES``, its outcome adjusted for QPs that never answer."""
        from roce.emu.core.constants import QPType

        rng = self.rng
        if not s.clean:
            self._arm(s)
        e = s.epsn
        rc = s.qp_type == QPType.IBV_QPT_RC
        receiving = s.state in ("RTR", "RTS")
        case = rng.choice(cases.GENERAL)
        if s.name.endswith("noaccess"):
            case = rng.choice(cases.NOACCESS_CASES)
        if s.qp_type == QPType.IBV_QPT_UD:
            case = rng.choice(cases.UD_CASES)
        posted = len(s.posted)
        wqe_len = next(iter(s.posted.values()))[2] if posted else 0  # the WQE a SEND takes
        env = cases.CaseEnv(self, s, rng, e, posted, wqe_len, TARGET_MTU, self.mr_rw.mr,
                            self.index(self.mr_rw))
        o = cases.CASES[case](env)
        answers, to_error, optional, writes = o.answers, o.to_error, o.optional, o.writes
        if not rc or not receiving:
            # UC and UD never answer; QPs outside RTR/RTS drop everything
            answers, to_error, optional = [], False, False
            if not receiving or case not in cases.LANDS_WITHOUT_ANSWER:
                writes = None
            s.clean = s.clean and receiving and s.qp_type == QPType.IBV_QPT_UD
        else:
            s.epsn = (e + o.advance) & PSN_MASK
            if o.advance:
                s.nak_sent = False
            if to_error:
                s.clean = False
        return o.frame, Expect(case, answers, to_error, optional, writes)

    def _pick_slot(self) -> Slot:
        """Target QPs for cases: receiving RC QPs half the time (most outcomes are theirs),
        receiving UC a sixth, any the rest."""
        rng = self.rng
        r = rng.random()
        if r < 0.5:
            pool = [s for s in self.slots if s.name in ("RC/RTS", "RC/RTR")]
        elif r < 0.66:
            pool = [s for s in self.slots if s.name in ("UC/RTS", "UC/RTR")]
        else:
            pool = self.slots
        return rng.choice(pool)

    def _mutant(self) -> tuple[Slot, bytes]:
        """A mutant of a valid request aimed at a target QP, never at a live one."""
        rng = self.rng
        slot = rng.choice(self.slots)
        slot.clean = False
        saved = slot.epsn
        base, _ = self._case(slot)
        slot.epsn = saved
        slot.clean = False
        m = self.mutator.mutate(base)
        self.summary.counts[f"mutant {'fixed' if m.fixed else 'raw'}"] += 1
        return slot, self._retarget(m.frame)

    def _retarget(self, frame: bytes) -> bytes:
        """Point a frame that would reach a live QP at a target QP instead."""
        w = fast.walk(frame)
        if w.status != OK:
            return frame
        qpn = dest_qp(frame, w)
        if qpn not in self.live_qpns:
            return frame
        good = icrc_ok(frame, w)
        buf = bytearray(frame)
        set_dest_qp(buf, w, self.rng.choice(self.slots).qp.qp_num)
        out = bytes(buf)
        if good:
            from roce.testing.mutate import fixup

            out = fixup(out)
        return out

    def _live_case(self) -> tuple[bytes, Expect]:
        """Something a live RC/UC QP must shrug off: a duplicate, a PSN ahead, a bad ICRC,
        a malformed frame."""
        rng = self.rng
        pq, dq, _ = self.live[rng.choice(("RC", "RC", "UC"))]
        rc = dq.core.transport is Transport.RC
        epsn = dq.core.responder.epsn  # white-box: the live responder's expected PSN
        kind = rng.choice(("dup", "ahead", "bad_icrc", "malformed"))
        prefix = "RC" if rc else "UC"
        live = self.mr_live.mr
        fake = Slot("live", dq, dq.core.qp_type, "RTS", None, 0, self.full)
        if kind == "dup":
            k = rng.randint(1024, (1 << 23) - 1)  # far behind anything in flight
            frame = self.request(fake, rng.choice(("SEND_ONLY", "RDMA_WRITE_ONLY")),
                                  epsn - k, b"dup!", va=live.addr, rkey=self.bad_rkey(live),
                                  dmalen=4) if rc else b""
            if not rc:  # UC treats any First/Only as a new message: send junk instead
                kind = "malformed"
            else:
                return frame, Expect(f"live_{kind}", [("ack", (epsn - 1) & PSN_MASK)])
        if kind == "ahead" and rc:
            frame = self.request(fake, "RDMA_WRITE_MIDDLE", epsn + rng.randint(1 << 16,
                                                                              1 << 22),
                                  rng.randbytes(TARGET_MTU))
            return frame, Expect(f"live_{kind}", [nak(NAK_PSN_SEQUENCE_ERROR, epsn)], optional=True)
        base = craft(f"{prefix}_SEND_ONLY", b"bad", dmac=self.dut.mac, dqpn=dq.qp_num,
                     psn=epsn).to_bytes()
        if kind == "bad_icrc":
            buf = bytearray(base)
            buf[-1 - rng.randrange(4)] ^= 1 << rng.randrange(8)
            return bytes(buf), Expect(f"live_{kind}", [])
        frame = base
        for _ in range(20):  # a mutant the walk rejects
            frame = self.mutator.mutate(base, fix=False).frame
            if fast.walk(frame).status != OK:
                break
        else:
            frame = base[:30]
        return frame, Expect("live_malformed", [])

    def _check_live(self) -> None:
        S = self.QPState
        for key, (pq, dq, _) in self.live.items():
            for q, side in ((pq, "peer"), (dq, "DUT")):
                if q.qp_state != S.IBV_QPS_RTS:
                    self._fail("valid-traffic", f"live {key} QP on the {side} is in "
                               f"{q.qp_state.name} with only harmless injections",
                               list(self.recent), {})
                    self._reconnect(key)
                    return

    def _reconnect(self, key: str) -> None:
        """Bring a live pair back after a failure so the run can go on."""
        from roce.emu import QPAttr, QPAttrMask, connect
        from roce.emu.core.constants import QPType

        pq, dq, _ = self.live[key]
        for q in (pq, dq):
            q.modify(QPAttr(qp_state=self.QPState.IBV_QPS_RESET), QPAttrMask.IBV_QP_STATE)
        self.live_posted[dq.qp_num].clear()
        for wr_id, (_, what) in list(self.outstanding.items()):
            if what.startswith(key):
                del self.outstanding[wr_id]
        if pq.core.qp_type == QPType.IBV_QPT_UD:
            for q in (pq, dq):
                q.to_init(QPAttr(qkey=QKEY))
                q.to_rtr(QPAttr())
                q.to_rts(QPAttr(sq_psn=0))
        else:
            connect(pq, dq, path_mtu=TARGET_MTU, psn_a=self.rng.randrange(1 << 24),
                    psn_b=self.rng.randrange(1 << 24), timeout=8, min_rnr_timer=1,
                    max_rd_atomic=4)
        self._snapshot_states()

    # -- running --------------------------------------------------------------------------------

    def run(self, count: int | None = 2000, time_limit: float | None = None,
            progress: Callable[[Summary], None] | None = None) -> Summary:
        start = time.monotonic()
        deadline = None if time_limit is None else start + time_limit
        while (count is None or self.step_no < count) and (
                deadline is None or time.monotonic() < deadline):
            self.step()
            if progress is not None and self.step_no % 64 == 0:
                progress(self.summary)
        self.finish()
        self.summary.elapsed = time.monotonic() - start
        return self.summary

    def finish(self) -> None:
        """Let valid traffic drain; everything posted must have completed."""
        try:
            self.fab.run(until=self.fab.now + VALID_DEADLINE_NS)
        except Exception as exc:  # noqa: BLE001
            self._fail("exception", "the fabric raised " + exc_line(exc), list(self.recent),
                       {"phase": "final"})
        self._poll_valid(final=True)
        self._check_memory(list(self.recent), {"phase": "final"})
        self.summary.counts["DUT frames in"] = self.dev.counters.frames_in
        self.summary.counts["DUT icrc drops"] = self.dev.counters.icrc_drops
        self.summary.counts["DUT malformed"] = self.dev.counters.malformed

    def replay(self, saved: Saved) -> list[str]:
        """Run the same seed to the saved step; the failures of the saved check there."""
        step = int(saved.keys.get("step", 0))
        found: list[tuple[str, str]] = []
        while self.step_no < step:
            self.step()
            if self.step_no == step:
                found = self.step_failures
        if self.step_no == step and not found:
            found = self.step_failures
        return [f"{c}: {d}" for c, d in found if c == saved.check]


def fuzz_responder(seed: int, count: int | None = 2000, time_limit: float | None = None,
                   skip: Iterable[str] = (),
                   progress: Callable[[Summary], None] | None = None) -> Summary:
    """Run the responder harness; see ``ResponderFuzzer``."""
    return ResponderFuzzer(seed, skip).run(count, time_limit, progress)


def replay(saved: list[Saved]) -> list[list[str]]:
    """The checks each saved responder failure still fails (empty: fixed).  Failures of one
    seed share one run, stepped to each saved step in turn."""
    out: list[list[str]] = [[] for _ in saved]
    runs: dict[int, ResponderFuzzer] = {}
    for i in sorted(range(len(saved)), key=lambda i: int(saved[i].keys.get("step", 0))):
        seed = int(saved[i].keys.get("seed", 0))
        if seed not in runs:
            runs[seed] = ResponderFuzzer(seed)
        out[i] = runs[seed].replay(saved[i])
    return out


def _fields(frame: bytes, base: int, header: str) -> dict[str, int]:
    return {f.name: get_field(frame, base, f) for f in LAYOUTS[header].fields}
