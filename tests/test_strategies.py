"""roce.testing.strategies: the strategies produce what they claim, and the project's own
property tests built on them (decoder robustness, fast path == reference, responder
invariants, exactly-once under faults)."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

import roce
from roce import OPCODES, ROCE_OPCODES, fast, locate
from roce.headers import ENCODERS, LAYOUTS
from roce.opcodes import Operation, Transport
from roce.packet import decode_headers_reference
from roce.testing import mutate, pytest_plugin
from roce.testing import strategies as S
from roce.testing.fuzz import DecoderFuzzer, run_program

# the plugin's fixtures, without registering the plugin twice once its entry point exists
roce_strategies = pytest_plugin.roce_strategies
roce_fabric = pytest_plugin.roce_fabric
roce_mutator = pytest_plugin.roce_mutator

# -- opcodes and headers ---------------------------------------------------------------------------


def test_opcode_rows_cover_the_table_and_filter():
    assert {op.code for op in S.opcode_rows()} == set(ROCE_OPCODES)
    assert all(op.transport is Transport.UD for op in S.opcode_rows("UD"))
    assert {op.code for op in S.opcode_rows("ud")} == {0x64, 0x65}
    reads = S.opcode_rows(operation="read")
    assert reads and all(op.operation is Operation.RDMA_READ for op in reads)
    assert [op.code for op in S.opcode_rows(Transport.RC, Operation.ATOMIC)] == [0x13, 0x14]
    with pytest.raises(ValueError):
        S.opcode_rows("UD", "read")


@given(S.opcodes(transport="UC", operation="write"))
def test_opcodes_strategy_filters(op):
    assert op.transport is Transport.UC and op.operation is Operation.RDMA_WRITE


def test_one_strategy_per_extended_header():
    used = {h for op in OPCODES.values() for h in op.headers}
    assert set(S.EXTENDED_HEADERS) == used
    for name in used:
        assert callable(getattr(S, name)) and name in S.__all__


@pytest.mark.parametrize("name", ["bth", *sorted({h for op in OPCODES.values()
                                                  for h in op.headers})])
def test_header_values_fit_their_widths(name):
    strategy = S.bth() if name == "bth" else getattr(S, name)()

    @settings(max_examples=examples(30))
    @given(strategy)
    def check(values):
        assert set(values) == {f.name for f in LAYOUTS[name].fields}
        ENCODERS[name](values)  # raises ValueError for a value that does not fit
        for f in LAYOUTS[name].fields:
            if f.name.startswith("reserved") or name == "cnp":
                assert values[f.name] == 0

    check()


@given(S.bth(opcode=0x0A, psn=5), S.reth(r_key=7), S.bth(reserved=True))
def test_fixed_fields_and_reserved(b, r, wild):
    assert b["opcode"] == 0x0A and b["psn"] == 5 and b["tver"] == 0
    assert r["r_key"] == 7
    ENCODERS["bth"](wild)


def test_header_rejects_unknown_fields():
    with pytest.raises(TypeError):
        S.reth(nope=1)


# -- packets and frames ----------------------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(ROCE_OPCODES), ids=lambda c: f"0x{c:02x}")
@settings(max_examples=examples(4))
@given(data=st.data())
def test_every_opcode_reachable_and_parses_back(code, data):
    p = data.draw(S.packets(opcode=code, roce_version=None, max_payload=300))
    frame = p.to_bytes()
    q = roce.parse(frame)
    assert q.opcode.code == code
    assert q.icrc_valid
    assert q.to_bytes() == frame


@given(S.packets(roce_version=None, ip_version=None, max_payload=600))
def test_packets_are_valid(p):
    q = roce.parse(p.to_bytes())
    assert q.icrc_valid and q.opcode.code == p.opcode.code


@given(S.packets(valid_icrc=False, max_payload=64))
def test_packets_with_a_bad_icrc(p):
    q = roce.parse(p.to_bytes())
    assert not q.icrc_valid


@given(S.frames(transport="RD", ip_version=6))
def test_frames_of_a_transport(frame):
    w = fast.walk(frame)
    assert w.status == locate.OK and w.l3_kind == locate.L3_IPV6
    assert OPCODES[w.opcode].transport is Transport.RD


@given(S.frames(roce_version=1, max_payload=32))
def test_rocev1_frames(frame):
    assert fast.walk(frame).l3_kind == locate.L3_GRH


# -- mutations -------------------------------------------------------------------------------------


@given(S.frames(max_payload=200), st.data())
def test_mutants_differ_from_the_original(frame, data):
    m = data.draw(S.mutants(frame))
    assert m.frame != frame
    assert m.ops and set(m.ops) <= set(mutate.OPERATORS)


@given(S.frames(max_payload=200, roce_version=None), st.data())
def test_fixed_up_mutants_pass_the_icrc_check(frame, data):
    m = data.draw(S.mutants(frame, fixup=True))
    w = fast.walk(m.frame)
    if w.status == locate.OK:
        assert m.fixed
        assert fast.icrc_of(m.frame, w) == int.from_bytes(m.frame[w.icrc_off:w.l4_end], "big")


@pytest.mark.parametrize("op", mutate.OPERATORS)
def test_each_operator_changes_frames(op):
    rng = random.Random(op)
    m = mutate.Mutator(rng, max_stack=1, ops=[op])
    base = roce.craft("RC_RDMA_WRITE_ONLY", b"payload!", va=0x1000, rkey=5, dmalen=8,
                      vlan=3).to_bytes()
    seen = set()
    for _ in range(50):
        out = m.mutate(base, fix=False)
        assert out.frame != base
        seen.add(out.ops[0])
    assert op in seen


def test_mutator_boundaries_and_lengths():
    base = roce.craft("RC_SEND_ONLY", b"abc", dqpn=0x12).to_bytes()
    rng = random.Random(1)
    m = mutate.Mutator(rng, max_stack=1, ops=["length"])
    statuses = {fast.walk(m.mutate(base, fix=False).frame).status for _ in range(200)}
    assert locate.BAD_UDP_LENGTH in statuses and locate.BAD_L3_LENGTH in statuses
    m = mutate.Mutator(rng, max_stack=1, ops=["tver"])
    assert fast.walk(m.mutate(base, fix=False).frame).status == locate.BAD_TVER
    m = mutate.Mutator(rng, max_stack=1, ops=["padcnt"])
    assert all(fast.walk(m.mutate(base, fix=False).frame).status in (
        locate.OK, locate.BAD_PADCNT) for _ in range(20))


def test_fixup_recomputes_the_icrc_after_a_field_change():
    base = roce.craft("RC_RDMA_WRITE_ONLY", b"12345678", va=1, rkey=2, dmalen=8).to_bytes()
    w = fast.walk(base)
    buf = bytearray(base)
    refs = {(r.header, r.field.name): r for r in mutate.field_refs(base, w)}
    ref = refs[("reth", "r_key")]
    mutate.set_field(buf, ref.base, ref.field, 0xDEAD)
    assert not roce.parse(bytes(buf)).icrc_valid
    fixed = mutate.fixup(bytes(buf))
    p = roce.parse(fixed)
    assert p.icrc_valid and p.fields()["reth.r_key"] == 0xDEAD


def test_header_offsets_come_from_the_walk():
    frame = roce.craft("RD_RDMA_WRITE_FIRST", b"x", vlan=1).to_bytes()
    names = [h for h, _ in mutate.header_offsets(frame)]
    assert names == ["eth", "vlan", "ip", "udp", "bth", "rdeth", "deth", "reth"]


# -- PSN sequences ---------------------------------------------------------------------------------

FEATURES = ("wrap", "gap", "duplicate", "reorder")
_ARG = {"wrap": "wrap", "gap": "gaps", "duplicate": "duplicates", "reorder": "reorder"}


@pytest.mark.parametrize("feature", FEATURES)
def test_psn_sequences_have_what_is_asked(feature):
    @settings(max_examples=examples(40))
    @given(S.psn_sequences(**{_ARG[feature]: True}))
    def check(seq):
        assert all(0 <= p < 1 << 24 for p in seq)
        assert feature in S.psn_features(seq)

    check()


@settings(max_examples=examples(60))
@given(S.psn_sequences(wrap=False, gaps=False, duplicates=False, reorder=False))
def test_psn_sequences_plain(seq):
    assert S.psn_features(seq) == frozenset()
    assert all(b == (a + 1) & 0xFFFFFF for a, b in zip(seq, seq[1:]))


@settings(max_examples=examples(60))
@given(S.psn_sequences(wrap=True, gaps=True, duplicates=True, reorder=True))
def test_psn_sequences_all_features(seq):
    assert S.psn_features(seq) == frozenset(FEATURES)


def test_psn_features_examples():
    assert S.psn_features([0xFFFFFE, 0xFFFFFF, 0, 1]) == {"wrap"}
    assert S.psn_features([5, 6, 8]) == {"gap"}
    assert S.psn_features([5, 6, 6, 7]) == {"duplicate"}
    assert S.psn_features([5, 7, 6]) == {"reorder"}


# -- verbs programs --------------------------------------------------------------------------------


@given(S.verbs_programs())
def test_programs_are_plain_data(program):
    kinds = {"post_recv", "send", "write", "read", "cas", "faa", "modify", "run"}
    for op in program:
        assert op[0] in kinds
        if op[0] in ("write", "read"):
            assert op[3] in S.RKEY_KINDS


def _invalid_kinds(program: list[tuple]) -> set[str]:
    """Which kinds of invalid operation a program holds."""
    kinds = set()
    for op in program:
        name = op[0]
        if name in ("write", "read", "cas", "faa") and op[-1] != "good":
            kinds.add("bad rkey " + op[-1])
        if name in ("write", "read") and op[1] + op[2] > S.PROGRAM_MR_SIZE:
            kinds.add("past the MR end")
        if name in ("write", "read") and op[2] == 0:
            kinds.add("zero length")
        if name in ("cas", "faa") and op[1] % 8:
            kinds.add("misaligned atomic")
        if name == "send" and op[1] > S.PROGRAM_RECV_SIZE:
            kinds.add("send longer than any receive")
        if name == "post_recv" and op[1] < S.PROGRAM_RECV_SIZE:
            kinds.add("short receive")
        if name == "modify":
            kinds.add("modify")
    return kinds


ALL_INVALID = {"bad rkey bad_key", "bad rkey bad_index", "bad rkey other_pd",
               "past the MR end", "zero length", "misaligned atomic",
               "send longer than any receive", "short receive", "modify"}


@pytest.mark.parametrize("invalid", [True, False])
def test_programs_reach_invalid_operations(invalid):
    seen: set[str] = set()

    @settings(max_examples=examples(300))
    @given(S.verbs_programs(max_ops=20, invalid=invalid))
    def draw(program):
        assert 1 <= len(program) <= 20
        seen.update(_invalid_kinds(program))

    draw()
    # every kind of invalid operation over the draws; none at all in valid programs
    assert seen == (ALL_INVALID if invalid else set())


def test_program_vocabulary_covers_invalid_cases():
    rng = random.Random(0)
    ops = [op for _ in range(300) for op in S.random_program(rng, 12, invalid=True)]
    assert any(op[0] == "write" and op[3] != "good" for op in ops)
    assert any(op[0] == "cas" and op[1] % 8 for op in ops)
    assert any(op[0] in ("write", "read") and op[1] + op[2] > S.PROGRAM_MR_SIZE for op in ops)
    assert any(op[0] == "send" and op[1] > S.PROGRAM_RECV_SIZE for op in ops)
    assert any(op[0] == "write" and op[2] == 0 for op in ops)
    assert any(op[0] == "modify" for op in ops)


# -- the project's property tests ------------------------------------------------------------------

_DECODER = DecoderFuzzer(seed=0, decode_every=0)


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(S.frames(roce_version=None, max_payload=300), st.data())
def test_decoder_raises_only_decode_errors_on_mutants(frame, data):
    mutant = data.draw(S.mutations(frame))
    try:
        p = roce.parse(mutant)
    except (roce.DecodeError, roce.NotRoCE):
        return
    p.fields()
    assert p.to_bytes() == mutant


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(S.frames(roce_version=None, max_payload=300), st.data())
def test_fast_path_equals_reference_on_mutants(frame, data):
    mutant = data.draw(S.mutations(frame, fixup=data.draw(st.booleans())))
    status, bad = _DECODER.check_frame(mutant)
    assert bad == []
    assert _DECODER.check_scan([mutant, frame], 1, 4791) == []
    w = locate.walk(mutant)
    if fast._ext is not None and w.bth_off >= 0 and w.bth_off + 12 <= len(mutant) and \
            w.opcode in OPCODES:
        assert fast._ext.decode_headers(mutant, w, 1) == decode_headers_reference(mutant, w, 1)


@settings(max_examples=examples(40), suppress_health_check=[HealthCheck.too_slow])
@given(S.verbs_programs(max_ops=10), st.integers(0, 2**16))
def test_responder_invariants_on_programs(program, seed):
    res = run_program(program, seed=seed)
    assert res.problems == [], (program, res.problems)


@settings(max_examples=examples(25), suppress_health_check=[HealthCheck.too_slow])
@given(S.verbs_programs(max_ops=8, invalid=False), st.integers(0, 2**16),
       st.sampled_from([{"loss": 0.05}, {"dup": 0.1}, {"reorder": 0.2},
                        {"loss": 0.03, "dup": 0.03, "reorder": 0.1}]))
def test_exactly_once_under_faults(program, seed, faults):
    res = run_program(program, seed=seed, auto_recv=True, **faults)
    assert res.problems == [], (program, faults, res.problems)
    assert set(res.statuses) <= {"IBV_WC_SUCCESS"}


def test_a_send_longer_than_its_receive_fails_and_valid_programs_avoid_it():
    """Found by the deep profile: a 1-byte receive then a 2-byte SEND ends in an invalid
    request NAK (correctly), so programs that must succeed post whole receive buffers."""
    res = run_program([("post_recv", 1), ("send", 2, None)], seed=0, auto_recv=True)
    assert res.problems == [] and dict(res.statuses) == {"IBV_WC_REM_INV_REQ_ERR": 1}
    rng = random.Random(5)
    lengths = {op[1] for _ in range(200) for op in S.random_program(rng, 12, invalid=False)
               if op[0] == "post_recv"}
    assert lengths == {S.PROGRAM_RECV_SIZE}

    @settings(max_examples=examples(100))
    @given(S.verbs_programs(invalid=False))
    def whole(program):
        assert all(op[1] == S.PROGRAM_RECV_SIZE for op in program if op[0] == "post_recv")

    whole()


# -- the pytest plugin -----------------------------------------------------------------------------


def test_plugin_fixtures(roce_strategies, roce_fabric, roce_mutator):
    from roce.emu import RecvWR, SendWR, WROpcode

    assert roce_strategies is S
    f = roce_fabric
    f.qb.post_recv(RecvWR(wr_id=1, sg_list=[f.mr_b.sge(0, 100)]))
    f.qa.post_send(SendWR(wr_id=2, opcode=WROpcode.IBV_WR_SEND, sg_list=[f.mr_a.sge(0, 100)]))
    f.run()
    assert [wc.wr_id for wc in f.cq_a.poll(8)] == [2]
    assert [wc.byte_len for wc in f.cq_b.poll(8)] == [100]
    assert f.mr_b.read(100) == f.mr_a.read(100)
    frame = roce.craft("RC_SEND_ONLY", b"x").to_bytes()
    assert roce_mutator.mutate(frame).frame != frame


def test_plugin_loads_in_a_user_suite(tmp_path):
    (tmp_path / "test_user.py").write_text(
        "from hypothesis import HealthCheck, given, settings\n"
        "def test_it(roce_fabric, roce_strategies, roce_mutator):\n"
        "    assert roce_fabric.seed == 3 and roce_fabric.qa.qp_state.name == 'IBV_QPS_RTS'\n"
        # a user suite outside this project's profiles: deterministic, and patient on a
        # loaded machine
        "    @settings(derandomize=True, deadline=None, max_examples=20,\n"
        "              suppress_health_check=[HealthCheck.too_slow])\n"
        "    @given(roce_strategies.frames(max_payload=8))\n"
        "    def inner(frame):\n"
        "        assert roce_mutator.mutate(frame).frame != frame\n"
        "    inner()\n")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "roce.testing.pytest_plugin", "--roce-seed", "3",
                          str(tmp_path / "test_user.py")], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120,
                         # -p loads the plugin; an installed pytest11 entry point must not
                         # load it a second time
                         env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 passed" in res.stdout
