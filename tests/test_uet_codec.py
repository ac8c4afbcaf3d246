"""The emulator's fast UET codec against the family's: ``uetframes.encode`` (generated
per-shape encoders and path templates, ``roce.emu.uet.uetcodec``) gives the bytes, and the
errors, of ``build.uet_bytes`` + ``build.frame`` for any field dictionary; ``uetframes.decode``
(the decoder without its expert checks) gives ``dissect.decode``'s fields less the expert ones,
for good, corrupted and cut frames; and the shapes the PDS really sends take the fast path."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from roce.emu.scenario import Scenario
from roce.emu.uet import uetcodec, uetframes
from roce.emu.uet.run import UetOptions, run_uet
from roce.families.uet import build
from roce.families.uet import codes as t
from roce.families.uet.checks import CHECK_FIELDS
from roce.families.uet.dissect import decode as dissect
from roce.families.uet.layouts import SPEC
from roce.fast import ip_checksum_reference
from roce.headers import ECN_CE

# every flat key a PDS packet of the specification's reading can carry, and the derived ones
KEYS = sorted({k for h in SPEC.headers.values() for k in h.keys} |
              {name for flags in SPEC.flags.values() for name, _m in flags} |
              {"uet.pds.clear_psn", "uet.pds.ack_psn", "uet.pds.ack.sack_psn",
               "uet.pds.start_psn", "uet.pds.ctl_type", "uet.pds.flags", "uet.tss",
               "uet.ses.rsp.opcode"})
TYPES = [t.RUD_REQ, t.ROD_REQ, t.RUD_CC_REQ, t.ROD_CC_REQ, t.RUDI_REQ, t.RUDI_RESP, t.UUD_REQ,
         t.ACK, t.ACK_CC, t.ACK_CCX, t.NACK, t.NACK_CCX, t.CTRL]
WIDTH = {k: f.bits for h in SPEC.headers.values() for k, f in zip(h.keys, h.layout.fields)}


def _value(key: str) -> st.SearchStrategy[Any]:
    top = (1 << WIDTH.get(key, 32)) - 1
    return st.one_of(st.integers(0, top), st.integers(0, top), st.booleans(),
                     st.sampled_from([0, 1, top, top + 1, -1, -0x8001, None, 1.0, 2]))


@st.composite
def packets(draw: st.DrawFn) -> tuple[dict[str, Any], bytes]:
    """A field dictionary as the PDS hands over (any keys, any order, mostly good values)."""
    v: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        v["uet.pds.type"] = draw(st.sampled_from(TYPES))
    if draw(st.booleans()):
        v["uet.pds.nh"] = draw(st.sampled_from(sorted(t.NEXT_HEADERS) + [15]))
    if draw(st.booleans()):
        v["uet.ses.std.opcode"] = draw(st.sampled_from([t.WRITE, t.READ, t.SEND, 0x3F,
                                                        *sorted(t.ATOMIC_OPCODES)[:1]]))
    if draw(st.booleans()):
        v["uet.pds.ack.cc_type"] = draw(st.sampled_from([t.CC_NSCC, t.CC_CREDIT, 7]))
    for k in draw(st.lists(st.sampled_from(KEYS), max_size=24, unique=True)):
        v[k] = draw(_value(k))
    keys = draw(st.permutations(list(v)))
    return {k: v[k] for k in keys}, draw(st.binary(max_size=64))


def _outcome(fn: Any, *args: Any, **kw: Any) -> tuple[str, Any]:
    try:
        return "bytes", fn(*args, **kw)
    except (ValueError, TypeError, OverflowError) as exc:
        return type(exc).__name__, str(exc)


PATH = dict(src="10.0.0.1", dst="10.1.2.3", smac=bytes.fromhex("020000000001"),
            dmac=bytes.fromhex("02000000ff02"))


@settings(max_examples=400)
@given(packets(), st.integers(0, 0xFFFF), st.integers(0, 0xFFFF))
def test_fast_encoder_builds_what_the_family_builds(pkt: tuple, entropy: int, ip_id: int) -> None:
    fields, payload = pkt
    fast = _outcome(uetcodec.uet_fast, fields, payload)
    if fast[0] != "bytes" or fast[1] is not None:  # it covers the shape: the same bytes
        assert fast == _outcome(build.uet_bytes, fields, payload=payload)
    kw = dict(PATH, entropy=entropy, ip_id=ip_id)
    assert _outcome(uetframes.encode, fields, payload, **kw) == \
        _outcome(uetframes.encode_reference, fields, payload, **kw)


@settings(max_examples=200)
@given(st.integers(0, 1500), st.integers(-2, 0x10001), st.integers(-2, 0x10001),
       st.integers(0, 63), st.integers(0, 3), st.sampled_from(["10.0.0.1", "192.168.255.254",
                                                              "255.255.255.255", "0.0.0.0"]))
def test_path_template_frames_as_build_frame(n: int, sport: int, ip_id: int, dscp: int,
                                             ecn: int, dst: str) -> None:
    uet = bytes(range(256)) * (n // 256) + bytes(n % 256)
    p = uetcodec.path("10.9.8.7", dst, PATH["smac"], PATH["dmac"], dscp, ecn)
    got = p.frame(uet, sport, ip_id)
    want = _outcome(build.frame, uet, src="10.9.8.7", dst=dst, smac=PATH["smac"].hex(":"),
                    dmac=PATH["dmac"].hex(":"), sport=sport, dscp=dscp, ecn=ecn, ip_id=ip_id)
    if got is None:  # only what build.frame refuses
        assert want[0] != "bytes"
    else:
        assert ("bytes", got) == want


def _reference_receive(frame: bytes) -> tuple | None:
    """What the host took from a frame before: the full decoder, its expert fields aside."""
    if len(frame) < uetframes.UET_AT or frame[12:14] != b"\x08\x00":
        return None
    if int.from_bytes(frame[36:38], "big") != 4793:
        return None
    data = frame[uetframes.UET_AT:uetframes.UET_AT - 8 + int.from_bytes(frame[38:40], "big")]
    d = dissect(data)
    if d.error is not None or "uet.pds.type" not in d.fields:
        return None
    fields = {k: x for k, x in d.fields.items() if k not in CHECK_FIELDS}
    payload = data[len(data) - d.fields.get("payload.len", 0):]
    return (fields, bytes(payload), ".".join(map(str, frame[26:30])),
            frame[15] & 3 == ECN_CE, frame[15] >> 2)


@settings(max_examples=300)
@given(packets(), st.lists(st.integers(0, 8 * 400), max_size=3), st.integers(0, 400),
       st.booleans())
def test_fast_decoder_reads_what_the_family_decodes(pkt: tuple, flips: list[int], cut: int,
                                                    ce: bool) -> None:
    fields, payload = pkt
    try:
        frame = bytearray(uetframes.encode_reference(fields, payload, entropy=0xC123,
                                                     ip_id=7, **PATH))
    except (ValueError, TypeError, OverflowError):
        return
    if ce:
        frame[15] |= 3
    for bit in flips:  # corruption anywhere after the MAC addresses
        if 12 + bit // 8 < len(frame):
            frame[12 + bit // 8] ^= 0x80 >> (bit % 8)
    if cut:
        del frame[max(0, len(frame) - cut):]
    r = uetframes.decode(bytes(frame))
    got = None if r is None else (r.fields, r.payload, r.src, r.ce, r.dscp)
    assert got == _reference_receive(bytes(frame))


def test_the_pds_shapes_take_the_fast_path(monkeypatch: Any) -> None:
    """A trimmed, sprayed run with loss: every frame the hosts send is the family's, and every
    one but atomics' (which ``build`` encodes) comes from a generated encoder."""
    seen = {"fast": 0, "slow": 0}
    real = uetframes.encode

    def guarded(fields: dict[str, Any], payload: bytes, **kw: Any) -> bytes:
        out = real(fields, payload, **kw)
        assert out == uetframes.encode_reference(fields, payload, **kw)
        seen["fast" if uetcodec.uet_fast(fields, payload) is not None else "slow"] += 1
        return out

    monkeypatch.setattr(uetframes, "encode", guarded)
    for opts, sc in ((UetOptions(entropy="packet", trim=True),
                      Scenario(op="write", size=64 << 10, count=2, topology="incast:4",
                               pfc=False, seed=3, buffer=1 << 20)),
                     (UetOptions(mode="rudi"), Scenario(op="read", size=20000, count=2,
                                                        loss=0.05, seed=4)),
                     (UetOptions(mode="rod", rendezvous=4096),
                      Scenario(op="send", size=10000, count=2, seed=5))):
        s = run_uet(sc, opts)
        assert s.data_verified
    assert seen["slow"] == 0 and seen["fast"] > 200


def test_a_frame_the_fast_decoder_does_not_take_is_refused_as_before() -> None:
    rng = random.Random(1)
    good = uetframes.encode({"uet.pds.type": t.ACK, "uet.pds.cack_psn": 5}, b"",
                            entropy=0xC000, **PATH)
    for frame in (good[:uetframes.UET_AT - 1], good[:uetframes.UET_AT + 3],
                  good[:12] + b"\x86\xdd" + good[14:], good[:36] + b"\x12\xb8" + good[38:],
                  bytes(rng.randrange(256) for _ in range(80))):
        assert uetframes.decode(frame) is None
        assert _reference_receive(frame) is None


def test_path_checksum_for_every_identification() -> None:
    """Every IP ID on one path (some make the ones' complement sum carry twice)."""
    p = uetcodec.path("10.255.255.255", "10.255.255.254", PATH["smac"], PATH["dmac"], 63, 3)
    for ip_id in range(0x10000):
        f = p.frame(b"\xff" * 40, 0xFFFF, ip_id)
        ip = bytearray(f[14:34])
        ip[10:12] = b"\0\0"
        assert int.from_bytes(f[24:26], "big") == ip_checksum_reference(bytes(ip)), ip_id


def test_a_cut_packet_first_of_its_shape() -> None:
    """A plan the decoder already has (from a whole packet it decoded) is not run on a
    shorter packet of the same first bytes, however the shapes come: those go to the
    decoder, which says where they break."""
    for typ, extra in ((t.RUD_REQ, {"uet.ses.std.opcode": t.SEND, "uet.ses.std.som": True,
                                    "uet.ses.std.dc": True, "uet.ses.std.rel": True}),
                       (t.ACK_CC, {"uet.pds.ack.cc_type": t.CC_NSCC, "uet.pds.ack.cc_flags": 5}),
                       (t.NACK, {"uet.pds.flags.nt": True, "uet.pds.flags.m": True})):
        fields = {"uet.pds.type": typ, **extra}
        whole = uetframes.encode(fields, b"x" * 100, entropy=0xC000, **PATH)
        ulen = int.from_bytes(whole[38:40], "big")
        dissect(whole[uetframes.UET_AT:uetframes.UET_AT - 8 + ulen])  # the decoder's plan
        for n in (8 + 3, ulen - 101, ulen, 8 + 5, ulen - 101, ulen, 8 + 1):
            frame = whole[:38] + n.to_bytes(2, "big") + whole[40:]
            r = uetframes.decode(frame)
            got = None if r is None else (r.fields, r.payload, r.src, r.ce, r.dscp)
            assert got == _reference_receive(frame), (typ, n)
