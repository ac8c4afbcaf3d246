"""``roce fuzz``: seeded, reproducible fuzzing of the decoder, the emulated responder and a
device under test on a wire.

::

    roce fuzz decoder --count 1000000 --seed 1 --jobs 2 --corpus crashes/
    roce fuzz responder --time 60 --seed 7
    roce fuzz decoder --replay crashes/            re-run saved failures
    roce fuzz coverage --time 60 [-- CORPUS_DIR -max_len=4096]     atheris / libFuzzer
    roce fuzz wire -i veth0 --target 10.0.0.2 --qpn 0x11 --rkey 0x100 --va 0x7f0000000000 \\
        --size 4096 --pps 2000 --probe-every 100 --pcap exchange.pcap

Each harness prints a summary (stdout; the same for the same seed and count) and the time
taken (stderr); progress goes to stderr when it is a terminal.  Every failing input is saved
under ``--corpus DIR`` as a pcap and a one-line reason file; ``--replay DIR`` runs them again
and exits 1 while any still fails.

Exit status: 0 no failure, 1 failures (or bad usage), 2 the environment stops the run (no
such interface, no privilege).  The harnesses, their help and default run lengths come from
``roce.testing.fuzz.harnesses``.

``roce fuzz coverage`` is of another kind: coverage-guided fuzzing of the compiled fast path
against its references (``roce.testing.atheris_harness``), run by libFuzzer, which reads its
own options (given after ``--``), saves a disagreement as ``crash-*`` and ends the process
itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable

from roce.options import (
    MAX_COUNT,
    bounded_int,
    field_int,
    parse_address,
    parse_ipv4_text,
    parse_jobs,
    parse_key,
    parse_mac,
    parse_positive_seconds,
    parse_pps,
    parse_psn,
    parse_qpn,
    parse_seed,
)
from roce.packet import field_width
from roce.testing import fuzz
from roce.testing.fuzz.harnesses import HARNESSES

_count = bounded_int(0, MAX_COUNT, "a count")
COVERAGE = "coverage"
# what libFuzzer can hold: its seed is 32 bits (and 0 asks it for a random one), its time
# limit a C int of seconds
_libfuzzer_runs = bounded_int(1, MAX_COUNT, "a number of inputs")
_libfuzzer_seed = bounded_int(1, (1 << 32) - 1, "libFuzzer's seed")
_libfuzzer_seconds = bounded_int(1, (1 << 31) - 1, "whole seconds")


def _common(p: argparse.ArgumentParser, harness: str) -> None:
    default_count = HARNESSES[harness].default_count
    p.add_argument("--seed", type=parse_seed, default=0, help="random seed (default 0)")
    p.add_argument("--count", type=_count, default=None,
                   help=f"inputs to try (default {default_count}, or unbounded with --time)")
    p.add_argument("--time", type=parse_positive_seconds, default=None, metavar="SEC",
                   help="stop after SEC seconds")
    p.add_argument("--corpus", metavar="DIR", help="save every failing input here")
    p.add_argument("--replay", metavar="DIR", help="re-run the failures saved in DIR")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress line")


def _decoder_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", "-j", type=parse_jobs, default=None,
                   help="worker processes (default: the number of CPUs)")
    p.add_argument("--decode-every", type=_count, default=fuzz.DECODE_EVERY, metavar="N",
                   help=f"run roce decode on every Nth chunk of {fuzz.CHUNK} frames "
                   "(0: never)")


def _responder_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--skip-check", action="append", default=[], metavar="CHECK",
                   choices=fuzz.RESPONDER_CHECKS,
                   help="do not report this invariant (" + ", ".join(
                       fuzz.RESPONDER_CHECKS) + ")")


def _wire_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--interface", required=True, metavar="IFACE")
    p.add_argument("--target", required=True, type=parse_ipv4_text, metavar="IP",
                   help="the target's IPv4 address")
    p.add_argument("--qpn", required=True, type=parse_qpn,
                   help="the target's RC QP number")
    p.add_argument("--rkey", type=parse_key, default=None,
                   help="an rkey of the target's memory (probes READ it)")
    p.add_argument("--va", type=parse_address, default=0, help="address of that MR")
    p.add_argument("--size", type=field_int("reth.dmalen", field_width, "an MR length"),
                   default=4096,
                   help="MR length")
    p.add_argument("--target-mac", type=parse_mac, default=None,
                   help="skip ARP: the target's MAC")
    p.add_argument("--src-qpn", type=parse_qpn, default=0x11,
                   help="the QP number the target answers to (its destination QPN)")
    p.add_argument("--psn", type=parse_psn, default=None,
                   help="the target's expected PSN if known (else learnt from answers)")
    p.add_argument("--pps", type=parse_pps, default=1000.0, help="frames per second")
    p.add_argument("--probe-every", type=_count, default=100, metavar="N",
                   help="a liveness probe every N frames (0: none)")
    p.add_argument("--probe-timeout", type=parse_positive_seconds, default=0.5, metavar="SEC")
    p.add_argument("-w", "--pcap", metavar="FILE",
                   help="record every frame sent and received")


Progress = Callable[[fuzz.Summary], None]


def _decoder_run(args: argparse.Namespace, count: int | None,
                 progress: Progress) -> fuzz.Summary:
    jobs = args.jobs if args.jobs else (os.cpu_count() or 1)
    return fuzz.fuzz_decoder(args.seed, count, args.time, jobs, args.decode_every, progress)


def _responder_run(args: argparse.Namespace, count: int | None,
                   progress: Progress) -> fuzz.Summary:
    return fuzz.fuzz_responder(args.seed, count, args.time, args.skip_check, progress)


def _wire_run(args: argparse.Namespace, count: int | None, progress: Progress) -> fuzz.Summary:
    config = fuzz.WireConfig(**{f.name: getattr(args, f.name)
                                for f in dataclasses.fields(fuzz.WireConfig)})
    return fuzz.fuzz_wire(config, count, args.time, progress)


# harness (as in roce.testing.fuzz.harnesses) -> (description, its options, how to run it)
_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None],
                           Callable[[argparse.Namespace, int | None, Progress],
                                    fuzz.Summary]]] = {
    "decoder": ("Fuzz the decoder: valid, mutated and random frames through roce.parse, the "
                "fast path and its reference twins, and roce decode.",
                _decoder_options, _decoder_run),
    "responder": (fuzz.ResponderFuzzer.__doc__.split("\n\n")[0], _responder_options,
                  _responder_run),
    "wire": ("Send mutated RoCE frames to a target over a raw AF_PACKET socket, probing that "
             "it still answers.", _wire_options, _wire_run),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="harness", metavar="HARNESS")
    sub.required = True
    for name, harness in HARNESSES.items():
        description, options, _ = _COMMANDS[name]
        p = sub.add_parser(name, help=harness.help, description=description)
        _common(p, name)
        options(p)
    p = sub.add_parser(
        COVERAGE, help="coverage-guided (atheris, libFuzzer): fast path vs references",
        description="Coverage-guided fuzzing (atheris, libFuzzer) of the compiled fast path "
                    "against its pure-Python references; libFuzzer saves a disagreement as "
                    "crash-*. Needs atheris: pip install \"roce[fuzz]\" (CPython < 3.12, "
                    "x86-64).")
    p.add_argument("--count", type=_libfuzzer_runs, default=None, metavar="N",
                   help="inputs to try (default: until --time, or until stopped)")
    p.add_argument("--time", type=_libfuzzer_seconds, default=None, metavar="SEC",
                   help="stop after SEC whole seconds")
    p.add_argument("--seed", type=_libfuzzer_seed, default=1,
                   help="libFuzzer's seed (default 1; 1..2^32-1)")
    p.add_argument("libfuzzer", nargs="*", metavar="LIBFUZZER_ARG",
                   help="after --: corpus directories and libFuzzer's own options "
                        "(-max_len=N, -dict=FILE ...); without a directory a temporary one "
                        "is seeded with a frame of every opcode")


def libfuzzer_args(args: argparse.Namespace) -> list[str]:
    """``roce fuzz coverage``'s options as libFuzzer's command line; a disagreement exits 1,
    as the other harnesses' failures do (libFuzzer's own default is 77)."""
    out = ["-error_exitcode=1", f"-seed={args.seed}"]
    if args.count is not None:
        out.append(f"-atheris_runs={args.count}")
    if args.time is not None:
        out.append(f"-max_total_time={args.time}")
    return out + list(args.libfuzzer)


class _Progress:
    """One line on stderr, rewritten at most twice a second, when stderr is a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.start = time.monotonic()
        self.last = 0.0

    def __call__(self, s: fuzz.Summary) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.5:
            return
        self.last = now
        rate = s.inputs / max(now - self.start, 1e-9)
        sys.stderr.write(f"\r{s.harness}: {s.inputs} inputs, {sum(s.failed.values())} "
                         f"failures, {rate:,.0f}/s  ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.last:
            sys.stderr.write("\r" + " " * 70 + "\r")


def run(args: argparse.Namespace) -> int:
    # errors roce raises on purpose (no interface: InputError; a corpus of wire failures:
    # UsageError) go up to roce.cli, which maps them to their exit statuses
    if args.harness == COVERAGE:
        from roce.testing import atheris_harness

        atheris_harness.run(libfuzzer_args(args))  # libFuzzer ends the process
        return 0
    if args.replay:
        return _replay(args)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    progress = _Progress(not args.quiet)
    count = args.count if args.count is not None else (
        None if args.time is not None else HARNESSES[args.harness].default_count)
    run_harness = _COMMANDS[args.harness][2]
    try:
        summary = run_harness(args, count, progress)
    finally:
        progress.close()
    for line in summary.lines():
        print(line)
    if args.corpus:
        saved = {fuzz.save_failure(args.corpus, f) for f in summary.failures}
        if saved:
            print(f"saved {len(saved)} failing inputs to {args.corpus}")
    rate = summary.inputs / summary.elapsed if summary.elapsed else 0.0
    print(f"roce fuzz {args.harness}: {summary.inputs} inputs in {summary.elapsed:.1f} s "
          f"({rate:,.0f}/s)", file=sys.stderr)
    return 0 if summary.ok else 1


def _replay(args: argparse.Namespace) -> int:
    saved = [s for s in fuzz.load_corpus(args.replay) if s.harness == args.harness]
    if not saved:
        print(f"roce fuzz: no saved {args.harness} failures in {args.replay}", file=sys.stderr)
        return 1
    failing = 0
    for s, still in zip(saved, fuzz.replay_all(saved)):
        failing += bool(still)
        state = "STILL FAILS" if still else "fixed"
        print(f"{s.path.name}: {s.check}: {state}")
        for line in still[:3]:
            print(f"    {line[:200]}")
    print(f"replayed {len(saved)}: {failing} still failing, {len(saved) - failing} fixed")
    return 1 if failing else 0
