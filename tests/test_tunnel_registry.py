"""Adding a tunnel is one module plus registry rows (docs/architecture.md, "Where a change
goes"): a toy tunnel declared the way roce.families.tunnels declares GRE, ERSPAN and VXLAN -
a layout, an ``unwrap``, a ``SkipRule`` and a ``Handler`` - and given one registry row is
crafted (``roce craft --encap``), peeled by the compiled peel with no C of its own,
decoded to its inner RoCE (one line and ``-V``, with its own title and field names),
analysed by ``roce stats`` and written to Parquet with typed columns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import pytest
from construct import BitsInteger, BitStruct

from roce import cli, fast
from roce.errors import DecodeError
from roce.families import peel, registry
from roce.families.handler import Handler, SkipRule, Unwrapped
from roce.headers import define
from roce.locate import LINKTYPE_ETHERNET
from roce.pcapio import Batch, open_capture

# -- the toy tunnel: what a new tunnel module holds ----------------------------------------------

TOY_PORT = 5555
TOY_MAGIC = 0xA5
U = BitsInteger
TOY = BitStruct("magic" / U(8) * "Magic", "flags" / U(8) * "Flags",
                "stream" / U(16) * "Toy Stream")
TOY_LAYOUT, decode_toy, encode_toy = define("toy", TOY)
TOY_OPTION = 4  # bytes of an option word present when flags bit 0x80 is set


def unwrap_toy(data: bytes, off: int) -> Unwrapped:
    if len(data) - off < TOY_LAYOUT.size:
        raise DecodeError(f"toy header truncated at byte {off}", "toy", off)
    h = decode_toy(data, off)
    if h["magic"] != TOY_MAGIC:
        raise DecodeError(f"toy magic 0x{h['magic']:02x} at byte {off}", "toy", off)
    pos = off + TOY_LAYOUT.size + (TOY_OPTION if h["flags"] & 0x80 else 0)
    return Unwrapped(data, pos, LINKTYPE_ETHERNET, "toy",
                     {"toy": True, **{f"toy.{k}": v for k, v in h.items()}})


TOY_HANDLER = Handler(
    "toy", unwrap=unwrap_toy,
    skip=SkipRule(size=TOY_LAYOUT.size, checks=((0, 0xFF, TOY_MAGIC),),
                  extras=((1, 0x80, TOY_OPTION),), inner=LINKTYPE_ETHERNET),
    layer="toy", title="Toy Tunnel Protocol", layouts=(("toy", TOY_LAYOUT),),
    fields=("toy", "toy.magic", "toy.flags", "toy.stream"),
    encap=lambda frame, n, ident: encode_toy(
        {"magic": TOY_MAGIC, "flags": 0x80 if n % 2 else 0, "stream": ident})
    + (n.to_bytes(TOY_OPTION, "big") if n % 2 else b"") + frame,
    ident_bits=16)


@pytest.fixture
def toy() -> Iterator[Handler]:
    reg = registry()
    reg.add(TOY_HANDLER, ("udp.port", TOY_PORT))  # the one row
    yield TOY_HANDLER
    reg.remove("toy")


# -- what the rest of roce does with it ------------------------------------------------------------


def _run(capsys, *argv: str) -> str:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.fixture
def capture(toy, tmp_path, capsys):
    """RC WRITEs crafted, then the same crafted inside the toy tunnel (stream 7)."""
    bare, wrapped = tmp_path / "bare.pcap", tmp_path / "toy.pcap"
    common = ["craft", "RC_RDMA_WRITE_ONLY", "--count", "6", "--payload-size", "64",
              "--psn", "10", "--dqpn", "0x11"]
    _run(capsys, *common, "-w", str(bare))
    _run(capsys, *common, "--encap", "toy", "--span-id", "7", "-w", str(wrapped))
    return bare, wrapped


def test_craft_offers_and_builds_it(capture) -> None:
    bare, wrapped = capture
    with open_capture(str(bare)) as a, open_capture(str(wrapped)) as b:
        pairs = list(zip([f.data for f in a], [f.data for f in b]))
    assert len(pairs) == 6
    for n, (inner, outer) in enumerate(pairs):
        assert outer.endswith(inner)  # the inner frame unchanged, after the toy header
        head = outer[len(outer) - len(inner) - 4 - (TOY_OPTION if n % 2 else 0):]
        assert decode_toy(head, 0) == {"magic": TOY_MAGIC, "flags": 0x80 if n % 2 else 0,
                                      "stream": 7}
        assert int.from_bytes(outer[36:38], "big") == TOY_PORT  # UDP destination port


@pytest.mark.skipif(not fast.COMPILED, reason="the compiled peel needs the built extension")
def test_the_compiled_peel_takes_its_rule(capture) -> None:
    _, wrapped = capture
    assert peel._compiled_peel() is not None  # configured from the registry, toy included
    with open_capture(str(wrapped)) as cap:
        datas = [f.data for f in cap]
    batch = Batch(datas, [0] * len(datas), [len(d) for d in datas], [len(d) for d in datas],
                  LINKTYPE_ETHERNET)
    compiled = peel.peel(batch, 4791).datas
    reference = peel.peel_reference(batch, 4791).datas
    assert compiled == reference
    assert all(c != d for c, d in zip(compiled, datas))  # every frame was peeled
    # a frame whose toy header is wrong is left alone by both
    bad = [d[:42] + b"\x00" + d[43:] for d in datas]
    batch = Batch(bad, *batch[1:])
    assert peel.peel(batch, 4791).datas == peel.peel_reference(batch, 4791).datas == bad


def test_decode_shows_the_inner_roce_and_the_tunnel(capture, capsys) -> None:
    bare, wrapped = capture
    plain = _run(capsys, "decode", str(bare)).splitlines()
    inner = _run(capsys, "decode", str(wrapped)).splitlines()
    # the same line as the bare frame's, but for the frame length (the tunnel's bytes)
    def columns(line: str) -> list[str]:
        cut = line.split()
        return cut[:6] + cut[7:]

    assert [columns(line) for line in inner] == [columns(line) for line in plain]
    assert [int(line.split()[6]) for line in inner] == [
        int(line.split()[6]) + 46 + (TOY_OPTION if n % 2 else 0)  # Eth + IPv4 + UDP + toy
        for n, line in enumerate(plain)]
    tree = _run(capsys, "decode", "-V", "-c", "2", str(wrapped))
    assert "Toy Tunnel Protocol" in tree and "Toy Stream: 7" in tree
    assert "Invariant CRC" in tree
    fields = _run(capsys, "decode", "-T", "fields", "-e", "toy.stream", "-e", "bth.psn",
                  "-Y", "toy.flags == 0x80", str(wrapped)).split()
    assert fields == ["7", "11", "7", "13", "7", "15"]


def test_stats_analyses_the_inner_flows(capture, capsys) -> None:
    _, wrapped = capture
    report = json.loads(_run(capsys, "stats", "-T", "json", str(wrapped)))
    assert report["totals"]["roce_packets"] == 6 and report["totals"]["not_roce"] == 0
    assert [f["qp"] for f in report["flows"]] == [0x11]


def test_parquet_types_its_columns(capture, tmp_path, capsys) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    _, wrapped = capture
    out = tmp_path / "toy.parquet"
    _run(capsys, "decode", "-T", "parquet", "-e", "toy.stream", "-e", "toy", "-e", "bth.psn",
         "-w", str(out), str(wrapped))
    table = pq.read_table(out)
    assert str(table.schema.field("toy.stream").type) == "uint16"
    assert table.column("toy.stream").to_pylist() == [7] * 6


def test_the_registry_row_alone_makes_the_difference(toy) -> None:
    reg = registry()
    reg.remove("toy")
    try:
        from roce.families import craft

        assert "toy" not in craft.encaps()
    finally:
        reg.add(replace(TOY_HANDLER), ("udp.port", TOY_PORT))
