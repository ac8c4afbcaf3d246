"""Verbs programs: the plain-data programs of ``roce.testing.strategies.verbs_programs``
(and of ``random_program`` here, without hypothesis), executed by ``run_program`` between
two emulated hosts with the exactly-once and memory invariants checked (the property tests
use it).

A program is a list of operations, each a tuple of plain values (the vocabulary is listed
in ``roce.testing.strategies``); ``rkey_kind`` is one of ``RKEY_KINDS``, offsets address
b's remote MR of ``PROGRAM_MR_SIZE`` bytes, and a receive may not exceed
``PROGRAM_RECV_SIZE`` bytes.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from roce.testing.fuzz import ranges
from roce.testing.fuzz.results import exc_line

RKEY_KINDS = ("good", "bad_key", "bad_index", "other_pd")
PROGRAM_MR_SIZE = 4096  # the size of b's remote MR that programs address
PROGRAM_RECV_SIZE = 1024  # the receive buffer a ("post_recv", n) may not exceed
STATES = ("RESET", "INIT", "RTR", "RTS", "SQD", "ERR")


def random_program(rng: random.Random, max_ops: int = 12, invalid: bool = True) -> list[tuple]:
    """A verbs program drawn with a plain ``random.Random`` (for the fuzz CLI), with the
    same vocabulary as ``verbs_programs``."""
    size = PROGRAM_MR_SIZE
    out: list[tuple] = []
    for _ in range(rng.randint(1, max_ops)):
        kind = rng.choice(("post_recv", "post_recv", "send", "write", "read", "cas", "faa",
                           "run") + (("modify",) if invalid else ()))
        rkey = rng.choice(RKEY_KINDS) if invalid and rng.random() < 0.3 else "good"
        length = rng.randint(1, size // 2)
        offset = rng.randint(0, size // 2)
        if invalid and rng.random() < 0.2:
            length = rng.choice((0, size, size + 1))
            offset = rng.choice((0, size - 1, size))
        aligned = rng.randrange(size // 8) * 8
        if kind == "post_recv":
            out.append(("post_recv", rng.randint(1, PROGRAM_RECV_SIZE) if invalid
                        else PROGRAM_RECV_SIZE))
        elif kind == "send":
            n = rng.randint(0, PROGRAM_RECV_SIZE)
            if invalid and rng.random() < 0.1:
                n = PROGRAM_RECV_SIZE + rng.randint(1, 100)
            out.append(("send", n, rng.choice((None, rng.getrandbits(32)))))
        elif kind in ("write", "read"):
            out.append((kind, offset, length, rkey))
        elif kind == "cas":
            off = aligned + (rng.randint(1, 7) if invalid and rng.random() < 0.2 else 0)
            out.append(("cas", off, rng.getrandbits(64), rng.getrandbits(64), rkey))
        elif kind == "faa":
            off = aligned + (rng.randint(1, 7) if invalid and rng.random() < 0.2 else 0)
            out.append(("faa", off, rng.getrandbits(64), rkey))
        elif kind == "run":
            out.append(("run", rng.choice((1_000, 100_000, 10_000_000))))
        else:
            out.append(("modify", rng.choice("ab"), rng.choice(STATES)))
    return out


@dataclass
class ProgramResult:
    """What ``run_program`` saw: ``problems`` lists every broken invariant."""

    problems: list[str] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)  # completion status name -> count
    posted: int = 0
    rejected: int = 0  # operations the verbs layer refused (bad state, illegal modify)


def run_program(program: list[tuple], seed: int = 0, auto_recv: bool = False,
                limit_ns: int = 2_000_000_000, **link: Any) -> ProgramResult:
    """Execute a verbs program (see ``roce.testing.strategies``) from host a to host b over
    a seeded fabric (``link``: ``LinkConfig`` fields such as loss=0.05, dup=0.05) and check:

    - nothing raises but the verbs layer's own refusals (QPStateError, ValueError);
    - every send work request completes exactly once, every receive at most once, and no
      completion names a request never posted;
    - b's remote MR changes only inside good, in-bounds WRITE/atomic ranges, its receive
      MR only inside posted receive buffers, and an MR of another PD never;
    - QP states change only through the table (or to ERR);
    - when every send completed successfully: SEND data arrived whole and in order,
      READs returned the remote bytes as they were, atomics the value before, and the
      remote MR holds exactly what the WRITEs and atomics made of it (exactly-once).

    ``auto_recv`` posts a receive before every SEND (valid programs have no RNR waits)."""
    from roce.emu import (
        CQ,
        MR,
        PD,
        QP,
        Access,
        Fabric,
        QPAttr,
        QPAttrMask,
        QPInitAttr,
        QPState,
        QPStateError,
        QPType,
        RecvWR,
        SendWR,
        WCStatus,
        WROpcode,
        connect,
    )
    from roce.emu.core.states import TRANSITIONS

    res = ProgramResult()
    full = (Access.IBV_ACCESS_LOCAL_WRITE | Access.IBV_ACCESS_REMOTE_WRITE
            | Access.IBV_ACCESS_REMOTE_READ | Access.IBV_ACCESS_REMOTE_ATOMIC)
    rng = random.Random(seed)
    fab = Fabric(seed=seed)
    a, b = fab.add_host("a", "10.0.0.1"), fab.add_host("b", "10.0.0.2")
    fab.connect(a, b, **link)
    pda, pdb, pdo = PD(a), PD(b), PD(b)
    slots = max(len(program), 1)
    src, dst = MR(pda, 1 << 16, full), MR(pda, slots * PROGRAM_MR_SIZE, full)
    src.write(rng.randbytes(1 << 16))
    remote = MR(pdb, PROGRAM_MR_SIZE, full)
    remote.write(rng.randbytes(PROGRAM_MR_SIZE))
    other = MR(pdo, PROGRAM_MR_SIZE, full)
    other.write(rng.randbytes(PROGRAM_MR_SIZE))
    recv = MR(pdb, 2 * slots * PROGRAM_RECV_SIZE, int(Access.IBV_ACCESS_LOCAL_WRITE))
    shadow = {"remote": bytes(remote.buf), "other": bytes(other.buf), "recv": bytes(recv.buf)}
    cqa, cqb = CQ(a), CQ(b)
    qa = QP(pda, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cqa, recv_cq=cqa))
    qb = QP(pdb, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cqb, recv_cq=cqb))
    connect(qa, qb, path_mtu=256, timeout=6, retry_cnt=7, rnr_retry=7 if auto_recv else 2,
            min_rnr_timer=1, max_rd_atomic=4)
    model = bytearray(remote.buf)  # the remote MR as exactly-once execution leaves it
    snapshots: list[bytes] = [bytes(model)]  # the model after each operation that changed it
    sends: dict[int, tuple[str, Any]] = {}  # wr_id -> (kind, what to check)
    recvs: dict[int, int] = {}  # wr_id -> recv MR offset
    granted: list[tuple[int, int]] = []
    recv_granted: list[tuple[int, int]] = []
    sent_data: list[bytes] = []
    wr = 0
    recv_slot = 0
    states = {"a": qa.qp_state, "b": qb.qp_state}
    may_lose = False
    u64 = (1 << 64) - 1

    def rkey_of(kind: str) -> int:
        return {"good": remote.rkey, "bad_key": remote.rkey ^ 0x5A,
                "bad_index": (0x7FFF << 8) | (remote.rkey & 0xFF),
                "other_pd": other.rkey}[kind]

    def post_recv(n: int) -> None:
        nonlocal wr, recv_slot
        wr += 1
        off = recv_slot * PROGRAM_RECV_SIZE
        recv_slot = (recv_slot + 1) % (2 * slots)
        try:
            qb.post_recv(RecvWR(wr_id=wr, sg_list=[recv.sge(off, n)]))
        except (QPStateError, ValueError):
            res.rejected += 1
            return
        recvs[wr] = off
        recv_granted.append((off, off + n))

    def post_send(kind: str, w: SendWR, check: Any) -> None:
        try:
            qa.post_send(w)
        except (QPStateError, ValueError):
            res.rejected += 1
            return
        res.posted += 1
        sends[w.wr_id] = (kind, check)

    try:
        for i, op in enumerate(program):
            name = op[0]
            dslot = i * PROGRAM_MR_SIZE
            if name == "post_recv":
                post_recv(op[1])
            elif name == "send":
                n, imm = op[1], op[2]
                if auto_recv:
                    post_recv(PROGRAM_RECV_SIZE)
                wr += 1
                off = rng.randrange((1 << 16) - n) if n < (1 << 16) else 0
                code = WROpcode.IBV_WR_SEND if imm is None else WROpcode.IBV_WR_SEND_WITH_IMM
                data = bytes(src.buf[off:off + n])
                post_send("send", SendWR(wr_id=wr, opcode=code, sg_list=[src.sge(off, n)],
                                         imm_data=imm or 0), data)
                if wr in sends:
                    sent_data.append(data)
            elif name in ("write", "read"):
                off, n, kind = op[1], op[2], op[3]
                wr += 1
                good = kind == "good" and n > 0 and off + n <= PROGRAM_MR_SIZE
                if name == "write":
                    soff = rng.randrange((1 << 16) - n) if n < (1 << 16) else 0
                    w = SendWR(wr_id=wr, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                               sg_list=[src.sge(soff, n)], remote_addr=remote.addr + off,
                               rkey=rkey_of(kind))
                    data = bytes(src.buf[soff:soff + n])
                    post_send("write", w, (off, data))
                    if good and wr in sends:
                        granted.append((off, off + n))
                        model[off:off + n] = data
                        snapshots.append(bytes(model))
                else:
                    n_local = min(n, PROGRAM_MR_SIZE)
                    w = SendWR(wr_id=wr, opcode=WROpcode.IBV_WR_RDMA_READ,
                               sg_list=[dst.sge(dslot, n_local)], remote_addr=remote.addr + off,
                               rkey=rkey_of(kind))
                    # a retried READ re-reads remote memory, which later WRITEs may have
                    # changed by then (IBA: no fence): any later state of it is right
                    post_send("read", w, (dslot, off, n if good else 0, len(snapshots) - 1))
            elif name in ("cas", "faa"):
                off, kind = op[1], op[-1]
                wr += 1
                good = kind == "good" and off % 8 == 0 and off + 8 <= PROGRAM_MR_SIZE
                before = int.from_bytes(model[off:off + 8], "little") if good else None
                if name == "cas":
                    cmp_, swap = op[2], op[3]
                    w = SendWR(wr_id=wr, opcode=WROpcode.IBV_WR_ATOMIC_CMP_AND_SWP,
                               sg_list=[dst.sge(dslot, 8)], remote_addr=remote.addr + off,
                               rkey=rkey_of(kind), compare_add=cmp_, swap=swap)
                    after = swap if before == cmp_ else before
                else:
                    w = SendWR(wr_id=wr, opcode=WROpcode.IBV_WR_ATOMIC_FETCH_AND_ADD,
                               sg_list=[dst.sge(dslot, 8)], remote_addr=remote.addr + off,
                               rkey=rkey_of(kind), compare_add=op[2])
                    after = None if before is None else (before + op[2]) & u64
                post_send("atomic", w, (dslot, before))
                if good and wr in sends and after is not None:
                    granted.append((off, off + 8))
                    model[off:off + 8] = after.to_bytes(8, "little")
                    snapshots.append(bytes(model))
            elif name == "modify":
                qp = qa if op[1] == "a" else qb
                try:
                    qp.modify(QPAttr(qp_state=getattr(QPState, "IBV_QPS_" + op[2])),
                              QPAttrMask.IBV_QP_STATE)
                    if op[1] == "a" and op[2] in ("RESET", "SQD"):
                        may_lose = True  # RESET drops work; SQD stops sending it
                except QPStateError:
                    res.rejected += 1
                states[op[1]] = qp.qp_state
            elif name == "run":
                fab.run(until=fab.now + op[1])
            for side, qp in (("a", qa), ("b", qb)):
                if qp.qp_state != states[side] and (states[side], qp.qp_state) not in \
                        TRANSITIONS and qp.qp_state != QPState.IBV_QPS_ERR:
                    res.problems.append(f"QP {side} went {states[side].name} -> "
                                        f"{qp.qp_state.name}")
                states[side] = qp.qp_state
        fab.run(until=fab.now + limit_ns)
    except Exception as exc:  # noqa: BLE001 - the finding
        res.problems.append("raised " + exc_line(exc))
        return res
    # completions: exactly once
    seen: Counter = Counter()
    ok_all = True
    for wc in cqa.poll(1 << 20):
        seen[wc.wr_id] += 1
        res.statuses[WCStatus(wc.status).name] += 1
        if wc.wr_id not in sends:
            res.problems.append(f"send completion for unknown wr_id {wc.wr_id}")
            continue
        kind, check = sends[wc.wr_id]
        if wc.status != WCStatus.IBV_WC_SUCCESS:
            ok_all = False
            continue
        if kind == "read" and check[2]:
            dslot, off, n, first = check
            for c in range(0, n, 256):  # per response packet (path MTU 256)
                got = bytes(dst.buf[dslot + c:dslot + min(c + 256, n)])
                later = [snap[off + c:off + min(c + 256, n)] for snap in snapshots[first:]]
                # a WRITE lands packet by packet, so a re-read may see it half done: each
                # byte must be one the remote held at or after the READ was posted
                if got not in later and any(all(v[k] != b for v in later)
                                            for k, b in enumerate(got)):
                    res.problems.append(f"READ wr {wc.wr_id} returned bytes the remote MR "
                                        f"never held (at +{c})")
                    break
        if kind == "atomic" and check[1] is not None and \
                int.from_bytes(dst.buf[check[0]:check[0] + 8], "little") != check[1]:
            res.problems.append(f"atomic wr {wc.wr_id} returned another original value")
    for wr_id in sends:
        if seen[wr_id] > 1 or (seen[wr_id] == 0 and not may_lose):
            res.problems.append(f"send wr {wr_id} ({sends[wr_id][0]}) completed "
                                f"{seen[wr_id]} times")
            ok_all = False
    got_data = []
    rseen: Counter = Counter()
    for wc in cqb.poll(1 << 20):
        rseen[wc.wr_id] += 1
        if wc.wr_id not in recvs:
            res.problems.append(f"receive completion for unknown wr_id {wc.wr_id}")
        elif wc.status == WCStatus.IBV_WC_SUCCESS:
            off = recvs[wc.wr_id]
            got_data.append(bytes(recv.buf[off:off + wc.byte_len]))
    for wr_id, n in rseen.items():
        if n > 1:
            res.problems.append(f"receive wr {wr_id} completed {n} times")
    # memory
    for name, mr, allowed in (("remote", remote, granted), ("other", other, []),
                              ("recv", recv, recv_granted)):
        for lo, hi in ranges.changed(shadow[name], bytes(mr.buf)):
            outside = ranges.subtract((lo, hi), allowed)
            if outside:
                res.problems.append(f"{name} MR bytes {outside[0][0]}..{outside[0][1] - 1} "
                                    "changed outside any granted range")
                break
    if ok_all and qa.qp_state == QPState.IBV_QPS_RTS and qb.qp_state == QPState.IBV_QPS_RTS:
        if got_data != sent_data:
            res.problems.append(f"{len(sent_data)} SENDs, {len(got_data)} received; data "
                                f"{'differs' if len(got_data) == len(sent_data) else 'lost'}")
        if bytes(remote.buf) != bytes(model):
            lo, hi = ranges.changed(bytes(model), bytes(remote.buf))[0]
            res.problems.append(f"remote MR differs from exactly-once execution at "
                                f"{lo}..{hi - 1}")
    return res
