"""Valid frames for the decoder harness to start from, one source per protocol family, and
the re-wrapping of Ethernet frames into the other link types the decoder reads.

A family the decoder learns gets a seed source here: a function ``(rng, per_opcode) ->
frames`` building valid frames of every message kind of the family from its table, added to
``SEED_SOURCES``.  The decoder harness mutates what the sources give; the order of the table
is part of a run's reproducibility (sources draw from one generator in turn).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from ...headers import ENCODERS, LAYOUTS, SIZE_OF
from ...locate import (
    ETHERTYPE_VLAN,
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_RAW,
)
from ...opcodes import OPCODES
from ...packet import craft
from ..mutate import get_field

_ETH_TYPE = LAYOUTS["eth"].field("type")

SeedSource = Callable[[random.Random, int], list[bytes]]


def roce_seeds(rng: random.Random, per_opcode: int = 3) -> list[bytes]:
    """Valid frames of every opcode in IPv4, IPv6 and RoCEv1, some with a VLAN tag, IPv4
    options or an Ethernet trailer; field values from their layouts."""
    pool = []
    for code, op in OPCODES.items():
        for i in range(per_opcode):
            kw: dict[str, Any] = [{}, {"ipv6": True}, {"roce_version": 1}][i % 3]
            if rng.random() < 0.25:
                kw["vlan"] = rng.randrange(4096)
            values: dict[str, Any] = {}
            for h in ("bth",) + op.headers:
                for f in LAYOUTS[h].fields:
                    if f.name.startswith("reserved") or h == "cnp" or f.name in (
                            "opcode", "padcnt", "tver"):
                        continue
                    values[f"{h}.{f.name}"] = (rng.random() < 0.5 if f.kind == "bool" else
                                               rng.choice((0, 1, f.mask, rng.getrandbits(
                                                   f.bits))))
            if op.payload_len is not None:
                payload = rng.randbytes(op.payload_len)
            elif op.payload:
                payload = rng.randbytes(rng.choice((0, 1, 2, 3, 4, 5, 8, 31, 64, 256,
                                                    rng.randint(0, 1100))))
            else:
                payload = b""
            p = craft(code, payload, **kw, **values)
            if "ip" in p.headers and rng.random() < 0.15:
                p.headers["ip"]["options"] = b"\x01\x01\x01\x00" * rng.randint(1, 3)
            frame = p.to_bytes()
            if rng.random() < 0.1:
                frame += bytes(rng.choice((2, 4, 6)))  # Ethernet trailer after the ICRC
            pool.append(frame)
    return pool


def macc_seeds(rng: random.Random, per_opcode: int = 3) -> list[bytes]:
    """Valid MAC Control frames (``roce.macc``): PAUSE with boundary and random quanta, PFC
    with any set of enabled classes (XON included), a quarter of them VLAN-tagged."""
    from ... import macc

    def pause() -> bytes:
        return macc.build_pause(src, rng.choice((0, 1, macc.MAX_QUANTA,
                                                 rng.randrange(macc.MAX_QUANTA + 1))))

    def pfc() -> bytes:
        classes = rng.sample(macc.PRIORITIES, rng.randint(0, len(macc.PRIORITIES)))
        return macc.build_pfc(src, {p: rng.choice((0, macc.MAX_QUANTA, rng.randrange(
            macc.MAX_QUANTA + 1))) for p in classes})

    build = {macc.OPCODE_PAUSE: pause, macc.OPCODE_PFC: pfc}
    pool = []
    for opcode in macc.BODY:
        for _ in range(per_opcode):
            src = bytes([rng.getrandbits(8) & 0xFE]) + rng.randbytes(5)  # a unicast source
            frame = build[opcode]()
            if rng.random() < 0.25:
                at = _ETH_TYPE.byte_offset
                tag = ENCODERS["vlan"]({"priority": rng.randrange(8), "dei": 0,
                                        "id": rng.randrange(4096), "etype": get_field(
                                            frame, 0, _ETH_TYPE)})
                frame = frame[:at] + ETHERTYPE_VLAN[0].to_bytes(2, "big") + tag + \
                    frame[at + 2:]
            pool.append(frame)
    return pool


# family -> source of valid frames; a new family adds one line
SEED_SOURCES: dict[str, SeedSource] = {
    "roce": roce_seeds,
    "macc": macc_seeds,
}


def seed_pool(rng: random.Random, per_opcode: int = 3) -> list[bytes]:
    """Valid frames of every family in ``SEED_SOURCES``, ``per_opcode`` of each kind."""
    pool: list[bytes] = []
    for source in SEED_SOURCES.values():
        pool.extend(source(rng, per_opcode))
    return pool


def to_linktype(eth_frame: bytes, linktype: int) -> bytes:
    """Re-wrap an Ethernet frame for another link type (raw IP, Linux SLL, SLL2)."""
    if linktype == LINKTYPE_ETHERNET or len(eth_frame) < SIZE_OF["eth"]:
        return eth_frame
    etype = get_field(eth_frame, 0, _ETH_TYPE)
    rest = eth_frame[SIZE_OF["eth"]:]
    if linktype == LINKTYPE_RAW:
        return rest[SIZE_OF["vlan"]:] if etype == ETHERTYPE_VLAN[0] else rest
    if linktype == LINKTYPE_LINUX_SLL:
        return ENCODERS["sll"]({"pkttype": 0, "hatype": 1, "halen": 6, "src": 0x0200000001,
                                "etype": etype}) + rest
    if linktype == LINKTYPE_LINUX_SLL2:
        return ENCODERS["sll2"]({"etype": etype, "reserved": 0, "ifindex": 2, "hatype": 1,
                                 "pkttype": 0, "halen": 6, "src": 0x0200000001}) + rest
    return eth_frame
