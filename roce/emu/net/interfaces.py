"""The interface of the switched network's replaceable part that is a protocol: what a
switch asks of its classifier (implemented in ``roce.emu.net.stages``).  The parts called per
frame are base classes their models subclass, so the compiled switch and NIC call them in C:
``stages.Forwarder``, ``stages.Marker``, ``stages.Pacer`` and ``buffer.BufferPolicy``.

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
