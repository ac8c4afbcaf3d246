"""``roce target`` answering frames from outside, checked byte for byte.

The target runs in namespace B on raw Ethernet with an address its kernel does not own (so
only the target's ARP can make it reachable).  From namespace A this test process sends
frames built by ``roce.craft`` on a packet socket it opened inside A (``setns``), and
captures the answers on the same socket.  Each answer must be exactly the frame the spec
requires -- the expected frame is crafted too, and the two are compared as bytes: ACKs
with the right PSN and MSN, one PSN-sequence NAK carrying the ePSN per gap, a remote access
NAK for a bad rkey, READ responses cut at the path MTU (AETH on First and Last, payload
from the MR), atomic ACKs with the original value.  Each case uses a QP of its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import netns
import pytest

import roce
from roce import fast
from roce.emu.real.target import fill_bytes
from roce.families.base.summary import ARROW
from roce.headers import describe_syndrome
from roce.locate import OK
from roce.packet import udp_source_port
from roce.pcapio import open_capture

REASON = netns.unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 3
ME_IP, TARGET_IP = "10.66.0.1", "10.66.0.2"  # neither kernel owns these
QPN, PEER_QPN, RKEY, VA, SIZE, PSN, MTU = 0x20, 0x33, 0x4242, 0x10000, 8192, 100, 256
MR = fill_bytes("pattern", SIZE)
SETTLE = 0.3  # how long "nothing more came" is watched


@contextlib.contextmanager
def inside(ns: str) -> Iterator[None]:
    """Run the block in network namespace ``ns`` (this thread only); sockets made here
    stay there."""
    libc = ctypes.CDLL(None, use_errno=True)
    here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    there = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(there, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {ns}")
        yield
    finally:
        libc.setns(here, CLONE_NEWNET)
        os.close(here)
        os.close(there)


def _mac(ns: str, ifname: str) -> str:
    res = subprocess.run(["ip", "-n", ns, "-j", "link", "show", ifname], capture_output=True,
                         text=True, check=True, timeout=30)
    return json.loads(res.stdout)[0]["address"]


class Wire:
    """A packet socket on A's end of the veth: send frames, collect the target's."""

    def __init__(self, ns: str, ifname: str) -> None:
        with inside(ns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW,
                                      socket.htons(ETH_P_ALL))
            self.sock.setsockopt(263, 23, 1)  # PACKET_IGNORE_OUTGOING
            self.sock.bind((ifname, 0))
        self.mac = _mac(ns, ifname)

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def collect(self, n: int, timeout: float = 3.0, settle: float = SETTLE) -> list[bytes]:
        """The target's RoCE/ARP frames: wait for ``n``, then ``settle`` s for extras."""
        got: list[bytes] = []
        end = time.monotonic() + timeout
        extra_until = None
        while True:
            now = time.monotonic()
            if extra_until is None and len(got) >= n:
                extra_until = now + settle
            stop = extra_until if extra_until is not None else end
            if now >= stop:
                return got
            r, _, _ = select.select([self.sock], [], [], stop - now)
            if r:
                f = self.sock.recv(65536)
                if f[:6] == bytes.fromhex(self.mac.replace(":", "")) and (
                        f[12:14] == b"\x08\x06" or fast.walk(f).status == OK):
                    got.append(f)

    def drain(self) -> None:
        self.sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:
                self.sock.recv(65536)
        self.sock.setblocking(True)

    def exchange(self, frames: list[bytes], n: int, **kw: float) -> list[bytes]:
        self.drain()
        for f in frames:
            self.send(f)
        return self.collect(n, **kw)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    pair = netns.create()
    pcap = tmp_path_factory.mktemp("target") / "target.pcap"
    lines: list[str] = []
    try:
        proc = pair.popen(pair.ns_b, [
            sys.executable, "-m", "roce.cli.target", "-i", pair.if_b, "--ip", TARGET_IP,
            "--qpn", hex(QPN), "--qps", "5", "--peer-qpn", hex(PEER_QPN), "--rkey", hex(RKEY),
            "--va", hex(VA), "--size", str(SIZE), "--psn", str(PSN), "--mtu", str(MTU),
            "-w", str(pcap)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        end = time.monotonic() + 15
        while "-- ready" not in lines:
            assert proc.poll() is None, "\n".join(lines)
            assert time.monotonic() < end, "target did not get ready:\n" + "\n".join(lines)
            time.sleep(0.02)
        wire = Wire(pair.ns_a, pair.if_a)
        yield SimpleNamespace(pair=pair, proc=proc, lines=lines, pcap=pcap, wire=wire,
                              target_mac=_mac(pair.ns_b, pair.if_b), reader=reader)
    finally:
        pair.close()


def req(t: SimpleNamespace, op: str, payload: bytes = b"", **fields: object) -> bytes:
    """A request from us (10.66.0.1) to the target, as an RNIC would put it on the wire."""
    return roce.craft(op, payload, src=ME_IP, dst=TARGET_IP, **{
        "eth.src": t.wire.mac, "eth.dst": t.target_mac}, **fields).to_bytes()


def answer(t: SimpleNamespace, qpn: int, op: str, payload: bytes = b"",
           **fields: object) -> bytes:
    """The frame the target must send back from its QP ``qpn``: to our MAC and IP, to
    PEER_QPN + (qpn - QPN), from the UDP port rxe derives from its QPN, IP ID 0, DF, TTL 64,
    P_Key 0xFFFF, and a correct ICRC."""
    return roce.craft(op, payload, src=TARGET_IP, dst=ME_IP, dqpn=PEER_QPN + qpn - QPN, **{
        "eth.src": t.target_mac, "eth.dst": t.wire.mac,
        "udp.srcport": udp_source_port(qpn)}, **fields).to_bytes()


ACK = 0x1F  # syndrome: ACK, unlimited credits
NAK_SEQ, NAK_ACCESS = 0x60, 0x62


def test_banner_tells_what_is_exposed(target: SimpleNamespace) -> None:
    text = "\n".join(target.lines)
    assert f"MR rkey 0x{RKEY:08x} va 0x{VA:x} size {SIZE}" in text
    for i in range(5):
        assert f"QP 0x{QPN + i:06x} RC ePSN 0x{PSN:06x} MTU {MTU} -> peer QP " \
               f"0x{PEER_QPN + i:06x}" in text
    assert f"roce target {TARGET_IP} ({target.target_mac}) over raw Ethernet" in text


def test_answers_arp_for_its_address(target: SimpleNamespace) -> None:
    from roce.iface import arp_frame

    w = target.wire
    got = w.exchange([arp_frame(1, w.mac, ME_IP, "00:00:00:00:00:00", TARGET_IP)], 1)
    assert got == [arp_frame(2, target.target_mac, TARGET_IP, w.mac, ME_IP)]
    got = w.exchange([arp_frame(1, w.mac, ME_IP, "00:00:00:00:00:00", "10.66.0.99")], 0)
    assert got == []  # not its address: silence


def test_send_and_write_are_acknowledged_with_psn_and_msn(target: SimpleNamespace) -> None:
    w, q = target.wire, QPN
    got = w.exchange([req(target, "RC_SEND_ONLY", b"hello target", dqpn=q, psn=PSN,
                          ackreq=True)], 1)
    assert got == [answer(target, q, "RC_ACKNOWLEDGE", psn=PSN, syndrome=ACK, msn=1)]
    data = bytes(range(40, 72))
    got = w.exchange([req(target, "RC_RDMA_WRITE_ONLY", data, dqpn=q, psn=PSN + 1,
                          ackreq=True, va=VA + 4096, rkey=RKEY, dmalen=len(data))], 1)
    assert got == [answer(target, q, "RC_ACKNOWLEDGE", psn=PSN + 1, syndrome=ACK, msn=2)]
    # no AckReq: no ACK; the next AckReq acknowledges both (coalesced)
    got = w.exchange([req(target, "RC_SEND_ONLY", b"quiet", dqpn=q, psn=PSN + 2)], 0)
    assert got == []
    got = w.exchange([req(target, "RC_SEND_ONLY", b"loud", dqpn=q, psn=PSN + 3,
                          ackreq=True)], 1)
    assert got == [answer(target, q, "RC_ACKNOWLEDGE", psn=PSN + 3, syndrome=ACK, msn=4)]
    # a duplicate is acknowledged again, not executed again (the MSN stays)
    got = w.exchange([req(target, "RC_SEND_ONLY", b"hello target", dqpn=q, psn=PSN,
                          ackreq=True)], 1)
    assert got == [answer(target, q, "RC_ACKNOWLEDGE", psn=PSN + 3, syndrome=ACK, msn=4)]
    # the WRITE landed: read it back
    got = w.exchange([req(target, "RC_RDMA_READ_REQUEST", dqpn=q, psn=PSN + 4, va=VA + 4096,
                          rkey=RKEY, dmalen=len(data))], 1)
    assert got == [answer(target, q, "RC_RDMA_READ_RESPONSE_ONLY", data, psn=PSN + 4,
                          syndrome=ACK, msn=5)]


def test_psn_gap_gets_one_sequence_nak_with_the_epsn(target: SimpleNamespace) -> None:
    w, q = target.wire, QPN + 1

    def write(psn: int) -> bytes:
        return req(target, "RC_RDMA_WRITE_ONLY", b"gap!", dqpn=q, psn=psn, ackreq=True,
                   va=VA + 5000, rkey=RKEY, dmalen=4)

    nak = answer(target, q, "RC_ACKNOWLEDGE", psn=PSN, syndrome=NAK_SEQ, msn=0)
    assert w.exchange([write(PSN + 2)], 1) == [nak]
    assert w.exchange([write(PSN + 3), write(PSN + 5)], 0) == []  # sent once per gap
    assert w.exchange([write(PSN)], 1) == [
        answer(target, q, "RC_ACKNOWLEDGE", psn=PSN, syndrome=ACK, msn=1)]
    # the ePSN arrived: a new gap earns a new NAK, carrying the new ePSN
    assert w.exchange([write(PSN + 7)], 1) == [
        answer(target, q, "RC_ACKNOWLEDGE", psn=PSN + 1, syndrome=NAK_SEQ, msn=1)]


def test_bad_rkey_gets_remote_access_nak(target: SimpleNamespace) -> None:
    w, q = target.wire, QPN + 2
    bad = req(target, "RC_RDMA_WRITE_ONLY", b"nope", dqpn=q, psn=PSN, ackreq=True, va=VA,
              rkey=RKEY ^ 0x100, dmalen=4)
    assert w.exchange([bad], 1) == [
        answer(target, q, "RC_ACKNOWLEDGE", psn=PSN, syndrome=NAK_ACCESS, msn=0)]
    # out of range with the right rkey: the same NAK
    time.sleep(0.3)  # the target re-creates the QP it had to put in ERR
    oob = req(target, "RC_RDMA_READ_REQUEST", dqpn=q, psn=PSN, va=VA + SIZE - 4, rkey=RKEY,
              dmalen=8)
    assert w.exchange([oob], 1) == [
        answer(target, q, "RC_ACKNOWLEDGE", psn=PSN, syndrome=NAK_ACCESS, msn=0)]
    time.sleep(0.3)
    good = req(target, "RC_RDMA_WRITE_ONLY", b"okay", dqpn=q, psn=PSN, ackreq=True,
               va=VA + 6000, rkey=RKEY, dmalen=4)
    assert w.exchange([good], 1) == [
        answer(target, q, "RC_ACKNOWLEDGE", psn=PSN, syndrome=ACK, msn=1)]


def test_read_responses_are_cut_at_the_mtu(target: SimpleNamespace) -> None:
    w, q = target.wire, QPN + 3
    off, length = 16, 700  # 256 + 256 + 188 bytes
    got = w.exchange([req(target, "RC_RDMA_READ_REQUEST", dqpn=q, psn=PSN, va=VA + off,
                          rkey=RKEY, dmalen=length)], 3)
    data = MR[off:off + length]
    assert got == [
        answer(target, q, "RC_RDMA_READ_RESPONSE_FIRST", data[:256], psn=PSN, syndrome=ACK,
               msn=1),
        answer(target, q, "RC_RDMA_READ_RESPONSE_MIDDLE", data[256:512], psn=PSN + 1),
        answer(target, q, "RC_RDMA_READ_RESPONSE_LAST", data[512:], psn=PSN + 2,
               syndrome=ACK, msn=1),
    ]
    assert roce.parse(got[2]).fields()["bth.padcnt"] == 0 and len(data[512:]) == 188
    # the READ took three PSNs: the next request is PSN + 3
    got = w.exchange([req(target, "RC_RDMA_READ_REQUEST", dqpn=q, psn=PSN + 3, va=VA + 1,
                          rkey=RKEY, dmalen=3)], 1)
    assert got == [answer(target, q, "RC_RDMA_READ_RESPONSE_ONLY", MR[1:4], psn=PSN + 3,
                          syndrome=ACK, msn=2)]
    assert roce.parse(got[0]).fields()["bth.padcnt"] == 1


def test_atomics_return_the_original_value(target: SimpleNamespace) -> None:
    w, q = target.wire, QPN + 4
    cell = 7000  # 8-byte aligned, touched by no other test
    orig = int.from_bytes(MR[cell:cell + 8], "little")
    got = w.exchange([req(target, "RC_FETCH_ADD", dqpn=q, psn=PSN, va=VA + cell, rkey=RKEY,
                          swapdt=5)], 1)
    assert got == [answer(target, q, "RC_ATOMIC_ACKNOWLEDGE", psn=PSN, syndrome=ACK, msn=1,
                          origremdt=orig)]
    got = w.exchange([req(target, "RC_COMPARE_SWAP", dqpn=q, psn=PSN + 1, va=VA + cell, rkey=RKEY,
                          cmpdt=orig + 5, swapdt=0x1122334455667788)], 1)
    assert got == [answer(target, q, "RC_ATOMIC_ACKNOWLEDGE", psn=PSN + 1, syndrome=ACK,
                          msn=2, origremdt=orig + 5)]
    # a duplicate atomic replays the saved result, it does not add again
    got = w.exchange([req(target, "RC_FETCH_ADD", dqpn=q, psn=PSN, va=VA + cell, rkey=RKEY,
                          swapdt=5)], 1)
    assert got == [answer(target, q, "RC_ATOMIC_ACKNOWLEDGE", psn=PSN, syndrome=ACK, msn=2,
                          origremdt=orig)]
    got = w.exchange([req(target, "RC_RDMA_READ_REQUEST", dqpn=q, psn=PSN + 2, va=VA + cell,
                          rkey=RKEY, dmalen=8)], 1)
    assert got == [answer(target, q, "RC_RDMA_READ_RESPONSE_ONLY",
                          (0x1122334455667788).to_bytes(8, "little"), psn=PSN + 2,
                          syndrome=ACK, msn=3)]


def test_log_and_pcap_after_ctrl_c(target: SimpleNamespace) -> None:
    """Last: stop the target with SIGINT; its log and pcap hold the whole exchange."""
    assert target.pair.stop(target.proc) == 0
    target.reader.join(5)
    text = "\n".join(target.lines)
    assert f"peer is {ME_IP} ({target.wire.mac})" in text
    assert "received 12 bytes: 68 65 6c 6c 6f 20 74 61 72 67 65 74" in text  # "hello target"
    assert f"QP 0x{QPN + 2:06x} went to ERR" in text and "re-created" in text
    assert "-- done:" in text
    rx = [ln for ln in target.lines if ln.startswith("rx ")]
    tx = [ln for ln in target.lines if ln.startswith("tx ")]
    assert any(f"{ME_IP} {ARROW} {TARGET_IP}" in ln and "RC Send Only" in ln for ln in rx)
    assert any("RC RDMA Read Response First" in ln for ln in tx)
    assert any(describe_syndrome(NAK_SEQ) in ln for ln in tx)
    assert any(describe_syndrome(NAK_ACCESS) in ln for ln in tx)
    frames = [f.data for f in open_capture(str(target.pcap))]
    roce_frames = [f for f in frames if fast.walk(f).status == OK]
    assert len(roce_frames) == len(rx) + len(tx) - (len(frames) - len(roce_frames))
    assert all(roce.parse(f).icrc_valid for f in roce_frames)


def test_udp_transport_target(tmp_path: Path) -> None:
    """``--transport udp``: the kernel builds IP/UDP; the datagrams carry BTH..ICRC, and the
    ICRC is the one a receiver computes over the headers the kernel really sent (ID 0, DF,
    UDP source port 4791)."""
    with netns.veth_pair() as pair:
        out = tmp_path / "target.out"
        with open(out, "w") as f:
            proc = pair.popen(pair.ns_b, [
                sys.executable, "-m", "roce.cli.target", "--transport", "udp", "--ip",
                pair.addr_b, "--qpn", "0x40", "--peer-qpn", "0x50", "--rkey", "0x777", "--va",
                "0x2000", "--size", "4096", "--mtu", "1024", "--count", "3"],
                stdout=f, stderr=subprocess.STDOUT)
            end = time.monotonic() + 15
            while "-- ready" not in out.read_text():
                assert proc.poll() is None and time.monotonic() < end, out.read_text()
                time.sleep(0.02)
        with inside(pair.ns_a):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((pair.addr_a, 4791))
        s.settimeout(3)

        def frame(src: str, dst: str, op: str, payload: bytes = b"", **kw: object) -> bytes:
            return roce.craft(op, payload, src=src, dst=dst, **{"udp.srcport": 4791},
                              **kw).to_bytes()

        def bth_on(f: bytes) -> bytes:
            w = fast.walk(f)
            return f[w.bth_off:w.l4_end]

        def ask(op: str, payload: bytes = b"", n: int = 1, **kw: object) -> list[bytes]:
            s.sendto(bth_on(frame(pair.addr_a, pair.addr_b, op, payload, **kw)),
                     (pair.addr_b, 4791))
            got = []
            for _ in range(n):
                data, addr = s.recvfrom(65536)
                assert addr == (pair.addr_b, 4791)
                got.append(data)
            return got

        def reply(op: str, payload: bytes = b"", **kw: object) -> bytes:
            return bth_on(frame(pair.addr_b, pair.addr_a, op, payload, dqpn=0x50, **kw))

        data = bytes(range(100, 200))
        assert ask("RC_RDMA_WRITE_ONLY", data, dqpn=0x40, psn=0, ackreq=True, va=0x2000 + 8,
                   rkey=0x777, dmalen=len(data)) == [
            reply("RC_ACKNOWLEDGE", psn=0, syndrome=ACK, msn=1)]
        mr = bytearray(fill_bytes("pattern", 4096))
        mr[8:108] = data
        assert ask("RC_RDMA_READ_REQUEST", n=2, dqpn=0x40, psn=1, va=0x2000, rkey=0x777,
                   dmalen=1500) == [
            reply("RC_RDMA_READ_RESPONSE_FIRST", bytes(mr[:1024]), psn=1, syndrome=ACK, msn=2),
            reply("RC_RDMA_READ_RESPONSE_LAST", bytes(mr[1024:1500]), psn=2, syndrome=ACK,
                  msn=2)]
        assert ask("RC_SEND_ONLY", b"over udp", dqpn=0x40, psn=3, ackreq=True) == [
            reply("RC_ACKNOWLEDGE", psn=3, syndrome=ACK, msn=3)]
        assert proc.wait(10) == 0  # --count 3: three requests, then it stops by itself
        s.close()
        text = out.read_text()
        assert "received 8 bytes: 6f 76 65 72 20 75 64 70" in text
        assert f"over UDP {pair.addr_b}:4791" in text


@pytest.mark.parametrize("sig", [15, 1], ids=["SIGTERM", "SIGHUP"])
def test_stopped_by_a_service_manager_keeps_its_pcap(tmp_path: Path, sig: int) -> None:
    """SIGTERM and SIGHUP end the target as Ctrl-C does: totals printed, exit 0, and the
    capture of what happened (written in place as it went) kept, on whole records."""
    with netns.veth_pair() as pair:
        out, pcap = tmp_path / "target.out", tmp_path / "target.pcap"
        with open(out, "w") as f:
            proc = pair.popen(pair.ns_b, [
                sys.executable, "-m", "roce", "target", "--transport", "udp", "--ip",
                pair.addr_b, "--qpn", "0x40", "--peer-qpn", "0x50", "-w", str(pcap)],
                stdout=f, stderr=subprocess.STDOUT)
            end = time.monotonic() + 15
            while "-- ready" not in out.read_text():
                assert proc.poll() is None and time.monotonic() < end, out.read_text()
                time.sleep(0.02)
        with inside(pair.ns_a):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((pair.addr_a, 4791))
        s.settimeout(3)
        frame = roce.craft("RC_SEND_ONLY", b"hi", src=pair.addr_a, dst=pair.addr_b,
                           dqpn=0x40, psn=0, ackreq=True, **{"udp.srcport": 4791}).to_bytes()
        w = fast.walk(frame)
        s.sendto(frame[w.bth_off:w.l4_end], (pair.addr_b, 4791))
        s.recvfrom(65536)  # its ACK: the target has seen the request
        s.close()
        time.sleep(0.2)  # and recorded its answer, microseconds after sending it
        proc.send_signal(sig)
        assert proc.wait(10) == 0
        text = out.read_text()
        assert "-- done: 1 requests received" in text and "Traceback" not in text
        with open_capture(pcap) as reader:
            frames = [f.data for f in reader]
            assert reader.problems == []
        assert len(frames) == 2  # the SEND and its ACK
        assert not list(tmp_path.glob(".*.tmp"))


def test_registered_as_roce_target(monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Through ``roce.cli.main`` once registered (roce/cli/__init__.py COMMANDS gets the entry)."""
    from roce import cli

    monkeypatch.setitem(cli.COMMANDS, "target",
                        ("roce.cli.target", "serve RDMA requests with the emulator"))
    assert cli.main(["target", "--transport", "udp"]) == 2
    assert "needs --ip ADDR" in capsys.readouterr().err
    assert cli.main(["target"]) == 1
    assert "give -i IFACE" in capsys.readouterr().err
    assert cli.main(["target", "-i", "nosuch0"]) == 2
    assert "no such interface 'nosuch0'" in capsys.readouterr().err
