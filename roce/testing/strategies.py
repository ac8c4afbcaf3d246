"""Hypothesis strategies for RoCE, derived from the opcode table and the header layouts.

Nothing here lists fields or opcodes by hand: header strategies come from
``roce.headers.LAYOUTS`` (every field, drawn within its width, boundaries favoured) and
packet strategies from ``roce.opcodes.OPCODES`` (which extended headers, whether there is a
payload and of what length).

Public strategies::

    opcodes(transport=None, operation=None)        Opcode rows of the table
    bth(**fixed)                                    dict of BTH field values
    reth(**fixed), aeth(...), deth(...), rdeth(...), atomiceth(...), atomicacketh(...),
    immdt(...), ieth(...), xrceth(...), feth(...), cnp(...)
                                                    one per extended header (``header(name)``
                                                    is the generic form)
    packets(opcode=None, transport=None, ip_version=None, roce_version=2,
            valid_icrc=True, max_payload=4096)      roce.Packet built with roce.craft
    frames(...)                                     the same as bytes
    mutations(frame, fixup=None, ops=None)          structure-aware mutants of one frame
                                                    (roce.testing.mutate does the work)
    psn_sequences(wrap=None, gaps=None, duplicates=None, reorder=None)
                                                    lists of 24-bit PSNs; True forces the
                                                    feature, False forbids it, None leaves it
                                                    to chance (``psn_features`` tells them)
    verbs_programs(max_ops=12, invalid=True)        programs for the emulator (see below)
    uet_cases(pds_type=None, next_header=None, opcode=None, reading="spec", native=None,
              encrypted=None, clean=True)           Ultra Ethernet packets: field values,
                                                    payload and frame (roce.testing.uetcases)
    uet_frames(...)                                 the same as Ethernet frames

Field values: ``int`` fields are drawn from 0..max with the boundaries (0, 1, max-1, max)
drawn often; ``bool`` fields as booleans; address fields as the strings the codec takes.
Keyword arguments fix a field: ``bth(opcode=0x04, psn=0)``.  Reserved fields and TVer are
zero unless ``reserved=True`` is given (then they, too, range over their width).

A verbs program is a list of operations, each a tuple of plain values that
``roce.testing.fuzz.run_program`` executes on two emulated hosts ``a`` -> ``b`` (RC)::

    ("post_recv", length)                     a receive WQE of ``length`` bytes on b
    ("send", length, imm)                     SEND (with immediate when imm is not None)
    ("write", offset, length, rkey_kind)      RDMA WRITE into b's MR at ``offset``
    ("read", offset, length, rkey_kind)       RDMA READ from b's MR
    ("cas", offset, compare, swap, rkey_kind) / ("faa", offset, add, rkey_kind)
    ("modify", side, state)                   ibv_modify_qp on "a" or "b" to a state name
    ("run", ns)                               let virtual time pass

``rkey_kind`` is "good", "bad_key" (right MR index, wrong key byte), "bad_index" (no such MR)
or "other_pd" (an MR of another protection domain); offsets and lengths range past the MR's
end, atomics over misaligned offsets, lengths include 0 and sends longer than any posted
receive buffer.  ``invalid=False`` keeps to operations that must all succeed (receives are
then whole buffers, ``PROGRAM_RECV_SIZE`` bytes, so that every SEND fits).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from roce.testing._extras import missing_extra

try:
    from hypothesis import strategies as st
except ImportError as exc:  # the fuzz extra is not installed: say how to get it
    raise missing_extra("hypothesis", __name__, exc) from exc

from roce import craft
from roce.headers import LAYOUTS, Field
from roce.opcodes import OPCODES, ROCE_OPCODES, Opcode, Operation, Transport, lookup
from roce.packet import Packet
from roce.psn import PSN_MASK, psn_diff
from roce.testing import mutate as _mutate
from roce.testing.fuzz.programs import (
    PROGRAM_MR_SIZE,
    PROGRAM_RECV_SIZE,
    RKEY_KINDS,
    STATES,
    random_program,
)

# -- opcodes -----------------------------------------------------------------------------------


def _as_transport(value: Transport | str | None) -> Transport | None:
    if value is None or isinstance(value, Transport):
        return value
    return Transport(str(value).upper())


def _as_operation(value: Operation | str | None) -> Operation | None:
    if value is None or isinstance(value, Operation):
        return value
    text = str(value).lower()
    for op in Operation:
        if text in (op.value, op.name.lower()):
            return op
    raise ValueError(f"unknown operation {value!r}")


def opcode_rows(transport: Transport | str | None = None,
                operation: Operation | str | None = None) -> list[Opcode]:
    """The RoCE table rows (``ROCE_OPCODES``: what these strategies' frames carry) matching
    a transport and/or operation (in code order)."""
    t, o = _as_transport(transport), _as_operation(operation)
    rows = [op for op in ROCE_OPCODES.values()
            if (t is None or op.transport is t) and (o is None or op.operation is o)]
    if not rows:
        raise ValueError(f"no opcode is {t} {o}")
    return rows


def opcodes(transport: Transport | str | None = None,
            operation: Operation | str | None = None) -> st.SearchStrategy[Opcode]:
    """Rows of the opcode table, optionally one transport and/or operation."""
    return st.sampled_from(opcode_rows(transport, operation))


# -- headers -------------------------------------------------------------------------------------


def _is_reserved(header: str, f: Field) -> bool:
    return f.name.startswith("reserved") or (header == "bth" and f.name == "tver") or \
        header == "cnp"


def field_values(header: str, f: Field, reserved: bool = False) -> st.SearchStrategy[Any]:
    """Values for one field of a header layout, within its width."""
    if _is_reserved(header, f) and not reserved:
        return st.just(0)
    if f.kind == "bool":
        return st.booleans()
    ints = st.one_of(st.sampled_from(sorted({0, 1, max(f.mask - 1, 0), f.mask})),
                     st.integers(0, f.mask))
    if f.kind == "addr":
        dec = f.decode
        assert dec is not None
        return ints.map(dec)
    return ints


def header(name: str, reserved: bool = False, **fixed: Any) -> st.SearchStrategy[dict]:
    """A dict of field values for header ``name`` of ``LAYOUTS``; ``fixed`` pins fields."""
    layout = LAYOUTS[name]
    unknown = set(fixed) - {f.name for f in layout.fields}
    if unknown:
        raise TypeError(f"{name} has no fields {sorted(unknown)}")
    return st.fixed_dictionaries({
        f.name: st.just(fixed[f.name]) if f.name in fixed else field_values(name, f, reserved)
        for f in layout.fields})


def bth(reserved: bool = False, **fixed: Any) -> st.SearchStrategy[dict]:
    """BTH field values: opcode from the table unless fixed, PadCnt 0..3, TVer 0."""
    if "opcode" not in fixed and not reserved:
        return header("bth", reserved, **fixed).flatmap(
            lambda d: opcodes().map(lambda op: {**d, "opcode": op.code}))
    return header("bth", reserved, **fixed)


# Every extended header that follows BTH in some opcode row: one strategy function each.
EXTENDED_HEADERS: tuple[str, ...] = tuple(sorted({h for op in OPCODES.values()
                                                  for h in op.headers}))


def _header_strategy(name: str) -> Any:
    def strategy(reserved: bool = False, **fixed: Any) -> st.SearchStrategy[dict]:
        return header(name, reserved, **fixed)

    strategy.__name__ = strategy.__qualname__ = name
    strategy.__doc__ = f"Field values of the {name.upper()} header (from LAYOUTS[{name!r}])."
    return strategy


for _name in EXTENDED_HEADERS:
    globals()[_name] = _header_strategy(_name)


# -- packets and frames -------------------------------------------------------------------------


def _resolve_opcode(opcode: int | str | Opcode | None, transport: Transport | str | None
                    ) -> st.SearchStrategy[Opcode]:
    if opcode is not None:
        return st.just(lookup(opcode))
    return opcodes(transport)


@st.composite
def _packet(draw: st.DrawFn, opcode: int | str | Opcode | None, transport: Any,
            ip_version: int | None, roce_version: int | None, valid_icrc: bool,
            max_payload: int) -> Packet:
    op = draw(_resolve_opcode(opcode, transport))
    version = roce_version if roce_version is not None else draw(st.sampled_from((1, 2)))
    kw: dict[str, Any] = {"roce_version": version}
    if version == 2:
        ipv = ip_version if ip_version is not None else draw(st.sampled_from((4, 6)))
        kw["ipv6"] = ipv == 6
        kw["ecn"] = draw(st.integers(0, 3))
    if draw(st.integers(0, 4)) == 0:
        kw["vlan"] = draw(st.integers(0, 4095))
        kw["vlan_priority"] = draw(st.integers(0, 7))
    fields: dict[str, Any] = {}
    fixed_bth = {"opcode": op.code}
    if op.transport is Transport.CNP:  # docs/protocol.md "CNP and ECN"
        fixed_bth.update(becn=True, p_key=0xFFFF, psn=0)
    values = draw(bth(**fixed_bth))
    for name, value in values.items():
        if name not in ("opcode", "padcnt"):  # PadCnt is the builder's to fill
            fields[f"bth.{name}"] = value
    for name in op.headers:
        for fname, value in draw(header(name)).items():
            fields[f"{name}.{fname}"] = value
    if op.payload_len is not None:
        payload = draw(st.binary(min_size=op.payload_len, max_size=op.payload_len))
    elif op.payload:
        payload = draw(st.binary(max_size=max_payload))
    else:
        payload = b""
    p = craft(op.code, payload, **kw, **fields)
    if not valid_icrc:
        p.icrc = p.expected_icrc ^ draw(st.integers(1, 0xFFFFFFFF))
    return p


def packets(opcode: int | str | Opcode | None = None, transport: Transport | str | None = None,
            ip_version: int | None = None, roce_version: int | None = 2,
            valid_icrc: bool = True, max_payload: int = 4096) -> st.SearchStrategy[Packet]:
    """Well-formed ``roce.Packet``: any opcode (or the one given, or one of a transport),
    IPv4 or IPv6 (``ip_version``), RoCEv2 or v1 (``roce_version``, None for either), an
    optional VLAN tag, every header field drawn by its layout.  ``valid_icrc=False`` gives
    packets whose ICRC is wrong (and nothing else)."""
    if ip_version not in (None, 4, 6):
        raise ValueError("ip_version is 4, 6 or None")
    if roce_version not in (None, 1, 2):
        raise ValueError("roce_version is 1, 2 or None")
    return _packet(opcode, transport, ip_version, roce_version, valid_icrc, max_payload)


def frames(opcode: int | str | Opcode | None = None, transport: Transport | str | None = None,
           ip_version: int | None = None, roce_version: int | None = 2,
           valid_icrc: bool = True, max_payload: int = 4096) -> st.SearchStrategy[bytes]:
    """``packets(...)`` as the bytes of Ethernet frames."""
    return packets(opcode, transport, ip_version, roce_version, valid_icrc,
                   max_payload).map(Packet.to_bytes)


# -- mutations --------------------------------------------------------------------------------


def mutants(frame: bytes, fixup: bool | None = None, ops: Iterable[str] | None = None,
            linktype: int = 1) -> st.SearchStrategy[_mutate.Mutant]:
    """``roce.testing.mutate.Mutant`` of ``frame`` (bytes, operator names, fixed-up flag).

    ``fixup=True`` recomputes the ICRC after mutating (where the frame still walks), so the
    mutant reaches the code behind the CRC check; False never does; None either."""
    names = tuple(ops) if ops is not None else None
    return st.randoms(use_true_random=False).map(
        lambda rng: _mutate.Mutator(rng, ops=names).mutate(frame, linktype, fix=fixup))


def mutations(frame: bytes, fixup: bool | None = None, ops: Iterable[str] | None = None,
              linktype: int = 1) -> st.SearchStrategy[bytes]:
    """Structure-aware mutants of ``frame`` as bytes (see ``roce.testing.mutate``)."""
    return mutants(frame, fixup, ops, linktype).map(lambda m: m.frame)


# -- PSN sequences ------------------------------------------------------------------------------

PSN_SPACE = PSN_MASK + 1


def psn_features(seq: list[int]) -> frozenset[str]:
    """Which of "wrap", "gap", "duplicate", "reorder" a PSN sequence shows.

    Offsets are taken in 24-bit serial arithmetic from the first PSN: a *wrap* is a PSN on
    the other side of 2^24 than its offset says; a *gap* a missing offset between the lowest
    and highest; a *duplicate* a PSN seen twice; a *reorder* first occurrences out of order."""
    if not seq:
        return frozenset()
    base = seq[0]
    out = set()
    offsets = [psn_diff(p, base) for p in seq]
    if any((p < base) != (o < 0) for p, o in zip(seq, offsets)):
        out.add("wrap")
    if len(set(seq)) < len(seq):
        out.add("duplicate")
    distinct = sorted(set(offsets))
    if distinct[-1] - distinct[0] + 1 > len(distinct):
        out.add("gap")
    seen: set[int] = set()
    firsts = []
    for o in offsets:
        if o not in seen:
            seen.add(o)
            firsts.append(o)
    if any(b < a for a, b in zip(firsts, firsts[1:])):
        out.add("reorder")
    return frozenset(out)


@st.composite
def psn_sequences(draw: st.DrawFn, wrap: bool | None = None, gaps: bool | None = None,
                  duplicates: bool | None = None, reorder: bool | None = None,
                  min_size: int = 2, max_size: int = 64) -> list[int]:
    """A list of 24-bit PSNs as a receiver may see them: in order from a start PSN, with
    gaps (lost packets), duplicates (retransmissions) and reordering as asked."""
    n = draw(st.integers(max(min_size, 2 if (gaps or reorder) else 1), max(max_size, 2)))
    want_gaps = draw(st.booleans()) if gaps is None else gaps
    steps = [1] * (n - 1)
    if want_gaps and n >= 2:
        holes = draw(st.lists(st.integers(0, n - 2), min_size=1, max_size=max(1, n // 4)))
        for i in holes:
            steps[i] = draw(st.sampled_from((2, 3, 5, 17, 1 << 12)))
    offsets = [0]
    for s in steps:
        offsets.append(offsets[-1] + s)
    span = offsets[-1]
    want_wrap = draw(st.booleans()) if wrap is None else wrap
    if want_wrap and span == 0:
        want_wrap = False
        if wrap:  # a single PSN cannot wrap: make it two
            offsets, span = [0, 1], 1
    if want_wrap:
        start = PSN_SPACE - draw(st.integers(1, span))
    else:
        start = draw(st.integers(0, PSN_MASK - span) | st.just(PSN_MASK - span) | st.just(0))
    seq = [(start + o) & PSN_MASK for o in offsets]
    want_reorder = draw(st.booleans()) if reorder is None else reorder
    if want_reorder and len(seq) >= 2:
        i = draw(st.integers(0, len(seq) - 2))
        seq[i], seq[i + 1] = seq[i + 1], seq[i]
    want_dups = draw(st.booleans()) if duplicates is None else duplicates
    if want_dups:
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(0, len(seq) - 1))
            j = draw(st.integers(i, len(seq) - 1))
            seq.insert(j + 1, seq[i])  # a later copy: first occurrences keep their order
    return seq


# -- verbs programs -----------------------------------------------------------------------------

# RKEY_KINDS, PROGRAM_MR_SIZE, PROGRAM_RECV_SIZE, STATES and random_program (plain random,
# no hypothesis) live with run_program in roce.testing.fuzz.programs; re-exported here


def _lengths(invalid: bool, limit: int) -> st.SearchStrategy[int]:
    good = st.integers(1, limit) | st.sampled_from((1, 8, 255, 256, 257, limit))
    if not invalid:
        return good
    return good | st.sampled_from((0, limit + 1, 2 * limit, 64 * 1024))


def _operation(invalid: bool) -> st.SearchStrategy[tuple]:
    size = PROGRAM_MR_SIZE
    rkey = st.sampled_from(RKEY_KINDS) if invalid else st.just("good")
    if invalid:
        offset = st.integers(0, size) | st.sampled_from((0, size - 8, size - 1, size, size + 8))
    else:
        offset = st.integers(0, size // 2)
    in_range = st.integers(1, size // 2)
    aligned = st.integers(0, size // 8 - 1).map(lambda i: i * 8)
    atomic_offset = (aligned | st.integers(0, size + 8)) if invalid else aligned
    u64 = st.integers(0, (1 << 64) - 1) | st.sampled_from((0, 1, (1 << 64) - 1))
    # A SEND may land in any posted receive, so operations that must succeed post whole
    # buffers only: a shorter one would end a longer SEND with an invalid request NAK.
    recv = st.tuples(st.just("post_recv"),
                     st.integers(1, PROGRAM_RECV_SIZE) | st.just(PROGRAM_RECV_SIZE)
                     if invalid else st.just(PROGRAM_RECV_SIZE))
    send = st.tuples(st.just("send"),
                     _lengths(invalid, PROGRAM_RECV_SIZE) if invalid
                     else st.integers(0, PROGRAM_RECV_SIZE),
                     st.none() | st.integers(0, 0xFFFFFFFF))
    write = st.tuples(st.just("write"), offset, in_range if not invalid else
                      _lengths(True, size // 2), rkey)
    read = st.tuples(st.just("read"), offset, in_range if not invalid else
                     _lengths(True, size // 2), rkey)
    cas = st.tuples(st.just("cas"), atomic_offset, u64, u64, rkey)
    faa = st.tuples(st.just("faa"), atomic_offset, u64, rkey)
    run = st.tuples(st.just("run"), st.sampled_from((1_000, 100_000, 10_000_000)))
    ops = [recv, recv, send, write, read, cas, faa, run]
    if invalid:
        ops.append(st.tuples(st.just("modify"), st.sampled_from(("a", "b")),
                             st.sampled_from(STATES)))
    return st.one_of(ops)


def verbs_programs(max_ops: int = 12, invalid: bool = True) -> st.SearchStrategy[list[tuple]]:
    """Programs of verbs operations (see the module docstring) for
    ``roce.testing.fuzz.run_program``."""
    return st.lists(_operation(invalid), min_size=1, max_size=max_ops)


from roce.testing.uetcases import UetCase, uet_cases, uet_frames  # noqa: E402

__all__ = ["opcodes", "opcode_rows", "bth", "header", "field_values", "packets", "frames",
           "UetCase", "uet_cases", "uet_frames",
           "mutants", "mutations", "psn_sequences", "psn_features", "verbs_programs",
           "random_program", "EXTENDED_HEADERS", "RKEY_KINDS", "PROGRAM_MR_SIZE",
           "PROGRAM_RECV_SIZE", *EXTENDED_HEADERS]
