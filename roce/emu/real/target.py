"""``roce target``: an emulated RoCE responder that outside peers can talk to.

It is the emulator's own responder behind a real transport: a device with one memory region
(rkey, VA and size chosen on the command line) and ``qps`` RC queue pairs (QPNs from
``qpn``, first expected PSN ``psn``), with receive buffers posted for SENDs.  Whatever
arrives is answered as the responder rules say (docs/protocol.md): ACKs carrying PSN and MSN,
PSN-sequence NAKs carrying the ePSN (once per gap), RNR NAKs, remote access NAKs, READ
responses segmented by the path MTU, atomic ACKs with the original value.

RC packets carry no source QPN, so the target's answers go to ``peer_qpn`` (+ i for QP i;
both runs of QPNs must fit 24 bits, ``roce.qpn``);
the peer's MAC and IP are learned from each request's frame (the first one, and again if
another peer takes over).  A QP that an error moved to ERR is re-created in its initial
state (``recover``), so one bad request does not end the session.  Each frame received
and sent is logged in ``roce decode``'s one-line form; ``record`` saves them to a pcap.
"""

from __future__ import annotations

import gc
import ipaddress
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from roce import fast
from roce.emu import defaults
from roce.emu.core.constants import ALL_ACCESS, Access, QPAttrMask, QPState, QPType, WCStatus
from roce.emu.core.memory import VA_ALIGN
from roce.emu.core.qp import AHAttr, QPAttr, QPCap
from roce.emu.core.verbs import CQ, MR, PD, QP, Context, QPInitAttr
from roce.emu.core.work import RecvWR
from roce.emu.real.driver import Transport, max_path_mtu
from roce.emu.real.loop import EventLoop
from roce.emu.real.raw import RawEthernetTransport
from roce.emu.real.udp import UdpTransport
from roce.families.base.fields import header_fields, known_headers
from roce.families.base.summary import Summarizer, TimeColumn
from roce.headers import LAYOUTS
from roce.iface import interface_ipv4, interface_mac, interface_mtu
from roce.locate import L3_IPV4, OK, explain
from roce.opcodes import OPCODES
from roce.psn import PSN_MASK
from roce.qpn import qpn_range

NO_MAC = "00:00:00:00:00:00"


@dataclass
class TargetConfig:
    """How a target answers: where it listens, its QPs and what it accepts."""

    ip: str | None = None
    interface: str | None = None
    transport: str = "raw"  # raw | udp
    mac: str | None = None
    qpn: int = 0x11
    qps: int = 1
    peer_qpn: int = 0x11
    rkey: int = 0x1000
    va: int = 0x7F00_0000_0000
    size: int = 1 << 16
    psn: int = 0
    mtu: int = 1024
    arp: bool = True
    recv_size: int = 1 << 16
    recv_depth: int = 16
    fill: str = "pattern"  # pattern (byte i = i & 0xff) | zero | random
    seed: int = 0
    recover: bool = True
    min_rnr_timer: int = 1
    udp_port: int = 4791


@dataclass
class TargetStats:
    """What a target received, sent and recovered, and from which peers."""

    received: int = 0  # RoCE frames for our QPs
    sent: int = 0
    messages_received: int = 0  # SENDs completed into receive buffers
    recovered: int = 0
    peers: list[str] = field(default_factory=list)


def fill_bytes(kind: str, n: int, seed: int = 0) -> bytes:
    """``n`` bytes of a fill (small sizes; ``fill_into`` fills an MR in place)."""
    buf = bytearray(n)
    fill_into(buf, kind, seed)
    return bytes(buf)


def fill_into(buf: bytearray, kind: str, seed: int = 0) -> None:
    """Fill ``buf`` in place, a chunk at a time: no second copy of a large MR."""
    n = len(buf)
    if kind == "zero":
        return  # a new MR is zeroed already
    if kind == "random":
        rng = random.Random(seed)
        for pos in range(0, n, _CHUNK):  # chunks of 4k bytes draw what one draw would
            m = min(_CHUNK, n - pos)
            buf[pos:pos + m] = rng.randbytes(m)
        return
    if kind == "pattern":
        block = bytes(range(256)) * (_CHUNK // 256)
        for pos in range(0, n, _CHUNK):
            m = min(_CHUNK, n - pos)
            buf[pos:pos + m] = block[:m]
        return
    raise ValueError(f"unknown fill {kind!r} (pattern, zero, random)")


_CHUNK = 1 << 20


class FrameLog:
    """``roce decode`` one-liners for frames seen live, numbered from 1, time from the first.

    Uses the decoder's per-record path (decode what the walk located, then the summary
    columns) -- the same text the batch path prints for a capture of these frames."""

    def __init__(self, udp_port: int = 4791) -> None:
        self.summ = Summarizer(TimeColumn("r", 9), udp_port)
        self.udp_port = udp_port
        self.number = 0
        self.first: int | None = None
        self.prev: int | None = None

    def line(self, ts_ns: int, frame: bytes) -> str:
        self.number += 1
        if self.first is None:
            self.first = self.prev = ts_ns
        assert self.prev is not None
        tt = self.summ.times.record_text(ts_ns, ts_ns - self.first, ts_ns - self.prev)
        self.prev = ts_ns
        w = fast.walk(frame, 1, self.udp_port)
        f: dict[str, Any] = {}
        header_fields(known_headers(frame, w, 1), f)
        if w.status == OK:
            f["icrc.valid"] = fast.icrc_of(frame, w) == int.from_bytes(
                frame[w.icrc_off:w.l4_end], "big")
        cols = self.summ.columns(frame, w, f, 1, len(frame), len(frame),
                                 None if w.status == OK else str(explain(w)))
        return self.summ.line(self.number, tt, len(frame), cols)


class Target:
    """The device, its QPs and memory, the transport, and the loop that serves."""

    def __init__(self, cfg: TargetConfig, record: Any = None, out: TextIO | None = None,
                 quiet: bool = False) -> None:
        self.cfg = cfg
        self.out = out or sys.stdout
        self.quiet = quiet
        self.stats = TargetStats()
        self.log = FrameLog(cfg.udp_port)
        # QP i is QPN qpn + i and answers the peer's QPN peer_qpn + i: both runs must be
        # QPNs (checked before anything is opened)
        qpns = qpn_range(cfg.qpn, cfg.qps)
        self.peer_qpns = qpn_range(cfg.peer_qpn, cfg.qps)
        ip = cfg.ip
        if cfg.transport == "raw":
            if not cfg.interface:
                raise ValueError("raw Ethernet needs an interface (-i IFACE)")
            ip = ip or interface_ipv4(cfg.interface)
            if not ip:
                raise ValueError(f"{cfg.interface} has no IPv4 address: give one with --ip")
            mac = cfg.mac or interface_mac(cfg.interface)
            link_limit = max_path_mtu(interface_mtu(cfg.interface))
        else:
            if not ip:
                raise ValueError("the UDP transport needs --ip ADDR to bind")
            mac = cfg.mac
            link_limit = 4096
        self.mtu = min(cfg.mtu, link_limit)
        if self.mtu != cfg.mtu:
            self._say(f"path MTU {cfg.mtu} does not fit {cfg.interface}: using {self.mtu}")
        self.ctx = Context("target", ip, mac)
        self.loop = EventLoop()
        t: Transport
        if cfg.transport == "raw":
            assert cfg.interface is not None
            t = RawEthernetTransport(self.ctx, cfg.interface, arp=cfg.arp, record=record,
                                     loop=self.loop)
        else:
            t = UdpTransport(self.ctx, ip, port=cfg.udp_port, record=record, loop=self.loop)
        self.transport = t
        self.pd = PD(self.ctx)
        self.mr = self._expose()
        self.qps: dict[int, QP] = {}
        self.cqs: dict[int, CQ] = {}
        self.recv_mrs: dict[int, MR] = {}
        self.peer: dict[int, tuple[str, str]] = {}  # QPN -> (MAC, IP) answers go to
        for i, qpn in enumerate(qpns):
            self._create_qp(qpn, i)
        t.taps.append(self._tap)

    # -- set-up

    def _expose(self) -> MR:
        """The MR with the rkey and VA asked for: the address space hands out the next
        index and VA, so point both at the requested values before registering."""
        cfg = self.cfg
        if not 0 <= cfg.rkey <= 0xFFFFFFFF:
            raise ValueError(f"rkey 0x{cfg.rkey:x} is not 32 bits")
        if cfg.va < 0 or cfg.va + cfg.size > 1 << 64:
            raise ValueError(f"VA 0x{cfg.va:x} + {cfg.size} is outside 64 bits")
        mem = self.ctx.device.memory
        mem.next_index = cfg.rkey >> 8
        mem.next_va = cfg.va
        mr = MR(self.pd, cfg.size, ALL_ACCESS, key=cfg.rkey & 0xFF)
        assert mr.rkey == cfg.rkey and mr.addr == cfg.va
        fill_into(mr.buf, cfg.fill, cfg.seed)
        # the receive buffers come after it, aligned, in an index range of their own
        mem.next_va = (cfg.va + cfg.size + 2 * VA_ALIGN - 1) // VA_ALIGN * VA_ALIGN
        return mr

    def _create_qp(self, qpn: int, i: int) -> QP:
        cfg = self.cfg
        dev = self.ctx.device
        cq = self.cqs.get(qpn) or CQ(self.ctx, 1 << 16)
        saved = dev.next_qpn
        dev.next_qpn = qpn  # the QPN asked for (the device numbers QPs from next_qpn)
        qp = QP(self.pd, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cq, recv_cq=cq,
                                    cap=QPCap(max_send_wr=16,
                                              max_recv_wr=max(cfg.recv_depth, 1))))
        dev.next_qpn = max(saved, qpn + 1)
        mac, ip = self.peer.get(qpn, (NO_MAC, "::" if ":" in self.ctx.ip else "0.0.0.0"))
        qp.to_init(QPAttr(qp_access_flags=ALL_ACCESS))
        qp.to_rtr(QPAttr(path_mtu=self.mtu, dest_qp_num=self.peer_qpns[i],
                         rq_psn=cfg.psn & PSN_MASK, max_dest_rd_atomic=16,
                         min_rnr_timer=cfg.min_rnr_timer, ah_attr=self._ah(mac, ip)))
        qp.to_rts(QPAttr(sq_psn=cfg.psn & PSN_MASK, timeout=defaults.ACK_TIMEOUT_REAL,
                         retry_cnt=defaults.RETRY_CNT, rnr_retry=defaults.RNR_RETRY,
                         max_rd_atomic=16))
        self.qps[qpn] = qp
        self.cqs[qpn] = cq
        if cfg.recv_depth > 0 and cfg.recv_size > 0:
            mr = self.recv_mrs.get(qpn)
            if mr is None:
                mr = self.recv_mrs[qpn] = MR(self.pd, cfg.recv_depth * cfg.recv_size,
                                             Access.IBV_ACCESS_LOCAL_WRITE)
            for slot in range(cfg.recv_depth):
                self._post_recv(qp, mr, slot)
        return qp

    def _ah(self, mac: str, ip: str) -> AHAttr:
        sport = self.cfg.udp_port if self.cfg.transport == "udp" else None
        return AHAttr(dmac=mac, dip=ip, ipv6=":" in ip, sport=sport)

    def _post_recv(self, qp: QP, mr: MR, slot: int) -> None:
        size = self.cfg.recv_size
        qp.post_recv(RecvWR(wr_id=slot, sg_list=[mr.sge(slot * size, size)]))

    # -- what the transport shows us

    def _tap(self, direction: str, ts: int, frame: bytes) -> None:
        if direction == "rx":
            self._learn(frame)
        else:
            self.stats.sent += 1
        if not self.quiet:
            self._print(f"{direction} {self.log.line(ts, frame)}")

    def _learn(self, frame: bytes) -> None:
        """Point the QP's answers at whoever sent this request (before the QP sees it)."""
        w = fast.walk(frame, 1, self.cfg.udp_port)
        if w.status != OK:
            return
        destqp = int.from_bytes(frame[w.bth_off + 5:w.bth_off + 8], "big")
        qp = self.qps.get(destqp)
        if qp is None or not OPCODES[w.opcode].is_request:
            return
        self.stats.received += 1
        src = LAYOUTS["ip" if w.l3_kind == L3_IPV4 else "ipv6"].field("src")
        off = w.l3_off + src.byte_offset
        ip = str(ipaddress.ip_address(frame[off:off + src.bits // 8]))
        eth_src = LAYOUTS["eth"].field("src")
        mac = frame[eth_src.byte_offset:eth_src.byte_offset + 6].hex(":")
        if self.peer.get(destqp) == (mac, ip):
            return
        first = destqp not in self.peer
        self.peer[destqp] = (mac, ip)
        qp.modify(QPAttr(ah_attr=self._ah(mac, ip)), QPAttrMask.IBV_QP_AV)
        who = f"{ip} ({mac})"
        if who not in self.stats.peers:
            self.stats.peers.append(who)
        self._say(f"QP 0x{destqp:06x}: {'peer is' if first else 'peer changed to'} {who}, "
                  f"answers go to its QP 0x{qp.core.attr.dest_qp_num:06x}")

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _say(self, text: str) -> None:
        self._print(f"-- {text}")

    # -- serving

    def banner(self) -> str:
        cfg, ctx = self.cfg, self.ctx
        where = (f"raw Ethernet on {cfg.interface}" + (", answering ARP" if cfg.arp else "")
                 if cfg.transport == "raw" else f"UDP {ctx.ip}:{cfg.udp_port}")
        lines = [f"-- roce target {ctx.ip} ({ctx.mac}) over {where}",
                 f"-- MR rkey 0x{self.mr.rkey:08x} va 0x{self.mr.addr:x} size {self.mr.length} "
                 f"(fill {cfg.fill})"]
        for i, qpn in enumerate(self.qps):
            lines.append(f"-- QP 0x{qpn:06x} RC ePSN 0x{cfg.psn & PSN_MASK:06x} MTU {self.mtu}"
                         f" -> peer QP 0x{self.peer_qpns[i]:06x}, "
                         f"{cfg.recv_depth} receives of {cfg.recv_size} bytes")
        return "\n".join(lines)

    def _service(self) -> None:
        """Completions (SENDs received), reposting, and QPs that went to ERR."""
        for qpn, qp in list(self.qps.items()):
            cq = self.cqs[qpn]
            for wc in cq.poll(1 << 16):
                if wc.opcode & 128 and wc.status == WCStatus.IBV_WC_SUCCESS:
                    self.stats.messages_received += 1
                    mr = self.recv_mrs[qpn]
                    head = mr.read(min(wc.byte_len, 16), wc.wr_id * self.cfg.recv_size)
                    imm = f" imm 0x{wc.imm_data:08x}" if wc.wc_flags & 2 else ""
                    self._say(f"QP 0x{qpn:06x}: received {wc.byte_len} bytes{imm}: "
                              f"{head.hex(' ')}{' ...' if wc.byte_len > 16 else ''}")
                    self._post_recv(qp, mr, wc.wr_id)
                elif wc.opcode & 128 and wc.status != WCStatus.IBV_WC_WR_FLUSH_ERR:
                    self._say(f"QP 0x{qpn:06x}: receive failed: {WCStatus(wc.status).name}")
            if qp.core.state == QPState.IBV_QPS_ERR:
                naks = ", ".join(f"{k}={v}" for k, v in qp.core.counters.naks_sent.items())
                if not self.cfg.recover:
                    continue
                self._say(f"QP 0x{qpn:06x} went to ERR (NAKs sent: {naks or 'none'}); "
                          f"re-created, ePSN 0x{self.cfg.psn & PSN_MASK:06x}")
                cq.poll(1 << 16)
                qp.close()
                self.stats.recovered += 1
                self._create_qp(qpn, qpn - self.cfg.qpn)

    def run(self, count: int | None = None, duration: float | None = None,
            stop: Callable[[], bool] | None = None) -> TargetStats:
        """Serve until ``count`` requests were received, ``duration`` s passed, or
        ``stop()``; a KeyboardInterrupt (every stop signal under ``roce.cli``: Ctrl-C,
        SIGTERM, SIGHUP) ends it cleanly."""
        end = None if duration is None else time.monotonic() + duration
        # what set-up made lives as long as the target: keep full collections (several ms
        # over the imports' objects) from stalling an answer
        gc.collect()
        gc.freeze()
        try:
            while True:
                if stop is not None and stop():
                    break
                if count is not None and self.stats.received >= count:
                    break
                wait = 0.1 if end is None else min(0.1, end - time.monotonic())
                if wait < 0:
                    break
                self.loop.poll(wait)
                self._service()
        except KeyboardInterrupt:
            pass
        self.transport.flush()
        return self.stats

    def close(self) -> None:
        self.loop.close()


__all__ = ["FrameLog", "Target", "TargetConfig", "TargetStats", "fill_bytes",
           "fill_into"]
