"""The interfaces of the switched network's replaceable parts: what a switch asks of its
classifier, forwarder and marker (implemented in ``roce.emu.net.stages``) and of its buffer
(``roce.emu.net.buffer``), and what a NIC asks of a QP's pacer.

Written for the type checker: the stages' modules import this one only under
``TYPE_CHECKING``, so that a run does not import ``typing`` for them (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from roce.emu.net.buffer import Account


class Classifier(Protocol):
    lossless: frozenset[int]  # classes PFC protects
    strict: frozenset[int]  # classes served before the others
    classes: frozenset[int]  # every class ``classify`` can return

    def classify(self, frame: bytes) -> int: ...


T = TypeVar("T")


class Forwarder(Protocol):
    def pick(self, frame: bytes, ports: Sequence[T]) -> T: ...


class Marker(Protocol):
    def mark(self, queue_bytes: int) -> bool: ...


class Pacer(Protocol):
    """A per-QP rate limiter: when the QP may send next, and what sending costs it."""

    rate_bps: int

    def next_allowed(self) -> int: ...

    def sent(self, now: int, nbytes: int) -> None: ...


class BufferPolicy(Protocol):
    """What a switch asks of its buffer: admission, release, and when to pause or resume a
    lossless ingress account (the PFC accounting stage)."""

    lossless_drops: int
    max_used: int
    size: int

    def account(self, headroom: int = 0) -> Account: ...

    def check(self, where: str) -> None: ...

    def admit(self, acct: Account, n: int, lossless: bool) -> int: ...

    def release(self, acct: Account, pool: int, n: int) -> None: ...

    def should_pause(self, acct: Account) -> bool: ...

    def should_resume(self, acct: Account) -> bool: ...

    def queue_limit(self) -> int:
        """The bytes one account can hold before the buffer stops it (tail drop, or PFC for
        a lossless class) when it is the only one using the shared pool."""
        ...

    def pfc_trigger(self, fan_in: int) -> int:
        """The egress queue at which ``fan_in`` lossless ingress ports feeding it, alike and
        alone in the shared pool, make the switch pause them."""
        ...
