"""Per-flow RoCE analysis: PSN gaps, retransmissions, NAKs, CNPs, ECN marks, bad ICRCs.

The analysis does no I/O.  Feed it a capture reader or frames (``roce.pcapio.Frame`` objects
or plain ``bytes``) and read a :class:`Report`::

    from roce.analysis.flows import analyse
    report = analyse(open_capture("f.pcap"))
    report.totals["gaps"], [e.line() for e in report.events]

This module only chooses an engine.  The parts, one job each:

- ``flowrules``: the rules and their tables (event kinds, texts, counters, per-opcode facts)
  and the definitions of what is counted; the one place to add an event kind;
- ``flowref``: the flow engine, written once; run interpreted it is the reference;
- ``cflows``: whether its compiled form (``roce.analysis._flowengine``, which the build
  makes from ``flowref.py``) may run: built, and from the source now there; a property test
  holds the two forms equal at every batch size;
- ``flowmodel``: events, flows, the report and its totals;
- ``flowpair``: pairing flows into connections;
- ``flowinput``: frames as columns.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from roce import locate
from roce.analysis import cflows
from roce.analysis.flowmodel import Event, EventStore, Flow, Report, totals
from roce.analysis.flowrules import (
    BATCH,
    EVENT_KINDS,
    KIND_KEYS,
    KIND_NAMES,
    MAX_EVENTS_PER_KIND,
    SEVERITIES,
    TEXTS,
)
from roce.errors import UsageError

__all__ = ["Event", "EventStore", "Flow", "Report", "analyse", "make_analyzer",
           "BATCH", "EVENT_KINDS", "KIND_KEYS", "KIND_NAMES", "MAX_EVENTS_PER_KIND",
           "SEVERITIES", "TEXTS", "totals"]

ENGINES = ("auto", "compiled", "reference")


def __getattr__(name: str) -> Any:
    if name == "Analyzer":  # the interpreted form, imported only when asked for
        from roce.analysis.flowref import Analyzer

        return Analyzer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_analyzer(udp_port: int = locate.ROCE_PORT, *, batch: int = BATCH,
                  max_events: int = MAX_EVENTS_PER_KIND, engine: str = "auto") -> Any:
    """An analyser: ``engine`` "compiled" (``cflows.CompiledAnalyzer``, the build's form of
    ``flowref``), "reference" (``flowref.Analyzer`` interpreted) or "auto" (compiled when
    it is built from the source now there)."""
    if engine not in ENGINES:
        raise UsageError(f"unknown analysis engine {engine!r}: use one of {ENGINES}")
    if engine == "compiled" or (engine == "auto" and cflows.AVAILABLE):
        return cflows.CompiledAnalyzer(udp_port, batch, max_events)
    # imported when it runs: `roce stats` needs only the compiled form
    from roce.analysis.flowref import Analyzer

    return Analyzer(udp_port, batch, max_events)


def analyse(frames: Iterable[Any], udp_port: int = locate.ROCE_PORT, *, batch: int = BATCH,
            max_events: int = MAX_EVENTS_PER_KIND, engine: str = "auto") -> Report:
    """Analyse a ``CaptureReader`` or an iterable of ``pcapio.Frame`` (or Ethernet frames as
    bytes); see :func:`make_analyzer` for ``engine``."""
    a = make_analyzer(udp_port, batch=batch, max_events=max_events, engine=engine)
    if hasattr(frames, "batches"):
        a.feed_capture(frames)
    else:
        a.feed(frames)
    return a.finish()



def merged_latency(hists: list[dict[str, Any]]) -> dict[str, Any]:
    """The completion and ACK round-trip times of several reports together (each report's
    ``latency_hists``): their histograms merged, so that the percentiles are those of every
    value, not a mix of each report's percentiles (``flowref.merged_latency``)."""
    from roce.analysis import flowref

    return flowref.merged_latency(hists)
