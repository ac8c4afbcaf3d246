"""The flag suffix of a native InfiniBand line: one table, for the compiled line formatter
(``roce._fastpath.ib_lines``), its twin (``roce.families.ib.lines``) and the per-record path
(``roce.families.ib.native.columns``).

RoCE's suffix (``roce.families.base.summary.FLAG_TEXT``: ``[AckReq]``, the forward congestion
mark, ``[BAD ICRC]``) with the BTH FECN in the place of IP's ECN CE and the BECN beside it
(docs/protocol.md "Native InfiniBand": the two marks), then ``[BAD VCRC]``.
"""

from __future__ import annotations

from roce.families.base.summary import FLAG_TEXT

BAD_VCRC = " [BAD VCRC]"
FECN_TEXT, BECN_TEXT = " [FECN]", " [BECN]"
_PIECES = ((1, FLAG_TEXT[1]), (2, FECN_TEXT), (4, BECN_TEXT), (8, FLAG_TEXT[4]), (16, BAD_VCRC))
IB_FLAG_TEXT: tuple[str, ...] = tuple("".join(t for bit, t in _PIECES if i & bit)
                                      for i in range(32))


def flag_index(ackreq: object, fecn: object, becn: object, icrc_ok: object,
               vcrc_ok: object) -> int:
    """The ``IB_FLAG_TEXT`` index of a packet's flags (each argument read as true/false)."""
    return ((1 if ackreq else 0) | (2 if fecn else 0) | (4 if becn else 0)
            | (0 if icrc_ok else 8) | (0 if vcrc_ok else 16))
