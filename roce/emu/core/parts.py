"""The interfaces of a QP's three parts (rxe's requester, responder and completer): base
classes every transport's parts subclass.

A QP calls its parts on every packet and timer (``QueuePair.receive``, ``deadline``; a NIC's
scheduler calls ``on_wire`` and ``pump``).  In the compiled form these are extension types,
so the QP reaches an RC part's methods in C; a part written in Python (UC's and UD's,
``roce.emu.core.unreliable``) is called through its overrides, as before.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from roce.emu.core.frames import Incoming


class RequesterPart:
    """Turns send work into request packets (``roce.emu.core.requester``)."""

    __slots__ = ()

    def pump(self, now: int) -> None:
        """Build what the window and the transmit list allow now."""
        raise NotImplementedError

    def on_wire(self, now: int, psn: int, end: int) -> None:
        """The request frame of PSNs ``psn``..``end`` left the NIC at ``now``."""
        raise NotImplementedError

    def on_timer(self, now: int) -> None:
        """A named timer (``timers``) ran out."""
        raise NotImplementedError

    def timers(self) -> dict[str, int]:
        """Every armed timer by name (virtual ns)."""
        raise NotImplementedError

    def deadline(self) -> int | None:
        """The earliest of ``timers``, or None."""
        raise NotImplementedError


class ResponderPart:
    """Executes the requests a QP receives (``roce.emu.core.responder``)."""

    __slots__ = ()

    def receive(self, now: int, pkt: Incoming) -> None:
        raise NotImplementedError


class CompleterPart:
    """Completes send work from the answers a QP receives (``roce.emu.core.completer``)."""

    __slots__ = ()

    def receive(self, now: int, pkt: Incoming) -> None:
        raise NotImplementedError
