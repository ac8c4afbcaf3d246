"""The emulator modules shipped compiled, and how to run their pure-Python form.

The per-packet path of the emulator (event loop, links, switch, NIC, congestion control, the
QP's requester and responder) is plain Python.  ``setup.py`` compiles the modules listed here
with Cython, unchanged: the compiled module and the ``.py`` beside it are one definition in
two forms, the same rules run in C or by the interpreter (docs/architecture.md, "Compiled
modules").  The build records each source's hash (``SOURCES``); a module whose ``.py`` no
longer matches it (edited since the build) is loaded from the ``.py``, with one warning, so
an edit is never hidden by a stale build.  ``ROCE_PURE=1`` in the environment loads the
``.py`` form of every one of them; the twin tests (tests/test_compiled_twins.py) run the same
scenarios both ways and require identical results.

The classes of ``CLASSES`` compile as extension types (Cython ``cdef`` classes): their
attributes live in C struct fields and their methods are ``cpdef``, so a method reaches its
own attributes, and the typed objects it holds, without a dictionary lookup.  What Cython needs
to know about them is generated (``pxd_text``, written beside each ``.py`` by the build) from
the ``.py`` itself: the attributes are the class's ``__slots__`` (a dataclass: its fields), so
the interpreted form refuses the same attributes the compiled one cannot hold.  ``CLASSES``
adds only what the source cannot say: which attributes, arguments and locals hold which of
these classes.  Since compiled modules refer to each other's types, one stale module sends
every module to its ``.py`` form.

``TWINS`` are modules the build compiles from another module's ``.py`` under a name of their
own, so that both forms run in one process: the flow engine, ``roce/analysis/flowref.py``,
interpreted as the reference and compiled as ``roce.analysis._flowengine`` (its C types in a
hand-written ``_flowengine.pxd``), and Ultra Ethernet's PDC engine, ``uetref.py`` as
``roce.analysis._uetengine`` (``_uetengine.pxd``).  The build records their sources' hashes
too; ``stale_twin`` tells their users (``roce.analysis.cflows``, ``uetflows``) whether the
build still matches.

This module imports nothing from ``roce``: ``setup.py`` reads it before anything is built.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import warnings

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
# ast parses sources for the .pxd generation: imported there (the build), not at every start
if TYPE_CHECKING:
    import ast
    from collections.abc import Callable
    from typing import Any

# What is compiled is what measurably speeds up the emulator's benchmarks (bench/bench_cc.py,
# bench/bench_emulator.py, bench/emu_speed_ab.py): each module costs install time
# (bench/RESULTS.md, "Install time").  Selective repeat (``core.selective``) is compiled as
# extension types that override the requester's, responder's and completer's methods in C: a
# leaf-spine with spraying runs its loop in 17 % less CPU (compiled as plain classes, it had
# run ~5 % slower).  Left interpreted, since compiling them made those runs no faster: the
# recovery settings (``core.recovery``), UC and UD (``core.unreliable``), the per-hop header
# helpers (``net.hop``: their per-packet rewrite is in the fast path already), and in
# roce/emu/cc/ the few modules of ``_CC_INTERPRETED``.

# roce/emu/cc/: every module is an algorithm or on its per-event path (the interface, the NIC's
# engine, the notification point), so a new algorithm's module is compiled without a row here;
# the modules named here are not: configuration, read once per run, what compiling
# measurably did not speed up (TIMELY; DCTCP and Swift: a 16:1 incast of 4 MiB each took
# 1.02x and 0.99x the CPU interpreted, medians of 5 alternating runs, where HPCC took 1.04x
# and UET's RCCC 1.03-1.07x: those stay compiled).  The interface (``base``) is an extension
# type, so that the driver reads an algorithm's per-frame state in C, and DCQCN's reaction
# point is one too (CLASSES); the others subclass it as Python classes.
_CC_INTERPRETED = ("__init__", "algorithms", "experiments", "params", "timely", "dctcp",
                   "swift")


def _cc_modules(where: str = "") -> list[str]:
    """The modules of roce/emu/cc (``where``: a directory standing for it) that are compiled."""
    where = where or os.path.join(os.path.dirname(os.path.abspath(__file__)), "emu", "cc")
    return [f"roce.emu.cc.{name[:-3]}" for name in sorted(os.listdir(where))
            if name.endswith(".py") and name[:-3] not in _CC_INTERPRETED]


MODULES = (
    "roce.psn",
    "roce.emu.core.completer",
    "roce.emu.core.device",
    "roce.emu.core.memory",
    "roce.emu.core.patterned",
    "roce.emu.core.placement",
    "roce.emu.core.work",
    "roce.emu.core.parts",
    "roce.emu.core.qp",
    "roce.emu.core.requester",
    "roce.emu.core.responder",
    "roce.emu.core.frames",
    "roce.emu.core.selective",
    "roce.emu.core.rack",
    *_cc_modules(),  # every congestion-control module but those of _CC_INTERPRETED
    "roce.emu.net.buffer",
    "roce.emu.net.direct",
    "roce.emu.net.faults",
    "roce.emu.net.callbacks",
    "roce.emu.net.link",
    "roce.emu.net.nic",
    "roce.emu.net.pfc",
    "roce.emu.net.sim",
    "roce.emu.net.stages",
    "roce.emu.net.switch",
    # native InfiniBand's per-packet path (bench/RESULTS.md, "Native InfiniBand against RoCE")
    "roce.emu.ib.credits",
    "roce.emu.ib.vltables",
    "roce.emu.ib.framing",
    "roce.emu.ib.ibswitch",
    "roce.emu.ib.hca",
    # Ultra Ethernet's PDS, SES and host (``--protocol uet``): per packet as the QP's parts
    "roce.emu.uet.pds",
    "roce.emu.uet.ses",
    "roce.emu.uet.host",
)

# Classes compiled as extension types, by module.  Per class: "attr": "T" types an attribute,
# "method.name": "T" an argument or a local of that method (T: a class of this table or of
# C_TYPES, reached in C once typed); "method": "def" keeps a method a plain def.  Every other
# method without a closure, a generator or a decorator becomes ``cpdef``.  A class has no base,
# or one class of this table that ``OPEN`` names (an override of its ``cpdef`` method must
# compile as ``cpdef`` too: the same arguments, no closure or generator).
CLASSES: dict[str, dict[str, dict[str, str]]] = {
    # ``at`` is handed around as a bound method (``PfcSender``); Cython cannot take a cpdef
    # method with optional arguments as a value from a typed object
    "roce.emu.net.sim": {"Network": {"at": "def", "events": "EventQueue",
                                     "run_until_any.q": "EventQueue",
                                     "run_until_any.h": "Callback"}},
    # what the loop calls per frame in C (a wire, the endpoint a frame arrives at)
    "roce.emu.net.callbacks": {"Callback": {}},
    # a link's counters: two per frame carried
    "roce.emu.net.faults": {"LinkStats": {a: "long" for a in (
                                "frames", "bytes", "lost", "duplicated", "corrupted",
                                "reordered", "filtered")},
                            # a link direction's configuration: its rate and delay read per
                            # frame sent
                            "LinkConfig": {},
                            "Faults": {"stats": "LinkStats", "config": "LinkConfig"}},
    # a two-host link: its fate decided per frame (``watch``, not a replaced ``fate``, spies)
    "roce.emu.net.direct": {"Link": {"faults": "Faults", "fate.faults": "Faults",
                                     "clean_arrival.faults": "Faults",
                                     "_serialize.bits": "long", "_serialize.rate": "double"},
                            "DirectNic": {"net": "Network", "device": "Device", "links": "dict",
                                          "receive.dev": "Device", "_after.dev": "Device",
                                          "_transmit.net": "Network",
                                          "_transmit.link": "Link", "_only": "Link",
                                          "_only_mac": "bytes", "_transmit.f": "bytes",
                                          "_transmit.events": "EventQueue"}},
    # the end a wire pulls from: the base of NICs, switch ports, HCAs and UET hosts
    "roce.emu.net.link": {"PullEndpoint": {},
                          "_Wake": {"wire": "Wire"},
                          "Wire": {"src": "PullEndpoint", "_stats": "LinkStats",
                                   "_events": "EventQueue",
                                   "faults": "Faults", "fire.events": "EventQueue"}},
    "roce.emu.net.pfc": {"PauseState": {}, "PfcSender": {}},
    # ``congested`` is handed to PFC as a bound method (``PfcSender.xoff``): taken from a
    # typed object, Cython makes a cpdef method a C function of the wrong signature (an error
    # with GCC >= 14, a call without its hidden argument otherwise)
    "roce.emu.net.buffer": {"Account": {"congested": "def", "held": "list"},
                            # the interface a switch calls per frame (in C): its models'
                            # base, typed as they are
                            "BufferPolicy": {f"{m}.acct": "Account" for m in (
                                "admit", "release", "should_pause", "should_resume")},
                            "SharedBuffer": {
                                **{f"{m}.acct": "Account" for m in (
                                    "admit", "release", "should_pause", "should_resume")},
                                # byte counts: C integers (a frame's, the pools')
                                **{a: "long" for a in (
                                    "size", "reserve", "max_frame", "carved", "shared_size",
                                    "shared_used", "used", "max_used", "lossless_drops",
                                    "resume_offset")},
                                "admit.m": "long", "admit.pool": "long",
                                "admit.r": "long", "admit.s": "long", "admit.h": "long",
                                "should_pause.h": "long", "should_pause.alpha": "double",
                                "_within_threshold.h": "long",
                                "_within_threshold.alpha": "double",
                                "release.m": "long", "release.p": "long"}},
    # the switch's ECN marker (one call per frame dequeued) and forwarder (one per frame with
    # a choice of ports): the base classes a switch calls, and their models
    "roce.emu.net.stages": {"Marker": {}, "NoMarker": {}, "Forwarder": {},
                            # RED's thresholds (bytes, ``parse_size``'s range) and Pmax
                            "RedMarker": {"kmin": "long", "kmax": "long", "pmax": "double",
                                          "probability.b": "long", "mark.b": "long"},
                            "EcmpForwarder": {}, "SprayForwarder": {}, "Pacer": {},
                            "RatePacer": {}},
    "roce.emu.net.switch": {
        "SwitchPort": {"switch": "Switch", "wire": "Wire", "pause": "PauseState",
                       "pfc": "PfcSender", "marker": "Marker",
                       **{a: "list" for a in ("queues", "qbytes", "in_acct", "eg_acct")},
                       **{a: "long" for a in ("index", "queued", "mask", "rr", "rx_frames",
                                              "tx_frames", "max_queue_bytes", "int_tx",
                                              "_strict_mask")},
                       "pull.m": "long", "pull.tc": "long", "pull.top": "bytes",
                       "pull.k": "long"},
        "Switch": {"net": "Network", "routes": "dict", "no_route": "long", "not_ip": "long",
                   "_lossless_mask": "long", "_table": "bytes",
                   "buffer": "BufferPolicy", "forwarder": "Forwarder",
                   # per frame, in and out: its bytes read, its class, lengths and queue
                   # bytes in C; the buffer, the ports and the account it is counted in typed
                   **{f"ingress.{v}": "long" for v in ("at", "tc", "n", "q", "dst")},
                   **{f"dequeue.{v}": "long" for v in ("at", "ecn", "c", "q", "n")},
                   **{f"{m}.{v}": "bytes" for m, v in (("ingress", "f"), ("ingress", "table"),
                                                       ("dequeue", "f"), ("dequeue", "ecns"))},
                   **{f"{m}.buf": "BufferPolicy" for m in ("ingress", "dequeue")},
                   **{f"{m}.acct": "Account" for m in ("ingress", "dequeue")},
                   "ingress.port": "SwitchPort", "ingress.out": "SwitchPort",
                   "dequeue.port": "SwitchPort", "dequeue.inport": "SwitchPort",
                   "stamp.port": "SwitchPort"}},
    "roce.emu.core.frames": {"FrameBuilder": {}, "Incoming": {
        "fill.ops": "dict", "fill.ecns": "dict", "fill.f": "bytes", "fill.flags": "long",
        **{a: "long" for a in ("starts", "ends", "request")},  # the opcode's bits, 0 or 1
        **{f"fill.{v}": "long" for v in ("l3_off", "off", "shift", "mask", "at", "bth_off",
                                         "payload_off", "pad_off")}}},
    "roce.emu.core.memory": {"MemoryRegion": {"content": "Patterned"},
                             # a device's MRs: a remote request's key looked up per packet
                             "AddressSpace": {"regions": "dict",
                                              "lookup_remote.mr": "MemoryRegion"}},
    # a seeded region's reads and writes: one of each per data packet
    "roce.emu.core.patterned": {
        "Patterned": {**{a: "long" for a in ("slot", "length", "writes", "_own_at",
                                             "_target_at")},
                      **{f"piece_at.{v}": "long" for v in ("o", "m", "chunk", "slot", "j", "lo",
                                                           "plo", "at", "size")},
                      **{f"pattern.{v}": "long" for v in ("o", "m", "plo")},
                      **{f"write.{v}": "long" for v in ("o", "n", "end")},
                      **{f"write_from.{v}": "long" for v in ("o", "m")},
                      "_holds_target.last": "long",
                      "_holds_target.good": "list",
                      "pattern.got": "bytes", "write.got": "bytes", "write_from.got": "bytes",
                      "read_at.o": "long", "read_at.got": "bytes",
                      "_seeds": "dict", "_make.recent": "dict"},
        "PatternView": {"content": "Patterned", "off": "long", "n": "long", "part.a": "long",
                        "part.b": "long"}},
    "roce.emu.core.placement": {"WriteCursor": {"take.qp": "QueuePair", "take.pkt": "Incoming",
                                                "take.dev": "Device",
                                                "take.mr": "MemoryRegion",
                                                "take.memory": "AddressSpace"}},
    # selective repeat's send record: a call or two per packet sent and acknowledged
    "roce.emu.core.rack": {"Rack": {}},
    # a QP's parts as it calls them: per packet, the RC parts in C
    "roce.emu.core.parts": {"RequesterPart": {}, "ResponderPart": {"receive.pkt": "Incoming"},
                            "CompleterPart": {"receive.pkt": "Incoming"}},
    "roce.emu.core.qp": {"Counters": {a: "long" for a in (
                             "packets_sent", "packets_received", "retransmitted", "timeouts",
                             "rnr_naks_received", "rnr_naks_sent", "duplicates",
                             "out_of_sequence", "messages_executed", "wrong_transport",
                             "ce_received", "duplicate_requests", "ooo_accepted", "sacks_sent",
                             "sacks_received", "selective_retransmitted")},
                    # its attributes (``ibv_qp_attr``): the peer's QPN and the access
                    # flags read per packet
                    "QPAttr": {},
                    "QueuePair": {"counters": "Counters", "builder": "FrameBuilder",
                                  "attr": "QPAttr",
                                  "requester": "RequesterPart", "responder": "ResponderPart",
                                  "completer": "CompleterPart",
                                  "receive.pkt": "Incoming"}},
    "roce.emu.core.device": {"DeviceCounters": {a: "long" for a in (
                                 "frames_in", "frames_out", "icrc_drops", "malformed",
                                 "not_roce", "unknown_qp")},
                        "Device": {"counters": "DeviceCounters", "receive.qp": "QueuePair",
                                   # its QPs and timer records: looked up on every event
                                   "qps": "dict", "_heap": "list", "_armed": "dict",
                                   "_touched": "dict",
                                   "receive.pkt": "Incoming", "_rearm.qp": "QueuePair",
                                   "on_timer.qp": "QueuePair"}},
    # a send WQE: read several times per packet sent (its PSNs, packets, views)
    "roce.emu.core.work": {"SendWQE": {a: "long" for a in ("length", "npkts", "npsn",
                                                           "first_psn", "read_next")}},
    "roce.emu.core.requester": {"Requester": {"qp": "QueuePair", "pump.wqe": "SendWQE",
                                              # its PSNs and positions (the window may be a
                                              # congestion control's float: not typed)
                                              **{a: "long" for a in ("cur", "cur_pkt", "psn",
                                                                     "una", "noack")},
                                              "_send_packet.wqe": "SendWQE",
                                              "_data_row.wqe": "SendWQE"}},
    "roce.emu.core.responder": {"Responder": {"qp": "QueuePair", "write": "WriteCursor",
                                              "_execute.access": "dict",
                                              "epsn": "long", "msn": "long",
                                              "receive.pkt": "Incoming",
                                              "_execute.pkt": "Incoming",
                                              "_write.pkt": "Incoming"}},
    "roce.emu.core.completer": {"Completer": {"qp": "QueuePair", "receive.pkt": "Incoming"}},
    # selective repeat's parts: overrides of the parts above, typed as they are
    "roce.emu.core.selective": {"SRRequester": {"_send_packet.wqe": "SendWQE",
                                                "_data_row.wqe": "SendWQE"},
                                "SRResponder": {"receive.pkt": "Incoming",
                                                "_write.pkt": "Incoming"},
                                "SRCompleter": {"receive.pkt": "Incoming"}},
    # the congestion-control driver: its tables read on every frame a NIC sends or receives
    # the algorithms' interface: what the driver reads per frame (the byte counter's room)
    # and the timers it reads per event, in C
    "roce.emu.cc.base": {"CongestionControl": {"_timers": "dict", "byte_room": "long"}},
    # DCQCN's reaction point: a call per CNP and per timer, its rules on C fields (times in
    # ns, counters, and the gain, alpha and decrease floor: floats, as the .py computes them)
    "roce.emu.cc.dcqcn": {"Dcqcn": {
        **{a: "long" for a in ("alpha_period", "time_reset", "byte_reset", "threshold",
                               "monitor", "_alpha_t", "t_stage", "b_stage", "cnps", "cuts")},
        **{a: "double" for a in ("g", "alpha", "min_dec")}}},
    # (a pacer's times and byte counts: virtual ns and bytes)
    "roce.emu.cc.engine": {"CcPacer": {**{f"sent.{v}": "long" for v in ("t", "n", "start",
                                                                        "bits", "rate")},
                                       **{a: "long" for a in ("_next", "_start", "_bits",
                                                              "bytes_sent")}}, "CcDriver": {
        "np": "NotificationPoint", "received.f": "bytes",
        # an algorithm where the driver calls it or reads its byte counter
        **{f"{m}.cc": "CongestionControl" for m in ("received", "transmitted", "_rtt",
                                                     "_resent")},
        "transmitted.room": "long", "_apply.pacer": "CcPacer",
        **{f"received.{v}": "long" for v in ("at", "kind", "qpn", "bth", "ecn")},
        **{a: "dict" for a in ("qps", "algos", "pacers", "_cnps", "_sent_at", "_armed",
                               "_want", "_own", "_timeouts", "_echo", "_uses_cnp")},
        **{a: "long" for a in ("cnps_received", "rtt_samples", "int_acks")}}},
    # the notification point: a call per CE-marked packet received (its counters, a QP's
    # last CNP time)
    "roce.emu.cc.np": {"CnpBuilder": {}, "NotificationPoint": {
        "_last": "dict", **{a: "long" for a in ("min_gap", "ce_packets", "cnps_sent",
                                                "suppressed")}}},
    # locals the credit rules bound (12-bit counters, a packet's bytes and blocks, the blocks
    # a buffer holds): C integers (``SCALARS``); what the buffer's size reaches is not one
    "roce.emu.ib.credits": {"Credits": {
        **{a: "list" for a in ("fctbs", "limit", "abr", "used", "blocks_sent",
                               "blocks_received", "max_used", "_seen", "adv")},
        **{a: "set" for a in ("owed", "init_owed", "batched")},
        **{f"may_send.{x}": "long" for x in ("v", "limit", "sent", "n", "block", "mod",
                                             "half")},
        **{f"sent.{x}": "long" for x in ("v", "n", "block", "mod", "b", "sent")},
        **{f"fccl.{x}": "long" for x in ("v", "abr", "grant", "mod", "half")},
        **{f"received.{x}": "long" for x in ("v", "n", "block", "mod", "b", "u", "a", "top",
                                             "adv")},
        **{f"released.{x}": "long" for x in ("v", "n", "block", "mod", "u", "adv", "abr")},
        **{f"take.{v}": "long" for v in ("vl", "op", "fccl", "sent", "op_at", "sent_at",
                                         "vl_at", "fccl_at")},
        **{f"on_packet.{v}": "long" for v in ("word", "vl", "mask", "sent_at", "vl_at",
                                              "fccl_at")},
        **{f"on_timer.{v}": "long" for v in ("vl", "vls")}}},
    "roce.emu.ib.vltables": {"SlToVl": {},
                             "_Table": {**{f"pick.{v}": "long" for v in ("n", "at", "block",
                                                                         "weight")},
                                        **{f"idle.{v}": "long" for v in ("n", "at", "block",
                                                                         "weight")}},
                             "VlArbiter": {"high": "_Table", "low": "_Table"}},
    "roce.emu.ib.framing": {"Framer": {}},
    "roce.emu.ib.ibswitch": {
        "IbPort": {"switch": "IbSwitch", "wire": "Wire", "credits": "Credits",
                   "queues": "list", "busy": "set",
                   "sl2vl": "SlToVl", "arbiter": "VlArbiter", "pull.cr": "Credits",
                   "pull.inp": "IbPort", "receive.cr": "Credits", "receive.out": "IbPort",
                   "enqueue.inp": "IbPort"},
        "IbSwitch": {"net": "Network"}},
    "roce.emu.net.nic": {"Nic": {"wire": "Wire", "net": "Network", "pause": "PauseState",
                                 "_rings": "list", "_busy": "list", "_tcache": "dict",
                                 "_prio": "dict", "pacers": "dict",
                                 "cc": "CcDriver", "device": "Device", "receive.dev": "Device",
                                 "receive.qp": "QueuePair", "receive.f": "bytes",
                                 "pull.qp": "QueuePair", "_take.qp": "QueuePair",
                                 "_take.tx": "_TxList", "_take.pacer": "Pacer",
                                 "pull.pacer": "Pacer", "_note.qp": "QueuePair",
                                 "pull.until": "list", "pull.prio": "long",
                                 "pull.tx": "_TxList"},
                         # a QP's transmit list: a frame in and out per packet sent
                         "_TxList": {"frames": "list", "nic": "Nic", "sent_bytes": "long",
                                     "pacer": "Pacer"}},
    # a Nic with an InfiniBand port; ``_ccti_timer`` is handed on as a bound method (to the
    # event loop)
    "roce.emu.ib.hca": {"Hca": {"credits": "Credits", "sl2vl": "SlToVl", "slots": "list",
                                "arbiter": "VlArbiter", "framer": "Framer",
                                "receive.cr": "Credits", "pull.cr": "Credits",
                                "next_tx.cr": "Credits", "_ready.cr": "Credits",
                                "_ccti_timer": "def"}},
    "roce.emu.uet.pds": {
        "Pdc": {}, "Sent": {}, "Out": {"pdc": "Pdc"},
        "Pds": {"pull.pdc": "Pdc", "deadline.pdc": "Pdc", "on_timer.pdc": "Pdc",
                "_in_window.pdc": "Pdc", "_sendable.pdc": "Pdc", "_next_request.pdc": "Pdc",
                "_next_request.s": "Sent", "_transmit.pdc": "Pdc", "_transmit.s": "Sent",
                "_queue.pdc": "Pdc", "_on_request.pdc": "Pdc", "_send_ack.pdc": "Pdc",
                "_on_ack.pdc": "Pdc", "_on_ack.s": "Sent", "_on_nack.pdc": "Pdc"}},
    # ``Piece``: one per data packet, made when a message is posted and read at each sending
    "roce.emu.uet.ses": {"Ses": {"pds": "Pds"}, "Piece": {"region": "MemoryRegion"}},
    # ``_on_timer`` is handed to the event loop as a bound method (as ``Network.at`` is)
    "roce.emu.uet.host": {"UetHost": {"pds": "Pds", "ses": "Ses", "pull.o": "Out",
                                      "_on_timer": "def"}},
}
# C types an attribute or a method's local may take in CLASSES ("frames": "long",
# "method.local": "long"): its arithmetic then runs in C, without a Python integer per step.
# Only where every value the rules give it is an integer a C long holds (a counter, a PSN, a
# byte count or offset of our own): Python code still reads and writes an int, but the
# compiled form would raise (TypeError, OverflowError) where the .py would carry on with a
# float, None or a larger integer.  Never an argument's type: what callers hand in stays the
# .py's (a peer's 64-bit address may not fit).  "double": a local that holds a float the .py
# divides by (a link's rate in Gb/s); an int there becomes the same float, and dividing by it
# gives the same quotient (IEEE division is correctly rounded, as Python's is); or an
# attribute the .py only ever gives a float (DCQCN's alpha).
SCALARS = frozenset({"long", "double"})
# Builtin types an attribute or a method's local may be typed as in CLASSES ("owed": "set"):
# Cython then tests, indexes and adds in C (``PySet_Add``, a list's item, a dictionary's
# ``get`` and ``items``, a bytes object's ``startswith`` at an offset), without a method call
# (a typed bytes object's slice is no faster: Cython slices it generically).  Not an
# argument's type: what callers hand in stays the .py's.  The attribute or local then holds
# that type (or None) only, as the .py always gives it.
CONTAINERS = frozenset({"list", "set", "dict", "bytes"})
# The classes of CLASSES that other classes subclass (selective repeat's requester, responder
# and completer, in Python; InfiniBand's HCA, itself a class of CLASSES, is a NIC; a test's
# region that misplaces bytes is a ``Patterned``; the fuzzer's planted bug is a device's
# ``AddressSpace``; the bases a caller types its per-packet calls with: a QP's parts, whose UC
# and UD classes are Python, a switch's and a NIC's stages, the end a wire pulls from, the
# event loop's callbacks: wires and endpoints; the congestion-control interface, whose
# algorithms but DCQCN's are Python).  Every
# other one but such a subclass is final (``@cython.final``): Cython then calls its methods
# without checking for an override, and writes less C for each.
OPEN = frozenset({"Nic", "Requester", "Responder", "Completer", "Patterned", "BufferPolicy",
                  "Marker", "Forwarder", "RequesterPart", "ResponderPart", "CompleterPart",
                  "PullEndpoint", "Pacer", "Callback", "CongestionControl",
                  "AddressSpace"})
# Extension types of the hand-written fast path (roce/_fastpath.pxd) that CLASSES may type with,
# by the module they are cimported from: the event queue the loop and the wires schedule on.
C_TYPES = {"EventQueue": "roce._fastpath"}
# Functions of the hand-written fast path that compiled modules import, by the module they
# import them from (``roce.fast``; ``roce.emu.net.hop`` for a switch hop's rewrite: the fast
# path's names there, when it is built: a compiled module is built with it), and call per
# packet: their ``.pxd`` cimports them from the fast path, so the call is a C call (building,
# reading and forwarding a frame).
C_FUNCTIONS = {"roce.fast": ("roce._fastpath", ("assemble", "bth_pack", "rx", "same_bytes")),
               "roce.emu.net.hop": ("roce._fastpath", ("routed",)),
               "roce.emu.net.serial": ("roce._fastpath", ("serial_end",))}

# Module-level functions of a compiled module declared ``cpdef`` too: its classes' methods, and
# every compiled module that imports one by its name (``pxd_text`` cimports it there), call
# them per packet in C, not through a Python call.  Each must compile as a method does (no
# closure, generator or decorator).
FUNCTIONS: dict[str, tuple[str, ...]] = {
    "roce.emu.ib.credits": ("blocks",),
    "roce.emu.ib.framing": ("lrh",),
    "roce.emu.ib.ibswitch": ("link_packet", "on_refresh", "refresh", "start_refresh",
                             "wake_refresh"),
    "roce.emu.uet.pds": ("ahead",),  # PSN distances: several per packet
    "roce.emu.uet.ses": ("space",),  # a message's ID space: per packet
    "roce.psn": ("psn_diff",),  # PSN distances: several per packet, from every QP part
    "roce.emu.core.frames": ("select", "receive"),  # a packet's opcode row; its parse
    "roce.emu.core.requester": ("_position",),
    "roce.emu.net.callbacks": ("deliverer",),  # an arrival's callback: per frame
    "roce.emu.cc.engine": ("_fixed",),  # the shape test of every frame a NIC's CC reads
    # the ranges a seeded region's writes hold: one test per packet placed
    "roce.emu.core.patterned": ("_add", "_remove", "_covers", "_touches", "_remember"),
    # the checks of a WRITE's placement: per packet (typed: the MR's fields read in C)
    "roce.emu.core.memory": ("check_remote", "take", "take_at"),  # and a packet's payload, read
    "roce.emu.core.placement": ("check_length",),
}
# Arguments and locals of those functions typed, by module: "function.argument": "T", a class
# of CLASSES (the function then reaches T's methods in C, as a method reaches a typed
# attribute's); "function.local": such a class, a C type (``SCALARS``) or a builtin
# (``CONTAINERS``), as a method's local.
FUNCTION_ARGS: dict[str, dict[str, str]] = {
    "roce.emu.core.memory": {"check_remote.mr": "MemoryRegion", "take.pv": "PatternView",
                             # a message's offset and a packet's bytes: C integers
                             "take_at.pv": "PatternView", "take_at.o": "long",
                             "take_at.m": "long"},
    "roce.emu.core.placement": {"check_length.pkt": "Incoming"},
    "roce.emu.core.frames": {"receive.pkt": "Incoming"},
    "roce.emu.cc.engine": {"_fixed.f": "bytes", "_fixed.want": "long"},
    "roce.emu.ib.ibswitch": {"link_packet.credits": "Credits", "refresh.credits": "Credits",
                             "refresh.wire": "Wire"},
}
# Module-level constants of a compiled module that its per-frame code reads, by module: name
# -> a C type (``SCALARS``) or a builtin (``CONTAINERS``).  Declared in its ``.pxd``, reading
# one is a load in C, where a module global is a dictionary lookup and, for a C local, a
# conversion.  Python code cannot read such a name from the compiled module: only the
# module's own private names (``_``), each assigned once at its top level.
CONSTANTS: dict[str, dict[str, str]] = {
    # the offsets and values of the fixed frame shape every frame is tested against, and
    # what a received frame's opcode makes of it
    "roce.emu.cc.engine": {**{n: "long" for n in (
        "_ETYPE", "_ET0", "_ET1", "_L3", "_VIHL_B", "_PROTO", "_DPORT", "_MIN_LEN", "_BTH",
        "_OP_AT", "_ECN_AT", "_ECN_SHIFT", "_ECN_MASK", "_DQ_OFF", "_CE", "_OTHER", "_IS_CNP",
        "_IS_ACK", "_IS_DATA")}, "_KIND": "bytes"},
    # a switch's reads of every frame: the EtherType, the destination address, the TOS byte
    # and its ECN bits, a queue's class
    "roce.emu.net.switch": {**{n: "long" for n in ("_ETYPE0", "_DST0", "_TOS", "_NOT_ECT",
                                                   "_CE")},
                            **{n: "bytes" for n in ("_IPV4", "_ECN_OF", "_TOP_CLASS")}},
    # a packet's opcode bits, by opcode
    "roce.emu.core.frames": {"_FLAGS": "bytes"},
    # a seeded region's piece size: where a packet's payload starts in its piece
    "roce.emu.core.patterned": {"_CHUNK": "long"},
}
PXD_HEADER = "# Generated by the build from the .py beside it and roce/_compiled.py: do not edit.\n"

# Compiled module -> the module whose .py it is built from (see the docstring).  No part of the
# all-or-none choice of MODULES: nothing there holds their types.
TWINS = {"roce.analysis._flowengine": "roce.analysis.flowref",
         "roce.analysis._uetengine": "roce.analysis.uetref"}

PURE_ENV = "ROCE_PURE"  # set to 1: load the .py form of MODULES
SOURCES = "_compiled_sources.json"  # written by the build beside this file: module -> hash
_HERE = os.path.dirname(os.path.abspath(__file__))


def _sha256() -> object:
    """SHA-256 as CPython builds it in: importing ``hashlib`` loads and starts OpenSSL, a few
    milliseconds of every start of roce for the hashes checked at import."""
    for name in ("_sha2", "_sha256"):  # Python 3.12+, 3.11
        try:
            return importlib.import_module(name).sha256
        except (ImportError, AttributeError):
            pass
    import hashlib
    return hashlib.sha256


_SHA256 = _sha256()


def source_hash(path: str) -> str:
    with open(path, "rb") as f:
        return _SHA256(f.read()).hexdigest()


_hash_of: Callable[[str], str] = source_hash  # what stale_modules compares; see cache_hashes
_file_value: Callable[[str, Callable[[str], Any]], Any] | None = None  # see cache_hashes


def cache_hashes(file_value: Callable[[str, Callable[[str], Any]], Any]) -> None:
    """Have ``stale_modules`` take each source's digest, and the build's record, through
    ``file_value(path, read)`` (roce.codecache.file_hash: computed again only when the file
    changed).  Not imported here: the build runs this file alone (setup.py), without the
    package."""
    global _hash_of, _file_value
    _hash_of = lambda path: file_value(path, source_hash)  # noqa: E731
    _file_value = file_value


def pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def _read_record(path: str) -> object:
    import json  # here: a start that finds the record in the start-up cache never parses it

    with open(path) as f:
        return json.load(f)


def _built() -> dict[str, Any]:
    path = os.path.join(_HERE, SOURCES)
    try:
        record = _read_record(path) if _file_value is None else _file_value(path, _read_record)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _sources(root: str) -> dict[str, str]:
    """What a build is made from: each module's ``.py``, and this file (its ``CLASSES``)."""
    out = {name: os.path.join(root, *name.split(".")) + ".py" for name in MODULES}
    out["roce._compiled"] = os.path.join(root, "roce", "_compiled.py")
    return out


def stale_modules() -> list[str]:
    """The sources edited since the build (all of them when nothing was built)."""
    built = _built()
    return [name for name, path in _sources(os.path.dirname(_HERE)).items()
            if built.get(name) != _hash_of(path)]


class _Chooser:  # a meta path finder (importlib.abc would import importlib.resources)
    """Decides which form of the modules of MODULES is loaded: the compiled ones when every
    source is the one they were built from, else every ``.py`` (always, under ROCE_PURE).
    All or none: a compiled module holds the types of others, it cannot run beside the
    ``.py`` form of one of them."""

    def __init__(self, pure: bool) -> None:
        self.pure = pure
        self.stale: list[str] = []
        self._checked = pure

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        """The spec of a module of ``roce`` (None for others: the normal import).  Having
        looked a module up, it answers with what it found, so the normal import does not
        search the package's directory again (a third of the finding at start)."""
        if name not in MODULES:
            return _source_spec(name, path) if name.startswith("roce.") else None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.origin is None or spec.origin.endswith(".py"):
            return spec  # not built (or not found): the .py, as the normal import finds it
        src = os.path.join(os.path.dirname(spec.origin), name.rpartition(".")[2] + ".py")
        if not os.path.exists(src):
            return None
        if not self._checked:  # once, at the first compiled module imported
            self._checked = True
            self.stale = stale_modules()
            if self.stale:
                warnings.warn(f"roce: {', '.join(self.stale)} edited after the build; running "
                              "the .py form of every compiled module (slower). Rebuild with: "
                              "pip install -e .", RuntimeWarning, stacklevel=2)
        if self.pure or self.stale:
            return importlib.util.spec_from_file_location(name, src)
        spec.loader = _ExtensionLoader(name, spec.origin)
        return spec


_ARGSPECS: dict[object, object] = {}  # function -> its argument spec (_ExtensionLoader)


class _ExtensionLoader(importlib.machinery.ExtensionFileLoader):
    """Loads a compiled module of MODULES as Python would, with one saving: Cython makes
    each field of a compiled dataclass by asking ``inspect.getfullargspec`` about
    ``dataclasses.field`` again, some sixty times at every start of the emulator (2-3 ms).
    While such a module runs its body, a function's argument spec, once computed, is reused
    (for any caller in the process: the same function has the same answer)."""

    def exec_module(self, module: object) -> None:
        inspect = sys.modules.get("inspect")
        if type(inspect) is not type(sys):  # none yet, or roce/_deferred.py's stand-in
            return super().exec_module(module)
        plain = getattr(inspect, "getfullargspec", None)
        if plain is None or getattr(plain, "memo", None) is not None:
            return super().exec_module(module)  # a module being run
        memo = _ARGSPECS

        def getfullargspec(func: object) -> object:
            try:
                return memo[func]
            except KeyError:
                spec = memo[func] = plain(func)
                return spec
            except TypeError:  # unhashable
                return plain(func)

        getfullargspec.memo = memo  # type: ignore[attr-defined]
        inspect.getfullargspec = getfullargspec
        try:
            super().exec_module(module)
        finally:
            inspect.getfullargspec = plain


def _source_spec(name: str, path: object) -> object:
    """The ``.py`` of a module of ``roce`` not in MODULES when a compiled form sits beside it,
    else the ``.py`` the normal import finds (None for a compiled module without a ``.py``
    and for what is not found: the normal import).  That compiled form is left from an
    earlier build, when MODULES was longer (an in-place build removes it:
    ``leftover_builds``); nothing records what it was built from, so it would run old code.
    A compiled module without a ``.py`` beside it (``_fastpath``, the TWINS) is no
    leftover."""
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
        return spec
    src = os.path.join(os.path.dirname(spec.origin), name.rpartition(".")[2] + ".py")
    return importlib.util.spec_from_file_location(name, src) if os.path.exists(src) else None


def leftover_builds(root: str) -> list[str]:
    """Compiled modules in the source tree ``root`` that a build no longer makes: extension
    files beside the ``.py`` of a module not in MODULES (``setup.py`` removes them after an
    in-place build; until then ``_source_spec`` never loads them)."""
    out = []
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for d, _dirs, files in os.walk(os.path.join(root, "roce")):
        for f in files:
            stem = next((f[:-len(s)] for s in suffixes if f.endswith(s)), None)
            if stem is None or not os.path.exists(os.path.join(d, stem + ".py")):
                continue
            name = ".".join(os.path.relpath(os.path.join(d, stem), root).split(os.sep))
            if name not in MODULES:
                out.append(os.path.join(d, f))
    return sorted(out)


def install_finder() -> None:
    """Put the chooser ahead of the other finders (once)."""
    if not any(isinstance(f, _Chooser) for f in sys.meta_path):
        sys.meta_path.insert(0, _Chooser(pure_requested()))


def twin_sources(name: str) -> list[str]:
    """What the build makes a module of TWINS from, relative to the tree: the other module's
    ``.py`` and the ``.pxd`` of its C types."""
    return [TWINS[name].replace(".", "/") + ".py", name.replace(".", "/") + ".pxd"]


def stale_twin(name: str) -> list[str]:
    """The sources of ``name`` (a module of TWINS) edited since the build, all of them when it
    was never built."""
    built = _built().get(name)
    root = os.path.dirname(_HERE)
    # a source an installation left out cannot have been edited: only those present count
    return [rel for rel in twin_sources(name)
            if not isinstance(built, dict) or (os.path.exists(os.path.join(root, rel))
                                               and built.get(rel)
                                               != source_hash(os.path.join(root, rel)))]


def built_twin(name: str) -> bool:
    """Is there a compiled file of ``name`` (a module of TWINS)?"""
    base = os.path.join(os.path.dirname(_HERE), *name.split("."))
    return any(os.path.exists(base + ext) for ext in importlib.machinery.EXTENSION_SUFFIXES)


def write_sources(root: str) -> None:
    """The build's record of what it compiled (``setup.py`` calls this)."""
    out: dict[str, object] = {name: source_hash(path) for name, path in _sources(root).items()}
    for name in TWINS:
        out[name] = {rel: source_hash(os.path.join(root, rel))
                     for rel in twin_sources(name)}
    import json

    with open(os.path.join(root, "roce", SOURCES), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)


# -- the declarations Cython reads (.pxd), generated -------------------------------------------

def _is_dataclass(node: ast.ClassDef) -> bool:
    import ast
    return any("dataclass" in ast.unparse(d) for d in node.decorator_list)


def _attributes(node: ast.ClassDef) -> list[str]:
    """A class's attributes: its dataclass fields in order, or its ``__slots__``."""
    import ast
    if _is_dataclass(node):
        return [s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                and isinstance(s.target, ast.Name) and "ClassVar" not in ast.unparse(s.annotation)]
    for s in node.body:
        if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                             for t in s.targets):
            return list(ast.literal_eval(s.value))
    raise ValueError(f"{node.name}: a compiled class lists its attributes in __slots__")


def _compilable(fn: ast.FunctionDef) -> bool:
    """A method Cython can make ``cpdef``: no closure, generator, decorator or star argument."""
    import ast
    a = fn.args
    if fn.name.startswith("__") or fn.decorator_list or a.vararg or a.kwarg or a.kwonlyargs \
            or a.posonlyargs:
        return False
    nested = (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.Yield, ast.YieldFrom,
              ast.GeneratorExp)
    return not any(isinstance(x, nested) for x in ast.walk(fn) if x is not fn)


def _names(fn: ast.FunctionDef) -> list[str]:
    """A function's arguments and the names it assigns."""
    import ast
    out = [a.arg for a in fn.args.args]
    out += [n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    return out


def pxd_text(module: str, source: str) -> str:
    """The ``.pxd`` of ``module`` (its classes of ``CLASSES``, its functions of ``FUNCTIONS``)
    from its ``.py`` source."""
    import ast
    owner = {cls: mod for mod, classes in CLASSES.items() for cls in classes}
    owner.update(C_TYPES)
    tree = ast.parse(source)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    body: list[str] = []
    used: set[str] = set()
    for name, typed in CLASSES.get(module, {}).items():
        node = classes.get(name)
        if node is None:
            raise ValueError(f"{module}.{name}: no such class")
        # a base is one extension type of CLASSES (its attributes and methods are its own)
        bases = [b.id if isinstance(b, ast.Name) else "" for b in node.bases]
        if len(bases) > 1 or any(b not in owner or b in C_TYPES or b not in OPEN
                                 for b in bases):
            raise ValueError(f"{module}.{name}: a compiled class has no base or one class of "
                             "CLASSES that OPEN names")
        used.update(bases)
        attrs = _attributes(node)
        methods = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
        plain: set[str] = set()  # methods kept def
        var_types: dict[str, dict[str, str]] = {}  # method -> argument or local -> class
        for key, t in typed.items():
            meth, _, var = key.partition(".")
            if t == "def" and not var:
                if meth not in methods:
                    raise ValueError(f"{module}.{name}: no method {meth}")
                plain.add(meth)
                continue
            if t in SCALARS:
                if var and (meth not in methods or var in [a.arg for a in
                                                           methods[meth].args.args]):
                    raise ValueError(f"{module}.{name}: {key} typed {t}: a C type is for an "
                                     "attribute or a method's locals")
            elif t in CONTAINERS:
                if var and meth in methods and var in [a.arg for a in methods[meth].args.args]:
                    raise ValueError(f"{module}.{name}: {key} typed {t}: a builtin type is "
                                     "for an attribute or a method's locals")
            elif t not in owner:
                raise ValueError(f"{module}.{name}: {key} typed {t}, not a class of CLASSES "
                                 "or C_TYPES")
            known = attrs if not var else _names(methods[meth]) if meth in methods else []
            if (var or meth) not in known:
                raise ValueError(f"{module}.{name}: {key} names nothing there")
            if t not in SCALARS and t not in CONTAINERS:
                used.add(t)
            if var:
                var_types.setdefault(meth, {})[var] = t
        # a subclass is not final either: Cython refuses a final class's overrides
        body += [""] if name in OPEN or bases else ["", "@cython.final"]
        body.append(f"cdef class {name}{''.join(f'({b})' for b in bases)}:")
        body += [f"    cdef public {typed.get(a, 'object')} {a}" for a in attrs]
        for meth, fn in methods.items():
            if meth in plain or not _compilable(fn):
                continue
            args = [a.arg for a in fn.args.args]
            types = var_types.get(meth, {})
            local = sorted((v, t) for v, t in types.items() if v not in args)
            if local:
                body.append(f"    @cython.locals({', '.join(f'{v}={t}' for v, t in local)})")
            first_default = len(args) - len(fn.args.defaults)
            sig = [(f"{types[a]} " if a in types else "") + a
                   + ("=*" if i >= first_default else "") for i, a in enumerate(args)]
            body.append(f"    cpdef {meth}({', '.join(sig)})")
        if body[-1].endswith(":"):
            body.append("    pass")
    consts = _constants(module, tree)
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for name in FUNCTIONS.get(module, ()):
        fn = functions.get(name)
        if fn is None or not _compilable(fn):
            raise ValueError(f"{module}.{name}: no such function that compiles as cpdef")
        args = [a.arg for a in fn.args.args]
        types, local = {}, []
        for key, t in FUNCTION_ARGS.get(module, {}).items():
            func, _, arg = key.partition(".")
            if func != name:
                continue
            if arg not in _names(fn):
                raise ValueError(f"{module}.{key} names no argument or local of {name}")
            if t in owner:
                used.add(t)
            elif arg in args or t not in SCALARS and t not in CONTAINERS:
                raise ValueError(f"{module}.{key} typed {t}, not a class of CLASSES or "
                                 "C_TYPES" + ("" if arg in args else ", a C type or a builtin"))
            if arg in args:
                types[arg] = t
            else:
                local.append((arg, t))
        first_default = len(args) - len(fn.args.defaults)
        if local:
            body.append(f"\n@cython.locals({', '.join(f'{v}={t}' for v, t in sorted(local))})")
        body.append(("" if local else "\n") + f"cpdef {name}("
                    + ", ".join((f"{types[a]} " if a in types else "") + a
                                + ("=*" if i >= first_default else "")
                                for i, a in enumerate(args)) + ")")
    head = [PXD_HEADER.rstrip("\n")]
    if any(line.lstrip("\n").startswith(("    @cython.locals", "@cython.locals",
                                          "@cython.final")) for line in body):
        head.append("cimport cython")
    head += [f"from {owner[t]} cimport {t}" for t in sorted(used) if owner[t] != module]
    # a function of another compiled module (FUNCTIONS) or of the fast path (C_FUNCTIONS) that
    # this one imports by its name: cimported, so called in C
    origin = {m: (m, names) for m, names in FUNCTIONS.items() if m != module}
    origin.update(C_FUNCTIONS)
    head += [f"from {origin[n.module][0]} cimport {a.name}" for n in tree.body
             if isinstance(n, ast.ImportFrom) and n.module in origin
             for a in n.names if a.name in origin[n.module][1] and a.asname is None]
    return "\n".join(head) + "\n" + "".join(consts) + "\n".join(body) + "\n"


def _constants(module: str, tree: ast.Module) -> list[str]:
    """The ``.pxd`` lines of ``module``'s ``CONSTANTS``."""
    import ast
    assigned: dict[str, int] = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    assigned[n.id] = assigned.get(n.id, 0) + 1
    lines = []
    for name, t in CONSTANTS.get(module, {}).items():
        if not name.startswith("_") or assigned.get(name) != 1:
            raise ValueError(f"{module}.{name}: a constant is a private name the module "
                             "assigns once at its top level")
        if t not in SCALARS and t not in CONTAINERS:
            raise ValueError(f"{module}.{name} typed {t}: a constant is a C type or a builtin")
        lines.append(f"cdef {t} {name}\n")
    return lines


def pxd_modules() -> list[str]:
    """The modules with a generated ``.pxd``: those of CLASSES, and those of FUNCTIONS (whose
    functions other modules then call in C)."""
    return [*CLASSES, *(m for m in FUNCTIONS if m not in CLASSES)]


def write_pxds(root: str) -> None:
    """Write the ``.pxd`` beside each module of CLASSES (``setup.py`` calls this); a file is
    rewritten only when its text changes, so Cython recompiles only what changed."""
    for module in pxd_modules():
        base = os.path.join(root, *module.split("."))
        with open(base + ".py") as f:
            text = pxd_text(module, f.read())
        path = base + ".pxd"
        try:
            with open(path) as f:
                same = f.read() == text
        except OSError:
            same = False
        if not same:
            with open(path, "w") as f:
                f.write(text)


def compiled_now() -> dict[str, bool]:
    """For each module of MODULES already imported: whether its compiled form is loaded."""
    out = {}
    for name in MODULES:
        mod = sys.modules.get(name)
        if mod is not None:
            out[name] = not (getattr(mod, "__file__", "") or "").endswith(".py")
    return out


if __name__ == "roce._compiled":  # imported by ``roce/__init__.py`` first; not when setup.py
    install_finder()                 # reads this file for MODULES and ``write_sources``
