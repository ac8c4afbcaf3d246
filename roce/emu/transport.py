"""Real-network drivers for an emulated ``Device``, under one name.

The work is in small modules, one job each; this one gathers their public names so a caller
imports one place:

* ``loop.EventLoop``: the selector, the devices' timers, wall time;
* ``driver.Transport``: what every driver does (drain, deliver, record, taps), with
  ``TransportError``, ``TransportStats`` and ``max_path_mtu``;
* ``raw.RawEthernetTransport``: whole frames on an interface (AF_PACKET, through
  ``roce.wire.iface``, which also opens ``roce sniff``'s sockets), with ARP (``arp``);
* ``udp.UdpTransport``: BTH..ICRC over a kernel UDP socket on port 4791;
* ``relay.Relay``: an impairing wire between two interfaces (``python -m roce.emu.relay``;
  ``python -m roce.emu.transport relay`` still works).
"""

from __future__ import annotations

import os
import sys

from roce.wire.iface import ROCE_OR_ARP, interface_ipv4, interface_mac, interface_mtu
from roce.emu.arp import arp_frame, parse_arp
from roce.emu.driver import Tap, Transport, TransportError, TransportStats, max_path_mtu
from roce.emu.loop import EventLoop
from roce.emu.raw import RawEthernetTransport
from roce.emu.relay import Relay, fix_tcp_checksum
from roce.emu.udp import UdpTransport

__all__ = ["ROCE_OR_ARP", "EventLoop", "RawEthernetTransport", "Relay", "Tap", "Transport",
           "TransportError", "TransportStats", "UdpTransport", "arp_frame", "fix_tcp_checksum",
           "interface_ipv4", "interface_mac", "interface_mtu", "max_path_mtu", "parse_arp"]

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "relay":
        from roce.emu.relay import main

        sys.exit(main(sys.argv[2:]))
    print("usage: python -m roce.emu.transport relay IF_A IF_B [options]", file=sys.stderr)
    sys.exit(os.EX_USAGE)
