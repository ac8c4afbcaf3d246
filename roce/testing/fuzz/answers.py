"""A responder's answers as plain tuples, for the harnesses that check them (responder,
wire): ``("ack", psn)``, ``("rnr", psn)``, ``("nak", code, psn)``, ``("read", psn, data)``,
``("atomic_ack", psn, original)``; the AETH syndrome is split by ``roce.headers``
(docs/protocol.md "AETH syndrome")."""

from __future__ import annotations

from roce.headers import AETH_ACK, AETH_NAK, AETH_RNR_NAK, syndrome_type, syndrome_value
from roce.opcodes import Operation
from roce.packet import parse
from roce.psn import PSN_MASK

Answer = tuple


def describe_answer(frame: bytes) -> Answer:
    """An answer frame as a tuple: ("ack", psn), ("nak", code, psn)... (see the module)."""
    try:
        p = parse(frame)
    except ValueError:
        return ("malformed",)
    f = p.fields()
    op = p.opcode.operation
    psn = f["bth.psn"]
    if op is Operation.ACK:
        syn = f["aeth.syndrome"]
        kind = syndrome_type(syn)
        if kind == AETH_ACK:
            return ("ack", psn)
        if kind == AETH_RNR_NAK:
            return ("rnr", psn)
        if kind == AETH_NAK:
            return ("nak", syndrome_value(syn), psn)
        return ("reserved-syndrome", syn, psn)
    if op is Operation.READ_RESPONSE:
        return ("read", psn, p.payload)
    if op is Operation.ATOMIC_ACK:
        return ("atomic_ack", psn, f["atomicacketh.origremdt"])
    return (p.opcode.ident, psn)


def answers_match(got: list[Answer], want: list[Answer]) -> bool:
    """``got`` is what ``want`` asks for; READ responses may come in several packets."""
    if len(want) == 1 and want[0][0] == "read":
        # READ responses: consecutive PSNs from the request's, payloads joined = the data
        _, psn, data = want[0]
        if not got or any(g[0] != "read" for g in got):
            return False
        psns = [g[1] for g in got]
        return psns == [(psn + i) & PSN_MASK for i in range(len(got))] and \
            b"".join(g[2] for g in got) == data
    return got == want


def format_answers(answers: list[Answer]) -> str:
    """Answers in words, for a failure's detail."""
    if not answers:
        return "no answer"
    parts = []
    for a in answers:
        if a[0] == "read":
            parts.append(f"read psn={a[1]} {len(a[2])}B")
        elif a[0] == "nak":
            parts.append(f"NAK code {a[1]} psn={a[2]}")
        else:
            parts.append(" ".join(str(x) for x in a))
    return ", ".join(parts)
