"""What a link needs from the thing at each of its ends: the ``Endpoint`` interface.

A link (``roce.emu.fabric.Link`` between two hosts, ``roce.emu.net.link.Wire`` in a switched
network, the relay between two interfaces) moves frames between endpoints; it does not care
whether an end is an emulated NIC, a switch port or a socket.  An endpoint receives frames
and says when it next wants to transmit; a link that pulls (the switched network's wire) then
asks it for that frame: such an end is a ``roce.emu.net.link.PullEndpoint``, a base class the
wire calls in C in the compiled form.
"""

from __future__ import annotations

from typing import Protocol


class Endpoint(Protocol):
    """One end of a link."""

    def receive(self, now: int, frame: bytes) -> None:
        """A frame arrived at virtual time ``now`` (ns)."""

    def next_tx(self, now: int) -> int | None:
        """The earliest time (ns, >= ``now``) this end wants to transmit; None: nothing to
        send until something else happens (a post, a received frame, a timer)."""

