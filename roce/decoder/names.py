"""The field names ``roce decode`` takes, one table for ``-e`` (``-T fields``, ``csv``,
``parquet``) and ``-Y``: a name stands for the flat record keys it reads.

* roce's own names (``bth.psn``, ``lrh.dlid``, ``macc.opcode``; ``roce decode -G fields``
  lists them) read themselves;
* Wireshark's ``infiniband.`` names read roce's name without the prefix
  (``infiniband.bth.psn`` is ``bth.psn``);
* Wireshark's names that say something else: ``WIRESHARK_ALIASES`` below (the RETH fields
  Wireshark also shows for the AtomicETH, the ICRC) and the families' own (their handlers'
  ``wireshark``: ``infiniband.variant.crc`` is native InfiniBand's ``vcrc``).

A name that reads several keys means "whichever the packet carries" (no packet carries two).
"""

from __future__ import annotations

from collections.abc import Callable

PREFIX = "infiniband."

# Wireshark shares one field between RETH and AtomicETH (hf "infiniband.reth.va") and calls
# the ICRC "invariant.crc"; every other RoCE field is ``infiniband.`` + roce's name.
WIRESHARK_ALIASES: dict[str, tuple[str, ...]] = {
    "infiniband.reth.va": ("reth.va", "atomiceth.va"),
    "infiniband.reth.r_key": ("reth.r_key", "atomiceth.r_key"),
    "infiniband.invariant.crc": ("icrc",),
}


def aliases() -> dict[str, tuple[str, ...]]:
    """Every Wireshark name that is not ``infiniband.`` + a roce name: RoCE's and the
    registered families'."""
    from roce.families import registry

    return {**registry().wireshark_names(), **WIRESHARK_ALIASES}


def resolver() -> Callable[[str], tuple[str, ...]]:
    """``keys(name)``: the record keys a field name reads (the table made once)."""
    table = aliases()

    def keys(name: str) -> tuple[str, ...]:
        found = table.get(name)
        if found is not None:
            return found
        if name.startswith(PREFIX):
            return (name[len(PREFIX):],)
        return (name,)

    return keys


def keys(name: str) -> tuple[str, ...]:
    """The record keys ``name`` reads (``resolver`` for one name)."""
    return resolver()(name)


__all__ = ["PREFIX", "WIRESHARK_ALIASES", "aliases", "keys", "resolver"]
