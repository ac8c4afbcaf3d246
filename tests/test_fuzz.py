"""``roce fuzz``: the decoder and responder harnesses, corpus and replay, a planted bug that
the invariants must catch, the wire harness against ``roce target`` in network namespaces,
the atheris harness, and regression tests for the bugs the fuzzers found."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import pytest

import roce
from roce import cli, fast, locate
from roce.analysis import flows
from roce.emu import (
    CQ,
    MR,
    PD,
    QP,
    Access,
    AHAttr,
    Context,
    QPAttr,
    QPAttrMask,
    QPInitAttr,
    QPState,
    QPType,
    RecvWR,
)
from roce.emu.core.memory import AccessError, AddressSpace
from roce.emu.fabric import Fabric
from roce.pcapio import open_capture
from roce.testing import atheris_harness, fuzz
from roce.testing.fuzz import dut_cases as responder_cases
from roce.testing.fuzz import harnesses as registry
from roce.testing.fuzz import seeds

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def fuzz_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """``roce fuzz`` is registered in roce/cli/__init__.py by its owner; until then, here."""
    monkeypatch.setitem(cli.COMMANDS, "fuzz", ("roce.cli.fuzz", "fuzz"))


def roce_fuzz(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(["fuzz", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


# -- decoder ---------------------------------------------------------------------------------------


def test_decoder_small_run(capsys):
    rc, out, err = roce_fuzz(capsys, "decoder", "--count", "3000", "--seed", "1", "-j", "1",
                             "--decode-every", "1", "-q")
    assert rc == 0, out
    assert out.startswith("roce fuzz decoder: seed 1, 3000 inputs, 0 failures")
    assert "result: OK" in out and "roce decode runs: 2" in out
    assert "walk status  0:" in out and "made mutant" in out
    assert "3000 inputs in" in err


def test_decoder_same_seed_same_summary_whatever_the_jobs(capsys):
    runs = [roce_fuzz(capsys, "decoder", "--count", "5000", "--seed", "7", "-j", jobs, "-q")
            for jobs in ("1", "2", "1")]
    assert runs[0][1] == runs[1][1] == runs[2][1]
    other = roce_fuzz(capsys, "decoder", "--count", "5000", "--seed", "8", "-j", "1", "-q")
    assert other[1] != runs[0][1]


def test_decoder_time_limit(capsys):
    start = time.monotonic()
    rc, out, _ = roce_fuzz(capsys, "decoder", "--time", "0.5", "--seed", "2", "-j", "1", "-q")
    assert rc == 0 and time.monotonic() - start < 10
    assert "inputs, 0 failures" in out


@pytest.fixture
def planted_walk_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference walk reports UDP port trouble for every RC SEND Only: the twins then
    disagree on exactly those frames."""
    real = locate.walk

    def walk(frame, linktype=1, udp_port=4791):
        w = real(frame, linktype, udp_port)
        if w.status == locate.OK and w.opcode == 0x04:
            return w._replace(status=locate.BAD_UDP_LENGTH)
        return w

    monkeypatch.setattr(locate, "walk", walk)


def test_corpus_and_replay(capsys, tmp_path, monkeypatch, planted_walk_bug):
    corpus = tmp_path / "corpus"
    rc, out, _ = roce_fuzz(capsys, "decoder", "--count", "4000", "--seed", "3", "-j", "1",
                           "--decode-every", "0", "--corpus", str(corpus), "-q")
    assert rc == 1 and "FAILED walk-twin" in out and "result: FAILED" in out
    pcaps = sorted(corpus.glob("*.pcap"))
    assert pcaps and len(pcaps) == len(list(corpus.glob("*.txt")))
    reason = pcaps[0].with_suffix(".txt").read_text()
    assert reason.count("\n") == 1 and reason.startswith("decoder/")
    assert "seed=3" in reason and "linktype=" in reason
    with open_capture(str(pcaps[0])) as cap:
        frames = [f.data for f in cap]
    assert len(frames) == 1
    rc, out, _ = roce_fuzz(capsys, "decoder", "--replay", str(corpus))
    assert rc == 1 and "STILL FAILS" in out
    monkeypatch.undo()  # the bug is fixed
    monkeypatch.setitem(cli.COMMANDS, "fuzz", ("roce.cli.fuzz", "fuzz"))
    rc, out, _ = roce_fuzz(capsys, "decoder", "--replay", str(corpus))
    assert rc == 0 and "STILL FAILS" not in out and "0 still failing" in out


def test_decode_cli_failure_is_narrowed_to_one_frame(monkeypatch):
    d = fuzz.DecoderFuzzer(seed=0)
    frames, _, lt, port = d.chunk_frames(0, 64)
    bad = frames[17]

    def check(part, linktype, udp_port, mode):
        return "boom" if bad in part else None

    monkeypatch.setattr(d, "check_decode_cli", check)
    assert d._narrow(frames, lambda part: d.check_decode_cli(part, lt, port, ())
                     is not None) == [bad]


@pytest.mark.skipif(fast._ext is None, reason="needs the compiled fast path")
def test_flow_analysis_is_checked_against_its_twin(monkeypatch):
    d = fuzz.DecoderFuzzer(seed=0, decode_every=0)
    frames, _, lt, port = d.chunk_frames(0, 256)
    assert d.check_flows(frames, lt, port) is None
    bad = frames[100]
    real = flows.analyse

    def broken(stream, udp_port, engine="auto", **kw):
        r = real(stream, udp_port, engine=engine, **kw)
        if engine == "compiled" and any(f.data == bad for f in stream):
            r.totals["frames"] += 1
        return r

    monkeypatch.setattr(flows, "analyse", broken)
    s = d.run_chunk(0, 256)
    (failure,) = [f for f in s.failures if f.check == "flows-twin"]
    assert failure.frames == [bad] and "differ in totals" in failure.detail


def test_uet_analysis_runs_on_every_chunk(monkeypatch):
    """A chunk's UET frames (the seed pool has every UET kind) reach roce stats' UET analysis;
    an exception it raises is a finding, narrowed to the frame, and replayed."""
    from roce.analysis import uetflows

    d = fuzz.DecoderFuzzer(seed=0, decode_every=0)
    frames, _, lt, port = d.chunk_frames(0, 256)
    assert d.check_uet(frames, lt, port) is None
    probe = uetflows.UetAnalysis(port)
    uet = [f for i, f in enumerate(frames) if probe.frame(i + 1, 0, f, lt, len(f))]
    assert len(uet) > 10
    bad = uet[len(uet) // 2]
    real_frame = uetflows.UetAnalysis.frame

    def frame(self, number, ts, data, linktype, origlen=None):
        if data == bad:  # the analysis breaks on this frame
            raise KeyError("planted")
        return real_frame(self, number, ts, data, linktype, origlen)

    monkeypatch.setattr(uetflows.UetAnalysis, "frame", frame)
    s = d.run_chunk(0, 256)
    (failure,) = [f for f in s.failures if f.check == "uet-flows"]
    assert failure.frames == [bad] and "KeyError" in failure.detail
    from roce.testing.fuzz.corpus import Saved

    saved = Saved(Path("x.pcap"), "decoder", "uet-flows", {}, failure.detail, [bad], lt)
    assert d.replay(saved)[0].startswith("uet-flows: UET analysis raised KeyError")


def test_uet_byte_reader_held_to_the_dissector(monkeypatch):
    """The harness runs each chunk's UET frames through roce stats' engine and through the
    dissector-only reference: a disagreement (here every ACK read as ECN-marked by the
    dissector's path) is a finding."""
    from roce.analysis import uetref

    d = fuzz.DecoderFuzzer(seed=0, decode_every=0)
    frames, _, lt, port = d.chunk_frames(0, 256)
    assert d.check_uet(frames, lt, port) is None
    real = uetref.Engine.packet

    def marked(self, number, ts, src, dst, f):
        if not self.fast and "uet.pds.flags.m" in f:
            f = {**f, "uet.pds.flags.m": True}
        return real(self, number, ts, src, dst, f)

    monkeypatch.setattr(uetref.Engine, "packet", marked)
    assert d.check_uet(frames, lt, port) == \
        "UET analysis: the byte reader and the dissector differ in pdcs"


def test_wire_without_the_interface_exits_2(capsys):
    rc, _, err = roce_fuzz(capsys, "wire", "-i", "nosuchif0", "--target", "192.0.2.1",
                           "--qpn", "0x11", "--count", "1")
    assert rc == 2 and "nosuchif0" in err


def test_bad_usage(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["fuzz", "decoder", "--count", "-5"])
    assert e.value.code == 1
    rc, _, err = roce_fuzz(capsys, "decoder", "--replay", "/nonexistent-dir")
    assert rc == 1 and "no saved decoder failures" in err


def test_a_new_seed_source_feeds_the_decoder(monkeypatch):
    """A protocol family joins the decoder harness with one entry in SEED_SOURCES."""
    marker = bytes(range(60))
    monkeypatch.setitem(seeds.SEED_SOURCES, "test-family", lambda rng, n: [marker] * n)
    pool = fuzz.seed_pool(__import__("random").Random(0), per_opcode=2)
    assert pool[-2:] == [marker, marker] and marker not in pool[:-2]
    d = fuzz.DecoderFuzzer(seed=0, decode_every=0)
    assert d.pool.count(marker) == 3


def test_decoder_pool_covers_every_family():
    from roce import macc
    from roce.opcodes import ROCE_OPCODES

    pool = fuzz.DecoderFuzzer(seed=0, decode_every=0).pool
    parsed = [macc.parse_macc(f) for f in pool]
    opcodes = {m.opcode for m in parsed if m is not None}
    assert opcodes == set(macc.BODY)  # PAUSE and PFC
    offsets = {macc.macc_offset(f) for f, m in zip(pool, parsed) if m is not None}
    assert offsets == {14, 18}  # untagged and VLAN-tagged
    tunnels = {f for f in pool if fast.walk(f).status in (locate.NR_PROTO, locate.NR_PORT)}
    roce_codes = {roce.parse(f).opcode.code for f, m in zip(pool, parsed)
                  if m is None and f not in tunnels}
    assert roce_codes == set(ROCE_OPCODES)
    # mirrored RoCE: every tunnel kind, every opcode inside; Ultra Ethernet: every PDS type
    # and SES opcode, over UDP and IP protocol 253
    from roce.families import dispatch
    from roce.families.uet import codes as uet_codes

    inner = set()
    kinds = set()
    uet_types, uet_ops, uet_rows = set(), set(), set()
    for f in tunnels:
        res = dispatch.resolve(f, 1, fast.walk(f), 4791)
        if res.family is not None and res.family.name.startswith("uet"):
            fields = res.family.decode(res.data).fields
            uet_types.add(fields["uet.pds.type"])
            uet_ops.add(fields.get("uet.ses.std.opcode"))
            uet_rows.add(res.family.name)
            continue
        kinds.add(tuple(name for name, _ in res.outer if name != "outer"))
        inner.add(res.walk.opcode)
    assert kinds == {("gre", "erspan"), ("gre",), ("vxlan",)}
    assert inner == set(ROCE_OPCODES)
    assert uet_types == set(uet_codes.PDS_TYPES) - {0, 1}
    assert set(uet_codes.REF_PROV_SES_OPCODES) == uet_ops - {None}  # the sync ones too
    assert uet_rows == {"uet", "uet.entropy"}


def test_decoder_covers_native_infiniband_and_erf_chunks():
    """Chunks of link type 247 and 197 draw from their own pools and pass every check."""
    import random

    from roce.families.ib import native as ib

    d = fuzz.DecoderFuzzer(seed=0, decode_every=1)
    pools = d.linktype_pools
    assert {ib.decode(f).kind for f in pools[247]} == {"roce"}
    seen = {}
    for index in range(200):
        family = random.Random(f"0:{index}:family")
        if family.random() < 0.15:
            seen.setdefault(family.choice(sorted(pools)), index)
        if len(seen) == 2:
            break
    assert set(seen) == {197, 247}
    for lt, index in seen.items():
        frames, _kinds, linktype, _port = d.chunk_frames(index, 300)
        assert linktype == lt
        s = d.run_chunk(index, 300)
        assert not s.failures, [f.detail for f in s.failures][:3]


def test_every_registered_harness_is_a_subcommand(capsys):
    for name, h in registry.HARNESSES.items():
        with pytest.raises(SystemExit) as e:
            cli.main(["fuzz", name, "--help"])
        assert e.value.code == 0
        assert f"(default {h.default_count}" in capsys.readouterr().out


def test_wire_failures_are_not_replayed_in_process(capsys, tmp_path):
    fuzz.save_failure(tmp_path, fuzz.Failure("wire", "liveness", "stopped answering",
                                             [bytes(60)], context={"seed": 1}))
    rc, _, err = roce_fuzz(capsys, "wire", "--replay", str(tmp_path), "-i", "lo", "--target",
                           "127.0.0.1", "--qpn", "1")
    assert rc == 1 and "not replayed here" in err and "roce replay" in err


@pytest.mark.parametrize(("option", "value"), [("--target-mac", "ff:ff:ff:ff:ff"),
                                               ("--target-mac", "02:00:00:00:00:zz"),
                                               ("--target", "10.0.0")])
def test_wire_bad_addresses_are_usage_errors(capsys, option, value):
    argv = {"--target": "192.0.2.1", option: value}
    with pytest.raises(SystemExit) as e:
        cli.main(["fuzz", "wire", "-i", "lo", "--qpn", "1", "--count", "1",
                  *[w for kv in argv.items() for w in kv]])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert f"argument {option}: bad " in err and repr(value) in err


# -- responder -------------------------------------------------------------------------------------


def test_responder_small_run_exits_0(capsys):
    rc, out, _ = roce_fuzz(capsys, "responder", "--count", "2000", "--seed", "1", "-q")
    assert rc == 0, out
    for name in responder_cases.CASES:  # every builder of the case table ran
        assert f"  case {name}: " in out, name


def test_responder_same_seed_same_summary(capsys):
    a = roce_fuzz(capsys, "responder", "--count", "400", "--seed", "4", "-q")
    b = roce_fuzz(capsys, "responder", "--count", "400", "--seed", "4", "-q")
    assert a[1] == b[1] and a[0] == b[0]
    assert a[1].startswith("roce fuzz responder: seed 4, 400 inputs")
    for word in ("injected case", "injected mutant", "injected live", "valid work completed",
                 "case bad_rkey", "case misaligned_atomic", "case psn_ahead"):
        assert word in a[1]


def test_responder_skip_check(capsys):
    argv = ["responder", "--count", "300", "--seed", "1", "-q"]
    for check in fuzz.RESPONDER_CHECKS:
        argv += ["--skip-check", check]
    rc, out, _ = roce_fuzz(capsys, *argv)
    assert rc == 0 and "result: OK" in out
    with pytest.raises(SystemExit):
        cli.main(["fuzz", "responder", "--skip-check", "nonsense"])


@pytest.fixture
def rxe_fixes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixes the bugs below ask for, as rxe does them: a QP reset forgets the message
    under way (rxe_qp_reset), and a UC WRITE's RETH range and Only length are checked on
    its first packet (check_rkey, check_length) -- so that the rest of the harness can be
    checked for false alarms."""
    from roce.emu.core import verbs
    from roce.emu.core.responder import Responder
    from roce.emu.core.unreliable import UCResponder

    # the harness moves QPs through the verbs API; the QP core is a compiled class whose
    # methods cannot be replaced, so the fix goes in after the verbs call
    real_modify = verbs.QP.modify

    def modify(self, attr, mask):
        real_modify(self, attr, mask)
        if self.core.state == QPState.IBV_QPS_RESET:
            r = self.core.responder
            if isinstance(r, (Responder, UCResponder)):
                r.in_progress, r.recv, r.offset = None, None, 0
            if isinstance(r, Responder):
                r.msn, r.nak_sent, r.resources = 0, False, deque()

    real_write = UCResponder._write

    def uc_write(self, pkt, first, last):
        if first:
            reth = pkt.ext["reth"]
            if last and len(pkt.payload) != reth["dmalen"]:
                self._drop()
                return
            if reth["dmalen"]:
                try:
                    self.qp.device.memory.lookup_remote(self.qp.pd, reth["r_key"], reth["va"],
                                                        reth["dmalen"],
                                                        int(Access.IBV_ACCESS_REMOTE_WRITE))
                except AccessError:
                    self._drop()
                    return
        real_write(self, pkt, first, last)

    monkeypatch.setattr(verbs.QP, "modify", modify)
    monkeypatch.setattr(UCResponder, "_write", uc_write)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_responder_clean_once_the_bugs_are_fixed(capsys, rxe_fixes, seed):
    rc, out, _ = roce_fuzz(capsys, "responder", "--count", "2000", "--seed", str(seed), "-q")
    assert rc == 0, out


class _WithoutBounds(AddressSpace):
    """A device's memory whose remote lookup has the range check taken out: the planted bug
    (an extension type in the compiled form: a subclass, called through its override)."""

    def lookup_remote(self, pd, rkey, addr, length, need, atomic=False):
        mr = self.regions.get(rkey >> 8)
        if mr is None or mr.rkey != rkey or not mr.valid:
            raise AccessError(f"no MR with rkey 0x{rkey:08x}")
        if mr.pd is not pd:
            raise AccessError("another PD")
        if not mr.access & need:
            raise AccessError("access")
        if atomic and addr % 8:
            raise AccessError("alignment")
        return mr


def _plant_bounds_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every host the fuzzer's fabric adds gets a ``_WithoutBounds`` memory, before any MR."""
    real = Fabric.add_host

    def add_host(self, name, ip, mac=None):
        ctx = real(self, name, ip, mac)
        ctx.device.memory = _WithoutBounds()
        return ctx

    monkeypatch.setattr(Fabric, "add_host", add_host)


def test_planted_bounds_bug_is_caught(capsys, monkeypatch, tmp_path):
    _plant_bounds_bug(monkeypatch)
    corpus = tmp_path / "c"
    rc, out, _ = roce_fuzz(capsys, "responder", "--seed", "0", "-q", "--corpus", str(corpus))
    assert rc == 1
    assert "FAILED write-outside-grant" in out
    reasons = [p.read_text() for p in corpus.glob("responder-write-outside-grant-*.txt")]
    # an out-of-range WRITE landed in a data MR (a correct responder writes nothing there)
    assert any("case=oob_write" in r and "MR rw" in r for r in reasons), reasons


def test_responder_replay(capsys, tmp_path, monkeypatch):
    _plant_bounds_bug(monkeypatch)
    corpus = tmp_path / "c"
    roce_fuzz(capsys, "responder", "--count", "1500", "--seed", "0", "-q", "--corpus",
              str(corpus))
    rc, out, _ = roce_fuzz(capsys, "responder", "--replay", str(corpus))
    assert rc == 1 and "STILL FAILS" in out


# -- what the responder fuzzer found (fixed ones stay as regression tests) -------------------------

FULL = (Access.IBV_ACCESS_LOCAL_WRITE | Access.IBV_ACCESS_REMOTE_WRITE
        | Access.IBV_ACCESS_REMOTE_READ | Access.IBV_ACCESS_REMOTE_ATOMIC)


class Dut:
    """One emulated device with one QP and an 8 KiB MR; frames in, answers out."""

    def __init__(self, qp_type: QPType) -> None:
        self.ctx = Context("dut", "10.0.0.2")
        self.pd = PD(self.ctx)
        self.mr = MR(self.pd, 8192, FULL)
        self.cq = CQ(self.ctx)
        self.qp = QP(self.pd, QPInitAttr(qp_type=qp_type, send_cq=self.cq, recv_cq=self.cq))

    def arm(self, psn: int, recv_off: int, wr_id: int) -> None:
        """RESET (if needed) -> INIT (one 1 KiB receive at recv_off) -> RTR -> RTS."""
        qp = self.qp
        if qp.qp_state != QPState.IBV_QPS_RESET:
            qp.modify(QPAttr(qp_state=QPState.IBV_QPS_RESET), QPAttrMask.IBV_QP_STATE)
        qp.to_init(QPAttr(qp_access_flags=FULL))
        qp.post_recv(RecvWR(wr_id=wr_id, sg_list=[self.mr.sge(recv_off, 1024)]))
        qp.to_rtr(QPAttr(path_mtu=256, dest_qp_num=0x99, rq_psn=psn, max_dest_rd_atomic=4,
                         min_rnr_timer=1, ah_attr=AHAttr(dmac="02:00:00:00:00:fe",
                                                         dip="10.0.0.254")))
        qp.to_rts(QPAttr(sq_psn=0, timeout=8, retry_cnt=1, rnr_retry=1, max_rd_atomic=4))

    def inject(self, ident: str, psn: int, payload: bytes = b"", **kw) -> list[tuple]:
        frame = roce.craft(ident, payload, dqpn=self.qp.qp_num, psn=psn, ackreq=True,
                           **kw).to_bytes()
        self.ctx.device.receive(0, frame)
        return [fuzz.describe_answer(f) for f in self.ctx.device.drain()]

    def completions(self) -> list[tuple]:
        return [(wc.wr_id, wc.status.name) for wc in self.cq.poll(16)]


def test_found_rc_reset_forgets_the_message_under_way():
    """Found by the responder fuzzer (failed at dca9d58): emu/qp.py QueuePair.modify to RESET
    clears the RQ but not the responder's message state (Responder.in_progress, recv, offset,
    msn, resources): after RESET->RTS a new SEND Only is NAKed 'invalid request' as if inside
    the old SEND, the QP goes to ERR and a WR posted before the reset completes; rxe_qp_reset
    sets resp.opcode = -1"""
    d = Dut(QPType.IBV_QPT_RC)
    d.arm(100, 4096, wr_id=1)
    assert d.inject("RC_SEND_FIRST", 100, bytes(256)) == [("ack", 100)]
    d.arm(500, 6144, wr_id=2)
    assert d.inject("RC_SEND_ONLY", 500, b"hello") == [("ack", 500)]
    assert d.qp.qp_state == QPState.IBV_QPS_RTS
    assert d.completions() == [(2, "IBV_WC_SUCCESS")]


def test_found_rc_reset_stale_receive_buffer():
    """Found by the responder fuzzer (failed at dca9d58): emu/qp.py QueuePair.modify(RESET) keeps
    Responder.recv/in_progress: a SEND Last after RESET->RTS continues the pre-reset message,
    writes into the pre-reset receive buffer (no longer posted) and completes the pre-reset WR
    1 with SUCCESS; it must be NAKed 'invalid request' (no first packet) and touch no memory"""
    d = Dut(QPType.IBV_QPT_RC)
    d.arm(100, 4096, wr_id=1)
    d.inject("RC_SEND_FIRST", 100, bytes(256))
    d.arm(500, 6144, wr_id=2)
    d.mr.write(bytes(8192))
    assert d.inject("RC_SEND_LAST", 500, b"LAST") == [("nak", 1, 500)]
    assert d.mr.read(8192) == bytes(8192)
    assert (1, "IBV_WC_SUCCESS") not in d.completions()


def test_found_rc_send_middle_after_reset_raises():
    """Found by the responder fuzzer (failed at dca9d58): emu/responder.py Responder.receive
    clears `recv` but not `in_progress` when it rejects a packet inside a SEND, and
    QueuePair.modify(RESET) clears neither: after RESET->RTS a SEND Middle passes the opcode-
    sequence check and Device.receive raises AssertionError (`assert wqe is not None`,
    Responder._send); it must be NAKed 'invalid request'"""
    d = Dut(QPType.IBV_QPT_RC)
    d.arm(100, 4096, wr_id=1)
    assert d.inject("RC_SEND_FIRST", 100, bytes(256)) == [("ack", 100)]
    assert d.inject("RC_SEND_MIDDLE", 101, bytes(10)) == [("nak", 1, 101)]  # short: rejected
    d.arm(500, 6144, wr_id=2)
    assert d.inject("RC_SEND_MIDDLE", 500, bytes(256)) == [("nak", 1, 500)]


def test_found_uc_reset_stale_receive_wqe():
    """Found by the responder fuzzer (failed at dca9d58): emu/unreliable.py UCResponder keeps
    `recv` (the WQE of an unfinished SEND) across QueuePair.modify(RESET): after RESET->RTS a
    SEND Only lands in the pre-reset receive buffer and completes pre-reset WR 1 instead of the
    WR posted since (2)"""
    d = Dut(QPType.IBV_QPT_UC)
    d.arm(100, 4096, wr_id=1)
    d.inject("UC_SEND_FIRST", 100, bytes(256))
    d.arm(500, 6144, wr_id=2)
    d.mr.write(bytes(8192))
    d.inject("UC_SEND_ONLY", 500, b"UCUC")
    assert d.completions() == [(2, "IBV_WC_SUCCESS")]
    assert d.mr.read(4, 6144) == b"UCUC" and d.mr.read(4, 4096) == bytes(4)


def test_found_uc_write_range_checked_with_dma_length():
    d = Dut(QPType.IBV_QPT_UC)
    d.arm(100, 0, wr_id=1)
    d.mr.write(bytes(8192))
    d.inject("UC_RDMA_WRITE_ONLY", 100, b"Z" * 38, va=d.mr.addr + 8192 - 38, rkey=d.mr.rkey,
             dmalen=39)
    assert d.mr.read(8192) == bytes(8192)


def test_found_uc_write_only_length_must_equal_dma_length():
    d = Dut(QPType.IBV_QPT_UC)
    d.arm(100, 0, wr_id=1)
    d.mr.write(bytes(8192))
    d.inject("UC_RDMA_WRITE_ONLY", 100, b"Y" * 8, va=d.mr.addr, rkey=d.mr.rkey, dmalen=4000)
    assert d.mr.read(8192) == bytes(8192)


# -- atheris ---------------------------------------------------------------------------------------


def test_atheris_check_function_without_atheris():
    pool = fuzz.seed_pool(__import__("random").Random(1), per_opcode=1)
    seen = set()
    for i, frame in enumerate(pool[:60]):
        for t in range(5):
            seen.add(atheris_harness.check(bytes([t, i % 5, i]) + frame))
            atheris_harness.check(bytes([t, i % 5, 250]) + frame[: i % 40])
    assert seen == set(atheris_harness.TARGETS)
    atheris_harness.check(b"")


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                    reason="atheris is not installed (pip install atheris)")
def test_atheris_bounded_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(roce.__file__).parent.parent)}
    res = subprocess.run([sys.executable, "-m", "roce", "fuzz", "coverage", "--count", "3000",
                          "--seed", "1", "--", "-max_len=2048"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Done 3000" in res.stderr
    # the seed and what followed -- reached libFuzzer
    assert "Seed: 1\n" in res.stderr and "-max_len is not provided" not in res.stderr


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                    reason="atheris is not installed (pip install atheris)")
def test_a_coverage_disagreement_is_saved_and_exits_1(tmp_path):
    """A planted disagreement: libFuzzer saves the input as crash-* and the run exits 1, as
    the other harnesses' failures do."""
    env = {**os.environ, "PYTHONPATH": str(Path(roce.__file__).parent.parent)}
    planted = ("import roce.testing.atheris_harness as h\n"
               "def check(data):\n    assert len(data) < 8, 'planted'\n"
               "h.check = check\n"
               "from roce.cli import main\n"
               "main(['fuzz', 'coverage', '--count', '100000', '--', '-max_len=64'])\n")
    res = subprocess.run([sys.executable, "-c", planted], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env=env)
    assert res.returncode == 1, res.stderr[-2000:]
    assert "AssertionError: planted" in res.stdout + res.stderr
    crashes = list(tmp_path.glob("crash-*"))
    assert len(crashes) == 1 and len(crashes[0].read_bytes()) >= 8


def test_coverage_options_are_libfuzzers(capsys, monkeypatch):
    """``roce fuzz coverage``'s options become libFuzzer's command line, bounded by what
    libFuzzer holds; what follows ``--`` passes through; without atheris the run is refused
    naming the extra that brings it."""
    from roce.cli import fuzz as fuzz_cli

    parser = cli.build_parser("fuzz")
    args = parser.parse_args(["fuzz", "coverage", "--count", "10", "--time", "5", "--seed",
                              "4294967295", "--", "corpus", "-max_len=64"])
    assert fuzz_cli.libfuzzer_args(args) == [
        "-error_exitcode=1", "-seed=4294967295", "-atheris_runs=10", "-max_total_time=5",
        "corpus", "-max_len=64"]
    assert fuzz_cli.libfuzzer_args(parser.parse_args(["fuzz", "coverage"])) == [
        "-error_exitcode=1", "-seed=1"]
    for bad in (["--seed", "0"], ["--seed", str(1 << 32)], ["--time", str(1 << 31)],
                ["--count", "0"], ["-max_len=64"]):
        with pytest.raises(SystemExit) as exit_:
            cli.main(["fuzz", "coverage", *bad])
        assert exit_.value.code == 1, bad
        assert bad[0] in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "atheris", None)  # import atheris: ImportError
    assert cli.main(["fuzz", "coverage", "--count", "1"]) == 1
    err = capsys.readouterr().err
    assert "needs atheris, which is not installed" in err and "roce[fuzz]" in err


# -- the wire harness against roce target ----------------------------------------------------------


def _wire_unavailable() -> str | None:
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import netns
    except ImportError:
        return "tests/netns.py is missing"
    return netns.unavailable_reason()


WIRE_REASON = _wire_unavailable()
TARGET_IP, QPN, RKEY, VA, SIZE = "10.66.0.2", 0x20, 0x4242, 0x10000, 8192

_FUZZ_MAIN = ("import sys\nfrom roce import cli\n"
              "cli.COMMANDS['fuzz'] = ('roce.cli.fuzz', 'fuzz')\n"
              "sys.exit(cli.main(sys.argv[1:]))\n")


@pytest.fixture
def wire_target(tmp_path):
    import netns

    pair = netns.create()
    try:
        proc = pair.popen(pair.ns_b, [
            sys.executable, "-m", "roce.cli.target", "-i", pair.if_b, "--ip", TARGET_IP,
            "--qpn", hex(QPN), "--rkey", hex(RKEY), "--va", hex(VA), "--size", str(SIZE),
            "--mtu", "256", "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # the target opens its socket and starts answering ARP
        assert proc.poll() is None, "roce target exited"
        yield pair, proc
    finally:
        pair.close()


def _fuzz_wire(pair, tmp_path, *extra: str) -> subprocess.CompletedProcess:
    pcap = tmp_path / "wire.pcap"
    return pair.run(pair.ns_a, [sys.executable, "-c", _FUZZ_MAIN, "fuzz", "wire", "-i",
                                pair.if_a, "--target", TARGET_IP, "--qpn", hex(QPN), "--rkey",
                                hex(RKEY), "--va", hex(VA), "--size", str(SIZE), "--pcap",
                                str(pcap), "--seed", "5", "-q", *extra],
                    timeout=60, cwd=str(REPO),
                    env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.skipif(WIRE_REASON is not None, reason=WIRE_REASON or "")
def test_fuzz_wire_against_roce_target(wire_target, tmp_path):
    pair, _ = wire_target
    res = _fuzz_wire(pair, tmp_path, "--count", "300", "--pps", "600", "--probe-every", "50")
    assert res.returncode in (0, 1), res.stderr
    assert "roce fuzz wire: seed 5, " in res.stdout
    assert "probes answered" in res.stdout, res.stdout
    with open_capture(str(tmp_path / "wire.pcap")) as cap:
        frames = [f.data for f in cap]
    assert len(frames) > 300  # what was sent, the probes and the target's answers
    me = frames[0][6:12]  # the first frame recorded is the first probe: ours, unmutated
    # The target also answers the harness's ARP request (a late or repeated reply can land in
    # the recording); everything else it sends must be a RoCE response.
    answers = [f for f in frames if f[0:6] == me and f[6:12] != me and f[12:14] != b"\x08\x06"]
    assert answers and all(roce.parse(f).opcode.is_response for f in answers)


@pytest.mark.skipif(WIRE_REASON is not None, reason=WIRE_REASON or "")
def test_fuzz_wire_reports_a_dead_target(wire_target, tmp_path):
    pair, proc = wire_target
    import threading

    threading.Timer(1.5, lambda: pair.stop(proc)).start()
    res = _fuzz_wire(pair, tmp_path, "--time", "8", "--pps", "300", "--probe-every", "30",
                     "--probe-timeout", "0.3")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAILED liveness" in res.stdout and "stopped answering" in res.stdout
