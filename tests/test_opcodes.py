"""The opcode table (roce.opcodes) against the protocol facts of docs/protocol.md."""

from __future__ import annotations

import pytest

from roce.headers import SIZE_OF
from roce.opcodes import (
    CNP_OPCODE,
    IB_CNP_OPCODE,
    IB_OPCODES,
    OPCODES,
    ROCE_OPCODES,
    Link,
    Opcode,
    Operation,
    Position,
    Transport,
    lookup,
    transport_of,
)

# docs/protocol.md "Opcodes and extended headers": RC opcode -> bytes before the payload
# (BTH included).
SPEC_HDR_BYTES = {
    0x00: 12, 0x01: 12, 0x02: 12, 0x04: 12,  # SEND First/Middle/Last/Only
    0x03: 16, 0x05: 16,  # SEND Last/Only with Immediate
    0x06: 28, 0x0A: 28,  # RDMA WRITE First/Only
    0x07: 12, 0x08: 12,  # RDMA WRITE Middle/Last
    0x09: 16,  # RDMA WRITE Last with Immediate
    0x0B: 32,  # RDMA WRITE Only with Immediate
    0x0C: 28,  # RDMA READ Request
    0x0D: 16, 0x0F: 16, 0x10: 16,  # READ Response First/Last/Only
    0x0E: 12,  # READ Response Middle
    0x11: 16,  # Acknowledge
    0x12: 24,  # Atomic Acknowledge
    0x13: 40, 0x14: 40,  # CmpSwap / FetchAdd
    0x16: 16, 0x17: 16,  # SEND Last/Only with Invalidate
    0x1C: 32,  # FLUSH
    0x1D: 28,  # ATOMIC WRITE
}
SPEC_RC_HEADERS = {
    0x03: ("immdt",), 0x05: ("immdt",), 0x06: ("reth",), 0x0A: ("reth",), 0x09: ("immdt",),
    0x0B: ("reth", "immdt"), 0x0C: ("reth",), 0x0D: ("aeth",), 0x0F: ("aeth",),
    0x10: ("aeth",), 0x11: ("aeth",), 0x12: ("aeth", "atomicacketh"), 0x13: ("atomiceth",),
    0x14: ("atomiceth",), 0x16: ("ieth",), 0x17: ("ieth",), 0x1C: ("feth", "reth"),
    0x1D: ("reth",),
}
NO_PAYLOAD_RC = {0x0C, 0x11, 0x12, 0x13, 0x14, 0x1C}
RC_RESPONSES = {0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12}
SEND_WRITE_RC = set(range(0x00, 0x0C))


def hdr_bytes(op: Opcode) -> int:
    return SIZE_OF["bth"] + sum(SIZE_OF[h] for h in op.headers)


def test_rc_rows_are_exactly_the_design_table():
    rc = {c for c, op in OPCODES.items() if op.transport is Transport.RC}
    assert rc == set(SPEC_HDR_BYTES)


@pytest.mark.parametrize("code", sorted(SPEC_HDR_BYTES), ids=lambda c: f"0x{c:02x}")
def test_rc_header_bytes_match_design(code):
    op = OPCODES[code]
    assert hdr_bytes(op) == SPEC_HDR_BYTES[code]
    assert op.headers == SPEC_RC_HEADERS.get(code, ())
    assert op.payload is (code not in NO_PAYLOAD_RC)
    assert op.payload_len == (8 if code == 0x1D else None)
    assert op.is_response is (code in RC_RESPONSES)
    assert op.is_request is (code not in RC_RESPONSES)


def test_header_sizes_used_by_the_table():
    assert {h: SIZE_OF[h] for h in ("immdt", "reth", "aeth", "atomicacketh", "atomiceth",
                                     "ieth", "feth", "rdeth", "deth", "xrceth", "cnp")} == {
        "immdt": 4, "reth": 16, "aeth": 4, "atomicacketh": 8, "atomiceth": 28, "ieth": 4,
        "feth": 4, "rdeth": 4, "deth": 8, "xrceth": 4, "cnp": 16}


def test_specific_design_examples():
    assert hdr_bytes(OPCODES[0x0B]) == 32
    assert hdr_bytes(OPCODES[0x12]) == 24
    assert hdr_bytes(OPCODES[0x13]) == 40
    assert hdr_bytes(OPCODES[0x1C]) == 32
    assert hdr_bytes(OPCODES[0x1D]) == 28 and OPCODES[0x1D].payload_len == 8


def test_uc_has_exactly_send_and_write_rows():
    uc = {c for c, op in OPCODES.items() if op.transport is Transport.UC}
    assert uc == set(range(0x20, 0x2C))
    for c in SEND_WRITE_RC:
        rc, op = OPCODES[c], OPCODES[0x20 + c]
        assert op.operation in (Operation.SEND, Operation.RDMA_WRITE)
        assert (op.headers, op.payload, op.position, op.operation) == (
            rc.headers, rc.payload, rc.position, rc.operation)
        assert op.ident == "UC_" + rc.ident[3:]
    # no READ, atomics, ACKs or SEND with Invalidate on UC
    for c in (0x2C, 0x2D, 0x31, 0x33, 0x36, 0x37):
        assert c not in OPCODES


def test_rd_rows():
    rd = {c for c, op in OPCODES.items() if op.transport is Transport.RD}
    assert rd == set(range(0x40, 0x56))
    for c in range(0x00, 0x15):
        rc, op = OPCODES[c], OPCODES[0x40 + c]
        if c in RC_RESPONSES:
            assert op.headers == ("rdeth",) + rc.headers, hex(op.code)
        else:
            assert op.headers == ("rdeth", "deth") + rc.headers, hex(op.code)
        assert op.payload == rc.payload
        assert hdr_bytes(op) == hdr_bytes(rc) + (4 if c in RC_RESPONSES else 12)
    resync = OPCODES[0x55]
    assert resync.operation is Operation.RESYNC
    assert resync.headers == ("rdeth", "deth") and not resync.payload
    assert 0x56 not in OPCODES and 0x5C not in OPCODES  # no RD FLUSH / ATOMIC WRITE


def test_ud_rows():
    ud = {c for c, op in OPCODES.items() if op.transport is Transport.UD}
    assert ud == {0x64, 0x65}
    assert OPCODES[0x64].headers == ("deth",)
    assert OPCODES[0x65].headers == ("deth", "immdt")
    assert OPCODES[0x65].immediate and not OPCODES[0x64].immediate
    assert all(OPCODES[c].payload and OPCODES[c].position is Position.ONLY for c in ud)


def test_xrc_rows():
    xrc = {c for c, op in OPCODES.items() if op.transport is Transport.XRC}
    assert xrc == {0xA0 + c for c in SPEC_HDR_BYTES if c <= 0x17}
    for c in xrc:
        op, rc = OPCODES[c], OPCODES[c - 0xA0]
        if op.is_request:
            assert op.headers == ("xrceth",) + rc.headers, hex(c)
        else:
            assert op.headers == rc.headers, hex(c)
            assert "xrceth" not in op.headers


def test_cnp_row():
    cnp = OPCODES[0x81]
    assert cnp.transport is Transport.CNP and cnp.operation is Operation.CNP
    assert cnp.headers == ("cnp",) and not cnp.payload
    assert hdr_bytes(cnp) == 28  # BTH + 16 reserved bytes
    assert cnp.links == {Link.ROCE}  # RoCEv2 Annex A17.9.2


def test_ib_cnp_row():
    """IBA table 38 / Annex A10.3.2 (Linux ib_pack.h IB_OPCODE_CNP): 0x80, BTH alone (hfi1
    return_cnp: PktLen 6 words, LRH + BTH + ICRC), valid on native InfiniBand only."""
    cnp = OPCODES[0x80]
    assert cnp.transport is Transport.CNP and cnp.operation is Operation.CNP
    assert cnp.headers == () and not cnp.payload and hdr_bytes(cnp) == 12
    assert cnp.links == {Link.IB}
    assert (CNP_OPCODE, IB_CNP_OPCODE) == (0x81, 0x80)
    assert 0x80 in IB_OPCODES and 0x80 not in ROCE_OPCODES
    assert 0x81 in ROCE_OPCODES and 0x81 not in IB_OPCODES
    others = set(OPCODES) - {0x80, 0x81}
    assert others <= set(IB_OPCODES) and others <= set(ROCE_OPCODES)
    assert lookup("cnp-ib") is cnp and lookup("cnp") is OPCODES[0x81]


def test_table_has_no_other_opcodes():
    expected = (set(SPEC_HDR_BYTES) | set(range(0x20, 0x2C)) | set(range(0x40, 0x56))
                | {0x64, 0x65, 0x80, 0x81} | {0xA0 + c for c in SPEC_HDR_BYTES if c <= 0x17})
    assert set(OPCODES) == expected
    assert len(OPCODES) == 25 + 12 + 22 + 2 + 2 + 23
    assert list(OPCODES) == sorted(OPCODES)
    assert all(op.code == c for c, op in OPCODES.items())


@pytest.mark.parametrize("code", range(256), ids=lambda c: f"0x{c:02x}")
def test_transport_of_bits_7_5(code):
    expected = {0: Transport.RC, 1: Transport.UC, 2: Transport.RD, 3: Transport.UD,
                4: Transport.CNP, 5: Transport.XRC, 6: None, 7: None}[code // 32]
    assert transport_of(code) is expected
    if code in OPCODES:
        assert OPCODES[code].transport is expected


def test_flags_follow_headers():
    for op in OPCODES.values():
        assert op.immediate is ("immdt" in op.headers), op
        assert op.invalidate is ("ieth" in op.headers), op
        assert op.is_request is not op.is_response
        prefix = "" if op.transport is Transport.CNP else op.transport.value + " "
        assert op.short_name.startswith(prefix) and op.iba_name.startswith(prefix)
        assert op.ident.startswith(op.transport.value)
        assert str(op) == op.short_name
        assert op.slug == op.ident.lower().replace("_", "-")


def test_positions():
    for op in OPCODES.values():
        word = op.ident.split("_")
        if "FIRST" in word:
            assert op.position is Position.FIRST
        elif "MIDDLE" in word:
            assert op.position is Position.MIDDLE
        elif "LAST" in word:
            assert op.position is Position.LAST
        else:
            assert op.position is Position.ONLY, op


def test_names_unique():
    for attr in ("ident", "iba_name", "slug"):
        values = [getattr(op, attr).lower() for op in OPCODES.values()]
        assert len(set(values)) == len(values), attr
    for table in (ROCE_OPCODES, IB_OPCODES):  # Wireshark names both CNPs "CNP"
        values = [op.short_name.lower() for op in table.values()]
        assert len(set(values)) == len(values)


# -- lookup -----------------------------------------------------------------------------


def test_lookup_examples():
    ack = OPCODES[0x11]
    assert lookup(0x11) is ack
    assert lookup("0x11") is ack
    assert lookup("17") is ack
    assert lookup("RC_ACKNOWLEDGE") is ack
    assert lookup("rc-acknowledge") is ack
    assert lookup("RC Acknowledge") is ack
    assert lookup(ack) is ack
    assert lookup("rc-write-only") is OPCODES[0x0A]
    assert lookup("rc-rdma-write-only") is OPCODES[0x0A]
    assert lookup("RC RDMA Write Only Immediate") is OPCODES[0x0B]  # Wireshark's name
    assert lookup("RC RDMA WRITE Only with Immediate") is OPCODES[0x0B]  # IBA's name
    assert lookup("uc_send_only") is OPCODES[0x24]
    assert lookup("  UD Send Only Immediate ") is OPCODES[0x65]
    assert lookup("cnp") is OPCODES[0x81]
    assert lookup("0x81") is OPCODES[0x81]
    assert lookup("RC Compare Swap") is OPCODES[0x13]
    assert lookup("rc read request") is OPCODES[0x0C]


@pytest.mark.parametrize("code", sorted(OPCODES), ids=lambda c: f"0x{c:02x}")
def test_every_spelling_finds_its_row(code):
    op = OPCODES[code]
    spellings = {code, f"0x{code:02x}", f"0X{code:02X}", str(code), op.ident, op.ident.lower(),
                 op.slug, op.slug.upper(), op.iba_name, op.short_name, op.short_name.upper(),
                 op.iba_name.replace(" ", "_")}
    if "RDMA" in op.ident:
        spellings.add(op.slug.replace("rdma-", ""))
    if Link.ROCE not in op.links:  # a name RoCE's row shares ("CNP") means RoCE's row
        spellings -= {s for s in spellings if isinstance(s, str) and any(
            s.lower() == r.short_name.lower() for r in ROCE_OPCODES.values())}
    for s in spellings:
        assert lookup(s) is op, s
        assert lookup(s) is op, s  # again: served from the cache of seen spellings


@pytest.mark.parametrize("bad", [0x15, 0x30, 0x82, 0xC0, 0xFF, 256, -1, "0x15", "0x30",
                                 "rc-bogus", "", "RC", "send only"])
def test_lookup_unknown_raises_keyerror(bad):
    with pytest.raises(KeyError) as exc:
        lookup(bad)
    text = str(exc.value)
    if isinstance(bad, int) and bad >= 0:
        assert f"0x{bad:02x}" in text
    elif isinstance(bad, str):
        assert repr(bad.strip()) in text


def test_opcodes_command_names_one_link_rows(capsys):
    from roce.cli import main

    assert main(["opcodes", "--transport", "cnp"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["0x80", "0x81"]
    assert rows[0].endswith("(native InfiniBand only)") and rows[1].endswith("(RoCE only)")
