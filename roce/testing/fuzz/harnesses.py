"""The table of harnesses: name, one-line help, default run length and how saved failures
are replayed.  ``roce fuzz`` takes its subcommands' help and defaults from here and
``replay_all`` dispatches through it.

Adding a harness: a module of its own in this package with a ``NAME``, a run function
returning a ``results.Summary`` and, when its failures can be re-run in-process, a
``replay(saved) -> [still failing checks per failure]``; one line in ``HARNESSES``; and its
options and runner, one entry in ``roce.cli.fuzz._COMMANDS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from roce.errors import UsageError
from roce.testing.fuzz import decoder, wire
from roce.testing.fuzz import dut as responder
from roce.testing.fuzz.corpus import Saved

Replay = Callable[[list[Saved]], list[list[str]]]


@dataclass(frozen=True)
class Harness:
    """One fuzz harness: its name, help, default count and how a failure replays."""

    name: str
    help: str  # one line, ``roce fuzz --help``
    default_count: int  # inputs a run tries when neither a count nor a time limit is given
    replay: Replay | None  # None: its failures are not replayed in-process
    replay_hint: str = ""  # what to do instead, when ``replay`` is None


HARNESSES: dict[str, Harness] = {h.name: h for h in (
    Harness(decoder.NAME, "parser, fast path vs references, roce decode", 100_000,
            decoder.replay),
    Harness(responder.NAME, "mutated frames into emulated RC/UC/UD responders", 3000,
            responder.replay),
    Harness(wire.NAME, "mutated frames to a device under test (raw socket)", 10_000, None,
            "send the pcap to the target again with `roce replay`"),
)}


def replay_all(saved: list[Saved]) -> list[list[str]]:
    """For each saved failure, the checks it still fails (empty: fixed), in order."""
    out: list[list[str]] = [[] for _ in saved]
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(saved):
        groups.setdefault(s.harness, []).append(i)
    for name, indexes in groups.items():
        first = saved[indexes[0]].path.name
        h = HARNESSES.get(name)
        if h is None:
            raise UsageError(f"{first}: no harness {name!r} (known: {', '.join(HARNESSES)})")
        if h.replay is None:
            raise UsageError(f"{first}: {name} failures are not replayed here; "
                             f"{h.replay_hint}")
        for i, still in zip(indexes, h.replay([saved[i] for i in indexes])):
            out[i] = still
    return out


def replay_one(saved: Saved) -> list[str]:
    """The checks a saved failure still fails (empty: fixed)."""
    return replay_all([saved])[0]
