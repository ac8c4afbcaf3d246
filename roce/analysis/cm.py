"""Connection Management exchanges paired with the RC connections they set up (native IB).

A CM exchange (IBA 12.6: REQ, then REP or REJ, then RTU; DREQ/DREP to tear down) names
both QPs and both starting PSNs: the REQ's Starting PSN is the first PSN the active side
will send, the REP's the first PSN the passive side will send.  ``CmPairing`` follows the
exchanges (keyed by the active side's Local Communication ID and LID) and the data
packets (keyed by destination LID and QP), and reports for each connection the QPNs, the
PSN each side announced and the first PSN seen on the wire in that direction, flagging a
mismatch.  It reads the flat fields ``roce.families.ib.native.decode`` makes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from roce.opcodes import OPCODES, Transport

ATTR_REQ, ATTR_REJ, ATTR_REP, ATTR_RTU, ATTR_DREQ, ATTR_DREP = (0x10, 0x12, 0x13, 0x14, 0x15,
                                                                0x16)
_RC = frozenset(c for c, op in OPCODES.items() if op.transport is Transport.RC)


@dataclass
class Connection:
    """One CM exchange and what the wire showed afterwards."""

    active_lid: int
    passive_lid: int
    comm_id: int
    active_qpn: int
    active_start_psn: int
    path_mtu: int
    passive_qpn: int | None = None
    passive_start_psn: int | None = None
    state: str = "REQ"
    frames: list[int] = field(default_factory=list)  # frame numbers of the CM messages
    first_psn_to_passive: int | None = None  # first data PSN active -> passive QP
    first_psn_to_active: int | None = None

    def problems(self) -> list[str]:
        out = []
        if self.first_psn_to_passive is not None and \
                self.first_psn_to_passive != self.active_start_psn:
            out.append(f"first PSN {self.first_psn_to_passive} to QP 0x{self.passive_qpn:06x} "
                       f"is not the REQ's starting PSN {self.active_start_psn}")
        if self.first_psn_to_active is not None and self.passive_start_psn is not None and \
                self.first_psn_to_active != self.passive_start_psn:
            out.append(f"first PSN {self.first_psn_to_active} to QP 0x{self.active_qpn:06x} "
                       f"is not the REP's starting PSN {self.passive_start_psn}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"active_lid": self.active_lid, "passive_lid": self.passive_lid,
                "comm_id": self.comm_id, "active_qpn": self.active_qpn,
                "passive_qpn": self.passive_qpn, "active_start_psn": self.active_start_psn,
                "passive_start_psn": self.passive_start_psn, "path_mtu": self.path_mtu,
                "state": self.state, "cm_frames": self.frames,
                "first_psn_to_passive": self.first_psn_to_passive,
                "first_psn_to_active": self.first_psn_to_active,
                "problems": self.problems()}


class CmPairing:
    """Feed it decoded native InfiniBand fields in capture order; read ``connections``."""

    def __init__(self) -> None:
        self.connections: list[Connection] = []
        self._by_req: dict[tuple[int, int], Connection] = {}  # (active LID, comm ID)
        # (LID, QPN) of each side -> (connection, True when that QP is the passive one)
        self._by_qp: dict[tuple[int, int], tuple[Connection, bool]] = {}

    def feed(self, number: int, f: dict[str, Any]) -> None:
        if "lrh.slid" not in f or "bth.opcode" not in f:
            return
        slid, dlid = f["lrh.slid"], f["lrh.dlid"]
        if "cm" in f:
            self._cm(number, slid, dlid, f)
            return
        if f["bth.opcode"] in _RC:
            hit = self._by_qp.get((dlid, f["bth.destqp"]))
            if hit is None:
                return
            conn, to_passive = hit
            if to_passive and conn.first_psn_to_passive is None:
                conn.first_psn_to_passive = f["bth.psn"]
            elif not to_passive and conn.first_psn_to_active is None:
                conn.first_psn_to_active = f["bth.psn"]

    def _cm(self, number: int, slid: int, dlid: int, f: dict[str, Any]) -> None:
        attr = f["mad.attributeid"]
        if attr == ATTR_REQ and "cm.req" in f:
            key = (slid, f["cm.req.localcommid"])
            if key in self._by_req:  # a retry of the same REQ
                self._by_req[key].frames.append(number)
                return
            conn = Connection(slid, dlid, f["cm.req.localcommid"], f["cm.req.localqpn"],
                              f["cm.req.startpsn"], f["cm.req.pppmtu"], frames=[number])
            self._by_req[key] = conn
            self.connections.append(conn)
            self._by_qp[(slid, conn.active_qpn)] = (conn, False)
            return
        if attr == ATTR_REP and "cm.rep" in f:
            conn = self._by_req.get((dlid, f["cm.rep.remotecommid"]))
            if conn is None:
                return
            conn.passive_qpn, conn.passive_start_psn = f["cm.rep.localqpn"], f["cm.rep.startpsn"]
            conn.state = "REP"
            conn.frames.append(number)
            self._by_qp[(slid, conn.passive_qpn)] = (conn, True)
            return
        names = {ATTR_RTU: ("cm.rtu", "RTU"), ATTR_REJ: ("cm.rej", "REJ"),
                 ATTR_DREQ: ("cm.dreq", "DREQ"), ATTR_DREP: ("cm.drep", "DREP")}
        if attr not in names or names[attr][0] not in f:
            return
        prefix, state = names[attr]
        ids = (f[f"{prefix}.localcommid"], f[f"{prefix}.remotecommid"])
        for lid, comm in ((slid, ids[0]), (dlid, ids[1])):  # sent by either side
            conn = self._by_req.get((lid, comm))
            if conn is not None:
                conn.state = state
                conn.frames.append(number)
                return

    def report_lines(self, warnings: bool = True) -> list[str]:
        """Text for ``roce stats``: one block per connection (with its warnings unless
        ``warnings`` is False: the report lists them among the expert findings)."""
        from roce.analysis.flowmodel import lid_text  # the LIDs as the flows show them

        out = []
        for i, c in enumerate(self.connections, 1):
            passive = "?" if c.passive_qpn is None else f"0x{c.passive_qpn:06x}"
            out.append(f"CM connection {i}: {lid_text(c.active_lid)} QP 0x{c.active_qpn:06x} "
                       f"<-> {lid_text(c.passive_lid)} QP {passive}")
            out.append(f"  comm ID 0x{c.comm_id:08x}, {c.state}, "
                       f"frames {', '.join(map(str, c.frames))}")
            out.append(f"  starting PSN announced: {c.active_start_psn} (REQ) / "
                       f"{'-' if c.passive_start_psn is None else c.passive_start_psn} (REP); "
                       f"first seen: "
                       f"{'-' if c.first_psn_to_passive is None else c.first_psn_to_passive} / "
                       f"{'-' if c.first_psn_to_active is None else c.first_psn_to_active}")
            if warnings:
                out += [f"  warning: {p}" for p in c.problems()]
        return out

    def warnings(self) -> list[str]:
        """The connections' problems as expert lines: ``CM connection 1: first PSN ...``."""
        return [f"CM connection {i}: {p}" for i, c in enumerate(self.connections, 1)
                for p in c.problems()]
