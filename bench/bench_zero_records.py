"""Zero-length pcap records against ordinary ones: the CPU time of `roce stats` and `roce
decode` on a gzip capture of 400,000 zero-length records (16 bytes each, about a megabyte of
gzip) against a capture of as many 64-byte RC WRITE Middle frames, start-up subtracted.  Each
zero-length record is a malformed frame, counted and reported; the target is that one costs
no more than 2.5 ordinary frames (it once cost 4 to 6).  Children's CPU time (``wait4``),
medians of the rounds.

    python bench/bench_zero_records.py [--rounds 5] [--records 400000]
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
TARGET = 2.5


def zero_records(path: Path, n: int) -> None:
    with gzip.open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        f.write(bytes(16) * n)


def ordinary(path: Path, n: int) -> None:
    import roce
    from roce.pcapio import PcapWriter

    frames = [roce.craft("RC_RDMA_WRITE_MIDDLE", bytes(64), dqpn=0x11, psn=i).to_bytes()
              for i in range(1024)]
    with gzip.open(path, "wb", compresslevel=1) as f:
        w = PcapWriter(f, nanosecond=False)
        for i in range(n):
            w.write(frames[i & 1023], ts_ns=i * 1000)
        w.close()


def cpu_seconds(*argv: str) -> float:
    """User + system CPU time of ``roce ARGV``, output discarded; it must succeed."""
    env = dict(os.environ, PYTHONPATH=str(HERE))
    proc = subprocess.Popen([sys.executable, "-m", "roce", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"roce {' '.join(argv)} failed: {proc.stderr.read().decode()}")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--records", type=int, default=400_000)
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    with tempfile.TemporaryDirectory() as d:
        zero, plain = Path(d) / "zero.pcap.gz", Path(d) / "ordinary.pcap.gz"
        zero_records(zero, args.records)
        ordinary(plain, args.records)
        print("| command | zero-length records, CPU s | ordinary, CPU s | ratio | target |")
        print("|---|---:|---:|---:|---:|")
        for command in ("stats", "decode"):
            zs, os_ = [], []
            for _ in range(args.rounds):
                base = cpu_seconds("decode", "-c", "1", str(plain))  # start-up
                zs.append(cpu_seconds(command, str(zero)) - base)
                os_.append(cpu_seconds(command, str(plain)) - base)
            z, o = statistics.median(zs), statistics.median(os_)
            print(f"| roce {command} | {z:.3f} | {o:.3f} | {z / o:.2f} | <= {TARGET} |")


if __name__ == "__main__":
    main()
