"""The defaults of an emulator run, each written once: the workload, the loss recovery, the
ACK timeout, the links, the switched network and the time limits.

``roce.emu.scenario.Scenario``'s fields, ``roce emulate``'s options (and so ``roce sweep``'s),
the link and network builders (``LinkConfig``, ``NetOptions``, ``BufferConfig``) and the
real-link runs all take their defaults from here.  The loss recovery's names are
``roce.emu.core.recovery``'s (``MODES``, ``LOSS_RULES``: the first of each is the default),
and the PSN width is ``roce.psn``'s.
"""

from __future__ import annotations

from roce.emu.core.recovery import LOSS_RULES, MODES

# the workload
OP = "write"
SIZE = 1 << 20
COUNT = 10
MTU = 4096
QPS = 1
DEPTH = 16
PSN = 0
QP_TYPE = "rc"
SEED = 0
RETRY_CNT = 7  # IBA's largest (3 bits): rxe's default
RNR_RETRY = 7  # 7 = retry for ever (IBA 9.7.5.2.8)
RECOVERY = MODES[0]  # gbn, rxe's go-back-N
LOSS_RULE = LOSS_RULES[0]  # rack, selective repeat's time-based rule

# the local ACK timeout exponent (4.096 us x 2^n): a simulated link's round trip is a few
# microseconds, so 16.8 ms is ample; across a real link (a kernel, a scheduler, a relay)
# 67 ms, the verbs default (``roce.emu.core.qp.QPAttr``)
ACK_TIMEOUT_SIMULATED = 12
ACK_TIMEOUT_REAL = 14

# the links
RATE_GBPS = 100.0
DELAY_NS = 1000

# the switched network
TOPOLOGY = "p2p"  # two hosts cabled back to back
NET_TOPOLOGY = "incast:2"  # ``NetScenario``'s: the smallest network a switch congests
BUFFER = 12 << 20  # shared buffer per switch
ECN = "on"  # RED with thresholds derived from the port rate and the buffer
PFC = True
LB = "ecmp"
OVERSUBSCRIPTION = 1.0  # leaf uplinks at the full rate
# --link-down: virtual time from a link's failure (or repair) to the routes that know of it
# (loss of signal at the port, then the routing update); a choice for ms-long runs, not a
# measured figure
DETECT_DELAY_NS = 100_000
TRACE_INTERVAL_NS = 10_000

# the traffic of real clusters (roce.emu.workload, roce.emu.net.workrun)
LOAD = 0.5  # offered load of --workload, a fraction of each host's line rate
DURATION_NS = 1_000_000  # flows arrive during the first 1 ms
FCT_BINS = 5  # percent of the flows per bin of the slowdown table (HPCC's)
# QPs a pair of hosts may hold for open-loop flows, one per concurrent flow; a flow that
# finds them all busy waits for one (its FCT counts the wait, as an application's would)
FLOW_QPS_PER_PAIR = 32
SMALL_FLOW_BYTES = 100_000  # "small" flows in the summary: below 100 KB (HPCC's split)

# how much virtual time a simulated run may take: ten minutes on two hosts cabled back to
# back (an ACK timeout of 2^24 x 4.096 us = 69 s retried seven times fits); ten seconds
# through the switched network's NICs and switches, where a PFC storm or a congestion
# controller's timers keep events coming for ever
TIME_LIMIT_NS = 600_000_000_000
SWITCHED_TIME_LIMIT_NS = 10_000_000_000
# the wall-clock limit of a run across a real link
REAL_TIME_LIMIT_S = 120.0
# a real link's out-of-band step: its TCP port (perftest's) and how long to wait for the peer
OOB_PORT = 18515
OOB_TIMEOUT_S = 30.0


def time_limit_ns(switched: bool) -> int:
    """The default virtual-time limit of a run through the switched network's NICs (a
    switch, congestion control or a PFC storm), or between two hosts cabled back to back."""
    return SWITCHED_TIME_LIMIT_NS if switched else TIME_LIMIT_NS


def ack_timeout(real: bool) -> int:
    """The default ACK timeout exponent across a real link, or a simulated one."""
    return ACK_TIMEOUT_REAL if real else ACK_TIMEOUT_SIMULATED

# native InfiniBand (roce.emu.ib): --protocol ib
PROTOCOLS = ("roce", "ib", "uet")  # --protocol: RoCE, native InfiniBand, UET (roce.emu.uet)
PROTOCOL = PROTOCOLS[0]
IB_VLS = 4  # data VLs per port (VL0-VL3: what HCAs commonly run; VL15 carries management)
IB_ROUTING = "minhop"  # the subnet manager's routing (roce.emu.ib.routing.ROUTINGS)
