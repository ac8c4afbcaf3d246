"""Native InfiniBand on the emulator's simulated network (``roce emulate --protocol ib``).

The RC queue pairs above are ``roce.emu.core``'s, unchanged; the links, topologies and
event loop ``roce.emu.net``'s.  What InfiniBand adds, one module each:

- ``credits``: credit-based link-level flow control per VL (sans-I/O, rules at its top);
- ``vltables``: the SL-to-VL table and VL arbitration (high/low tables of (VL, weight));
- ``routing``: the routings by name (``route_minhop``, ``route_dmodk``, ``route_updn``,
  ``route_ftree``, one module each) and what they share (``lft``: LIDs, LMC, ranks, the
  tables and adaptive routing's groups);
- ``framing``: between the QPs' RoCEv2 frames and LRH-routed packets (ICRC, VCRC);
- ``hca``: the host, a ``roce.emu.net.nic.Nic`` with an InfiniBand port;
- ``ibswitch``: the switch, input buffers per port and VL, output queues per VL;
- ``ibcc``: congestion control (Annex A10): FECN marking, CNPs with BECN, the CCTI;
- ``subnet``: what the subnet manager sets up for a topology, and the subnet's counters;
- ``ibrun``: the run (``IbRun``, the switched network's run on a subnet).

Protocol facts (IBA Vol 1 ch. 7: flow control 7.9.4, VLs and SL-to-VL 7.6, arbitration
7.6.9; ch. 18: switches and forwarding tables) are cited where each rule is written; the
flow-control packet itself is ``roce.families.ib.flowcontrol``.  Not emulated yet:
the workload generators over InfiniBand.
"""
