"""Watching a switched network run: the sampled ``Trace`` (``--trace FILE``).

Every ``interval_ns`` of virtual time the trace writes, as CSV rows or JSON lines:

- ``queue``: bytes in each egress queue (switch port, traffic class);
- ``qp``: each sending QP's rate over the last interval (Gb/s, from the bytes its NIC
  scheduler sent), its PSNs acknowledged and the bytes of its completed messages;
- ``pause``: whether each port (switch ports and host NICs) is paused, per priority.

Sampling stops when nothing else is left to happen (a run that went idle).  Taps (``--tap
NODE:PORT``): a switch port or a host writes what it receives and what it starts sending to
its ``tap`` writer; ``tap_port`` finds the port a spec names (``parse_tap`` checks the spec's
form first, as ``--tap``'s type).
"""

from __future__ import annotations

import argparse
import re

from roce.errors import UsageError
from roce.psn import psn_diff

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any, TextIO

COLUMNS = ("time_ns", "kind", "node", "index", "bytes", "rate_gbps", "acked_psns", "paused")
# NODE:PORT, a switch's name and a port number in decimal (ports are numbered from 0)
TAP = r"(?P<node>[^=]+):(?P<port>0|[1-9][0-9]{0,5})"  # compiled by re at first use


def parse_tap(text: str) -> str:
    """``--tap``'s type: ``NODE:PORT`` or ``NODE:PORT=FILE``, the text as given."""
    where, eq, path = text.partition("=")
    if not re.fullmatch(TAP, where) or (eq and not path):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NODE:PORT[=FILE], a switch "
                                         "and a port number from 0 (e.g. sw:0)")
    return text


def tap_port(net: Any, spec: str) -> Any:
    """The port ``NODE:PORT`` names (for ``--tap``): a switch port (``sw:0``) or a host's
    one port (``A:0``); a UsageError unless the network has it."""
    m = re.fullmatch(TAP, spec)
    if m and m["node"] in net.hosts and m["port"] == "0":
        return net.hosts[m["node"]]
    sw = net.switches.get(m["node"]) if m else None
    if sw is None or int(m["port"]) >= len(sw.ports):
        have = f" ({m['node']} has ports 0..{len(sw.ports) - 1})" if sw is not None and \
            sw.ports else ""
        example = (f"a switch port such as {next(iter(net.switches))}:0, or a host's, such "
                   f"as {next(iter(net.hosts))}:0" if net.switches
                   else f"a host's port, such as {next(iter(net.hosts))}:0")
        raise UsageError(f"--tap {spec}: no such port{have} (NODE:PORT: {example})")
    return sw.ports[int(m["port"])]


class Trace:
    def __init__(self, out: TextIO, interval_ns: int, fmt: str = "csv") -> None:
        if interval_ns <= 0:
            raise ValueError("the trace interval must be positive")
        self.out = out
        self.interval = interval_ns
        self.fmt = fmt
        # here, not at the top: every run imports this module (its options), few write a trace
        import csv
        import json

        self._dumps = json.dumps
        self._csv = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
        if self._csv is not None:
            self._csv.writerow(COLUMNS)
        self.samples = 0
        self._last: dict[int, int] = {}

    def start(self, net: Any, flows: list[Any], names: list[tuple[str, str]]) -> None:
        self.net = net
        self.flows = list(zip(flows, names))
        self.classes = sorted({c for sw in net.switches.values() for c in sw.classifier.classes}
                              | {c for nic in net.hosts.values()
                                 if getattr(nic, "classifier", None) is not None
                                 for c in nic.classifier.classes})
        self.first_psn = {id(f): f.qa.core.requester.una for f, _ in self.flows}
        for nic in net.hosts.values():
            if hasattr(nic, "count_sent"):  # a host cabled straight: count as QPs send
                nic.count_sent()
        net.at(0, self._sample)

    @staticmethod
    def _sent(nic: Any, qp: Any) -> int:
        """Bytes ``qp`` has sent: what a NIC's scheduler took from it, or what a host cabled
        straight counted (``DirectNic.count_sent``)."""
        counted = getattr(nic, "sent_bytes", None)
        if counted is not None:
            return counted.get(qp.qpn, 0)
        return getattr(qp.tx, "sent_bytes", 0)

    def _row(self, t: int, kind: str, node: str, index: int, **values: Any) -> None:
        """One row: ``index`` is the traffic class / priority, or the QPN for ``qp`` rows."""
        if self._csv is not None:
            self._csv.writerow((t, kind, node, index,
                                *(values.get(c, "") for c in COLUMNS[4:])))
        else:
            self.out.write(self._dumps({"time_ns": t, "kind": kind, "node": node,
                                       "index": index, **values}) + "\n")

    def _sample(self, now: int, _: Any = None) -> None:
        self.samples += 1
        net = self.net
        for sw in net.switches.values():
            for p in sw.ports:
                for c in self.classes:
                    self._row(now, "queue", p.name, c, bytes=p.qbytes[c])
        for f, (src, dst) in self.flows:
            qp = f.qa.core
            sent = self._sent(net.hosts[src], qp)
            rate = (sent - self._last.get(id(f), 0)) * 8 / self.interval  # bits/ns = Gb/s
            self._last[id(f)] = sent
            acked = psn_diff(qp.requester.una, self.first_psn[id(f)])
            self._row(now, "qp", f"{src}->{dst}", qp.qpn, bytes=f.bytes,
                      rate_gbps=round(rate, 3), acked_psns=acked)
        for c in self.classes:
            for sw in net.switches.values():
                for p in sw.ports:
                    self._row(now, "pause", p.name, c, paused=int(p.pause.until[c] > now))
            for name, nic in net.hosts.items():
                pause = getattr(nic, "pause", None)
                if pause is not None:
                    self._row(now, "pause", name, c, paused=int(pause.until[c] > now))
        if net.events:  # sample while anything is left to happen
            net.at(now + self.interval, self._sample)

    def finish(self, net: Any) -> None:
        self.out.flush()
