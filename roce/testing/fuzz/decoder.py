"""The decoder harness: frames through the parser, the fast path and its reference twins,
the flow analysis and ``roce decode``'s output modes.

Frames are valid ones from a pool (``seeds.seed_pool``: every RoCE opcode, MAC Control PAUSE
and PFC, one source per family), structure-aware mutants of them
(``roce.testing.mutate``) and random bytes, cut into chunks of ``CHUNK`` frames; chunk ``i``
draws from ``random.Random(f"{seed}:{i}")``, so a run is the same whatever the number of
worker processes (``runner.run_chunks``).  Every frame goes through ``roce.parse`` (only
``DecodeError``/``NotRoCE`` may come out; a parsed frame must rebuild to the same bytes) and
every fast-path function is compared with its reference twin: ``walk``, ``icrc``,
``decode_headers``, and per chunk ``scan`` and the flow analysis (``roce stats``' compiled
engine against ``roce.analysis.flows``' reference, and the UET analysis beside it, which must
not raise).  Every ``DECODE_EVERY`` chunks the chunk
is written to a pcap and decoded by ``roce.decoder.decode`` in one of its output modes (it
must finish with status 0 and no exception).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import tempfile
from collections.abc import Callable

from roce import fast, icrc, locate
from roce.errors import DecodeError, NotRoCE
from roce.headers import SIZE_OF
from roce.locate import (
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_RAW,
    OK,
    ROCE_PORT,
)
from roce.opcodes import OPCODES
from roce.packet import Packet, decode_headers_reference, parse
from roce.pcapio import Frame, PcapWriter
from roce.testing.fuzz.chunks import CHUNK, run_chunks
from roce.testing.fuzz.corpus import Saved
from roce.testing.fuzz.results import Failure, Summary, exc_line, short
from roce.testing.fuzz.seeds import LINKTYPE_SEEDS, seed_pool, to_linktype
from roce.testing.mutate import Mutator, random_frame

NAME = "decoder"
DECODE_EVERY = 16  # every this many chunks, one goes through `roce decode`
BASE_TS_NS = 1_700_000_000_000_000_000  # timestamps of the frames written for roce decode

# the `roce decode` options each decode check uses, in turn
DECODE_MODES: tuple[tuple[str, ...], ...] = (
    (), ("-V",), ("-T", "json"), ("-T", "fields", "-e", "bth.psn", "-e", "reth.va", "-e",
                                   "aeth.syndrome", "-e", "frame.len"),
    ("-x",), ("-Y", "bth.opcode != 4"), ("-T", "csv", "-e", "bth.opcode", "-e", "icrc"),
)


class DecoderFuzzer:
    """Frames through the parser, the fast path and its twins (see the module docstring)."""

    name = NAME

    def __init__(self, seed: int, decode_every: int = DECODE_EVERY,
                 twins: bool = True) -> None:
        self.seed = seed
        self.decode_every = decode_every
        self.ext = fast._ext if twins else None
        self.pool = seed_pool(random.Random(f"pool:{seed}"))
        # native InfiniBand and ERF chunks draw from pools of their own (seeds.LINKTYPE_SEEDS)
        self.linktype_pools = {lt: source(random.Random(f"pool:{seed}:{lt}"), 1)
                               for lt, source in LINKTYPE_SEEDS.items()}
        self._tmp: str | None = None

    # -- frames ---------------------------------------------------------------------------

    def chunk_frames(self, index: int, n: int) -> tuple[list[bytes], list[str], int, int]:
        """Frames of chunk ``index``: (frames, how each was made, linktype, udp port)."""
        rng = random.Random(f"{self.seed}:{index}")
        linktype = LINKTYPE_ETHERNET
        if rng.random() < 0.15:
            linktype = rng.choice((LINKTYPE_RAW, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2))
        port = ROCE_PORT if rng.random() < 0.95 else rng.choice((4792, 1, 65535))
        mut = Mutator(rng)
        pool = self.pool
        family = random.Random(f"{self.seed}:{index}:family")  # apart: old draws unchanged
        if self.linktype_pools and family.random() < 0.15:
            linktype = family.choice(sorted(self.linktype_pools))
            pool = self.linktype_pools[linktype]
        frames, kinds = [], []
        for _ in range(n):
            r = rng.random()
            base = rng.choice(pool)
            if r < 0.08:
                frame, kind = base, "valid"
            elif r < 0.94:
                m = mut.mutate(to_linktype(base, linktype), linktype, port)
                frame, kind = m.frame, "mutant"
                if m.fixed:
                    kind = "mutant-fixed"
                frames.append(frame)
                kinds.append(kind + ":" + m.ops[0])
                continue
            else:
                frame, kind = random_frame(rng), "random"
            frames.append(to_linktype(frame, linktype) if kind == "valid" else frame)
            kinds.append(kind)
        return frames, kinds, linktype, port

    # -- checks ---------------------------------------------------------------------------

    def check_frame(self, frame: bytes, linktype: int = LINKTYPE_ETHERNET,
                    port: int = ROCE_PORT) -> tuple[int, list[tuple[str, str]]]:
        """(walk status, [(check, detail)]) for one frame."""
        bad: list[tuple[str, str]] = []
        ref = locate.walk(frame, linktype, port)
        ext = self.ext
        if ext is not None:
            got = ext.walk(frame, linktype, port)
            if got != ref:
                diff = [f"{k}={a}/{b}" for k, a, b in zip(ref._fields, got, ref) if a != b]
                bad.append(("walk-twin", "fast/reference differ: " + " ".join(diff)))
        try:
            pkt = parse(frame, linktype, port)
        except (DecodeError, NotRoCE):
            pkt = None
        except Exception as exc:  # noqa: BLE001 - any other exception is the finding
            bad.append(("parse-raised", exc_line(exc)))
            pkt = None
        if pkt is not None:
            bad.extend(self._check_packet(pkt, frame))
        try:
            parse(frame, linktype, port, partial=True)
        except (DecodeError, NotRoCE):
            pass
        except Exception as exc:  # noqa: BLE001
            bad.append(("parse-partial-raised", exc_line(exc)))
        if ext is not None:
            bad.extend(self._check_twins(frame, ref, linktype, port))
        bad.extend(self._check_families(frame, ref, linktype, port))
        return ref.status, bad

    def _check_families(self, frame: bytes, ref: locate.Walk, linktype: int,
                        port: int) -> list[tuple[str, str]]:
        """A frame the RoCE walk does not claim, through the registry's families and
        tunnels (``roce.families.dispatch``) and the native InfiniBand scan twins: only
        ``RoceError``s may come out."""
        from roce.errors import RoceError
        from roce.families import dispatch
        from roce.families.ib import native as ib

        bad: list[tuple[str, str]] = []
        if locate.is_malformed(ref.status) or ref.status == OK:
            return bad
        try:
            res = dispatch.resolve(frame, linktype, ref, port)
            if res is not None and res.family is not None:
                d = res.family.decode(res.data, len(res.data), len(res.data))
                if res.family.columns is not None:  # its line and tree too (UET's)
                    res.family.columns(d)
                if res.family.tree is not None:
                    res.family.tree(d, res.data)
        except RoceError:
            pass
        except Exception as exc:  # noqa: BLE001 - any other exception is the finding
            bad.append(("family-raised", exc_line(exc)))
        if linktype == ib.LINKTYPE_INFINIBAND and ib._EXT is not None:
            got, want = ib.scan_columns(1), ib.scan_columns(1)
            ib._EXT.ib_scan([frame], got)
            ib.scan_reference([frame], want)
            diff = [n for n in ib.SCAN_COLUMNS if got[n] != want[n]]
            if diff:
                bad.append(("ib-scan-twin", "fast/reference differ in " + " ".join(diff)))
        return bad

    def _check_packet(self, pkt: Packet, frame: bytes) -> list[tuple[str, str]]:
        bad = []
        try:
            pkt.fields()
            if pkt.to_bytes() != frame:
                bad.append(("roundtrip", "parse(frame).to_bytes() != frame"))
            rebuilt = pkt.copy().to_bytes()
            if rebuilt != frame:
                at = next((i for i, (a, b) in enumerate(zip(rebuilt, frame)) if a != b),
                          min(len(rebuilt), len(frame)))
                bad.append(("rebuild", f"Packet rebuilt from its decoded fields differs at "
                                       f"byte {at} (len {len(rebuilt)} vs {len(frame)})"))
        except Exception as exc:  # noqa: BLE001
            bad.append(("packet-raised", exc_line(exc)))
        return bad

    def _check_twins(self, frame: bytes, w: locate.Walk, linktype: int,
                     port: int) -> list[tuple[str, str]]:
        bad = []
        ext = self.ext
        assert ext is not None
        if w.status == OK:
            ref = icrc.icrc_at(frame, w.l3_off, w.l3_kind, w.l3_len, w.bth_off, w.icrc_off)
            got = ext.icrc_at(frame, w.l3_off, w.l3_kind, w.l3_len, w.bth_off, w.icrc_off)
            if got != ref:
                bad.append(("icrc-twin", f"icrc_at fast 0x{got:08x} reference 0x{ref:08x}"))
            stored = int.from_bytes(frame[w.icrc_off:w.l4_end], "big")
            checked = ext.icrc(frame, linktype, port)
            if checked != (OK, ref, stored):
                bad.append(("icrc-twin", f"icrc() {checked} != {(OK, ref, stored)}"))
        if w.bth_off >= 0 and w.bth_off + SIZE_OF["bth"] <= len(frame) and \
                w.opcode in OPCODES:
            try:
                got_h = ext.decode_headers(frame, w, linktype)
            except Exception as exc:  # noqa: BLE001
                return bad + [("decode-headers-raised", "fast: " + exc_line(exc))]
            try:
                want_h = decode_headers_reference(frame, w, linktype)
            except Exception as exc:  # noqa: BLE001
                return bad + [("decode-headers-raised", "reference: " + exc_line(exc))]
            if got_h != want_h:
                keys = sorted(k for k in set(got_h) | set(want_h)
                              if got_h.get(k) != want_h.get(k))
                detail = "; ".join(f"{k}: fast {short(got_h.get(k))} reference "
                                   f"{short(want_h.get(k))}" for k in keys[:2])
                bad.append(("decode-headers-twin", detail))
        return bad

    def check_scan(self, frames: list[bytes], linktype: int,
                   port: int) -> list[tuple[int, str]]:
        """(frame index, detail) for every frame whose scan columns differ from the
        reference's (with the ICRC check on)."""
        if self.ext is None or not frames:
            return []
        got = fast.scan_columns(len(frames))
        want = fast.scan_columns(len(frames))
        self.ext.scan(frames, linktype, port, True, got)
        fast.scan_reference(frames, linktype, port, True, want)
        bad: dict[int, str] = {}
        for name in fast.SCAN_COLUMNS:
            a, b = got[name], want[name]
            if a != b:
                for i in range(len(frames)):
                    if a[i] != b[i] and i not in bad:
                        bad[i] = f"column {name}: fast {a[i]} reference {b[i]}"
        return sorted(bad.items())

    def check_decode_cli(self, frames: list[bytes], linktype: int, port: int,
                         mode: tuple[str, ...]) -> str | None:
        """Decode a pcap of ``frames`` as ``roce decode`` with the options ``mode``; None when
        it finishes with status 0 without an exception, else what went wrong."""
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="roce-fuzz-")
        path = os.path.join(self._tmp, f"batch-{os.getpid()}.pcap")
        with PcapWriter(path, linktype=linktype) as w:
            for i, frame in enumerate(frames):
                w.write(frame, ts_ns=BASE_TS_NS + i * 1000)
        argv = [path, "--color", "never", *mode]
        if port != ROCE_PORT:
            argv += ["--udp-port", str(port)]
        what = f"`roce decode {' '.join(mode)}`" if mode else "`roce decode`"
        try:
            rc, err = _decode(argv)
        except Exception as exc:  # noqa: BLE001 - any exception is the finding
            return f"{what} raised {exc_line(exc)}"
        if rc != 0:
            return f"{what} exited {rc}: {err.strip()[:200]}"
        if "Traceback" in err:
            return f"{what} printed a traceback"
        return None

    def check_flows(self, frames: list[bytes], linktype: int, port: int) -> str | None:
        """The chunk through the compiled flow analysis and its pure-Python reference: None
        when both run and give the same report, else what went wrong."""
        if self.ext is None or not frames:
            return None
        # looked up at each call: tests plant a bug in it
        from roce.analysis.flows import analyse

        stream = [Frame(f, BASE_TS_NS + i * 1000, len(f), len(f), linktype, 0)
                  for i, f in enumerate(frames)]
        reports = {}
        for engine in ("compiled", "reference"):
            try:
                reports[engine] = analyse(stream, port, engine=engine).to_dict()
            except Exception as exc:  # noqa: BLE001 - any exception is the finding
                return f"{engine} flow analysis raised {exc_line(exc)}"
        got, want = reports["compiled"], reports["reference"]
        if got != want:
            keys = [k for k in want if got.get(k) != want.get(k)]
            return f"compiled and reference flow analyses differ in {', '.join(keys)}"
        return None

    def check_uet(self, frames: list[bytes], linktype: int, port: int) -> str | None:
        """The chunk through ``roce stats``' UET analysis (``roce.analysis.uetflows``) and its
        reports, and again through the interpreted engine reading every packet with the
        family's dissector: None when nothing raised and the two reports agree, else what
        went wrong."""
        from roce.analysis.uetflows import UetAnalysis

        reports = []
        for a in (UetAnalysis(port), UetAnalysis(port, engine="reference", fast=False)):
            try:
                for i, f in enumerate(frames):
                    a.frame(i + 1, BASE_TS_NS + i * 1000, f, linktype, len(f))
                reports.append(a.to_dict())
                a.lines()
            except Exception as exc:  # noqa: BLE001 - any exception is the finding
                return f"UET analysis raised {exc_line(exc)}"
        if reports[0] != reports[1]:
            keys = [k for k in reports[1] if reports[0].get(k) != reports[1].get(k)]
            return ("UET analysis: the byte reader and the dissector differ in "
                    f"{', '.join(keys)}")
        return None

    def _narrow(self, frames: list[bytes], fails: Callable[[list[bytes]], bool]) -> list[bytes]:
        """Halve a failing batch while the failure stays: usually down to a frame or two."""
        while len(frames) > 1:
            half = len(frames) // 2
            for part in (frames[:half], frames[half:]):
                if fails(part):
                    frames = part
                    break
            else:
                break
        return frames

    # -- a chunk --------------------------------------------------------------------------

    def run_chunk(self, index: int, n: int = CHUNK) -> Summary:
        s = Summary(self.name, self.seed)
        frames, kinds, linktype, port = self.chunk_frames(index, n)
        s.inputs = len(frames)
        counts = s.counts
        for i, frame in enumerate(frames):
            status, bad = self.check_frame(frame, linktype, port)
            counts[f"walk status {status:2d}"] += 1
            counts["made " + kinds[i].split(":")[0]] += 1
            for check, detail in bad:
                s.add_failure(Failure(self.name, check, detail, [frame], linktype, port,
                                      {"seed": self.seed, "chunk": index, "index": i,
                                       "made": kinds[i]}))
        for i, detail in self.check_scan(frames, linktype, port):
            s.add_failure(Failure(self.name, "scan-twin", detail, [frames[i]], linktype, port,
                                  {"seed": self.seed, "chunk": index, "index": i,
                                   "made": kinds[i]}))
        problem = self.check_flows(frames, linktype, port)
        if problem is not None:
            culprit = self._narrow(frames, lambda part: self.check_flows(
                part, linktype, port) is not None)
            s.add_failure(Failure(self.name, "flows-twin", problem, culprit, linktype, port,
                                  {"seed": self.seed, "chunk": index}))
        problem = self.check_uet(frames, linktype, port)
        if problem is not None:
            culprit = self._narrow(frames, lambda part: self.check_uet(
                part, linktype, port) is not None)
            s.add_failure(Failure(self.name, "uet-flows", problem, culprit, linktype, port,
                                  {"seed": self.seed, "chunk": index}))
        if self.decode_every and index % self.decode_every == 0:
            mode = DECODE_MODES[(index // self.decode_every) % len(DECODE_MODES)]
            counts["roce decode runs"] += 1
            problem = self.check_decode_cli(frames, linktype, port, mode)
            if problem is not None:
                culprit = self._narrow(frames, lambda part: self.check_decode_cli(
                    part, linktype, port, mode) is not None)
                s.add_failure(Failure(self.name, "decode-cli", problem, culprit, linktype,
                                      port, {"seed": self.seed, "chunk": index,
                                             "mode": ",".join(mode) or "lines"}))
        return s

    def replay(self, saved: Saved) -> list[str]:
        """Checks that still fail for a saved decoder failure."""
        port = int(saved.keys.get("udp_port", ROCE_PORT))
        still = []
        if saved.check == "decode-cli":
            mode = tuple(m for m in saved.keys.get("mode", "lines").split(",")
                         if m and m != "lines")
            problem = self.check_decode_cli(saved.frames, saved.linktype, port, mode)
            return [f"decode-cli: {problem}"] if problem else []
        if saved.check == "flows-twin":
            problem = self.check_flows(saved.frames, saved.linktype, port)
            return [f"flows-twin: {problem}"] if problem else []
        if saved.check == "uet-flows":
            problem = self.check_uet(saved.frames, saved.linktype, port)
            return [f"uet-flows: {problem}"] if problem else []
        for frame in saved.frames:
            _, bad = self.check_frame(frame, saved.linktype, port)
            still.extend(f"{c}: {d}" for c, d in bad)
            still.extend(f"scan-twin: {d}" for _, d in self.check_scan([frame],
                                                                       saved.linktype, port))
        return still


def _decode(argv: list[str]) -> tuple[int, str]:
    """Run the decode command's module (``add_arguments`` and ``run``, what ``roce decode``
    dispatches to) on ``argv``: (exit status, what it wrote on stderr)."""
    from roce.cli import decode

    parser = argparse.ArgumentParser(prog="roce decode")
    decode.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = decode.run(parser.parse_args(argv))
        except SystemExit as exc:  # the option parser refused the mode
            rc = exc.code if isinstance(exc.code, int) else 1
    return int(rc or 0), err.getvalue()


class DecoderFactory:
    """Builds a DecoderFuzzer in each worker process (picklable)."""

    harness_name = NAME

    def __init__(self, seed: int, decode_every: int = DECODE_EVERY) -> None:
        self.seed = seed
        self.decode_every = decode_every

    def __call__(self) -> DecoderFuzzer:
        return DecoderFuzzer(self.seed, self.decode_every)


def fuzz_decoder(seed: int, count: int | None = 10_000, time_limit: float | None = None,
                 jobs: int = 1, decode_every: int = DECODE_EVERY,
                 progress: Callable[[Summary], None] | None = None) -> Summary:
    """Run the decoder harness; see ``DecoderFuzzer``."""
    s = run_chunks(DecoderFactory(seed, decode_every), seed, count, time_limit, jobs,
                   progress=progress)
    if fast._ext is None:
        s.notes.append("compiled fast path missing: twin checks skipped")
    return s


def replay(saved: list[Saved]) -> list[list[str]]:
    """The checks each saved decoder failure still fails (empty: fixed)."""
    fuzzers: dict[int, DecoderFuzzer] = {}
    out = []
    for s in saved:
        seed = int(s.keys.get("seed", 0))
        if seed not in fuzzers:
            fuzzers[seed] = DecoderFuzzer(seed)
        out.append(fuzzers[seed].replay(s))
    return out
