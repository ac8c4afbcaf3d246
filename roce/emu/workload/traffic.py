"""The one interface every workload has, and the transfer it hands a runner.

A ``Workload`` is a description (sizes, load, duration; or a collective's kind, size and
ranks), checked when it is made.  ``start(hosts, rate_gbps, rng)`` turns it into a
``Source`` for one run: the host names, the line rate and a seeded ``random.Random`` are
handed in, and nothing else is read (no clock, no global randomness), so a seed gives the
same transfers every time.

A runner drives a ``Source`` on virtual time, in integer nanoseconds:

- ``ready(now)``: the transfers it may post now (each handed out once);
- ``next_time()``: when a transfer becomes ready without any completion (an open-loop
  flow's arrival), or None;
- ``complete(transfer, now)``: the transfer's last byte arrived at ``now``;
- ``done``: every transfer there will be has completed.

So the loop is: post what ``ready`` gives, run the network until a transfer completes or
``next_time()`` comes, report completions, until ``done``.  What a source measures (flow
completion times, per-iteration times) it keeps; ``roce.emu.workload.fct`` and
``collective.bandwidth`` turn them into tables.

``Transfer.src`` and ``dst`` index the host list handed to ``start``; a collective's rank
``i`` is host ``i``.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from roce.errors import UsageError


@dataclass(frozen=True, slots=True)
class Transfer:
    """One message from host ``src`` to host ``dst`` (indexes into the run's host list).

    ``id`` is unique within a source.  An open-loop flow has its arrival time ``at_ns``; a
    collective's transfer has ``at_ns`` None (it starts when its inputs arrived) and says
    where it sits in the algorithm: ``iteration``, ``step`` (from 0), ``phase`` ("reduce"
    when the receiver adds the data to its own, "copy" when it keeps it), ``piece`` (which
    cut of the step's message, from 0) and ``block`` (the range of the ``ranks`` equal parts
    of the buffer it carries, ``lo..hi-1``).
    """

    id: int
    src: int
    dst: int
    size: int
    at_ns: int | None = None
    iteration: int = 0
    step: int = 0
    phase: str = ""
    piece: int = 0
    block: tuple[int, int] = (0, 0)


class Source(ABC):
    """One run of a workload, driven by a runner (module docstring)."""

    @abstractmethod
    def ready(self, now: int) -> list[Transfer]:
        """The transfers that may be posted at ``now`` and were not handed out before."""

    @abstractmethod
    def next_time(self) -> int | None:
        """The earliest time a transfer becomes ready without a completion, or None."""

    @abstractmethod
    def complete(self, transfer: Transfer, now: int) -> None:
        """``transfer`` (handed out by ``ready``) arrived whole at ``now``."""

    @property
    @abstractmethod
    def done(self) -> bool:
        """Every transfer this source will ever hand out has completed."""


class Workload(ABC):
    """A traffic description; ``start`` makes the ``Source`` of one run."""

    @abstractmethod
    def start(self, hosts: Sequence[str], rate_gbps: float, rng: random.Random,
              start_ns: int = 0) -> Source:
        """The run's source over ``hosts`` with links of ``rate_gbps``, drawing from
        ``rng``, its first transfer at or after ``start_ns``."""

    @abstractmethod
    def check_memory(self, hosts: int, rate_gbps: float, per_transfer: int = 0) -> None:
        """Refuse, with a ``UsageError`` naming the option to lower, a run whose transfers
        the runner cannot hold in memory (``per_transfer``: what the runner keeps for each
        beside the source's own cost)."""


def check_rate(rate_gbps: float) -> None:
    if not (rate_gbps > 0 and rate_gbps < float("inf")):
        raise UsageError(f"--rate {rate_gbps}: a workload needs a positive line rate")


def check_hosts(hosts: Sequence[str], need: int, what: str) -> None:
    """At least ``need`` hosts, or a ``UsageError`` saying ``what`` needs them."""
    if len(hosts) < need:
        raise UsageError(f"{what} needs at least {need} hosts; the network has "
                         f"{len(hosts)}")


__all__ = ["Source", "Transfer", "Workload", "check_hosts", "check_rate"]
