"""The interfaces of the switched network's replaceable parts that are protocols: what a
switch asks of its classifier (implemented in ``roce.emu.net.stages``) and what a NIC asks of
a QP's pacer.  The parts a switch calls per frame are base classes their models subclass, so
the compiled switch calls them in C: ``stages.Forwarder``, ``stages.Marker`` and
``buffer.BufferPolicy``.

Written for the type checker: the stages' modules import this one only under
``TYPE_CHECKING``, so that a run does not import ``typing`` for them (docs/architecture.md).
"""

from __future__ import annotations

from typing import Protocol, TypeVar


class Classifier(Protocol):
    lossless: frozenset[int]  # classes PFC protects
    strict: frozenset[int]  # classes served before the others
    classes: frozenset[int]  # every class ``classify`` can return

    def classify(self, frame: bytes) -> int: ...


T = TypeVar("T")


class Pacer(Protocol):
    """A per-QP rate limiter: when the QP may send next, and what sending costs it."""

    rate_bps: int

    def next_allowed(self) -> int: ...

    def sent(self, now: int, nbytes: int) -> None: ...
