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

from roce.headers import ENCODERS, LAYOUTS, SIZE_OF
from roce.locate import (
    ETHERTYPE_VLAN,
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_RAW,
)
from roce.opcodes import ROCE_OPCODES
from roce.packet import craft
from roce.testing.mutate import get_field

_ETH_TYPE = LAYOUTS["eth"].field("type")

SeedSource = Callable[[random.Random, int], list[bytes]]


def roce_seeds(rng: random.Random, per_opcode: int = 3) -> list[bytes]:
    """Valid frames of every opcode in IPv4, IPv6 and RoCEv1, some with a VLAN tag, IPv4
    options or an Ethernet trailer; field values from their layouts."""
    pool = []
    for code, op in ROCE_OPCODES.items():
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
    from roce import macc

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


def tunnel_seeds(rng: random.Random, per_opcode: int = 3) -> list[bytes]:
    """RoCE frames of every opcode mirrored in ERSPAN II/III, in GRE (transparent Ethernet)
    and in VXLAN (``roce.families.craft``), one tunnel kind per frame in turn."""
    from roce.families import craft as family_craft

    pool = []
    for i, frame in enumerate(roce_seeds(rng, max(per_opcode // 3, 1))):
        kinds = list(family_craft.encaps())
        kind = kinds[i % len(kinds)]
        pool.append(family_craft.encap(frame, kind, rng.getrandbits(16), rng.getrandbits(10)))
    return pool


def ib_seeds(rng: random.Random, per_opcode: int = 3) -> list[bytes]:
    """Native InfiniBand packets (link type 247, ``roce.families.ib.native``): every opcode with and
    without GRH, with random LRH fields (RoCE's CNP made native InfiniBand's); MADs (SMP,
    SA), CM REQ/REP/RTU/DREQ and IPoIB."""
    from roce.families.craft import ib_transport
    from roce.families.ib import mad as ibmad
    from roce.families.ib import native as ib
    from roce.locate import walk

    def transport(frame: bytes) -> bytes:
        w = walk(frame)
        return frame[w.bth_off:w.icrc_off]

    pool = []
    for frame in roce_seeds(rng, per_opcode):
        w = walk(frame)
        if w.status:
            continue
        t = ib_transport(frame, w.bth_off, w.icrc_off)
        grh = frame[w.l3_off:w.l3_off + 40] if w.l3_kind == 1 else None
        pool.append(ib.build(t, lnh=ib.LNH_GLOBAL if grh else ib.LNH_LOCAL, grh=grh,
                             vl=rng.randrange(16), sl=rng.randrange(16),
                             dlid=rng.getrandbits(16), slid=rng.getrandbits(16)))
    mads = [ibmad.build_mad(1, 1, 0x20), ibmad.build_mad(3, 0x81, 0x35),
            *(ibmad.build_cm(a, {"localqpn": rng.getrandbits(24),
                                 "startpsn": rng.getrandbits(24), "pppmtu": rng.randrange(6)})
              for a in ibmad.CM_MESSAGES)]
    for mad in mads:
        qp = 0 if mad[1] == 1 else 1
        t = transport(craft("UD_SEND_ONLY", mad, dqpn=qp, sqpn=qp).to_bytes())
        pool.append(ib.build(t, vl=15 if qp == 0 else 0))
    ip4 = bytes([0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2])
    t = transport(craft("UD_SEND_ONLY", b"\x08\x00\x00\x00" + ip4, dqpn=0x48).to_bytes())
    pool.append(ib.build(t))
    return pool


def erf_seeds(rng: random.Random, per_opcode: int = 3) -> list[bytes]:
    """ERF records (link type 197, ``roce.families.erf``): native InfiniBand packets and
    RoCE Ethernet frames, some with chained extension headers."""
    from roce.families import erf

    pool = []
    for frame in ib_seeds(rng, max(per_opcode // 3, 1)):
        ext = tuple(rng.randrange(1, 127) for _ in range(rng.choice((0, 0, 1, 2))))
        pool.append(erf.record(frame, extensions=ext))
    for frame in roce_seeds(rng, 1)[::7]:
        pool.append(erf.record(frame, rtype=erf.ERF_TYPE_ETH))
    return pool


def uet_seeds(rng: random.Random, per_opcode: int = 3) -> list[bytes]:
    """Ultra Ethernet Transport packets (``roce.families.uet``) of every kind ``roce craft``
    names, both readings, over UDP 4793 and IP protocol 253, some with a TSS header: every
    field of the layouts the packet holds drawn from its width, the fields that choose those
    layouts kept (``dissect.decode``'s own list of them)."""
    from roce.families.uet import build as ub
    from roce.families.uet import dissect
    from roce.families.uet.layouts import READINGS

    keep = ("uet.pds.type", "uet.pds.nh", "uet.pds.ctl_type", "uet.pds.flags.syn",
            "uet.pds.flags.p", "uet.pds.flags.epsn", "uet.ses.std.opcode", "uet.ses.std.som",
            "uet.ses.med_req.flags.hd", "uet.pds.ack.cc_type", "uet.tss.type", "uet.tss.sp",
            "uet.ses.atomic_op_ext_hdr.atomic_opcode", "uet.ses.comp_swap_ext_hdr.atomic_opcode")
    pool = []
    for reading in READINGS.values():
        for typ, opcode in ub.kinds(reading).values():
            # one in three, as tunnels: RoCE keeps most of the pool
            for i in range(max(per_opcode // 3, 1)):
                native, tss = rng.random() < 0.3, rng.random() < 0.1
                v: dict[str, Any] = {"uet.pds.type": typ}
                if opcode is not None:
                    v["uet.ses.std.opcode"] = opcode
                if typ in (2, 3) and opcode is None:
                    v["uet.pds.nh"] = rng.choice((1, 2, 3))
                if tss:
                    v["uet.tss"] = True
                payload = rng.randbytes(rng.choice((0, 1, 4, 16, 64, rng.randint(0, 600))))
                v = ub.with_defaults(v, reading, len(payload))
                data = ub.uet_bytes(v, reading, payload, entropy=native)
                d = dissect.decode(data, entropy=native, reading=reading)
                for key in d.headers:  # every field of every layout the packet holds
                    h = reading.headers[key]
                    for flat, f in zip(h.keys, h.layout.fields):
                        if flat not in keep and not flat.endswith("_offset"):
                            v[flat] = rng.choice((0, 1, f.mask, rng.getrandbits(f.bits)))
                data = ub.uet_bytes(v, reading, payload, entropy=native)
                pool.append(ub.frame(data, native=native, ipv6=i % 2 == 1,
                                     sport=rng.getrandbits(16)))
    return pool


# family -> source of valid frames; a new family adds one line
SEED_SOURCES: dict[str, SeedSource] = {
    "roce": roce_seeds,
    "macc": macc_seeds,
    "tunnels": tunnel_seeds,
    "uet": uet_seeds,
}
# link types whose frames are not Ethernet: their chunks draw from pools of their own
LINKTYPE_SEEDS: dict[int, SeedSource] = {
    247: ib_seeds,  # native InfiniBand
    197: erf_seeds,  # ERF records
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
