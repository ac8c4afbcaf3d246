"""ARP frames for the raw Ethernet transport: build a request or reply, parse one (RFC 826,
Ethernet/IPv4 only)."""

from __future__ import annotations

import socket
import struct

from roce.iface import ETH_P_ARP, ETH_P_IP

BROADCAST = "ff:ff:ff:ff:ff:ff"
ZERO_MAC = "00:00:00:00:00:00"
ARP_REQUEST, ARP_REPLY = 1, 2


def mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", "").replace("-", ""))


def arp_frame(op: int, smac: str, sip: str, tmac: str, tip: str, dst: str | None = None) -> bytes:
    """An Ethernet ARP request (op 1) or reply (op 2), padded to the 60-byte minimum."""
    eth = mac_bytes(dst or (BROADCAST if op == ARP_REQUEST else tmac)) + mac_bytes(smac)
    body = struct.pack("!HHBBH6s4s6s4s", 1, ETH_P_IP, 6, 4, op, mac_bytes(smac),
                       socket.inet_aton(sip), mac_bytes(tmac), socket.inet_aton(tip))
    return (eth + struct.pack("!H", ETH_P_ARP) + body).ljust(60, b"\0")


def parse_arp(frame: bytes) -> tuple[int, str, str, str, str] | None:
    """(op, sender MAC, sender IP, target MAC, target IP) of an Ethernet/IPv4 ARP frame."""
    if len(frame) < 42 or int.from_bytes(frame[12:14], "big") != ETH_P_ARP:
        return None
    htype, ptype, hlen, plen, op = struct.unpack_from("!HHBBH", frame, 14)
    if htype != 1 or ptype != ETH_P_IP or hlen != 6 or plen != 4:
        return None
    sha, spa, tha, tpa = struct.unpack_from("!6s4s6s4s", frame, 22)
    return op, sha.hex(":"), socket.inet_ntoa(spa), tha.hex(":"), socket.inet_ntoa(tpa)
