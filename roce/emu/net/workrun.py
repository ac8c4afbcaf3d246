"""A run of the traffic of real clusters on the simulated network: ``WorkloadRun``.

``roce emulate --workload`` (open-loop flows, ``roce.emu.workload.openloop``) and
``--collective`` (``roce.emu.workload.collective``) put a workload generator's transfers on
any topology in place of ``--count`` messages per pair.  The run drives the generator's
``Source`` on virtual time:

- after the topology is built, ``wl.start(hosts, rate, rng)`` (hosts in the topology's
  order: a collective's rank ``i`` is host ``i``; ``rng`` seeded from ``--seed`` alone,
  ``workload_rng``), so the seed gives the same transfers every time, whatever the
  transport, load balancing or switches draw from the network's generator;
- every transfer ``ready(now)`` hands out is posted at once on the run's transport
  (``roce.emu.net.transport``: one interface, RoCE's RC queue pairs, native InfiniBand's on
  HCAs, Ultra Ethernet's PDCs); a named event (``_arrival``) wakes the loop at
  ``next_time()``, an open-loop flow's arrival;
- each completion the transport reports goes back with ``complete(transfer, now)``, until
  ``done`` or the virtual time limit.

Open-loop flows are WRITEs and complete at the sender (as the HPCC simulator measures FCT:
the last ACK).  At most ``defaults.FLOW_QPS_PER_PAIR`` flows of one pair of hosts are in
flight: past that a flow waits for one of its pair to complete (its FCT counts the wait).
A collective's transfers are SENDs and complete at the receiver.

Registered memory is two buffers, not one per message: one *source* holding a seeded
pattern and one *sink*, each as large as the largest transfer (the CDF's largest size, or
the collective's chunk), registered by every host over the same bytes.  Every transfer of
``n`` bytes carries ``pattern[0:n]`` into ``sink[0:n]``, so transfers that land in the
sink at the same time write the same bytes at the same places, and each is checked when it
completes: the completion is a success with its byte count, and the sink holds the pattern
where it landed (a byte placed at a wrong offset, or changed on the way, shows; a lost
packet is the transport's to recover).  Memory is therefore two transfers' worth, whatever
the hosts, flows or ranks.

``run()`` returns the one ``Summary`` of every run, with ``workload``: for flows the offered
and carried load, flows finished and not, the binned slowdown table and the slowdown of
small and large flows (``roce.emu.workload.fct``), the per-flow rows written to ``--fct``;
for a collective each iteration's time, algbw and busbw and, beside them, the run's pause
frames, ECN marks, CNPs and retransmissions.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from roce.emu import budget, defaults
from roce.emu.core.payload import seeded_chunks
from roce.emu.net import runner
from roce.emu.net import topology as topo
from roce.emu.net.transport import OPS, PER_TRANSFER, QpTransport, Shared, Transport
from roce.emu.scenario import Scenario, Summary
from roce.emu.workload import cdf as cdfs
from roce.emu.workload import fct
from roce.emu.workload.collective import DEFAULT_CHUNK, DEFAULT_WINDOW, Collective
from roce.emu.workload.openloop import OpenLoop
from roce.emu.workload.traffic import Transfer, Workload
from roce.errors import UsageError


def workload_rng(seed: int) -> random.Random:
    """The generator a run's workload draws from: seeded by ``--seed`` alone, so every
    protocol, load balancing and switch configuration gets the same transfers."""
    return random.Random(f"workload/{seed}")


DIGEST_MASK = (1 << 64) - 1


def transfer_hash(t: Transfer) -> int:
    """64 bits of BLAKE2b over what makes a transfer (id, hosts, size, arrival, place in a
    collective).  Their sum (mod 2**64) is the workload report's ``transfers_digest``: the
    same for two runs that posted the same transfers, whatever the order."""
    text = f"{t.id},{t.src},{t.dst},{t.size},{t.at_ns},{t.iteration},{t.step},{t.phase}," \
           f"{t.piece},{t.block}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def workload_of(sc: Scenario, hosts: int) -> Workload:
    """The scenario's workload generator on a network of ``hosts`` hosts, checked (a
    UsageError naming the option); a collective's ranks default to every host."""
    if sc.cdf is not None:
        return OpenLoop(cdfs.load(sc.cdf), sc.load, sc.duration_ns)
    ranks = hosts if sc.ranks is None else sc.ranks
    if ranks > hosts:
        raise UsageError(f"--ranks {ranks}: the network has {hosts} hosts")
    return Collective(sc.collective or "", sc.size, ranks, sc.algorithm,
                      sc.iterations, sc.chunk or DEFAULT_CHUNK, sc.window or DEFAULT_WINDOW)


def refuse_options(sc: Scenario) -> None:
    """A UsageError naming the first option a workload run refuses: the two kinds together,
    or an option of the ``--count`` traffic they replace."""
    base = Scenario()
    if sc.cdf is not None and sc.collective is not None:
        raise UsageError("--workload and --collective exclude each other: one kind of "
                         "traffic per run")
    what = f"--workload {sc.cdf}" if sc.cdf is not None else f"--collective {sc.collective}"
    for name, opt, why in (
            ("traffic", "--traffic", "the workload says who sends to whom"),
            ("count", "--count", "the workload says how many transfers"),
            ("qps", "--qps", "the runner keeps the QPs the transfers need"),
            ("depth", "--depth", "the workload says what is in flight")):
        if getattr(sc, name) != getattr(base, name):
            raise UsageError(f"{opt} {getattr(sc, name)}: not with {what} ({why})")
    if sc.cdf is not None:
        if sc.op != "write":
            raise UsageError(f"--op {sc.op}: open-loop flows are RDMA WRITEs, each "
                             "completing at its sender (HPCC's FCT)")
        if sc.size != base.size:
            raise UsageError(f"--size {sc.size}: not with {what} (flow sizes come from the "
                             "CDF; --size is a collective's buffer)")
        for name, opt in (("ranks", "--ranks"), ("chunk", "--chunk"), ("window", "--window")):
            if getattr(sc, name) is not None:
                raise UsageError(f"{opt}: only with --collective")
        if sc.iterations != 1 or sc.algorithm:
            raise UsageError("--iterations and --algorithm: only with --collective")
    else:
        if sc.op not in ("write", "send"):
            raise UsageError(f"--op {sc.op}: a collective moves its data with SENDs")
        if sc.fct is not None or sc.fct_bins != base.fct_bins:
            raise UsageError("--fct and --fct-bins: per-flow rows and the slowdown table come "
                             "from --workload runs")
        if (sc.load, sc.duration_ns) != (base.load, base.duration_ns):
            raise UsageError("--load and --duration: only with --workload")


class WorkloadRun:
    """One workload run, built and ready (``net`` may be hooked before ``run()``);
    ``transport``: how its transfers travel (RoCE's RC queue pairs by default)."""

    def __init__(self, sc: Scenario, record: Any = None,
                 taps: dict[str, Any] | None = None,
                 topology: topo.Topology | None = None,
                 transport: Transport | None = None) -> None:
        refuse_options(sc)
        tr = self.transport = transport if transport is not None else QpTransport()
        tr.check(sc)
        # the checks of --op, --recovery, --psn... with the buffer checks left to the
        # workload's own (--size is a collective's buffer, never one message)
        replace(sc, size=1, count=1).check(sides=2)
        if sc.fct is not None:
            fct.rows_format(sc.fct)
        t = self.topology = topology if topology is not None else runner.topology_of(sc)
        topo.oversubscribe(t, sc.oversubscription, sc.rate_gbps)
        wl = self.workload = workload_of(sc, len(t.hosts))
        if sc.cdf is not None and not t.switches:
            raise UsageError(f"--workload {sc.cdf}: open-loop flows need a switched "
                             "--topology (incast:N, dumbbell:N, leafspine:L,S,H or a file)")
        self.hosts = list(t.hosts)
        # a scheduling NIC on every host, so the fabric's counters are there on p2p too
        runner.refuse_inapplicable(sc, t, True)
        if sc.time_limit_ns is None:
            sc = replace(sc, time_limit_ns=defaults.time_limit_ns(True))
        self.sc = sc
        # memory, before anything is built: the generator's transfers with what the runner
        # keeps for each, then the two shared buffers
        wl.check_memory(len(self.hosts), sc.rate_gbps, per_transfer=PER_TRANSFER)
        self.largest = self._largest()
        self._paths: dict[tuple[str, str], tuple[int, float]] = {}
        budget.check(2 * self.largest, *self._buffer_option(),
                     "a source and a sink as large as the largest transfer")
        net = self.net = tr.build(t, sc)
        self.failures = runner.start_failures(sc, t, net)
        if record is not None:
            tr.record(record)
        for spec, writer in (taps or {}).items():
            runner.attach_tap(net, spec, writer)
        self.pattern = bytearray(b"".join(seeded_chunks(f"workload/{sc.seed}",
                                                        self.largest)))
        self.sink = bytearray(self.largest)
        self._sent = memoryview(self.pattern)  # a transfer's bytes, compared without a copy
        # selective repeat's BDP cap: the base RTT between the first and the last host (the
        # farthest apart in the named topologies' order: other pods of a fat tree)
        far = self.ideal_path(self.hosts[0], self.hosts[-1])[0]
        window = wl.window if isinstance(wl, Collective) else 1
        tr.done = self._done
        tr.start(net, Shared(sc, self.hosts, self.pattern, self.sink, self.largest, window,
                             far))
        self.op = OPS[0] if sc.cdf is not None else OPS[1]
        self.in_flight: Counter = Counter()  # flows in flight per pair (open-loop)
        self.waiting: dict[tuple[int, int], deque] = {}
        self.status: Counter = Counter()
        self.posted = 0
        self.digest = 0  # of the transfers posted (``transfer_hash``), in any order
        self.bytes = 0
        self.fcts: list[int] = []
        self.bad: list[str] = []  # transfers that did not check out, in words
        self.post_ns: dict[int, int] = {}
        self._wake_at: int | None = None
        self._woken = False
        self.src = wl.start(self.hosts, sc.rate_gbps, workload_rng(sc.seed))

    @property
    def ready(self) -> list[Any]:
        return self.transport.ready

    def _largest(self) -> int:
        wl = self.workload
        if isinstance(wl, OpenLoop):
            return max(1, int(wl.cdf.points[-1][0]))
        return min(wl.chunk, wl.size)  # type: ignore[attr-defined]

    def _buffer_option(self) -> tuple[str, str, str]:
        sc = self.sc
        if sc.cdf is not None:
            return ("--workload", sc.cdf, "a CDF whose largest flow fits")
        return ("--chunk", budget.human(self.largest), "a smaller --chunk")

    # -- posting -----------------------------------------------------------------------

    def _post(self, t: Transfer) -> None:
        self.posted += 1
        self.digest = (self.digest + transfer_hash(t)) & DIGEST_MASK
        self.post_ns[t.id] = self.net.now
        if self.op == "write":
            pair = (t.src, t.dst)
            if self.in_flight[pair] >= defaults.FLOW_QPS_PER_PAIR:
                self.waiting.setdefault(pair, deque()).append(t)
                return
            self.in_flight[pair] += 1
        self.transport.post(t, self.op)

    def _feed(self) -> None:
        """Post what the source has ready now; wake the loop at its next arrival."""
        net, src = self.net, self.src
        for t in src.ready(net.now):
            self._post(t)
        nxt = src.next_time()
        if nxt is not None and (self._wake_at is None or self._wake_at <= net.now
                                or nxt < self._wake_at):
            self._wake_at = nxt
            net.at(max(nxt, net.now), self._arrival)

    def _arrival(self, now: int, arg: Any = None) -> None:
        """The named event of an open-loop arrival: the loop wakes and asks the source."""
        self.ready.append(None)

    # -- completions -------------------------------------------------------------------

    def _done(self, t: Transfer, ok: bool, nbytes: int, status: str) -> None:
        """The transport's callback: ``t`` completed (``ok``, ``nbytes`` arrived)."""
        now = self.net.now
        self.status[status] += 1
        if not ok:
            self.bad.append(f"{self._where(t)}: {status}")
        # (both buffers hold the largest transfer: the sink's first t.size bytes are the
        # pattern's exactly when it starts with them)
        elif nbytes != t.size or not self.sink.startswith(self._sent[:t.size]):
            self.bad.append(f"{self._where(t)}: {nbytes} bytes arrived, not what was sent")
        else:
            self.bytes += t.size
            self.fcts.append(now - self.post_ns.pop(t.id))
            self.src.complete(t, now)
        if self.op == "write":
            pair = (t.src, t.dst)
            waiting = self.waiting.get(pair)
            if waiting:
                self.transport.post(waiting.popleft(), self.op)
            else:
                self.in_flight[pair] -= 1

    def _where(self, t: Transfer) -> str:
        return f"transfer {t.id} ({self.hosts[t.src]}->{self.hosts[t.dst]}, {t.size} bytes)"

    def run(self, progress: Callable[[int, int], None] | None = None) -> Summary:
        sc, net, src = self.sc, self.net, self.src
        limit = sc.time_limit_ns
        cpu0 = time.process_time()
        self._feed()
        finished = True
        while not src.done:
            if not net.run_until_any(self.ready, limit):
                finished = False
                if net.events:  # the limit ended the run, not a lack of events
                    net.now = max(net.now, limit)
                break
            self.transport.reap()
            self._feed()
            if progress is not None:
                progress(len(self.fcts), max(self.posted, 1))
        return self.summarise(time.process_time() - cpu0, finished)

    # -- the summary -------------------------------------------------------------------

    def summarise(self, cpu: float, finished: bool) -> Summary:
        sc, net, tr = self.sc, self.net, self.transport
        s = Summary(scenario=asdict(sc))
        tr.count(s)
        s.posted = self.posted
        s.completed = dict(self.status)
        s.bytes = self.bytes
        runner.network_totals(s, net, cpu)
        left = self.posted - len(self.fcts)
        s.finished = finished
        s.outstanding = left if not finished else 0
        if not finished:
            s.stopped = tr.stopped(sc, left)
        s.fct_ns = runner.fct_stats(self.fcts)
        s.fabric = tr.fabric_stats(self.failures)
        s.warnings = list(net.warnings)
        s.workload = (self._flows_report(s) if sc.cdf is not None
                      else self._collective_report(s))
        why = []
        if self.bad:
            more = f"; {len(self.bad) - 3} more" if len(self.bad) > 3 else ""
            why.append(f"{len(self.bad)} transfer(s) did not check out ("
                       + "; ".join(self.bad[:3]) + more + ")")
        if not finished:
            why.append(f"{left} of {self.posted} posted transfer(s) did not complete")
        s.unverified = "; ".join(why)
        s.data_verified = not why
        return s

    def ideal_path(self, a: str, b: str) -> tuple[int, float]:
        """(base RTT in ns, slowest rate) of the path from host ``a`` to host ``b``: HPCC's
        base RTT, twice the delays and one full frame per hop.  Cached per pair of leaves
        (hosts on the same switches have the same paths)."""
        sc, t = self.sc, self.topology
        key = (t.leaf_of.get(a, a), t.leaf_of.get(b, b))
        got = self._paths.get(key)
        if got is None:
            links = topo.path(t, a, b)
            delays = [sc.delay_ns if ln.delay_ns is None else ln.delay_ns for ln in links]
            rates = [ln.rate_gbps or sc.rate_gbps for ln in links]
            frame = fct.wire_bytes(sc.mtu, sc.mtu)
            got = self._paths[key] = (fct.base_rtt_ns(delays, rates, frame), min(rates))
        return got

    def ideal(self) -> Callable[[int, int, int], int]:
        """A flow's ideal FCT on this network: its path's base RTT plus its bytes on the
        wire at the path's slowest rate."""
        mtu = self.sc.mtu

        def ideal(src: int, dst: int, size: int) -> int:
            rtt, rate = self.ideal_path(self.hosts[src], self.hosts[dst])
            return fct.ideal_fct_ns(size, rate, rtt, mtu)
        return ideal

    def _flows_report(self, s: Summary) -> dict[str, Any]:
        sc, src = self.sc, self.src
        n = len(self.hosts)
        rows = list(fct.flow_rows(src.completions, self.hosts,  # type: ignore[attr-defined]
                                  self.ideal()))
        if sc.fct is not None:
            fct.write_rows(sc.fct, rows)
        bins = fct.slowdown_table(rows, sc.fct_bins)
        small = [r.slowdown for r in rows if r.size < defaults.SMALL_FLOW_BYTES]
        large = [r.slowdown for r in rows if r.size >= defaults.SMALL_FLOW_BYTES]
        generated = src.generated  # type: ignore[attr-defined]
        return {
            "kind": "flows", "transfers_digest": f"{self.digest:016x}", "cdf": sc.cdf,
            "load": sc.load, "duration_ns": sc.duration_ns,
            "hosts": n,
            "offered_load": src.offered_load(n, sc.rate_gbps,  # type: ignore[attr-defined]
                                             sc.duration_ns),
            "carried_load": (self.bytes * 8 / (n * sc.rate_gbps * s.virtual_ns)
                             if s.virtual_ns else 0.0),
            "flows": generated, "finished": len(rows), "unfinished": generated - len(rows),
            "small_bytes": defaults.SMALL_FLOW_BYTES,
            "slowdown": {"small": fct.quantiles(small), "large": fct.quantiles(large),
                         "all": fct.quantiles([r.slowdown for r in rows])},
            "slowdown_table": [asdict(b) for b in bins],
            "fct_file": sc.fct or "",
        }

    def _collective_report(self, s: Summary) -> dict[str, Any]:
        wl = self.workload
        rows = wl.report(self.src.iterations)  # type: ignore[attr-defined]
        fab = s.fabric

        def mean(key: str) -> float:
            return sum(r[key] for r in rows) / len(rows) if rows else 0.0
        return {
            "kind": "collective", "transfers_digest": f"{self.digest:016x}",
            "op": wl.op, "algorithm": wl.algorithm,  # type: ignore[attr-defined]
            "ranks": wl.ranks, "size": wl.size, "chunk": wl.chunk,  # type: ignore
            "window": wl.window, "iterations": rows,  # type: ignore[attr-defined]
            "completed_iterations": len(rows),
            "time_ns": mean("time_ns"), "algbw_GBps": mean("algbw_GBps"),
            "busbw_GBps": mean("busbw_GBps"), "line_rate_GBps": self.sc.rate_gbps / 8,
            # an InfiniBand subnet has no PFC or ECN (its FECN marks are in ``fabric``)
            "pfc_frames": fab.get("pfc_frames", 0), "ecn_marked": fab.get("ecn_marked", 0),
            "cnps": fab.get("cnps_sent", 0), "retransmitted": s.retransmitted,
        }


def run_workload(sc: Scenario, record: Any = None,
                 progress: Callable[[int, int], None] | None = None,
                 taps: dict[str, Any] | None = None,
                 transport: Transport | None = None) -> Summary:
    """Run a ``--workload`` or ``--collective`` scenario and summarise it."""
    return WorkloadRun(sc, record, taps, transport=transport).run(progress)


__all__ = ["PER_TRANSFER", "WorkloadRun", "refuse_options", "run_workload", "transfer_hash",
           "workload_of", "workload_rng"]
