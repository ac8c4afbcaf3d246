"""``roce compare``'s contenders and report: named configurations of the emulator run on one
topology and workload, side by side.

A contender is a name and the ``roce emulate`` options that make it (``--protocol uet
--trim``); the command parses them with emulate's own parser, so every option and value is
checked as emulate checks it.  ``DEFAULT_CONTENDERS`` are the four of the comparison the
project exists for:

- ``roce-pfc-dcqcn``: RoCE, lossless (PFC), DCQCN, go-back-N, ECMP;
- ``roce-sr-spray``: RoCE, PFC off, DCQCN, selective repeat, packets sprayed;
- ``uet-rud-trim``: UET, reliable unordered delivery, trimming switches, a new entropy per
  packet (spraying on the ECMP hash), NSCC when the emulator's ``--cc`` offers it (``NSCC``;
  without it the report's notes say the contender ran without congestion control);
- ``ib-cc``: native InfiniBand, credit-based links, IB congestion control on.

``report`` turns each contender's summary (``roce.emu.scenario.Summary.as_dict()``) into one
row of ``COLUMNS`` and checks the contenders ran the same transfers (the workload report's
``transfers_digest``); ``text`` is the table, ``SCHEMA`` the JSON's keys and types (tested).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from roce.errors import UsageError

# (name, emulate options): the default contenders (module docstring)
DEFAULT_CONTENDERS: tuple[tuple[str, str], ...] = (
    ("roce-pfc-dcqcn", "--protocol roce --pfc on --cc dcqcn --recovery gbn --lb ecmp"),
    ("roce-sr-spray", "--protocol roce --pfc off --cc dcqcn --recovery sr --lb spray"),
    ("uet-rud-trim", "--protocol uet --pfc off --pdc-mode rud --trim --entropy packet "
     "--lb ecmp"),
    ("ib-cc", "--protocol ib --ib-cc on"),
)
NSCC = ("uet-rud-trim", "--cc nscc")  # added to that contender when --cc offers nscc
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,39}")

# One row per contender: (key, JSON type, heading in the text table, format); None where a
# figure does not apply to the run (a slowdown without open-loop flows, a busbw without a
# collective).
COLUMNS: tuple[tuple[str, type, str, str], ...] = (
    ("name", str, "contender", ""),
    ("protocol", str, "protocol", ""),
    ("goodput_gbps", float, "goodput Gb/s", ".2f"),
    ("fct_p50_us", float, "FCT p50 us", ".1f"),
    ("fct_p99_us", float, "FCT p99 us", ".1f"),
    ("slowdown_p50", float, "slowdown p50", ".2f"),
    ("slowdown_p99", float, "slowdown p99", ".2f"),
    ("busbw_GBps", float, "busbw GB/s", ".3f"),
    ("pauses", int, "pauses", "d"),
    ("drops", int, "drops", "d"),
    ("trims", int, "trims", "d"),
    ("retransmitted", int, "retx", "d"),
    ("timeouts", int, "timeouts", "d"),
    ("cpu_s", float, "CPU s", ".2f"),
    ("hops_per_cpu_s", float, "hops/CPU-s", ",.0f"),
    ("transfers", int, "transfers", "d"),
    ("completed", int, "completed", "d"),
    ("verified", bool, "verified", ""),
)
# Columns the text table leaves to lines of their own: what the run cost this machine, which
# differs from run to run (the table's widths stay those of the network's figures).
MEASURED = ("cpu_s", "hops_per_cpu_s")
# The report's top level: its keys and types (the rows are ``COLUMNS``, plus ``options``).
SCHEMA: dict[str, type] = {"kind": str, "same_transfers": bool, "notes": list,
                           "contenders": list}
WORDS = ("pauses: PFC pause frames sent (InfiniBand: credit stalls, the times a port had a "
         "packet and no credit); trims: packets switches cut to their headers; retx: "
         "packets retransmitted")


@dataclass(frozen=True)
class Contender:
    """One configuration: its ``name`` and its emulate options, as words."""

    name: str
    words: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.words)


def check_name(name: str, where: str) -> str:
    if not NAME.fullmatch(name):
        raise UsageError(f"{where}: contender name {name!r}: 1 to 40 letters, digits and "
                         "_.+- (starting with a letter or digit)")
    return name


def check_unique(contenders: list[Contender]) -> None:
    if not contenders:
        raise UsageError("no contenders: give --contender NAME=OPTIONS or leave the default "
                         "four")
    seen: set[str] = set()
    for c in contenders:
        if c.name in seen:
            raise UsageError(f"contender {c.name}: named twice")
        seen.add(c.name)


def _kind(d: dict[str, Any]) -> str:
    w = d.get("workload") or {}
    return w.get("kind", "messages")


def row(name: str, options: str, d: dict[str, Any]) -> dict[str, Any]:
    """A contender's row from its summary (``Summary.as_dict()``)."""
    fab = d.get("fabric") or {}
    w = d.get("workload") or {}
    fct = d.get("fct_ns") or {}
    sc = d.get("scenario") or {}
    kind = _kind(d)
    infiniband = "credit_stalls" in fab
    slow = (w.get("slowdown") or {}).get("all") or {}
    ok = sum(v for k, v in (d.get("completed") or {}).items()
             if k in ("IBV_WC_SUCCESS", "OK"))
    return {
        "name": name, "options": options, "protocol": sc.get("protocol", "roce"),
        "goodput_gbps": float(d.get("goodput_gbps", 0.0)),
        "fct_p50_us": float(fct.get("p50", 0.0)) / 1e3,
        "fct_p99_us": float(fct.get("p99", 0.0)) / 1e3,
        "slowdown_p50": float(slow["p50"]) if kind == "flows" and slow else None,
        "slowdown_p99": float(slow["p99"]) if kind == "flows" and slow else None,
        "busbw_GBps": float(w["busbw_GBps"]) if kind == "collective" else None,
        "pauses": int(fab.get("credit_stalls", 0) if infiniband else fab.get("pfc_frames", 0)),
        "drops": int(fab.get("drops", 0)), "trims": int(fab.get("trimmed", 0)),
        "retransmitted": int(d.get("retransmitted", 0)), "timeouts": int(d.get("timeouts", 0)),
        "cpu_s": float(d.get("cpu_s", 0.0)), "hops_per_cpu_s": float(d.get("hops_per_cpu_s", 0.0)),
        "transfers": int(d.get("posted", 0)), "completed": ok,
        "verified": bool(d.get("data_verified", False)),
        "digest": w.get("transfers_digest", "") if w else _messages_digest(d),
    }


def _messages_digest(d: dict[str, Any]) -> str:
    """What --count traffic sends, as a digest: the flows' (source, destination) pairs, with
    the operation, size and count of each (the order of the flows aside)."""
    sc = d.get("scenario") or {}
    pairs = sorted((f.get("src", ""), f.get("dst", "")) for f in d.get("flows") or [])
    text = json.dumps([sc.get("op"), sc.get("size"), sc.get("count"), pairs])
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def report(results: list[tuple[Contender, dict[str, Any]]],
           notes: list[str] | None = None) -> dict[str, Any]:
    """The side-by-side report of ``results`` ((contender, summary as a dict) each)."""
    rows = [row(c.name, c.text, d) for c, d in results]
    kinds = {_kind(d) for _, d in results}
    digests = {r["digest"] for r in rows}
    same = len(digests) == 1 and "" not in digests
    out_notes = list(notes or [])
    if len(kinds) > 1:
        out_notes.append("the contenders ran different kinds of traffic: "
                         + ", ".join(sorted(kinds)))
    elif not same and kinds == {"messages"}:
        out_notes.append("--count traffic: the contenders' hosts were paired differently "
                         "(a permutation is drawn from each network's own generator; a "
                         "topology's own traffic, --traffic all-to-all or a file's pairs are "
                         "the same for all)")
    elif not same:
        out_notes.append("the contenders did not run the same transfers (see digest)")
    return {"kind": kinds.pop() if len(kinds) == 1 else "mixed", "same_transfers": same,
            "notes": out_notes, "contenders": rows}


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return format(value, fmt) if fmt else str(value)


def text(rep: dict[str, Any]) -> str:
    """The report as a table: one row per contender, the columns that apply to the run's
    kind of traffic (a slowdown for flows, a busbw for a collective)."""
    rows = rep["contenders"]
    cols = [c for c in COLUMNS if c[0] not in ("protocol", *MEASURED)
            and any(r[c[0]] is not None for r in rows)]
    cells = [[h for _, _, h, _ in cols]] + [[_cell(r[k], f) for k, _, _, f in cols]
                                            for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cols))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(line, widths))).rstrip()
             for line in cells]
    lines.append("")
    width = max(len(r["name"]) for r in rows)
    lines += [f"{r['name']:<{width}}  {r['options']}" for r in rows]
    # what the run cost this machine: a figure of its own, not the network's
    lines += [f"cpu  {r['name']:<{width}}  {r['cpu_s']:.3f} s, {r['hops_per_cpu_s']:,.0f} "
              "packet-hops per CPU-second" for r in rows]
    lines.append(f"same transfers on every contender: "
                 f"{'yes' if rep['same_transfers'] else 'no'}")
    lines += [f"note: {n}" for n in rep["notes"]]
    lines.append(WORDS)
    return "\n".join(lines)


__all__ = ["COLUMNS", "Contender", "DEFAULT_CONTENDERS", "MEASURED", "NSCC", "SCHEMA", "check_name",
           "check_unique", "report", "row", "text"]
