"""Fuzz harnesses: the decoder, the emulated responder and (over a raw socket) a device under
test, all seeded and reproducible, plus the verbs-program runner the property tests use.
``roce fuzz`` (``roce.cli.fuzz``) is their command line.

One module per job:

- ``decoder``: frames through the parser, the fast path and its twins, the flow analysis
  and ``roce decode``'s output modes; ``seeds`` gives it valid frames, one source per
  protocol family;
- ``responder`` (with its known-outcome requests in ``responder_cases``): frames injected
  into an emulated device under test next to valid traffic;
- ``wire``: mutated requests to a real device under test, with liveness probes;
- ``programs``: ``run_program`` executes ``roce.testing.strategies.verbs_programs``;
- ``results`` (``Failure``, ``Summary``), ``corpus`` (failures saved as pcap + reason line),
  ``runner`` (chunked runs on worker processes), ``registry`` (the table of harnesses and
  replay), ``answers``, ``ranges`` and ``frame_fields`` (helpers the harnesses share).

Adding a harness or a protocol family: see ``registry`` and ``seeds``.  Nothing here needs
hypothesis; ``roce.testing.strategies`` does (the ``fuzz`` extra).
"""

from __future__ import annotations

from roce.testing.fuzz.answers import describe_answer
from roce.testing.fuzz.chunks import CHUNK, run_chunks
from roce.testing.fuzz.corpus import Saved, load_corpus, save_failure
from roce.testing.fuzz.decoder import DECODE_EVERY, DecoderFactory, DecoderFuzzer, fuzz_decoder
from roce.testing.fuzz.dut import RESPONDER_CHECKS, ResponderFuzzer, fuzz_responder
from roce.testing.fuzz.harnesses import HARNESSES, Harness, replay_all, replay_one
from roce.testing.fuzz.programs import ProgramResult, run_program
from roce.testing.fuzz.results import MAX_FAILURES_PER_CHECK, Failure, Summary
from roce.testing.fuzz.seeds import SEED_SOURCES, seed_pool, to_linktype
from roce.testing.fuzz.wire import EnvironmentProblem, WireConfig, WireFuzzer, fuzz_wire

__all__ = [
    "CHUNK", "DECODE_EVERY", "HARNESSES", "MAX_FAILURES_PER_CHECK", "RESPONDER_CHECKS",
    "SEED_SOURCES", "DecoderFactory", "DecoderFuzzer", "EnvironmentProblem", "Failure",
    "Harness", "ProgramResult", "ResponderFuzzer", "Saved", "Summary", "WireConfig",
    "WireFuzzer", "describe_answer", "fuzz_decoder", "fuzz_responder", "fuzz_wire",
    "load_corpus", "replay_all", "replay_one", "run_chunks", "run_program",
    "save_failure", "seed_pool", "to_linktype",
]
