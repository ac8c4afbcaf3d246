"""Ultra Ethernet Transport endpoints, emulated: the packet delivery sublayer (PDS), the
semantic sublayer (SES) over it, and the host that puts both on the simulated network.

* ``pds``: one host's PDCs (packet delivery contexts), sans-I/O: establishment from a SYN
  request, RUD and ROD delivery, cumulative ACKs with SACK bitmaps, ACK coalescing, NACKs by
  code, retransmission on NACK, SACK gap (RACK, ``roce.emu.core.rack``) and timeout, close;
  RUDI and UUD with no PDC on the wire; its rules and transitions are tables at the top of
  the module;
* ``ses``: WRITE, READ and SEND messages over the PDCs into the memory model of the RoCE
  queue pairs (``roce.emu.core.memory``), with message IDs, offsets and completions;
* ``uetframes``: a PDS packet (flat fields, as ``roce.families.uet`` names them) to an Ethernet
  frame and back (no layout of its own): ``uetcodec`` builds the shapes the PDS sends, the
  UET family's codec the rest and is what both are held to;
* ``uetcodec``: the fast encoder, one function generated per packet shape from the family's
  layouts, and the frame prefix of each path from a template (``build.frame``'s bytes); the
  fast reader, one function per packet shape building only the fields the PDS, SES and
  congestion manager read (``RECEIVED``: the contract), the family's decoder behind it;
* ``congestion``: congestion management, the PDS's hooks into NSCC and RCCC (``roce.emu.cc``);
* ``reps``: REPS, recycling the entropies whose ACKs came back unmarked;
* ``host``: a UET host on ``roce.emu.net``'s links (an ``Endpoint`` the wire pulls);
* ``run``: ``roce emulate --protocol uet``'s run: the topology, the messages, the check of
  the data and the summary.

Sources (docs/protocol.md, "Ultra Ethernet Transport emulated"): the UE specification 1.0
as Wireshark 5.0's ``packet-uet.c`` reads it, and the reference provider
(``ultraethernet/uet-ref-prov``, ``uet_pds.c``: PDC states, the 128-PSN maximum PSN range,
0-RTT establishment with the initiator's start PSN).
"""

# the choices of a run's options, here so that ``roce emulate``'s parser reads them without
# importing the endpoints (and the UET family's codec) for a run that is not UET
# reliable unordered, reliable ordered, reliable unordered for idempotent operations,
# unreliable unordered (``run.MODES``)
PDC_MODES = ("rud", "rod", "rudi", "uud")
# one entropy per PDC, one per packet, recycled entropies (``host``, ``reps``)
ENTROPY_MODES = ("pdc", "packet", "reps")
# who starts a PDC's end: the initiator closes; or the target asks it to clear, then to close
# (control types CLEAR_REQ and CLOSE_REQ, ``pds.CONTROLS``)
CLOSERS = ("initiator", "target")
