"""Real transports on loopback: two emulated devices in one process, each with its own
``UdpTransport`` on its own 127/8 address (port 4791), sharing one ``EventLoop``; the
out-of-band exchange; pcap recording; the remote runner in two threads.  No root needed
except for the raw-socket filter test (which makes its own namespace).
"""

from __future__ import annotations

import errno
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import roce
from roce import fast
from roce.emu import (
    AH,
    CQ,
    MR,
    PD,
    QP,
    Access,
    AHAttr,
    Context,
    QPAttr,
    QPInitAttr,
    QPType,
    RecvWR,
    SendWR,
    WCStatus,
    WROpcode,
    defaults,
)
from roce.emu.core import payload
from roce.emu.core.recovery import RTO_HIGH_NS, RTO_LOW_NS
from roce.emu.core.work import SGE
from roce.emu.real import messages as schema
from roce.emu.real import oob, remote
from roce.emu.real.driver import TransportError, max_path_mtu
from roce.emu.real.loop import EventLoop
from roce.emu.real.relay import fix_tcp_checksum
from roce.emu.real.udp import UdpTransport
from roce.emu.scenario import Scenario
from roce.errors import PeerMessageError, RoceError, UsageError
from roce.iface import ROCE_OR_ARP, arp_frame, parse_arp
from roce.pcapio import PcapWriter, open_capture

FULL = (Access.IBV_ACCESS_LOCAL_WRITE | Access.IBV_ACCESS_REMOTE_WRITE
        | Access.IBV_ACCESS_REMOTE_READ | Access.IBV_ACCESS_REMOTE_ATOMIC)
SPORT = 4791  # what UdpTransport's receiver rebuilds: senders must build with it


def _free_pair() -> tuple[str, str]:
    """Two loopback addresses nobody else uses now (other test runs may hold 4791 on some)."""
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(50):
        base = f"127.{rng.randrange(100, 250)}.{rng.randrange(1, 250)}"
        a, b = f"{base}.1", f"{base}.2"
        probes = []
        try:
            for ip in (a, b):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                probes.append(s)
                s.bind((ip, 4791))
            return a, b
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
        finally:
            for s in probes:
                s.close()
    raise RuntimeError("no free loopback address pair")


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[SimpleNamespace]:
    ip_a, ip_b = _free_pair()
    loop = EventLoop()
    writer = PcapWriter(str(tmp_path / "loop.pcap"))
    a, b = Context("a", ip_a), Context("b", ip_b)
    ta = UdpTransport(a, record=writer, loop=loop)
    tb = UdpTransport(b, record=writer, loop=loop)
    h = SimpleNamespace(a=a, b=b, ta=ta, tb=tb, loop=loop, pd_a=PD(a), pd_b=PD(b),
                        pcap=tmp_path / "loop.pcap", writer=writer)
    try:
        yield h
    finally:
        loop.close()
        writer.close()


def rc_pair(h: SimpleNamespace, mtu: int = 1024, psn: int = 0, timeout: int = 14,
            retry_cnt: int = 7, sport: int | None = SPORT) -> SimpleNamespace:
    """Connected RC QPs qa (on a) and qb (on b) with a 64 KiB MR on each side."""
    cq_a, cq_b = CQ(h.a), CQ(h.b)
    qa = QP(h.pd_a, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cq_a, recv_cq=cq_a))
    qb = QP(h.pd_b, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cq_b, recv_cq=cq_b))
    for me, peer in ((qa, qb), (qb, qa)):
        me.to_init(QPAttr(qp_access_flags=FULL))
        me.to_rtr(QPAttr(path_mtu=mtu, dest_qp_num=peer.qp_num, rq_psn=psn,
                         max_dest_rd_atomic=16, min_rnr_timer=1,
                         ah_attr=AHAttr(dmac=peer.ctx.mac, dip=peer.ctx.ip, sport=sport)))
        me.to_rts(QPAttr(sq_psn=psn, timeout=timeout, retry_cnt=retry_cnt, rnr_retry=7,
                         max_rd_atomic=16))
    src, dst = MR(h.pd_a, 1 << 16, FULL), MR(h.pd_b, 1 << 16, FULL)
    rng = random.Random(1)
    src.write(rng.randbytes(1 << 16))
    dst.write(rng.randbytes(1 << 16))
    return SimpleNamespace(qa=qa, qb=qb, cq_a=cq_a, cq_b=cq_b, src=src, dst=dst)


def wait_wc(h: SimpleNamespace, cq: CQ, n: int = 1, timeout: float = 10) -> list:
    got: list = []

    def enough() -> bool:
        got.extend(cq.poll(64))
        return len(got) >= n

    assert h.loop.run(stop=enough, timeout=timeout), f"only {len(got)} of {n} completions"
    return got


def ok(wcs: list) -> bool:
    return all(w.status == WCStatus.IBV_WC_SUCCESS for w in wcs)


# -- RC and UD over UDP on loopback ------------------------------------------------------------


def test_rc_write_read_byte_exact(hosts: SimpleNamespace) -> None:
    p = rc_pair(hosts, mtu=1024, psn=0xFFFFF0)  # PSNs wrap during the run
    p.qa.post_send(SendWR(wr_id=1, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                          sg_list=[p.src.sge(100, 20000)], remote_addr=p.dst.addr + 300,
                          rkey=p.dst.rkey))
    p.qa.post_send(SendWR(wr_id=2, opcode=WROpcode.IBV_WR_RDMA_READ,
                          sg_list=[p.src.sge(40000, 9000)], remote_addr=p.dst.addr + 50000,
                          rkey=p.dst.rkey))
    expect_read = p.dst.read(9000, 50000)
    wcs = wait_wc(hosts, p.cq_a, 2)
    assert ok(wcs) and [w.wr_id for w in wcs] == [1, 2]
    assert p.dst.read(20000, 300) == p.src.read(20000, 100)
    assert p.src.read(9000, 40000) == expect_read
    assert p.qa.core.counters.retransmitted == 0
    assert hosts.a.device.counters.icrc_drops == hosts.b.device.counters.icrc_drops == 0


def test_rc_send_with_immediate_and_atomics(hosts: SimpleNamespace) -> None:
    p = rc_pair(hosts, mtu=256)
    p.qb.post_recv(RecvWR(wr_id=7, sg_list=[p.dst.sge(0, 4096)]))
    p.qa.post_send(SendWR(wr_id=1, opcode=WROpcode.IBV_WR_SEND_WITH_IMM,
                          sg_list=[p.src.sge(0, 1000)], imm_data=0xCAFE))
    p.dst.write((41).to_bytes(8, "little"), offset=8192)
    p.qa.post_send(SendWR(wr_id=2, opcode=WROpcode.IBV_WR_ATOMIC_FETCH_AND_ADD,
                          sg_list=[SGE(p.src.addr + 60008, 8, p.src.lkey)],
                          remote_addr=p.dst.addr + 8192, rkey=p.dst.rkey, compare_add=1))
    p.qa.post_send(SendWR(wr_id=3, opcode=WROpcode.IBV_WR_ATOMIC_CMP_AND_SWP,
                          sg_list=[SGE(p.src.addr + 60016, 8, p.src.lkey)],
                          remote_addr=p.dst.addr + 8192, rkey=p.dst.rkey, compare_add=42,
                          swap=0xDEAD))
    assert ok(wait_wc(hosts, p.cq_a, 3))
    rwc = wait_wc(hosts, p.cq_b, 1)[0]
    assert rwc.status == WCStatus.IBV_WC_SUCCESS and rwc.wr_id == 7
    assert rwc.byte_len == 1000 and rwc.imm_data == 0xCAFE
    assert p.dst.read(1000) == p.src.read(1000)
    assert int.from_bytes(p.src.read(8, 60008), "little") == 41  # FADD fetched the original
    assert int.from_bytes(p.src.read(8, 60016), "little") == 42  # CAS fetched 41 + 1
    assert int.from_bytes(p.dst.read(8, 8192), "little") == 0xDEAD


def test_ud_send_byte_exact_with_grh(hosts: SimpleNamespace) -> None:
    h = hosts
    cq_a, cq_b = CQ(h.a), CQ(h.b)
    qa = QP(h.pd_a, QPInitAttr(qp_type=QPType.IBV_QPT_UD, send_cq=cq_a, recv_cq=cq_a))
    qb = QP(h.pd_b, QPInitAttr(qp_type=QPType.IBV_QPT_UD, send_cq=cq_b, recv_cq=cq_b))
    for q in (qa, qb):
        q.to_init(QPAttr(qkey=0x1234))
        q.to_rtr(QPAttr())
        q.to_rts(QPAttr(sq_psn=5))
    src, dst = MR(h.pd_a, 4096, FULL), MR(h.pd_b, 8192, FULL)
    src.write(bytes(range(256)) * 16)
    ah = AH(h.pd_a, AHAttr(dmac=h.b.mac, dip=h.b.ip, sport=SPORT))
    for i in range(3):
        qb.post_recv(RecvWR(wr_id=i, sg_list=[dst.sge(i * 2048, 2048)]))
    for i in range(3):
        qa.post_send(SendWR(wr_id=i, opcode=WROpcode.IBV_WR_SEND,
                            sg_list=[src.sge(i * 100, 700)], ah=ah, remote_qpn=qb.qp_num,
                            remote_qkey=0x1234))
    assert ok(wait_wc(h, cq_a, 3))
    wcs = wait_wc(h, cq_b, 3)
    assert ok(wcs) and [w.src_qp for w in wcs] == [qa.qp_num] * 3
    for i, w in enumerate(wcs):
        assert w.byte_len == 40 + 700
        grh = dst.read(40, i * 2048)
        assert grh[20] == 0x45 and grh[32:36] == socket.inet_aton(h.a.ip)  # IPv4 header
        assert dst.read(700, i * 2048 + 40) == src.read(700, i * 100)


def test_pcap_records_both_directions_with_valid_icrc(hosts: SimpleNamespace) -> None:
    p = rc_pair(hosts, mtu=512)
    p.qa.post_send(SendWR(wr_id=1, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                          sg_list=[p.src.sge(0, 3000)], remote_addr=p.dst.addr,
                          rkey=p.dst.rkey))
    assert ok(wait_wc(hosts, p.cq_a))
    hosts.writer.close()
    frames = [f.data for f in open_capture(str(hosts.pcap))]
    st = hosts.ta.stats, hosts.tb.stats
    # WRITE First, 4 Middle, Last and one ACK, each recorded when sent and when received
    assert len(frames) == sum(s.frames_sent + s.frames_received for s in st) == 7 * 2
    for f in frames:
        pkt = roce.parse(f)
        assert pkt.icrc_valid
        fields = pkt.fields()
        assert fields["udp.srcport"] == SPORT and fields["ip.flags.df"] == 1
        assert fields["ip.id"] == 0 and fields["ip.ttl"] == 64
    # the receiver's rebuilt frame is byte for byte the one the sender built, but for the
    # Ethernet source (a UDP socket never sees the peer's MAC)
    same = [f[:6] + f[12:] for f in frames]
    assert all(n == 2 for n in Counter(same).values())
    ops = [roce.parse(f).fields()["bth.opcode"] for f in frames if f[6:12] != bytes(6)]
    assert ops == [0x06, 0x07, 0x07, 0x07, 0x07, 0x08, 0x11]


def test_frames_built_with_another_source_port_are_restamped(hosts: SimpleNamespace) -> None:
    """A QP whose address vector leaves the source port to the rxe hash still works: the
    transport rewrites port and ICRC to what the receiver will rebuild."""
    p = rc_pair(hosts, sport=None)
    p.qa.post_send(SendWR(wr_id=1, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                          sg_list=[p.src.sge(0, 5000)], remote_addr=p.dst.addr,
                          rkey=p.dst.rkey))
    assert ok(wait_wc(hosts, p.cq_a))
    assert p.dst.read(5000) == p.src.read(5000)
    assert hosts.ta.stats.restamped > 0 and hosts.tb.stats.restamped > 0
    assert hosts.b.device.counters.icrc_drops == 0


def test_retransmission_timer_runs_on_wall_clock(hosts: SimpleNamespace) -> None:
    """Nobody answers: the local ACK timeout (4.096 us * 2^12 = 16.8 ms) fires retry_cnt
    + 1 times on the real clock, then the WR fails with RETRY_EXC_ERR."""
    p = rc_pair(hosts, timeout=12, retry_cnt=2)
    hosts.tb.close()  # b goes deaf
    t0 = time.monotonic()
    p.qa.post_send(SendWR(wr_id=1, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                          sg_list=[p.src.sge(0, 100)], remote_addr=p.dst.addr,
                          rkey=p.dst.rkey))
    wc = wait_wc(hosts, p.cq_a, 1, timeout=5)[0]
    elapsed = time.monotonic() - t0
    assert wc.status == WCStatus.IBV_WC_RETRY_EXC_ERR
    assert p.qa.core.counters.timeouts == 3 and p.qa.core.counters.retransmitted == 2
    assert 3 * 0.0168 <= elapsed < 2.0


def test_bind_conflicts_and_foreign_addresses_are_clear() -> None:
    ip_a, _ = _free_pair()
    with UdpTransport(Context("x", ip_a)):
        with pytest.raises(TransportError, match="in use"):
            UdpTransport(Context("y", ip_a))
    with pytest.raises(TransportError, match="not an address of this host"):
        UdpTransport(Context("z", "192.0.2.77"))
    with pytest.raises(ValueError, match="covers the source address"):
        UdpTransport(Context("w", ip_a), "127.0.0.1")


# -- helpers of the transport module --------------------------------------------------------


def test_arp_frames_round_trip() -> None:
    f = arp_frame(1, "02:00:00:00:00:01", "10.1.2.3", "00:00:00:00:00:00", "10.1.2.4")
    assert len(f) == 60 and f[:6] == b"\xff" * 6 and f[12:14] == b"\x08\x06"
    assert parse_arp(f) == (1, "02:00:00:00:00:01", "10.1.2.3", "00:00:00:00:00:00",
                            "10.1.2.4")
    r = arp_frame(2, "02:00:00:00:00:02", "10.1.2.4", "02:00:00:00:00:01", "10.1.2.3")
    assert r[:6] == bytes.fromhex("020000000001") and parse_arp(r)[0] == 2
    assert parse_arp(b"\x00" * 60) is None


def test_path_mtu_fits_the_interface() -> None:
    assert max_path_mtu(1500) == 1024
    assert max_path_mtu(9000) == max_path_mtu(65536) == 4096
    assert max_path_mtu(4096 + 84) == 4096 and max_path_mtu(4096 + 83) == 2048
    with pytest.raises(TransportError):
        max_path_mtu(300)


def test_relay_repairs_offloaded_tcp_checksums() -> None:
    src, dst = socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2")
    payload = b"hello out-of-band"
    tcp = struct.pack("!HHIIBBHHH", 40000, 18515, 1, 2, 5 << 4, 0x18, 512, 0xBEEF, 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0x4000, 64, 6, 0, src, dst)
    frame = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + tcp
    fixed = fix_tcp_checksum(frame)
    seg = fixed[34:]
    pseudo = src + dst + struct.pack("!BBH", 0, 6, len(seg))
    assert fast.ip_checksum_reference(pseudo + seg) == 0  # a correct checksum sums to 0
    assert fixed[:50] == frame[:50] and fixed[52:] == frame[52:]
    assert fix_tcp_checksum(b"\x00" * 20) == b"\x00" * 20


def test_bpf_filter_passes_roce_and_arp_only(tmp_path: Path) -> None:
    """The hand-assembled filter on a packet socket in a fresh namespace's loopback: UDP to
    4791 and ARP pass, UDP to other ports does not."""
    import netns

    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(reason)
    ns = f"rocetbpf{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True, timeout=30)
        script = (
            "import socket\n"
            "from roce.iface import arp_frame\n"
            "from roce.iface import ROCE_OR_ARP\n"
            "from roce.iface import packet_socket\n"
            "s = packet_socket('lo', ROCE_OR_ARP, ignore_outgoing=True)\n"
            "s.settimeout(0.5)\n"
            "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "for port in (4790, 4791, 4792, 53):\n"
            "    u.sendto(port.to_bytes(2, 'big') * 8, ('127.0.0.1', port))\n"
            "s.send(arp_frame(1, '02:00:00:00:00:01', '127.0.0.9', '00:00:00:00:00:00',"
            " '127.0.0.1'))\n"
            "seen = []\n"
            "try:\n"
            "    while True:\n"
            "        f, a = s.recvfrom(65536)\n"
            "        seen.append('arp' if f[12:14] == b'\\x08\\x06' else\n"
            "                    str(int.from_bytes(f[36:38], 'big')))\n"
            "except socket.timeout:\n"
            "    pass\n"
            "print(' '.join(seen))\n")
        res = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", script],
                             capture_output=True, text=True, timeout=30)
        assert res.returncode == 0, res.stderr
        seen = res.stdout.split()
        assert "4791" in seen and "arp" in seen
        assert not {"4790", "4792", "53"} & set(seen)
    finally:
        subprocess.run(["ip", "netns", "del", ns], timeout=30)
    assert all(len(insn) == 4 for insn in ROCE_OR_ARP)


# -- out-of-band exchange --------------------------------------------------------------------


@pytest.fixture
def oob_pair() -> Iterator[tuple[oob.Channel, oob.Channel]]:
    with oob.Listener("127.0.0.1", 0) as lst:
        client = oob.connect("127.0.0.1", lst.port, timeout=5)
        server = lst.accept(5)
    try:
        yield client, server
    finally:
        client.close()
        server.close()


def _scenario(**over: Any) -> dict[str, Any]:
    return {**remote.scenario_fields(Scenario(size=4096, count=2)), **over}


def test_oob_hello_params_exchange(oob_pair: tuple[oob.Channel, oob.Channel]) -> None:
    client, server = oob_pair
    mine = oob.QPInfo(qpn=0x11, psn=0xABCDEF, ip="10.0.0.1", gid=oob.gid_of("10.0.0.1"),
                      mac="02:00:0a:00:00:01", rkey=0x1234, va=0x7F0000001000, size=65536,
                      mtu=1024)
    client.send("hello", scenario=_scenario(op="write"), qps=[mine.to_dict()], max_mtu=4096)
    msg = server.recv(5, "hello")
    assert msg["max_mtu"] == 4096 and msg["scenario"]["op"] == "write"
    assert msg["protocol"] == oob.PROTOCOL
    theirs = oob.QPInfo(**msg["qps"][0])
    assert theirs == mine
    claim = {name: 0 for name in schema.CLAIM.names}
    claim.update(completed={}, naks_sent={}, finished=True, unverified="")
    server.send("params", mtu=1024, qps=[mine.to_dict()])
    server.send("result", verified=True, summary=claim)  # likely two messages in one read
    assert client.recv(5, "params")["mtu"] == 1024
    assert client.recv(5, "result")["verified"] is True
    assert client.poll() is None and not client.buffered()


def test_oob_errors_are_sentences(oob_pair: tuple[oob.Channel, oob.Channel]) -> None:
    client, server = oob_pair
    with pytest.raises(oob.OOBError, match=r"timed out after 0\.2 s waiting for a 'hello'"):
        server.recv(0.2, "hello")
    client.send("done", posted=0, completed={}, finished=True)
    with pytest.raises(oob.OOBError, match="expected a 'hello' message .* got 'done'"):
        server.recv(5, "hello")
    client.error("no network interface 'eth9'")
    with pytest.raises(oob.OOBError, match="reported: no network interface 'eth9'"):
        server.recv(5)
    client.sock.sendall(b"not json\n")
    with pytest.raises(PeerMessageError, match="peer message: not JSON"):
        server.recv(5)
    client.sock.sendall(b"[1, 2]\n")
    with pytest.raises(PeerMessageError, match=r"peer message: \[1, 2\] is not an object"):
        server.recv(5)
    client.sock.sendall(b'{"type": "hello", "protocol": "other/9"}\n')
    with pytest.raises(PeerMessageError, match='field "protocol": the peer speaks "other/9"'):
        server.recv(5)
    client.close()
    with pytest.raises(oob.OOBError, match="closed the out-of-band connection"):
        server.recv(5)


def test_oob_refused_and_accept_timeout() -> None:
    with oob.Listener("127.0.0.1", 0) as lst:
        port = lst.port
        with pytest.raises(oob.OOBError, match="no peer connected"):
            lst.accept(0.1)
    t0 = time.monotonic()
    with pytest.raises(oob.OOBError, match=f"cannot connect to 127.0.0.1:{port} within"):
        oob.connect("127.0.0.1", port, timeout=0.5)
    assert time.monotonic() - t0 < 3
    with pytest.raises(oob.OOBError, match="cannot resolve"):
        oob.connect("no-such-host.invalid", 1, timeout=0.5)


def test_connect_retries_until_the_listener_is_up() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    box: dict = {}

    def late_listener() -> None:
        time.sleep(0.3)
        with oob.Listener("127.0.0.1", port) as lst:
            ch = lst.accept(5)
            try:
                ch.recv(5, "hello")
            except oob.OOBError as e:
                box["msg"] = e
            ch.close()

    th = threading.Thread(target=late_listener)
    th.start()
    ch = oob.connect("127.0.0.1", port, timeout=5)
    ch.send("error", message="late")
    th.join(10)
    ch.close()
    assert "reported: late" in str(box["msg"])


# -- the remote runner, both roles in one process ---------------------------------------------


def _real(**fields: Any) -> Scenario:
    """A real-link run's scenario, with the defaults ``roce emulate --listen/--connect``
    applies (its ACK timeout; its wall-clock time limit unless given)."""
    fields.setdefault("timeout", defaults.ACK_TIMEOUT_REAL)
    fields.setdefault("time_limit_ns", int(defaults.REAL_TIME_LIMIT_S * 1e9))
    return Scenario(**fields)


def _roles(sc: Scenario, hint: Scenario | None = None) -> tuple[dict, Any]:
    """Run a listener (told ``hint``) in a thread and a connector in this one over UDP on
    loopback: ({"listener": summary} or {"error": exception}, connector summary or error)."""
    ip_l, ip_c = _free_pair()
    with oob.Listener(ip_l, 0) as probe:
        port = probe.port
    ep_l = remote.Endpoint(transport="udp", ip=ip_l, oob_port=port, oob_timeout=10)
    ep_c = remote.Endpoint(transport="udp", ip=ip_c, oob_port=port, oob_timeout=10)
    box: dict = {}

    def serve() -> None:
        try:
            box["listener"] = remote.run_listener(hint, ep_l, bind=ip_l)
        except Exception as e:  # noqa: BLE001 - the test looks at it
            box["error"] = e

    th = threading.Thread(target=serve)
    th.start()
    try:
        con: Any = remote.run_connector(ip_l, sc, ep_c)
    except RoceError as e:
        con = e
    th.join(20)
    return box, con


@pytest.mark.parametrize("op,qp_type", [("mixed", "rc"), ("send", "ud"), ("write", "uc")])
def test_remote_roles_over_udp_loopback(op: str, qp_type: str) -> None:
    size = 700 if qp_type == "ud" else 3000
    sc = _real(op=op, size=size, count=16, mtu=1024, qps=2, depth=4, seed=4,
                               qp_type=qp_type, time_limit_ns=20 * 10**9)
    box, con = _roles(sc)
    assert "error" not in box, box.get("error")
    lst = box["listener"]
    assert con.data_verified and con.peer_verified and lst.data_verified
    assert con.completed == {"IBV_WC_SUCCESS": 32} and lst.messages == 32
    assert lst.scenario["mtu"] == con.scenario["mtu"] == 1024
    text = con.text()
    assert "data verified yes" in text and "connector over UDP" in text
    assert "executed 32 of 32" in lst.text()


@pytest.mark.parametrize("loss_rule", ["rack", "dupthresh"])
def test_remote_listener_follows_the_connectors_recovery(loss_rule: str) -> None:
    """The connector's --recovery sr / --loss-rule travel in its hello: both ends run
    selective repeat (its WRITE encoding would not execute at a go-back-N responder's
    checks otherwise: every WRITE packet but the last is a WRITE First) and both
    summaries say so."""
    sc = _real(op="mixed", size=5000, count=12, mtu=1024, qps=2, depth=4,
                               seed=3, time_limit_ns=20 * 10**9, recovery="sr", loss_rule=loss_rule)
    box, con = _roles(sc)
    assert "error" not in box, box.get("error")
    lst = box["listener"]
    assert con.data_verified and lst.data_verified and lst.messages == 24
    for s in (con, lst):
        assert s.scenario["recovery"] == "sr" and s.scenario["loss_rule"] == loss_rule
        assert f"recovery      sr ({loss_rule})" in s.text()


def test_remote_recovery_mismatch_names_both_values() -> None:
    sc = _real(op="write", size=3000, count=2, mtu=1024, seed=1,
                               time_limit_ns=10 * 10**9)  # gbn
    hint = _real(recovery="sr")
    box, con = _roles(sc, hint)
    err = box.get("error")
    assert isinstance(err, remote.RecoveryMismatch) and isinstance(err, UsageError)
    assert "--recovery sr on the listener, --recovery gbn on the connector" in str(err)
    assert isinstance(con, oob.OOBError)  # the connector fails with the listener's reason
    assert "--recovery sr on the listener, --recovery gbn on the connector" in str(con)


def test_remote_loss_rule_mismatch_and_a_default_listener_follows() -> None:
    sr = _real(recovery="sr")  # rack
    with pytest.raises(remote.RecoveryMismatch, match="--loss-rule dupthresh on the listener, "
                       "--loss-rule rack on the connector"):
        remote.agree(sr, _real(recovery="sr", loss_rule="dupthresh"))
    # the listener's defaults (gbn, rack) mean "follow the connector"
    remote.agree(sr, _real())
    remote.agree(sr, None)
    # a loss rule does not matter under go-back-N
    remote.agree(_real(), _real(loss_rule="dupthresh"))


def test_sr_timeouts_scale_with_the_ack_timeout() -> None:
    cfg = remote.sr_config(_real(recovery="sr", timeout=14))
    assert cfg is not None and cfg.rto_high_ns == 4096 << 14
    assert cfg.rto_low_ns * RTO_HIGH_NS == cfg.rto_high_ns * RTO_LOW_NS
    assert remote.sr_config(_real(timeout=14)) is None


def test_expected_memory_follows_the_plan() -> None:
    """The plan both ends replay, checked against the bytes it must produce."""
    sc = _real(op="mixed", size=16, count=8, seed=2)
    exp = remote.expected(sc, 0)
    assert sc.slots == 4 and sc.slot == 16
    loc0, rem0 = bytearray(64), bytearray(64)
    payload.fill(loc0, 2, 0, "local", 16, 4)
    payload.fill(rem0, 2, 0, "remote", 16, 4)
    local = b"".join(b for j in range(4) for b in exp.chunks("local", j))
    rem = b"".join(b for j in range(4) for b in exp.chunks("remote", j))
    # writes 0 and 4 copy local slot 0 over remote slot 0; fetch-and-add 3 bumps the
    # remote's first 8 bytes, write 4 resets them, fetch-and-add 7 bumps them again and
    # fetches the value write 4 left (into local slot 3)
    assert rem[8:16] == loc0[8:16]
    assert int.from_bytes(rem[:8], "little") == (int.from_bytes(loc0[:8], "little") + 1) % 2**64
    assert local[48:56] == loc0[:8]
    assert local[16:32] == rem0[16:32]  # reads (1, 5) copied remote slot 1
    assert rem[32:48] == loc0[32:48]  # sends (2, 6) landed in remote slot 2
    assert exp.matches("local", bytearray(local)) and exp.matches("remote", bytearray(rem))
    assert not exp.matches("remote", rem0)


def test_ipv6_over_udp() -> None:
    """IPv6 GIDs: both devices on ::1, told apart by port (loopback has one v6 address)."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
            base = s.getsockname()[1]
    except OSError:
        pytest.skip("no IPv6 loopback")
    loop = EventLoop()
    a = Context("a", "::1", "02:00:00:00:00:0a")
    b = Context("b", "::1", "02:00:00:00:00:0b")
    try:
        UdpTransport(a, port=base, peer_port=base + 1, loop=loop)
        UdpTransport(b, port=base + 1, peer_port=base, loop=loop)
    except TransportError as e:
        loop.close()
        pytest.skip(f"ports taken: {e}")
    try:
        h = SimpleNamespace(a=a, b=b, loop=loop, pd_a=PD(a), pd_b=PD(b))
        p = rc_pair(h, sport=None)  # the transports stamp their own ports
        p.qa.post_send(SendWR(wr_id=1, opcode=WROpcode.IBV_WR_RDMA_WRITE,
                              sg_list=[p.src.sge(0, 5000)], remote_addr=p.dst.addr,
                              rkey=p.dst.rkey))
        p.qa.post_send(SendWR(wr_id=2, opcode=WROpcode.IBV_WR_RDMA_READ,
                              sg_list=[p.src.sge(9000, 3000)], remote_addr=p.dst.addr + 9000,
                              rkey=p.dst.rkey))
        want = p.dst.read(3000, 9000)
        assert ok(wait_wc(h, p.cq_a, 2))
        assert p.dst.read(5000) == p.src.read(5000) and p.src.read(3000, 9000) == want
        assert a.device.counters.icrc_drops == b.device.counters.icrc_drops == 0
    finally:
        loop.close()


@pytest.mark.parametrize("argv,why", [
    (["--listen"], "say how to reach the wire: -i IFACE (raw Ethernet) or --transport udp"),
    (["--connect", "127.0.0.1", "--transport", "raw"], "--transport raw needs -i IFACE"),
    (["--listen", "--connect", "127.0.0.1", "--transport", "udp"],
     "--listen and --connect exclude each other"),
])
def test_a_real_link_run_needs_one_role_and_a_way_to_the_wire(argv: list[str], why: str,
                                                              capsys) -> None:
    """Refused before anything is opened: exit 1, naming what is missing."""
    from roce.cli import main

    assert main(["emulate", *argv, "--port", "0", "--oob-timeout", "0.1"]) == 1
    assert why in capsys.readouterr().err
