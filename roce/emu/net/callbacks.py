"""What the event loop calls for the per-frame events: ``Callback``.

An event's callback is any callable ``fn(now, arg)`` (``roce.emu.net.events``).  A ``Callback``
is one too (``__call__``), and the loop (``roce.emu.net.sim.Network.run_until_any``) calls its
``fire`` directly: in the compiled form that is a C call, where any other callback is a
Python-level call (a bound method made, arguments parsed).  The two events of every frame on
every link have such callbacks: a wire's end of serialization (``Wire``), and the arrival at
the far end (the endpoint itself: a NIC, a switch port, a two-host NIC; ``deliverer``).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any


class Callback:
    """A callback object the loop fires: ``fire(now, arg)``, overridden by its subclasses (in
    C in the compiled form, where a subclass written in Python is called through its
    override)."""

    __slots__ = ()

    def fire(self, now: int, arg: Any) -> None:
        raise NotImplementedError

    def __call__(self, now: int, arg: Any) -> None:
        self.fire(now, arg)


def deliverer(endpoint: Any) -> Any:
    """The callback a frame's arrival at ``endpoint`` is scheduled with: the endpoint, when it
    is a ``Callback`` (its ``fire`` receives the frame), else its ``receive`` (a stand-in: a
    severed link's sink, a test's hook).  ``roce.emu.net.failures`` takes arrivals off the
    queue by this same callback."""
    return endpoint if isinstance(endpoint, Callback) else endpoint.receive


__all__ = ["Callback", "deliverer"]
