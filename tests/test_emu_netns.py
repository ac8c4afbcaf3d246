"""``roce emulate --listen/--connect`` across real links: two network namespaces and a veth.

Every run is two processes (``ip netns exec NS python -m roce emulate ...``) speaking
RoCE over raw Ethernet (AF_PACKET) or the kernel's UDP, with the out-of-band TCP exchange
beside it.  Checked: both summaries (``-T json``) say every message completed and the data
is byte-exact on both sides; the recorded pcaps hold only frames with valid ICRCs and
tshark decodes them; on an impaired link (``tc netem`` where the kernel has it, else the
emulator's own impairing relay in a third namespace, ``roce relay``) RC still executes every
message exactly once.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import netns
import pytest

import roce
from roce import fast
from roce.locate import OK
from roce.pcapio import open_capture

REASON = netns.unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
TSHARK = shutil.which("tshark")
_serial = itertools.count()


# -- topology helpers --------------------------------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                          check=check)


def _wait_up(ns: str, ifname: str, timeout: float = 10) -> None:
    end = time.monotonic() + timeout
    while True:
        res = _ip("-n", ns, "-j", "link", "show", ifname, check=False)
        info = json.loads(res.stdout or "[{}]")[0]
        if info.get("operstate") == "UP" and "LOWER_UP" in info.get("flags", []):
            return
        if time.monotonic() > end:
            raise RuntimeError(f"{ifname} in {ns} did not come up")
        time.sleep(0.05)


class Relayed:
    """A -- veth -- M -- veth -- B, with the impairing relay running in M."""

    def __init__(self, mtu: int, relay_args: list[str]) -> None:
        tag = f"{os.getpid()}x{next(_serial)}"
        self.pair = netns.VethPair(f"rocer{tag}A", f"rocer{tag}B", "e0", "e0")
        self.ns_m = f"rocer{tag}M"
        self.relay: subprocess.Popen | None = None
        self.stats: dict | None = None
        p = self.pair
        try:
            for ns in (p.ns_a, p.ns_b, self.ns_m):
                _ip("netns", "add", ns)
                subprocess.run(p.cmd(ns, ["sh", "-c",
                                          "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6;"
                                          "echo 1 > /proc/sys/net/ipv6/conf/default/"
                                          "disable_ipv6"]), capture_output=True, timeout=30)
            for ns, end in ((p.ns_a, "m0"), (p.ns_b, "m1")):
                _ip("link", "add", "e0", "netns", ns, "mtu", str(mtu), "type", "veth", "peer",
                    "name", end, "netns", self.ns_m, "mtu", str(mtu))
                _ip("-n", self.ns_m, "link", "set", end, "up")
            for ns, addr in ((p.ns_a, p.addr_a), (p.ns_b, p.addr_b)):
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "e0")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "link", "set", "e0", "up")
            self.relay = p.popen(self.ns_m, [sys.executable, "-m", "roce", "relay",
                                             "m0", "m1", *relay_args],
                                 stdout=subprocess.PIPE, text=True)
            assert self.relay.stdout is not None
            assert "ready" in self.relay.stdout.readline()
            for ns in (p.ns_a, p.ns_b):
                _wait_up(ns, "e0")
        except BaseException:
            self.close()
            raise

    def stop_relay(self) -> dict:
        """Stop the relay; its per-direction fault counts."""
        if self.stats is None and self.relay is not None:
            self.relay.terminate()
            out, _ = self.relay.communicate(timeout=10)
            self.stats = json.loads(out.strip().splitlines()[-1])
        return self.stats or {}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop_relay()
        self.pair.close()
        _ip("netns", "del", self.ns_m, check=False)


@pytest.fixture(scope="module")
def pair() -> Iterator[netns.VethPair]:
    # MTU 9000: RoCE path MTU 4096 fits (4096 + 84 bytes of headers)
    with netns.veth_pair(mtu=9000) as p:
        yield p


def emulate(pair: netns.VethPair, transport: str, args: Sequence[str], tmp: Path,
            timeout: float = 45, listener_args: Sequence[str] = (),
            connector_args: Sequence[str] = ()) -> tuple[dict, dict]:
    """Run a listener in B and a connector in A; (listener summary, connector summary)."""
    if transport == "raw":
        lst, con = ["-i", pair.if_b], ["-i", pair.if_a]
    else:
        lst = con = ["--transport", "udp"]
    common = ["-T", "json", "--oob-timeout", "20", "--time-limit", "30"]
    listener = pair.popen(pair.ns_b, pair.roce("emulate", "--listen", *lst, *common,
                                               "-w", str(tmp / "listener.pcap"),
                                               *listener_args),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        con_res = pair.run(pair.ns_a, pair.roce("emulate", "--connect", pair.addr_b, *con,
                                                *common, "-w", str(tmp / "connector.pcap"),
                                                *args, *connector_args), timeout=timeout)
        lout, lerr = listener.communicate(timeout=timeout)
    finally:
        pair.stop(listener)
    assert con_res.stdout, f"connector said nothing: {con_res.stderr}\nlistener: {lerr}"
    assert lout, f"listener said nothing: {lerr}\nconnector: {con_res.stderr}"
    return json.loads(lout), json.loads(con_res.stdout)


def brief(s: dict) -> str:
    """The parts of a summary that explain a failed assertion."""
    keys = ("role", "transport", "posted", "completed", "messages", "data_verified",
            "local_verified", "peer_verified", "retransmitted", "naks", "naks_sent",
            "timeouts", "wall_ns", "finished", "transport_stats")
    return json.dumps({k: s.get(k) for k in keys})


def check_pcap(path: Path) -> list[bytes]:
    """Every RoCE frame in the capture parses and carries a valid ICRC; the RoCE frames."""
    frames = [f.data for f in open_capture(str(path))]
    roce_frames = [f for f in frames if fast.walk(f).status == OK]
    assert roce_frames, f"{path} holds no RoCE frame"
    for f in roce_frames:
        assert roce.parse(f).icrc_valid, f"bad ICRC in {path}: {f.hex()}"
    return roce_frames


def tshark_opcodes(path: Path) -> list[int]:
    res = subprocess.run([TSHARK, "-r", str(path), "-T", "fields", "-e",
                          "infiniband.bth.opcode"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return [int(x, 0) for x in res.stdout.split()]


# -- runs on a clean link ---------------------------------------------------------------------

CASES = [  # (op, qp type, size, count, mtu)
    ("write", "rc", 20000, 12, 4096),
    ("read", "rc", 20000, 12, 1024),
    ("send", "rc", 9000, 12, 2048),
    ("atomic", "rc", 8, 20, 1024),
    ("send", "ud", 1000, 20, 1024),
]


@pytest.mark.parametrize("transport", ["raw", "udp"])
@pytest.mark.parametrize("op,qp_type,size,count,mtu", CASES,
                         ids=[f"{c[1]}-{c[0]}" for c in CASES])
def test_ops_across_veth(pair: netns.VethPair, tmp_path: Path, transport: str, op: str,
                         qp_type: str, size: int, count: int, mtu: int) -> None:
    qps = 2
    lst, con = emulate(pair, transport, ["--op", op, "--qp-type", qp_type, "--size",
                                         str(size), "--count", str(count), "--mtu", str(mtu),
                                         "--qps", str(qps), "--depth", "8", "--seed", "3"],
                       tmp_path)
    total = count * qps
    assert con["role"] == "connector" and lst["role"] == "listener"
    assert con["transport"] == lst["transport"] == transport
    assert con["posted"] == total
    assert con["completed"] == {"IBV_WC_SUCCESS": total}
    assert con["local_verified"] and con["peer_verified"] and con["data_verified"]
    assert lst["data_verified"]
    assert con["scenario"]["mtu"] == lst["scenario"]["mtu"] == mtu
    assert lst["messages"] == total  # RC: the responder's MSN; UD: receives completed
    per = 8 if op == "atomic" else size
    assert con["bytes"] == lst["bytes"] == total * per
    assert con["icrc_drops"] == lst["icrc_drops"] == 0
    assert con["wall_ns"] > 0 and con["goodput_gbps"] > 0
    assert con["peer_summary"]["messages"] == total
    check_pcap(tmp_path / "connector.pcap")


@pytest.mark.parametrize("transport", ["raw", "udp"])
def test_mixed_pcaps_valid_and_tshark_reads_them(pair: netns.VethPair, tmp_path: Path,
                                                 transport: str) -> None:
    lst, con = emulate(pair, transport, ["--op", "mixed", "--size", "5000", "--count", "24",
                                         "--mtu", "1024", "--seed", "9"], tmp_path)
    assert con["data_verified"] and lst["data_verified"]
    assert lst["messages"] == 24
    ours = check_pcap(tmp_path / "connector.pcap")
    theirs = check_pcap(tmp_path / "listener.pcap")
    # one wire, two views: what one side sent the other received, in order
    a_to_b = [f for f in ours if roce.parse(f).fields()["ip.src"] == pair.addr_a]
    b_got = [f for f in theirs if roce.parse(f).fields()["ip.src"] == pair.addr_a]
    assert len(a_to_b) == len(b_got)
    if transport == "raw":
        assert a_to_b == b_got  # byte for byte
    if TSHARK is None:
        pytest.skip("tshark is not installed")
    for path, frames in ((tmp_path / "connector.pcap", ours),
                         (tmp_path / "listener.pcap", theirs)):
        ops = tshark_opcodes(path)
        assert ops == [roce.parse(f).fields()["bth.opcode"] for f in frames]
        # WRITE First, READ request and First response, SEND First, FADD, ACK, atomic ACK
        assert {0x06, 0x0C, 0x0D, 0x00, 0x14, 0x11, 0x12} <= set(ops)


def test_raw_resolves_peer_by_arp(pair: netns.VethPair, tmp_path: Path) -> None:
    """Device addresses the kernels do not own: only the transports' ARP can find them."""
    lst, con = emulate(pair, "raw", ["--op", "write", "--size", "3000", "--count", "5",
                                     "--mtu", "1024", "--arp", "--ip", "10.77.0.1"],
                       tmp_path, listener_args=["--arp", "--ip", "10.77.0.2"])
    assert con["data_verified"] and lst["data_verified"]
    assert con["local"]["ip"] == "10.77.0.1" and con["peer"]["ip"] == "10.77.0.2"
    frames = [f.data for f in open_capture(str(tmp_path / "connector.pcap"))]
    # (op, sender IP, target IP) of every ARP frame seen by the connector
    arps = {(f[21], f[28:32], f[38:42]) for f in frames if f[12:14] == b"\x08\x06"}
    me, peer = bytes([10, 77, 0, 1]), bytes([10, 77, 0, 2])
    # the listener resolved the connector (which answered for its own address and, as
    # Linux does, learned the asker's MAC from the request, so it had no need to ask)
    assert (1, peer, me) in arps and (2, me, peer) in arps
    assert con["peer"]["mac"] == lst["local"]["mac"]


# -- an impaired link --------------------------------------------------------------------------

IMPAIR = {"loss": 0.05, "reorder": 0.10, "dup": 0.02}


def _netem_works() -> bool:
    with netns.veth_pair() as p:
        res = p.run(p.ns_a, ["tc", "qdisc", "add", "dev", p.if_a, "root", "netem", "delay",
                             "1ms", "reorder", "25%"])
        return res.returncode == 0


@pytest.fixture(scope="module")
def impaired() -> Iterator[tuple[netns.VethPair, Relayed | None]]:
    """A link with loss 5%, reordering and 2% duplication on both directions: tc netem
    when the kernel has it, else the emulator's relay (this kernel may lack sch_netem)."""
    if shutil.which("tc") and _netem_works():
        with netns.veth_pair(mtu=9000) as p:
            for ns, dev in ((p.ns_a, p.if_a), (p.ns_b, p.if_b)):
                res = p.run(ns, ["tc", "qdisc", "add", "dev", dev, "root", "netem", "delay",
                                 "1ms", "reorder", "90%", "loss", "5%", "duplicate", "2%"])
                assert res.returncode == 0, res.stderr
            yield p, None
        return
    r = Relayed(9000, ["--loss", str(IMPAIR["loss"]), "--reorder", str(IMPAIR["reorder"]),
                       "--dup", str(IMPAIR["dup"]), "--jitter", "1ms", "--seed", "7"])
    try:
        yield r.pair, r
    finally:
        r.close()


@pytest.mark.parametrize("transport", ["raw", "udp"])
def test_rc_exactly_once_on_impaired_link(impaired: tuple[netns.VethPair, Relayed | None],
                                          tmp_path: Path, transport: str) -> None:
    p, relay = impaired
    before = relay.stats if relay else None
    assert before is None
    # ACK timeout 2^13 x 4.096 us = 34 ms: a loaded machine stalls a process for several
    # ms at times, and seven timeouts in a row at 4 ms (--timeout 10) exhausted retry_cnt
    lst, con = emulate(p, transport, ["--op", "mixed", "--size", "6000", "--count", "40",
                                      "--qps", "2", "--mtu", "1024", "--depth", "8",
                                      "--timeout", "13", "--seed", "5"], tmp_path, timeout=55)
    why = f"\n{brief(con)}\n{brief(lst)}"
    assert con["completed"] == {"IBV_WC_SUCCESS": 80}, why
    assert con["data_verified"] and lst["data_verified"], why
    assert lst["messages"] == 80, why  # every message executed once, however often sent
    assert con["retransmitted"] > 0, why
    assert con["naks"] or con["timeouts"], "the losses had to be noticed" + why
    check_pcap(tmp_path / "connector.pcap")
    check_pcap(tmp_path / "listener.pcap")


def test_relay_did_impair(impaired: tuple[netns.VethPair, Relayed | None]) -> None:
    """Guard the test above: the wire really lost, reordered and duplicated frames."""
    _, relay = impaired
    if relay is None:
        pytest.skip("tc netem did the impairing")
    stats = relay.stop_relay()
    dirs = [v for k, v in stats.items() if "->" in k]
    assert sum(d["lost"] for d in dirs) > 0
    assert sum(d["reordered"] for d in dirs) > 0
    assert sum(d["duplicated"] for d in dirs) > 0


# -- selective repeat across a real link -------------------------------------------------------

LOSSY = ["--loss", "0.02", "--seed", "11"]  # the relay: 2% of RoCE frames lost each way
RECOVERY_RUN = ["--op", "mixed", "--size", "16000", "--count", "40", "--mtu", "1024",
                "--depth", "8", "--timeout", "13", "--seed", "5"]


def _lossy_run(tmp: Path, recovery: list[str]) -> tuple[dict, dict, dict]:
    """One run through a fresh relay (so each recovery mode meets the same seeded fault
    stream): (listener summary, connector summary, the relay's fault counts)."""
    r = Relayed(9000, LOSSY)
    try:
        lst, con = emulate(r.pair, "raw", RECOVERY_RUN, tmp, timeout=55,
                           connector_args=recovery)
        return lst, con, r.stop_relay()
    finally:
        r.close()


def test_selective_repeat_across_a_lossy_link(tmp_path: Path) -> None:
    """--recovery sr on the connector alone: the listener follows its hello, every message
    arrives byte-exact, both summaries say sr, and it resends fewer packets than
    go-back-N on the same lossy link (a lost packet of a 16-packet WRITE costs go-back-N
    the rest of the window)."""
    runs = {}
    for mode in ("gbn", "sr"):
        d = tmp_path / mode
        d.mkdir()
        lst, con, faults = _lossy_run(d, ["--recovery", mode])
        why = f"\n{mode}: {brief(con)}\n{brief(lst)}"
        assert sum(v["lost"] for k, v in faults.items() if "->" in k) > 0, faults
        assert con["completed"] == {"IBV_WC_SUCCESS": 40}, why
        assert con["data_verified"] and lst["data_verified"], why
        assert lst["messages"] == 40, why
        assert con["scenario"]["recovery"] == lst["scenario"]["recovery"] == mode, why
        assert con["retransmitted"] > 0, why
        runs[mode] = con
    sr, gbn = runs["sr"], runs["gbn"]
    assert sr["selective_retransmitted"] > 0 and sr["selective_naks"] > 0, brief(sr)
    assert gbn["selective_retransmitted"] == 0
    assert sr["retransmitted"] < gbn["retransmitted"], (sr["retransmitted"],
                                                        gbn["retransmitted"])
    check_pcap(tmp_path / "sr" / "connector.pcap")


def test_simulated_options_refused_on_a_real_link(pair: netns.VethPair) -> None:
    """Options only the simulated fabric honours are refused by name, not ignored."""
    for extra, named in ((["--cc", "dcqcn"], "--cc"), (["--loss", "0.1"], "--loss"),
                         (["--rate", "25"], "--rate"), (["--lb", "spray"], "--lb"),
                         (["--topology", "incast:2"], "--topology")):
        res = pair.run(pair.ns_a, pair.roce("emulate", "--connect", pair.addr_b, "-i",
                                            pair.if_a, "--oob-timeout", "1", *extra))
        assert res.returncode == 1, res.stderr
        assert f"{named} is for the simulated fabric" in res.stderr, res.stderr


# -- failures are clear ------------------------------------------------------------------------


def test_connector_without_listener_fails_clearly(pair: netns.VethPair) -> None:
    res = pair.run(pair.ns_a, pair.roce("emulate", "--connect", pair.addr_b, "-i", pair.if_a,
                                        "--port", "18999", "--oob-timeout", "1"), timeout=30)
    assert res.returncode == 2
    assert "cannot connect to" in res.stderr and "18999" in res.stderr


def test_bad_interface_fails_clearly(pair: netns.VethPair) -> None:
    lst = pair.popen(pair.ns_b, pair.roce("emulate", "--listen", "-i", pair.if_b,
                                          "--oob-timeout", "10"),
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    res = pair.run(pair.ns_a, pair.roce("emulate", "--connect", pair.addr_b, "-i", "nosuch0",
                                        "--oob-timeout", "10"), timeout=30)
    assert res.returncode == 2
    assert "no such interface 'nosuch0'" in res.stderr
    _, err = lst.communicate(timeout=20)
    assert lst.returncode == 2
    assert "nosuch0" in err  # the connector told the listener why it gave up


@pytest.mark.parametrize("sig", [2, 15, 1], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stopped_listener_says_so_and_leaves_no_pcap(pair: netns.VethPair, tmp_path: Path,
                                                       sig: int) -> None:
    err, pcap = tmp_path / "listener.err", tmp_path / "listener.pcap"
    lst = pair.popen(pair.ns_b, pair.roce("emulate", "--listen", "--transport", "udp",
                                          "--oob-timeout", "60", "-w", str(pcap)),
                     stdout=subprocess.DEVNULL, stderr=err.open("w"))
    netns.wait_for_text(err, "listening", lst, timeout=30)
    lst.send_signal(sig)
    assert lst.wait(10) == 130
    name = {2: "SIGINT", 15: "SIGTERM", 1: "SIGHUP"}[sig]
    last = err.read_text().strip().splitlines()[-1]
    assert last == f"roce emulate: interrupted ({name}); {pcap} removed"
    assert list(tmp_path.iterdir()) == [err]  # no pcap, no temporary file
