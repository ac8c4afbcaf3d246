"""The emulator's fast UET codec against the family's: ``uetframes.encode`` (generated
per-shape encoders and path templates, ``roce.emu.uet.uetcodec``) gives the bytes, and the
errors, of ``build.uet_bytes`` + ``build.frame`` for any field dictionary; ``uetframes.decode``
(a reader generated per packet shape, building only the fields the PDS, SES and congestion
manager read: ``uetcodec.RECEIVED``; and its C twin, ``uetcodec.decode_native``, the same
answer) gives ``dissect.decode``'s values of those fields, for
good, corrupted and cut frames of any shape and of every shape the PDS sends; the PDS, SES and
congestion manager read no other field; and the shapes the PDS really sends take the fast
paths, both ways."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from functools import cache
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from roce import _compiled
from roce.emu.cc.algorithms import configure
from roce.emu.scenario import Scenario
from roce.emu.uet import uetcodec, uetframes
from roce.emu.uet.run import UetOptions, UetRun, run_uet
from roce.families.uet import build
from roce.families.uet import codes as t
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
TYPE, NH, OP, CC = uetcodec.TYPE, uetcodec.NH, uetcodec.OP, uetcodec.CC
SYN, SOM, HD, TSS = uetcodec.SYN, uetcodec.SOM, uetcodec.HD, uetcodec.TSS
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


@settings(max_examples=400)
@given(packets(), st.integers(-2, 0x10001), st.integers(-2, 0x10001), st.integers(0, 70000))
def test_c_frame_plans_build_what_the_python_encoders_build(pkt: tuple, sport: int, ip_id: int,
                                                            n: int) -> None:
    """The twin of each shape's generated ``frm`` in C (``_frame.pxi``): the same frame, or
    None, for any values; where it hands back (MISS), a value is not an int or a bool."""
    fields, _payload = pkt
    payload = bytes(range(256)) * (n // 256)
    encs = uetcodec._encoders(fields, tuple(fields))
    if encs is None or uetcodec._FRAME is None:
        return
    if encs[2] is None:  # only a value wider than 64 bits leaves a shape to Python alone
        assert any(WIDTH.get(k, 0) > 64 for k in fields), fields
        return
    p = uetcodec.path("10.0.0.1", "10.1.2.3", PATH["smac"], PATH["dmac"], 46, 0)
    c = uetcodec._FRAME(encs[2], fields, p.template, p.base, sport, ip_id, payload)
    py = encs[1](fields, p.gaps, p.base, sport, ip_id, payload)
    if c is uetcodec.MISS:
        assert any(type(v) not in (int, bool) for v in fields.values()), (fields, py)
    else:
        assert c == py, fields


def test_the_c_frame_maker_is_there_when_built() -> None:
    from roce import fast
    assert (uetcodec._FRAME is not None) == bool(fast.COMPILED)


@settings(max_examples=200)
@given(packets(), st.data())
def test_a_shape_then_another_with_the_same_keys(pkt: tuple, data: st.DataObject) -> None:
    """The encoder of the shape last seen with a dictionary's keys is tried first: the values
    that choose layouts (type, next header, opcode, CC type, SYN, SOM, HD, TSS) drawn again
    for the same keys in the same order still give the family's bytes."""
    fields, payload = pkt
    again = dict(fields)
    for k, choices in ((TYPE, TYPES), (NH, [0, 1, 3, 4, 5, 15]), (OP, [1, 2, 5, 0x3F]),
                       (CC, [0, 1, 7]), (SYN, [False, True]), (SOM, [False, True]),
                       (HD, [False, True]), (TSS, [False, True])):
        if k in again:
            again[k] = data.draw(st.sampled_from(choices))
    for f in (fields, again, fields):
        fast = _outcome(uetcodec.uet_fast, f, payload)
        if fast[0] != "bytes" or fast[1] is not None:
            assert fast == _outcome(build.uet_bytes, f, payload=payload)


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
    """What the host takes from a frame by the full decoder: the fields of ``RECEIVED``."""
    if len(frame) < uetframes.UET_AT or frame[12:14] != b"\x08\x00":
        return None
    if int.from_bytes(frame[36:38], "big") != 4793:
        return None
    data = frame[uetframes.UET_AT:uetframes.UET_AT - 8 + int.from_bytes(frame[38:40], "big")]
    d = dissect(data)
    if d.error is not None or "uet.pds.type" not in d.fields:
        return None
    fields = {k: x for k, x in d.fields.items() if k in uetcodec.RECEIVED}
    payload = data[len(data) - d.fields.get("payload.len", 0):]
    return (fields, bytes(payload), ".".join(map(str, frame[26:30])),
            frame[15] & 3 == ECN_CE, frame[15] >> 2)


# the readers of a frame: Python's generated ones, and the C twin where the fast path is built
READERS = (uetcodec.decode_python,) + ((uetcodec.decode_native,) if uetcodec._RECEIVE else ())


def _received(frame: bytes) -> tuple | None:
    """What every reader takes from ``frame``, the same for each (the twins agree)."""
    outs = []
    for read in READERS:
        r = read(frame)
        outs.append(None if r is None else (r.fields, r.payload, r.src, r.ce, r.dscp))
        assert r is None or type(r) is uetframes.Received, read
    assert all(o == outs[0] for o in outs), (frame.hex(), outs)
    return outs[0]


def test_the_c_reader_is_the_hosts_when_built() -> None:
    from roce import fast
    assert (uetframes.decode is uetcodec.decode_native) == bool(fast.COMPILED)
    assert (uetcodec._RECEIVE is not None) == bool(fast.COMPILED)


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
    assert _received(bytes(frame)) == _reference_receive(bytes(frame))


def test_the_pds_shapes_take_the_fast_path(monkeypatch: Any) -> None:
    """A trimmed, sprayed run with loss: every frame the hosts send is the family's, and every
    one but atomics' (which ``build`` encodes) comes from a generated encoder."""
    seen = {"fast": 0, "slow": 0}
    real = uetframes.frame_of

    def guarded(fields: dict[str, Any], payload: bytes, *args: Any) -> bytes:
        out = real(fields, payload, *args)
        kw = dict(zip(("src", "dst", "smac", "dmac", "entropy", "marking", "ip_id"), args))
        assert out == uetframes.encode_reference(fields, payload, **kw)
        seen["fast" if uetcodec.uet_fast(fields, payload) is not None else "slow"] += 1
        if uetcodec._FRAME is not None:  # and its shape has its plan in C
            encs = uetcodec._encoders(fields, tuple(fields))
            assert encs is not None and encs[2] is not None
        return out

    monkeypatch.setattr(uetframes, "frame_of", guarded)
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
        assert _received(frame) is None
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
            assert _received(frame) == _reference_receive(frame), (typ, n)


# Small runs that between them send every shape of packet the PDS sends: each PDC mode, SYN
# and established requests, WRITE, READ and its response data, SEND eager and rendezvous,
# atomics (fetch-add and compare-and-swap), NSCC and credit ACKs with SACK bitmaps, trimmed
# packets' NACKs, RUDI responses, close and clear commands from either end.
RUNS: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = (
    (dict(entropy="packet", trim=True),
     dict(op="write", size=64 << 10, count=2, topology="incast:4", pfc=False, seed=3,
          buffer=96 << 10, cc="nscc")),
    (dict(), dict(op="write", size=32 << 10, count=2, topology="incast:2", pfc=False, seed=2,
                  cc="rccc")),
    (dict(mode="rod", rendezvous=4096), dict(op="send", size=10000, count=2, seed=5,
                                             loss=0.05)),
    (dict(mode="rudi"), dict(op="read", size=20000, count=2, loss=0.05, dup=0.05, seed=4)),
    (dict(mode="uud"), dict(op="write", size=9000, count=2, seed=6)),
    (dict(close="target"), dict(op="atomic", count=3, seed=7, reorder=0.2)),
    (dict(rendezvous=16384), dict(op="mixed", size=12000, count=6, seed=8, loss=0.05,
                                  corrupt=0.02)),
)


def _scenario(kw: dict[str, Any]) -> Scenario:
    kw = dict(kw)
    if "cc" in kw:
        kw["cc"] = configure(kw["cc"], None, [], 100.0)
    return Scenario(**kw)


@cache
def pds_frames() -> tuple[bytes, ...]:
    """Every frame the hosts of ``RUNS`` received (one of each distinct frame)."""
    frames: dict[bytes, None] = {}

    class Keep:
        def write(self, frame: bytes, ts_ns: int = 0) -> None:
            frames[bytes(frame)] = None

    for opts, sc in RUNS:
        run = UetRun(_scenario(sc), UetOptions(**opts))
        run.net.recorders.append(Keep())
        run.run()
    return tuple(frames)


def test_the_pds_shapes_are_read_by_generated_readers(monkeypatch: Any) -> None:
    """Every frame the PDS sends reads as the decoder reads it, and every one but atomics'
    (the extension by a byte at no fixed place) through a generated reader."""
    frames = pds_frames()
    kinds = {(f["uet.pds.type"], f.get("uet.pds.nh"), f.get("uet.ses.std.opcode"),
              bool(f.get("uet.pds.flags.syn")))
             for f in (uetframes.decode(fr).fields for fr in frames)}  # type: ignore[union-attr]
    assert len(kinds) >= 14, kinds
    slow: list[bytes] = []
    real = uetcodec.dissect

    def counted(data: bytes, **kw: Any) -> Any:
        slow.append(data)
        return real(data, **kw)

    monkeypatch.setattr(uetcodec, "dissect", counted)
    for fr in frames:
        r = uetcodec.decode_python(fr)
        assert r is not None and (r.fields, r.payload, r.src, r.ce, r.dscp) == \
            _reference_receive(fr)
    assert slow and all(dissect(d).fields.get("uet.ses.std.opcode") == t.FETCHING_ATOMIC
                        for d in slow)
    if uetcodec._RECEIVE is not None:  # and C reads every one of them, atomics included
        for fr in frames:
            r = uetcodec._RECEIVE(fr)
            assert r is not None and (r.fields, r.payload, r.src, r.ce, r.dscp) == \
                _reference_receive(fr)


@settings(max_examples=300)
@given(st.data(), st.lists(st.integers(0, 8 * 120), max_size=3), st.integers(0, 120),
       st.booleans())
def test_fast_reader_reads_the_pds_shapes_as_the_decoder(data: st.DataObject, flips: list[int],
                                                         cut: int, ce: bool) -> None:
    """The twin over what the PDS sends: its frames, corrupted anywhere after the MAC
    addresses (the UET headers first of all), cut short, marked CE."""
    frames = pds_frames()
    frame = bytearray(frames[data.draw(st.integers(0, len(frames) - 1))])
    if ce:
        frame[15] |= 3
    for bit in flips:
        at = 12 + bit // 8
        if at < len(frame):
            frame[at] ^= 0x80 >> (bit % 8)
    if cut:
        del frame[max(0, len(frame) - cut):]
    assert _received(bytes(frame)) == _reference_receive(bytes(frame))


# Run in a child with ROCE_PURE=1: compiled, the PDS and SES read a dict with C calls that
# a dict subclass cannot watch.
_WATCH = """
import json, sys
from roce.emu.uet import uetframes
sys.path.insert(0, sys.argv[1])
import test_uet_codec as T

read = set()

class Watched(dict):
    def get(self, k, d=None):
        read.add(k)
        return dict.get(self, k, d)

    def __getitem__(self, k):
        read.add(k)
        return dict.__getitem__(self, k)

    def __contains__(self, k):
        read.add(k)
        return dict.__contains__(self, k)

real = uetframes.decode

def watched(frame):
    r = real(frame)
    if r is not None:
        r = r._replace(fields=Watched(r.fields))
    return r

uetframes.decode = watched
T.pds_frames()
print(json.dumps(sorted(read)))
"""


def test_the_pds_reads_no_field_outside_received() -> None:
    """``RECEIVED`` is the contract: what the PDS, SES and congestion manager read of a
    received packet, every field of it read in some run, no other."""
    env = {**os.environ, _compiled.PURE_ENV: "1"}
    r = subprocess.run([sys.executable, "-c", _WATCH, os.path.dirname(__file__)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    read = set(json.loads(r.stdout.splitlines()[-1]))
    assert read <= uetcodec.RECEIVED, read - uetcodec.RECEIVED
    assert uetcodec.RECEIVED - read <= {
        # read on paths these runs do not take: an SES refusal's response, a RUDI response
        # of an error, a NACK of the PDC's state
        "uet.ses.rsp.message_id", "uet.ses.rsp.job_id", "uet.ses.std.job_id",
        "uet.ses.rsp.return_code", "uet.pds.nack.max_recv_psn_plus_1",
        "uet.ses.comp_swap_ext_hdr.atomic_data_type", "uet.ses.comp_swap_ext_hdr.comp_value",
        "uet.ses.comp_swap_ext_hdr.swap_value", "uet.pds.ack.cc_state.credit",
        "uet.pds.ctrl_payload"}, uetcodec.RECEIVED - read
