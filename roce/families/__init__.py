"""Protocol families and tunnels, dispatched by one registry.

``registry`` (the module) maps link types, EtherTypes, IP protocols, UDP ports, GRE protocols
and ERF record types to ``handler.Handler`` objects; ``base`` is what every family builds on
(the flat fields, one-line text and ``-V`` tree of Ethernet, IP, UDP, MAC Control and the IBA
transport headers); ``ib`` (native InfiniBand), ``erf`` and ``tunnels`` (GRE, ERSPAN, VXLAN)
are families; ``builtin`` holds their rows and loads the registry; ``dispatch`` follows the
rows for a frame the compiled RoCE walk did not claim.  docs/architecture.md, "Layers",
says what each may import.
"""

from __future__ import annotations

from roce.families.handler import Handler, Unwrapped
from roce.families.registry import REGISTRY, Registry

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

_BUILTIN: list[Any] = []  # roce.families.builtin.registry, imported at the first call


def registry(plugins: bool = True) -> Registry:
    """The process-wide registry with the built-in rows and (``plugins``) those of the
    ``roce.families`` entry points (``roce.families.builtin.registry``).  Asked per frame
    that is not RoCE: the import is made once."""
    if not _BUILTIN:
        from roce.families.builtin import registry as loaded

        _BUILTIN.append(loaded)
    return _BUILTIN[0](plugins)  # type: ignore[no-any-return]


__all__ = ["REGISTRY", "Handler", "Registry", "Unwrapped", "registry"]
