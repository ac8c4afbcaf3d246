"""Pairing flows into RC connections, once, at the end of a capture.

QPNs differ on the two sides of a connection (A->B goes to QP b, B->A to QP a), so pairing is
a heuristic:

1. PSN ranges: a flow's responses carry the PSNs of the requests they answer, so a flow Y
   (B->A) is paired with a flow X (A->B) when the first or last response PSN seen on Y lies
   inside X's request PSN range and X is the only such flow;
2. otherwise, when an IP pair has exactly one unpaired flow in each direction, those two
   are paired;
3. everything else is a lone flow.
"""

from __future__ import annotations

from roce.analysis.flowmodel import Flow
from roce.psn import psn_diff

__all__ = ["pair"]


def pair(flows: list[Flow]) -> tuple[list[tuple[Flow, Flow]], list[Flow]]:
    """(connections, lone flows); sets each flow's ``peer``."""
    for f in flows:
        f.peer = None
    by_addr: dict[tuple[int, bytes], list[Flow]] = {}
    for f in flows:
        by_addr.setdefault((f.l3, f.addr), []).append(f)

    def reverse(f: Flow) -> list[Flow]:
        h = len(f.addr) // 2
        return by_addr.get((f.l3, f.addr[h:] + f.addr[:h]), [])

    def answers(y: Flow, x: Flow) -> bool:
        """Do y's response PSNs fall in x's request PSN range?"""
        if y.rsp_first < 0 or x.req is None:
            return False
        lo, hi = x.req_first, x.req.next  # hi: a NAK may carry the next expected PSN
        return any(psn_diff(p, lo) >= 0 and psn_diff(hi, p) >= 0
                   for p in (y.rsp_first, y.rsp_last))

    pairs: list[tuple[Flow, Flow]] = []
    for y in flows:
        if y.peer is not None or y.rsp_first < 0:
            continue
        cands = [x for x in reverse(y) if x.peer is None and x is not y and answers(y, x)]
        if len(cands) == 1:
            x = cands[0]
            x.peer, y.peer = y, x
            pairs.append((x, y))
    # Unordered IP pair -> unpaired flows of each direction.
    left: dict[tuple[int, bytes], tuple[list[Flow], list[Flow]]] = {}
    for f in flows:
        if f.peer is None:
            h = len(f.addr) // 2
            rev = f.addr[h:] + f.addr[:h]
            sides = left.setdefault((f.l3, min(f.addr, rev)), ([], []))
            sides[f.addr > rev].append(f)
    for one, other in left.values():
        if len(one) == 1 and len(other) == 1:
            x, y = one[0], other[0]
            if x.req is None and y.req is not None or (
                    (x.req is None) == (y.req is None) and y.id < x.id):
                x, y = y, x
            x.peer, y.peer = y, x
            pairs.append((x, y))
    pairs.sort(key=lambda p: min(p[0].id, p[1].id))
    paired = {f.id for c in pairs for f in c}
    return pairs, [f for f in flows if f.id not in paired]
