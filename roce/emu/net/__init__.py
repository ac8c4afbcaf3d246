"""The emulator's simulated network: hosts, switches and links on a virtual clock.  Every
simulated run is one of its topologies, two hosts cabled back to back (``p2p``) included.

Modules, one job each:

- ``hop``: per-hop byte offsets (from roce/headers.py) and the router rewrite;
- ``faults``: the seeded faults of a link direction (``Faults``, ``LinkConfig``), shared by
  every link model;
- ``link``: one direction of a link (``Wire``): store-and-forward serialization, propagation
  delay, faults;
- ``direct``: hosts cabled back to back without a transmit scheduler (``DirectNic``,
  ``Link``): the two-host model;
- ``sim``: the event loop (``Network``): integer nanoseconds, one seeded random source;
- ``nic``: a host NIC: the transmit scheduler its link pulls, PFC reception, pacing;
- ``stages``: the switch's replaceable stages: classify (DSCP map), forward (ECMP, spray),
  mark (RED ECN), and the pacer interface congestion control will drive;
- ``buffer``: the switch's shared buffer (reserve, dynamic threshold, PFC headroom);
- ``pfc``: 802.1Qbb pause state, sending and receiving;
- ``switch``: an output-queued switch with 8 traffic classes per port;
- ``topology``: the topologies (p2p, incast, dumbbell, leaf-spine, TOML file), routes, and
  ``build``;
- ``schema``: what a topology may be, checked before it is built: a file's keys, the
  topology strings, the limits, what building and flows cost against the memory budget;
- ``runner``: the run of every simulated scenario: traffic, the run loop, the data checks
  and the summary (``fabric`` stats, completion times);
- ``observe``: the sampled trace (taps are a port's ``tap`` writer).

Protocol facts and published parameters this package uses (docs/protocol.md collects them):

- DSCP and priorities: NVIDIA's RoCE configuration marks RoCE data with DSCP 26 and
  priority 3, and CNPs with DSCP 48 and priority 6 ("trust dscp" mode; NVIDIA MLNX_OFED
  RoCE QoS documentation, mlnx_qos).  Here DSCP 26 -> lossless class 3, DSCP 48 -> strict
  high-priority class 6, every other DSCP -> lossy class 0.
- PFC frames: IEEE 802.1Qbb, a MAC Control frame (EtherType 0x8808, opcode 0x0101) to
  01:80:C2:00:00:01 with a class-enable vector and eight pause times in quanta of 512 bit
  times; time 0 is XON.  802.3x PAUSE (opcode 0x0001) pauses the whole link.  Codec:
  ``roce.macc``.
- PFC headroom: about rate x 2 x propagation delay + 2 MTU per lossless priority and port
  (the data in flight during one round trip plus a frame being sent at each end).
- Shared buffer: ns-3 HPCC (``switch-mmu.cc``) gives each (port, queue) a small reserve and
  admits into the shared pool up to a dynamic threshold of alpha x free shared buffer with
  alpha = 1/8; PFC pauses an ingress queue above that threshold.
- ECN: RED on the egress queue at dequeue (as DCQCN switches and the ns-3 HPCC model mark),
  probability 0 below Kmin, Pmax x (q - Kmin)/(Kmax - Kmin) up to Kmax, 1 above.  Defaults
  follow the HPCC ns-3 configuration: Kmin 100 KB, Kmax 400 KB per 25 Gb/s of port rate,
  Pmax 0.2 (so 400 KB / 1600 KB at 100 Gb/s).  Both shrink by one factor until the queue
  reaches Kmax before the buffer stops it: without PFC at half the bytes one queue may hold
  before tail drop, with PFC at the queue where two senders into one port trigger PFC
  (deployment guides set ECN below PFC; docs/congestion-control.md, "Marking thresholds").
- ECMP: a hash of the 5-tuple with a per-switch seed; RoCEv2's UDP source port is the
  flow entropy (IBA Annex A17.2.4), so QPs spread and one QP keeps one path.
"""
