"""UET benchmark: `roce decode` and `roce stats` per packet on Ultra Ethernet Transport
against RoCE, on captures of the same packets.

The RoCE capture is the decoding benchmark's (bench_decode.make_capture: the emulator's mixed
WRITE/READ/SEND/ATOMIC, MTU 1024, 0.1% loss).  The UET capture carries the same traffic frame
for frame, as UET would: each RoCE request becomes a RUD request with a standard SES header of
the matching operation and the same payload (its first packet with SOM, its last with EOM),
each ACK an ACK_CC with a SACK bitmap and NSCC state, each NAK a NACK (trimmed), each CNP a
control probe; PSNs, PDC IDs from the QPs.  Both run through the same command lines in one
run, rounds interleaved, process start-up included; figures are medians, of the wall-clock
time and of the CPU time (user + system) per packet.

    python bench/bench_uet.py [--rounds 5] [--packets 100000] [--markdown]

Target (issue 25): UET within 1.5x of RoCE's cost per packet.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_decode import make_capture  # noqa: E402

from roce.families.uet import build  # noqa: E402
from roce.families.uet import codes as t  # noqa: E402
from roce.locate import OK, walk  # noqa: E402
from roce.opcodes import OPCODES, Operation, Position  # noqa: E402
from roce.packet import parse  # noqa: E402
from roce.pcapio import PcapWriter, open_capture  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPATH"] = str(REPO)
_OPS = {Operation.RDMA_WRITE: t.WRITE, Operation.SEND: t.SEND, Operation.RDMA_READ: t.READ,
        Operation.ATOMIC: t.FETCHING_ATOMIC, Operation.READ_RESPONSE: None,
        Operation.ATOMIC_WRITE: t.WRITE}


def uet_frame(frame: bytes) -> bytes:
    """The UET packet that carries what this RoCE frame carries."""
    w = walk(frame)
    if w.status != OK:
        return frame
    p = parse(frame)
    op = OPCODES[w.opcode]
    bth = p.headers["bth"]
    psn, qp = bth["psn"], bth["destqp"]
    payload = frame[w.payload_off:w.pad_off]
    v: dict = {"uet.pds.psn": psn, "uet.pds.spdcid": qp & 0xFFFF,
               "uet.pds.dpdcid": (qp + 1) & 0xFFFF}
    if op.operation is Operation.ACK:
        syn = p.headers["aeth"]["syndrome"]
        if syn >> 5 == 3:  # NAK
            v = {"uet.pds.type": t.NACK, "uet.pds.nack.code": 1, "uet.pds.nack.psn": psn,
                 "uet.pds.spdcid": qp & 0xFFFF, "uet.pds.dpdcid": (qp + 1) & 0xFFFF}
        else:
            v = {"uet.pds.type": t.ACK_CC, "uet.pds.cack_psn": psn,
                 "uet.pds.spdcid": qp & 0xFFFF, "uet.pds.dpdcid": (qp + 1) & 0xFFFF,
                 "uet.pds.ack.sack_psn": psn + 1, "uet.pds.ack.sack_bitmap": 0,
                 "uet.pds.ack.cc_state.rcvd_bytes": 1024}
    elif op.operation is Operation.CNP:
        v = {"uet.pds.type": t.CTRL, "uet.pds.ctl_type": 6, "uet.pds.psn": psn}
    elif op.operation in (Operation.READ_RESPONSE, Operation.ATOMIC_ACK):
        v.update({"uet.pds.type": t.ACK, "uet.pds.cack_psn": psn, "uet.pds.nh": t.NH_RSP_DATA,
                  "uet.ses.rsp.payload_length": len(payload)})
    else:
        opcode = _OPS.get(op.operation, t.SEND)
        v.update({"uet.ses.std.opcode": opcode if opcode is not None else t.WRITE,
                  "uet.ses.std.som": op.position in (Position.FIRST, Position.ONLY),
                  "uet.ses.std.eom": op.position in (Position.LAST, Position.ONLY),
                  "uet.ses.std.message_id": qp & 0xFFFF})
        if "reth" in p.headers:
            v["uet.ses.std.buffer_offset"] = p.headers["reth"]["va"]
        if opcode in t.ATOMIC_OPCODES:
            payload = b""
    v = build.with_defaults(v, payload=len(payload))
    return build.frame(build.uet_bytes(v, payload=payload), sport=0xC000 + (qp & 0x3FFF))


def make_uet(src: Path, dst: Path) -> int:
    n = 0
    with PcapWriter(dst) as w:
        for f in open_capture(src):
            w.write(uet_frame(f.data), ts_ns=f.ts_ns)
            n += 1
    return n


def run(cmd: list[str]) -> tuple[float, float]:
    """(wall-clock seconds, CPU seconds: user + system) of one run of ``cmd``.  CPU time is
    the steadier figure on a shared machine: waiting for a core costs wall time only."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   env=ENV, cwd=REPO)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


MODES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("one line", ("decode",)),
    ("-V", ("decode", "-V")),
    ("-T fields", ("decode", "-T", "fields", "-e", "frame.number", "-e", "ip.src", "-e",
                   "udp.srcport", "-e", "frame.len")),
    ("-T json", ("decode", "-T", "json")),
    ("stats", ("stats", "-T", "json")),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--packets", type=int, default=100_000)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--modes", default=",".join(m for m, _ in MODES))
    args = ap.parse_args()
    wanted = args.modes.split(",")
    roce_cmd = [sys.executable, "-m", "roce"]
    with tempfile.TemporaryDirectory() as d:
        rpath, upath = Path(d) / "roce.pcap", Path(d) / "uet.pcap"
        n = make_capture(rpath, args.packets)
        make_uet(rpath, upath)
        sizes = (rpath.stat().st_size, upath.stat().st_size)
        rows = []
        for name, opts in MODES:
            if name not in wanted:
                continue
            times: dict[str, list[tuple[float, float]]] = {"roce": [], "uet": []}
            for path in (rpath, upath):  # warm-up
                run([*roce_cmd, *opts, str(path)])
            for r in range(args.rounds):
                order = (("roce", rpath), ("uet", upath))
                for kind, path in order if r % 2 == 0 else order[::-1]:
                    times[kind].append(run([*roce_cmd, *opts, str(path)]))
            wall = {k: statistics.median(w for w, _ in v) / n * 1e6 for k, v in times.items()}
            cpu = {k: statistics.median(c for _, c in v) / n * 1e6 for k, v in times.items()}
            rows.append((name, wall["roce"], wall["uet"], cpu["roce"], cpu["uet"]))
    print(f"{n} packets each; capture bytes RoCE {sizes[0]:,}, UET {sizes[1]:,}; "
          f"load {os.getloadavg()[0]:.1f}")
    if args.markdown:
        print("| mode | RoCE us/packet | UET us/packet | UET / RoCE | RoCE CPU us | UET CPU us "
              "| UET / RoCE (CPU) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, a, b, ca, cb in rows:
            cmd = "`roce stats -T json`" if name == "stats" else f"`roce decode` {name}"
            print(f"| {cmd} | {a:.2f} | {b:.2f} | {b / a:.2f}x | {ca:.2f} | {cb:.2f} | "
                  f"{cb / ca:.2f}x |")
    else:
        for name, a, b, ca, cb in rows:
            print(f"{name:12s} RoCE {a:7.2f} us/pkt  UET {b:7.2f} us/pkt  ratio {b / a:.2f}  "
                  f"CPU {ca:7.2f} / {cb:7.2f} us/pkt  ratio {cb / ca:.2f}")


if __name__ == "__main__":
    main()
