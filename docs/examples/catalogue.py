"""The samples README.md and docs/guide/ show: what each runs, and so what each block says.

An ``Example`` is a list of steps run in one fresh directory (a copy of ``pcaps/`` in it):

- ``Step("roce ...")`` a command line, shown as ``$ roce ...`` with what it prints;
  ``rc=`` the exit status it must end with (0 unless said); ``host="A"``/``"B"`` runs it in
  that network namespace (root examples: veth0 is in A, veth1 in B); ``ready="text"`` starts
  it in the background and goes on once it printed ``text`` (a listener, a capture), its
  output shown in its place when it ended; ``label`` a comment line above it.
- ``Py(code)`` Python run with ``python -c``, shown as a code block and what it printed.

``measured`` names the kinds of wall-clock and CPU-time figures the output holds
(make_examples.MEASURED); ``files`` are written into the directory first (a name ending in
``/`` makes a directory), and shown above the commands with ``show_files=True``; ``cost``
orders the runs (slowest first).  Keep samples small: the test runs all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Step:
    cmd: str
    rc: int = 0
    host: str | None = None
    ready: str | None = None
    label: str | None = None


@dataclass(frozen=True)
class Py:
    code: str


@dataclass(frozen=True)
class Example:
    name: str
    steps: tuple[Step | Py, ...]
    measured: tuple[str, ...] = ()
    root: bool = False
    files: dict[str, str] = field(default_factory=dict)
    show_files: bool = False
    cost: float = 1.0


EXAMPLES: dict[str, Example] = {}


def example(name: str, *steps: Step | Py | str, **kw: object) -> None:
    assert name not in EXAMPLES, name
    EXAMPLES[name] = Example(name, tuple(Step(s) if isinstance(s, str) else s for s in steps),
                             **kw)  # type: ignore[arg-type]


# the main job of README's first command: 20 RDMA WRITEs of 1 MiB over a link with 1% loss
MAIN_RUN = "roce emulate --op write --size 1M --count 20 --loss 0.01 --seed 7"

# ---------------------------------------------------------------------------------------------
# README.md: the quickstart

example("quick-craft",
        "roce craft rc-write-only --dqpn 0x11 --psn 100 --va 0x1000 --rkey 0x22 "
        "--payload-size 1024 -w write.pcap",
        "roce decode -T fields -E header=y -e bth.opcode -e bth.destqp -e bth.psn -e reth.va "
        "-e icrc -e icrc.valid write.pcap")

example("quick-send",
        Step("roce sniff -i veth1 -c 3", host="B", ready="listening on",
             label="host B: capture on the far end of the link first"),
        Step("roce send rc-send-only --dqpn 0x11 --psn 5 --count 3 --pps 1000 -i veth0",
             host="A", label="host A: send three RC SENDs"),
        root=True, measured=("send-rate", "live-time"), cost=3)

example("quick-decode",
        "roce decode pcaps/example.pcap -Y 'nak or cnp'",
        "roce stats pcaps/example.pcap | tail -n 9")

example("quick-emulate",
        "roce emulate --topology incast:8 --size 1M --count 1 --cc dcqcn --seed 1",
        measured=("cpu",))

example("quick-fuzz", "roce fuzz decoder --count 2000 --seed 1", measured=("fuzz-rate",),
        cost=2)

# ---------------------------------------------------------------------------------------------
# docs/guide/craft.md

example("craft-write",
        "roce craft rc-write-only --dqpn 0x11 --psn 100 --va 0x1000 --rkey 0x22 "
        "--payload-size 1024 --src 10.0.0.1 --dst 10.0.0.2 -w out.pcap")

example("craft-sequence",
        "roce craft rc-send-only --dqpn 0x11 --psn 0xfffffe --count 3 --payload-size 64")

example("craft-variants",
        "roce craft rc-send-only --dqpn 0x11 --vlan 100 --ecn ce --bad-icrc",
        "roce craft rc-write-only --ipv6 --src fd00::1 --dst fd00::2 --dqpn 0x11 --payload-size 8",
        "roce craft rc-acknowledge --dqpn 0x11 --psn 3 --field aeth.syndrome=0x60 --msn 4",
        "roce craft ud-send-only --dqpn 0x11 --qkey 0x1234 --sqpn 0x22 --payload-size 32")

example("craft-field-refused",
        Step("roce craft rc-send-only --field eth.src=true", rc=1),
        Step("roce craft rc-send-only --field vlan.id=3", rc=1))

example("craft-macc",
        "roce craft pfc --prio 3 --quanta 65535",
        "roce craft pfc --prio 3=100 --prio 5=0",
        "roce craft pause --quanta 1000 --smac 02:00:00:00:00:09")

example("craft-ib-tunnel",
        "roce craft rc-send-only --link ib --dlid 2 --slid 1 --dqpn 0x11 --payload-size 16",
        "roce craft cnp --link ib --dqpn 0x11 --becn",
        "roce craft rc-send-only --encap erspan2 --span-id 7 --dqpn 0x11")

example("craft-uet",
        "roce craft uet-send --pds-psn 5 --message-id 3 --job-id 9 --payload-size 64",
        "roce craft uet-fetching-atomic --amo-opcode cswap --compare-value 1 --swap-value 2",
        "roce craft uet-nack --nack-code trimmed --nack-psn 6 --uet-native",
        "roce craft uet-ctrl --ctl-type probe --pds-psn 7 --probe-opaque 0x99",
        "roce craft uet-rudi-resp --ses response-data --return-code too-long --payload-size 8",
        "roce craft uet-write --payload-size 8 --bad-ses-length --bad-reserved")

example("opcodes-ud", "roce opcodes --transport UD")

# ---------------------------------------------------------------------------------------------
# docs/guide/wire.md

example("wire-sniff-send",
        Step("roce sniff -i veth1 -c 4 -Y 'bth.psn >= 101' -w seen.pcap", host="B",
             ready="listening on", label="host B"),
        Step("roce send rc-write-only --dqpn 0x11 --psn 100 --va 0x1000 --rkey 0x22 "
             "--payload-size 512 --count 5 --pps 1000 -i veth0 -w sent.pcap",
             host="A", label="host A"),
        Step("roce decode -T fields -e frame.number -e bth.psn seen.pcap",
             label="host B, afterwards: only what the filter let through was saved"),
        root=True, measured=("send-rate", "live-time"), cost=3)

example("wire-replay",
        "roce replay pcaps/example.pcap --rewrite-dqpn 0x12 --psn-offset 1000 -w replayed.pcap",
        "roce decode replayed.pcap -c 4")

# ---------------------------------------------------------------------------------------------
# docs/guide/decode.md

example("decode-example", "roce decode pcaps/example.pcap")

example("decode-verbose",
        "roce decode -V -Y 'frame.number == 20' pcaps/example.pcap | tail -n 8")

example("decode-fields",
        "roce decode -T fields -E header=y -e frame.number -e bth.opcode -e bth.destqp "
        "-e bth.psn -e aeth.syndrome -e aeth.msn -Y 'ack or nak' pcaps/example.pcap")

example("decode-filters",
        "roce decode -Y 'bth.psn >= 106 and not ack' pcaps/example.pcap",
        "roce decode -Y 'bth.opcode == \"RC Send Only\" and ecn_ce' pcaps/example.pcap",
        Step("roce decode -Y 'bth.psn == 10.0.0.1' pcaps/example.pcap", rc=1))

example("decode-macros", "roce decode -G macros | head -n 12")

example("decode-pfc",
        "roce craft pfc --prio 3=100 --prio 5=0 -w pfc.pcap",
        "roce decode -T fields -E header=y -e macc.opcode -e macc.cbfc.enbv "
        "-e macc.cbfc.pause_time.c3 -e macc.cbfc.pause_time.c5 pfc.pcap",
        "roce decode -V pfc.pcap | head -n 26 | tail -n 12")

example("decode-ib",
        "roce craft rc-send-only --link ib --dlid 2 --slid 1 --dqpn 0x11 --payload-size 16 "
        "-w ib.pcap > /dev/null",
        "roce decode -V ib.pcap | tail -n 3",
        "roce decode -T fields -E header=y -e lrh.slid -e lrh.dlid -e bth.destqp -e icrc.valid "
        "-e vcrc.valid ib.pcap")

example("decode-tunnel",
        "roce craft rc-send-only --encap erspan2 --span-id 7 --dqpn 0x11 -w mirror.pcap "
        "> /dev/null",
        "roce decode -T fields -E header=y -e outer.ip.src -e outer.ip.dst -e erspan.spanid "
        "-e ip.src -e ip.dst -e bth.destqp mirror.pcap")

example("decode-int",
        "roce emulate --topology dumbbell:1 --size 8K --count 1 --cc hpcc -w hpcc.pcap "
        "> /dev/null",
        "roce decode -T fields -E header=y -e frame.len -e int.hops -e int.rhc "
        "-e int.hop.switch_id -e int.hop.qlen -e int.hop.egress_ts -e bth.opcode -e bth.psn "
        "-e icrc.valid hpcc.pcap",
        "roce decode -V -c 1 hpcc.pcap | head -n 67 | tail -n 25")

example("decode-uet",
        "roce craft uet-write --pds-psn 1005 --spdcid 0x12 --dpdcid 0x34 --message-id 7 "
        "--buffer-offset 4096 --payload-size 4096 --som -w write.pcap > /dev/null",
        "roce decode write.pcap",
        "roce craft uet-ack-cc --spdcid 0x34 --dpdcid 0x12 --cack-psn 1005 --sack-psn 1007 "
        "--sack-bitmap 0b101 --ecn-marked -w ack.pcap > /dev/null",
        "roce decode -V ack.pcap | tail -n 25",
        "roce decode -T fields -E header=y -e uet.pds.cack_psn -e uet.pds.ack.sack_psn "
        "-e uet.pds.ack.sack_bitmap -e uet.pds.flags.m ack.pcap")

example("decode-uet-expert",
        "roce craft uet-ack-cc --cack-psn 1005 --bad-sack -w bad.pcap > /dev/null",
        "roce decode -Y uet.expert bad.pcap",
        "roce decode -V bad.pcap | tail -n 2")

example("decode-uet-ref-prov",
        "roce craft uet-write --syn --pds-psn 100 --start-psn 96 --use-reserved-pdc "
        "--uet-layout ref-prov --uet-port 49150 -w rp.pcap > /dev/null",
        "roce decode -d udp.port==49150,uet -T fields -E header=y -e uet.pds.start_psn "
        "-e uet.pds.pdc_mode_use_rsv -e uet.pds.pdc_mode_rsv rp.pcap",
        "roce decode -d udp.port==49150,uet --uet-layout ref-prov -T fields -E header=y "
        "-e uet.pds.start_psn -e uet.pds.pdc_mode_use_rsv -e uet.pds.pdc_mode_rsv rp.pcap")

example("decode-selective",
        f"{MAIN_RUN} --recovery sr -w sr.pcap > /dev/null",
        "roce decode -Y aeth.selective -c 2 sr.pcap",
        "roce decode -V -Y aeth.selective -c 1 sr.pcap | head -n 56 | tail -n 6", cost=1.5)

# ---------------------------------------------------------------------------------------------
# docs/guide/stats.md

example("stats-example", "roce stats pcaps/example.pcap")

example("stats-run",
        f"{MAIN_RUN} -w run.pcap > /dev/null",
        "roce stats run.pcap | tail -n 28")

example("stats-uet",
        Py('''\
from roce.families.uet import build
from roce.pcapio import PcapWriter

def packet(values, size=0, src="10.0.0.1", dst="10.0.0.2"):
    v = build.with_defaults(values, payload=size)
    return build.frame(build.uet_bytes(v, payload=bytes(size)), src=src, dst=dst)

def req(psn, syn=False, retx=False):  # a 1 KiB WRITE, PDC 0x12 (initiator) -> 0x34 (target)
    v = {"uet.pds.psn": psn, "uet.pds.spdcid": 0x12, "uet.pds.flags.retx": retx}
    v.update({"uet.pds.flags.syn": True} if syn else {"uet.pds.dpdcid": 0x34})
    return packet(v, 1024)

def ack(kind, **fields):  # from the target
    return packet({"uet.pds.type": kind, "uet.pds.spdcid": 0x34, "uet.pds.dpdcid": 0x12,
                   **fields}, src="10.0.0.2", dst="10.0.0.1")

frames = [req(1000, syn=True), req(1001), req(1003),  # 1002 lost
          ack(8, **{"uet.pds.cack_psn": 1001, "uet.pds.ack.sack_bitmap": 0b10,
                    "uet.pds.flags.m": True, "uet.pds.ack.cc_state.service_time": 12}),
          ack(10, **{"uet.pds.nack.code": 1, "uet.pds.nack.psn": 1004}),  # 1004 trimmed
          req(1002, retx=True), req(1004, retx=True),
          ack(7, **{"uet.pds.cack_psn": 1004})]
with PcapWriter("pdc.pcap") as w:
    for i, frame in enumerate(frames):
        w.write(frame, ts_ns=i * 1000)  # 1 us apart
'''),
        "roce stats pdc.pcap | tail -n 12")

example("stats-pfc",
        Step("roce emulate --topology incast:2 --size 256K --count 1 --pfc-storm r --seed 1 "
             "-w storm.pcap > /dev/null", rc=4),
        "roce stats --pause-storm 1ms storm.pcap | tail -n 12")

example("stats-cc",
        "roce emulate --topology incast:2 --size 1M --count 1 --cc dcqcn --seed 1 -w cc.pcap "
        "> /dev/null",
        "roce stats --cnp-interval 20us --timeline 20us cc.pcap | head -n 115 | tail -n 30")

# ---------------------------------------------------------------------------------------------
# docs/guide/columnar.md

example("columnar-duckdb",
        "roce decode -T parquet -w example.parquet pcaps/example.pcap",
        Py('import duckdb\n\n'
           'duckdb.sql("""SELECT "frame.number", "bth.psn", "aeth.syndrome", "aeth.msn"\n'
           '              FROM \'example.parquet\' WHERE "aeth.syndrome" IS NOT NULL""").show()'))

example("columnar-many",
        f"{MAIN_RUN} -w caps/write.pcap > /dev/null",
        "roce emulate --op read --size 256K --count 8 --seed 3 -w caps/read.pcap > /dev/null",
        "roce stats caps/ -j 2 | tail -n 38", files={"caps/": ""}, cost=1.5)

# ---------------------------------------------------------------------------------------------
# docs/guide/emulate.md

example("emulate-main", f"{MAIN_RUN} -w run.pcap", measured=("cpu",))

example("emulate-lossy",
        "roce emulate --op write --size 1M --count 100 --mtu 4096 --loss 0.01 --reorder 0.01 "
        "--dup 0.001 --corrupt 0.001 --seed 7 -w run.pcap",
        measured=("cpu",), cost=6)

example("emulate-sr", f"{MAIN_RUN} --recovery sr", measured=("cpu",), cost=1.5)

example("emulate-uc",
        Step("roce emulate --qp-type uc --op send --size 64K --count 50 --loss 0.01 --seed 7",
             rc=4),
        measured=("cpu",))

example("emulate-incast",
        "roce emulate --topology incast:16 --size 1M --count 1 --buffer 2M --tap sw:0 "
        "--trace trace.csv -w incast.pcap",
        "roce decode incast.pcap -Y pfc -c 2",
        measured=("cpu",), cost=2)

example("emulate-p2p-network",
        "roce emulate --size 1M --count 8 --delay 20us --cc timely --tap A:0 "
        "--trace trace.csv | tail -n 4",
        "roce decode tap-A-0.pcap -Y 'frame.number <= 2 || bth.opcode == 0x11' -c 3",
        measured=("cpu",), cost=1.5)

example("emulate-dcqcn",
        "roce emulate --topology incast:16 --size 1M --count 1 --cc dcqcn | tail -n 4",
        "roce emulate --topology dumbbell:2 --size 256K --count 2 --cc dcqcn --cc-profile paper "
        "--cc-param rp_ai_rate=40 --ecn-codepoint ect1 | tail -n 4",
        measured=("cpu",), cost=2)

example("emulate-uet",
        "roce emulate --protocol uet --topology incast:3 --pfc off --buffer 160K --size 128K "
        "--count 2 --trim -w uet.pcap",
        "roce decode uet.pcap -c 3",
        "roce stats uet.pcap | tail -n 11",
        measured=("cpu",), cost=2)

example("emulate-topology-file",
        "roce emulate --topology-file net.toml --size 64K --count 4 --seed 1",
        measured=("cpu",), show_files=True,
        files={"net.toml": """\
[hosts.h1]
[hosts.h2]

[switches.sw]
buffer = "2M"

[[links]]
a = "h1"
b = "sw"
rate = "100G"
delay = "1us"
faults = { drop_nth = [5] }     # h1 -> sw drops its 5th frame; reverse_faults for sw -> h1

[[links]]
a = "h2"
b = "sw"
rate = "25G"

[[traffic]]
src = "h1"
dst = "h2"
"""})

# ---------------------------------------------------------------------------------------------
# docs/guide/real-links.md

example("real-udp",
        Step("roce emulate --listen --transport udp --ip 127.0.0.2", ready="listening on",
             label="one process (or host)"),
        Step("roce emulate --connect 127.0.0.2 --transport udp --ip 127.0.0.1 --op write "
             "--size 64K --count 4 --seed 1", label="another"),
        measured=("wall", "cpu"), cost=2)

example("real-target",
        Step("roce target -i veth1 --ip 10.0.0.2 --qpn 0x11 "
             "--rkey 0x1000 --va 0x10000 --size 64K --count 3", host="B", ready="-- ready",
             label="host B: the target"),
        Step("roce send rc-write-only --dqpn 0x11 --psn 0 --va 0x10000 --rkey 0x1000 "
             "--payload-size 64 -i veth0", host="A", label="host A: a WRITE inside the MR,"),
        Step("roce send rc-rdma-read-request --dqpn 0x11 --psn 1 --va 0x10000 --rkey 0x1000 "
             "--dmalen 16 -i veth0", host="A", label="a READ of its first 16 bytes,"),
        Step("roce send rc-write-only --dqpn 0x11 --psn 2 --va 0x0 --rkey 0x1000 "
             "--payload-size 64 -i veth0", host="A", label="and a WRITE outside it"),
        root=True, measured=("send-rate", "live-time"), cost=3)

# ---------------------------------------------------------------------------------------------
# docs/guide/sweep.md

example("sweep-small",
        "roce sweep --grid loss=0,0.01 recovery=gbn,sr --size 256K --count 4 --seed 7 "
        "-o results.csv",
        "roce sweep --grid loss=0,0.01 recovery=gbn,sr --size 256K --count 4 --seed 7 "
        "-o results.csv",
        Py('import csv\n\n'
           'with open("results.csv") as f:\n'
           '    for row in csv.DictReader(f):\n'
           '        print(row["loss"], row["recovery"], row["seed"], row["goodput_gbps"],\n'
           '              row["retransmitted"], row["data_verified"])'),
        cost=2)

# ---------------------------------------------------------------------------------------------
# docs/guide/plot.md

example("plot-run",
        "roce plot pcaps/example.pcap -o example.png --interval 10us",
        "roce emulate --topology incast:2 --size 64K --count 2 --trace trace.csv > /dev/null",
        "roce plot --trace trace.csv -o fabric.svg", cost=2.5)

# ---------------------------------------------------------------------------------------------
# docs/guide/fuzz.md

example("fuzz-responder", "roce fuzz responder --count 300 --seed 1 --corpus bugs/",
        measured=("fuzz-rate",), cost=1.5)

# ---------------------------------------------------------------------------------------------
# docs/guide/python-api.md

example("py-craft-parse", Py('''\
import roce

# opcode by number or any name: 0x0A, "RC_RDMA_WRITE_ONLY", "rc-write-only", "RC RDMA Write Only"
pkt = roce.craft("RC_RDMA_WRITE_ONLY", b"hello", dqpn=0x11, psn=100, va=0x1000, rkey=0x22,
                 dmalen=5, src="10.0.0.1", dst="10.0.0.2")
frame = pkt.to_bytes()                  # the Ethernet frame: lengths, checksum, pad, ICRC filled

p = roce.parse(frame)                   # Ether/[802.1Q]/IPv4|IPv6/UDP 4791/BTH/ETHs/...
print(p.opcode.short_name)
print(p.fields()["reth.va"], p.fields()["bth.psn"], hex(p.fields()["icrc"]))
print(p.icrc_valid, p.to_bytes() == frame)

p.headers["bth"]["psn"] = 7             # edit, then rebuild: the ICRC stays as parsed...
print(roce.parse(p.to_bytes()).icrc_valid)
p.icrc = None                           # ...unless set to None: recomputed on to_bytes()
print(roce.parse(p.to_bytes()).icrc_valid)

try:
    roce.parse(frame[:60])              # cut inside the RETH
except roce.DecodeError as e:
    print(e.header, e.offset, e)'''))

example("py-scapy", Py('''\
from scapy.all import IP, UDP, Ether, Raw

from roce.wire.layers import BTH, RETH

pkt = (Ether() / IP(dst="10.0.0.2") / UDP(sport=0xC000, dport=4791)  # sport: Scapy's 53 is DNS
       / BTH(opcode="RC_RDMA_WRITE_ONLY", destqp=0x11) / RETH(va=0x1000, r_key=0x22, dmalen=4)
       / Raw(b"data"))
back = Ether(bytes(pkt))                # the ICRC comes from roce's fast path
print(back[BTH].icrc_valid)
print(back[BTH].summary())'''))

example("py-verbs", Py('''\
from roce.emu import CQ, MR, PD, QP, Fabric, QPInitAttr, SendWR, connect
from roce.emu.core.constants import (IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ,
                                IBV_ACCESS_REMOTE_WRITE, IBV_QPT_RC, IBV_WR_RDMA_READ,
                                IBV_WR_RDMA_WRITE)

fab = Fabric(seed=7)                                  # virtual clock, seeded faults
a, b = fab.add_host("a", "10.0.0.1"), fab.add_host("b", "10.0.0.2")
fab.connect(a, b, rate_gbps=100, delay_ns=1000, loss=0.01)
access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ
pd_a, pd_b = PD(a), PD(b)
local, remote = MR(pd_a, 1 << 20, access), MR(pd_b, 1 << 20, access)
local.write(b"hello, remote memory")
cq_a, cq_b = CQ(a), CQ(b)
qa = QP(pd_a, QPInitAttr(qp_type=IBV_QPT_RC, send_cq=cq_a, recv_cq=cq_a))
qb = QP(pd_b, QPInitAttr(qp_type=IBV_QPT_RC, send_cq=cq_b, recv_cq=cq_b))
connect(qa, qb)                                       # INIT -> RTR -> RTS on both sides
qa.post_send(SendWR(wr_id=1, opcode=IBV_WR_RDMA_WRITE, sg_list=[local.sge(0, 20)],
                    remote_addr=remote.addr, rkey=remote.rkey))
qa.post_send(SendWR(wr_id=2, opcode=IBV_WR_RDMA_READ, sg_list=[local.sge(4096, 20)],
                    remote_addr=remote.addr, rkey=remote.rkey))
fab.run_until_idle()
for wc in cq_a.poll(2):                               # two completions
    print(wc)
print(remote.read(20), local.read(20, offset=4096))'''))

# ---------------------------------------------------------------------------------------------
# docs/guide/reference.md

example("reference-errors",
        Step("roce decode -Y 'bth.psn == 10.0.0.1' pcaps/example.pcap", rc=1),
        Step("roce craft rc-send-only --dqpn 0x1000000", rc=1),
        Step("roce emulate --topology incast:2 --pfc-storm x", rc=1),
        Step("roce decode missing.pcap", rc=2))
