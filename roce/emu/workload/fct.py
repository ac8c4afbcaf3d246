"""Flow completion times: the ideal FCT of a flow, per-flow rows, and the slowdown table.

A flow's slowdown is its FCT over its ideal FCT, at least 1.  The ideal is the HPCC ns-3
simulator's "standalone FCT" (alibaba-edu/High-Precision-Congestion-Control,
``simulation/scratch/third.cc``): the path's base RTT plus the flow's bytes on the wire at
the line rate, every packet's headers counted.  Here the bytes on the wire are exact:
``wire_bytes`` sums the frames the emulator builds for the message
(``roce.emu.core.frames.FrameBuilder``: Ethernet, IPv4 or IPv6, UDP, BTH, the extended
headers of each packet's opcode, payload, pad and ICRC; what a simulated link serializes),
``path_mtu`` bytes of payload per packet.  The base RTT is HPCC's too (``base_rtt_ns``):
twice the path's propagation delay plus one full frame's serialization at every hop.

The slowdown table is HPCC's ``analysis/fct_analysis.py``: flows sorted by size (ties by
slowdown), cut into bins of ``bin_percent`` percent of the flows (bin ``i`` holds flows
``floor(i*step*n/100)`` up to ``floor((i+1)*step*n/100)``, empty bins left out), and per
bin the largest size and the slowdown at 50, 95 and 99 percent, each the element at index
``floor(count * q)`` of the bin's sorted slowdowns.

Per-flow rows go to CSV or Parquet (``write_rows``, by the file's extension; Parquet needs
pyarrow, ``roce.extras``): ``COLUMNS``, one row per completed flow.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache

from roce.emu.core.frames import FrameBuilder, Path, select
from roce.emu.workload.traffic import Transfer
from roce.errors import InputError, UsageError
from roce.opcodes import Operation, Position, Transport

COLUMNS = ("src", "dst", "size", "start_ns", "fct_ns", "ideal_fct_ns", "slowdown")
OPS = ("write", "send")  # the one-sided and two-sided message a flow can be
QUANTILES = (0.5, 0.95, 0.99)


def headers(op: str = "write", ipv6: bool = False) -> dict[str, int]:
    """Bytes of one packet of an ``op`` message besides its payload and pad, per position
    ("only", "first", "middle", "last"): the frame the emulator builds with no payload."""
    if op not in OPS:
        raise UsageError(f"--op {op}: a flow is one of {', '.join(OPS)}")
    return dict(_headers(op, ipv6))


@cache
def _headers(op: str, ipv6: bool) -> tuple[tuple[str, int], ...]:
    operation = Operation.RDMA_WRITE if op == "write" else Operation.SEND
    addr = ("::1", "::2") if ipv6 else ("10.0.0.1", "10.0.0.2")
    builder = FrameBuilder(Path("02:00:00:00:00:01", "02:00:00:00:00:02", *addr, ipv6=ipv6),
                           0x11)
    return tuple((pos.value, len(builder.build(select(Transport.RC, operation, pos), 0x11, 0)))
                 for pos in Position)


def wire_bytes(size: int, path_mtu: int, op: str = "write", ipv6: bool = False) -> int:
    """Bytes on the wire of one ``size``-byte message: ``ceil(size / path_mtu)`` packets
    (at least one), each with its headers, its payload padded to 4 bytes and the ICRC."""
    if path_mtu <= 0 or size < 0:
        raise ValueError("a message has a positive path MTU and no negative size")
    h = headers(op, ipv6)
    packets = max(1, -(-size // path_mtu))
    if packets == 1:
        return h["only"] + size + (-size & 3)
    last = size - (packets - 1) * path_mtu
    return (h["first"] + h["last"] + (packets - 2) * h["middle"]
            + (packets - 1) * (path_mtu + (-path_mtu & 3)) + last + (-last & 3))


def base_rtt_ns(delays_ns: Sequence[int], rates_gbps: Sequence[float],
                frame_bytes: int) -> int:
    """HPCC's base RTT of a path of links (each with its propagation delay and rate): twice
    the delays, plus one ``frame_bytes`` frame serialized at every hop (store and
    forward)."""
    if len(delays_ns) != len(rates_gbps) or not delays_ns:
        raise ValueError("a path has one rate per link and at least one link")
    return 2 * sum(delays_ns) + sum(math.ceil(frame_bytes * 8 / r) for r in rates_gbps)


def ideal_fct_ns(size: int, rate_gbps: float, rtt_ns: int, path_mtu: int,
                 op: str = "write", ipv6: bool = False) -> int:
    """The flow's FCT alone on the network: ``rtt_ns`` plus its bytes on the wire at
    ``rate_gbps`` (the slowest link of its path)."""
    return rtt_ns + math.ceil(wire_bytes(size, path_mtu, op, ipv6) * 8 / rate_gbps)


def slowdown(fct_ns: int, ideal_ns: int) -> float:
    """FCT over ideal FCT, at least 1 (HPCC: a flow cannot beat its ideal; rounding can)."""
    return max(1.0, fct_ns / ideal_ns)


@dataclass(frozen=True)
class FlowRow:
    """One completed flow: its hosts, size, start and FCT, and its ideal FCT."""

    src: str
    dst: str
    size: int
    start_ns: int
    fct_ns: int
    ideal_fct_ns: int

    @property
    def slowdown(self) -> float:
        return slowdown(self.fct_ns, self.ideal_fct_ns)

    def values(self) -> tuple:
        return (self.src, self.dst, self.size, self.start_ns, self.fct_ns, self.ideal_fct_ns,
                self.slowdown)


def flow_rows(completions: Iterable[tuple[Transfer, int]], hosts: Sequence[str],
              ideal_ns: Callable[[int, int, int], int]) -> Iterator[FlowRow]:
    """The rows of completed flows ((flow, completion time), as ``FlowSource.completions``
    holds them): ``hosts`` names the flows' host indexes, ``ideal_ns(src, dst, size)`` is a
    flow's ideal FCT on the run's network (``ideal_fct_ns`` with its path's RTT and rate)."""
    for t, end in completions:
        yield FlowRow(hosts[t.src], hosts[t.dst], t.size, t.at_ns, end - t.at_ns,
                      ideal_ns(t.src, t.dst, t.size))


@dataclass(frozen=True)
class Bin:
    """One bin of the slowdown table: ``lo``..``hi`` percent of the flows by size."""

    lo: int
    hi: int
    flows: int
    max_size: int
    p50: float
    p95: float
    p99: float


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def slowdown_table(rows: Iterable[FlowRow], bin_percent: int = 5) -> list[Bin]:
    """HPCC's binned slowdown table of ``rows`` (module docstring)."""
    if not 1 <= bin_percent <= 100:
        raise UsageError(f"--fct-bins {bin_percent}: a bin is 1..100 percent of the flows")
    flows = sorted((r.size, r.slowdown) for r in rows)
    n = len(flows)
    out = []
    for lo in range(0, 100, bin_percent):
        hi = min(100, lo + bin_percent)
        part = flows[lo * n // 100:hi * n // 100]
        if not part:
            continue
        values = sorted(s for _, s in part)
        out.append(Bin(lo, hi, len(part), part[-1][0],
                       *(_quantile(values, q) for q in QUANTILES)))
    return out


def table_text(bins: Sequence[Bin]) -> str:
    """The table as text: one line per bin."""
    lines = [f"{'flows %':>9} {'count':>7} {'max size':>10} {'p50':>8} {'p95':>8} {'p99':>8}"]
    for b in bins:
        lines.append(f"{b.lo:>4g}-{b.hi:<4g} {b.flows:>7} {b.max_size:>10} {b.p50:>8.3f} "
                     f"{b.p95:>8.3f} {b.p99:>8.3f}")
    return "\n".join(lines)


def rows_format(path: str) -> str:
    """"csv" or "parquet" by ``path``'s extension; a UsageError for another, or for Parquet
    without pyarrow."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".csv", ".parquet"):
        raise UsageError(f"--fct {path}: the file name ends in .csv or .parquet")
    if ext == ".parquet":
        from roce.extras import need_pyarrow

        need_pyarrow("--fct FILE.parquet")
    return ext[1:]


def write_rows(path: str, rows: Iterable[FlowRow]) -> int:
    """Write ``rows`` to ``path`` (CSV or Parquet by its extension), ``COLUMNS`` in order;
    return how many.  A path that cannot be written is an ``InputError`` naming it."""
    fmt = rows_format(path)
    try:
        if fmt == "csv":
            n = 0
            with open(path, "w", newline="") as f:
                w = csv.writer(f, lineterminator="\n")
                w.writerow(COLUMNS)
                for r in rows:
                    w.writerow(r.values())
                    n += 1
            return n
        return _write_parquet(path, list(rows))
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or e}") from None


def _write_parquet(path: str, rows: list[FlowRow]) -> int:
    from roce.extras import need_pyarrow

    pa = need_pyarrow("--fct FILE.parquet")
    import pyarrow.parquet as pq

    types = (pa.string(), pa.string(), pa.uint64(), pa.int64(), pa.int64(), pa.int64(),
             pa.float64())
    columns = list(zip(*(r.values() for r in rows))) if rows else [()] * len(COLUMNS)
    table = pa.table({name: pa.array(list(values), type=t)
                      for name, values, t in zip(COLUMNS, columns, types)})
    pq.write_table(table, path)
    return len(rows)


__all__ = ["Bin", "COLUMNS", "FlowRow", "OPS", "base_rtt_ns", "flow_rows", "headers",
           "ideal_fct_ns",
           "rows_format", "slowdown", "slowdown_table", "table_text", "wire_bytes",
           "write_rows"]
