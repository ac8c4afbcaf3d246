"""Protocol families and tunnels beyond RoCEv2, dispatched by one registry.

``registry`` maps link types, EtherTypes, IP protocols, UDP ports, GRE protocols and ERF
record types to handlers; ``builtin`` holds the rows of RoCE, native InfiniBand (``ib``,
``ibcrc``, ``ibmad``), ERF (``erf``) and the tunnels (``tunnels``: GRE, ERSPAN, VXLAN);
``dispatch`` follows the rows for a frame the compiled RoCE walk did not claim, and
``records`` makes the decoder's records and lines from the result.
"""

from roce.families.registry import REGISTRY, Handler, Registry, Unwrapped, registry

__all__ = ["REGISTRY", "Handler", "Registry", "Unwrapped", "registry"]
