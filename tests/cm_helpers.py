"""A native InfiniBand CM exchange for the ``roce stats`` CM-pairing tests: REQ, REP and RTU
between LIDs 2 (active, QP 0x11, starting PSN 100) and 1 (passive, QP 0x22, starting PSN
500), then the connection's first packets; the first to the active side starts at PSN 501,
not the REP's 500."""

from __future__ import annotations

import roce
from roce.families.ib import mad as ibmad
from roce.families.ib import native as ib
from roce.locate import walk


def _transport(code: str, payload: bytes, **kw: object) -> bytes:
    raw = roce.craft(code, payload, **kw).to_bytes()
    w = walk(raw)
    return raw[w.bth_off:w.icrc_off]


def _cm(attr: int, values: dict, slid: int, dlid: int) -> bytes:
    t = _transport("UD_SEND_ONLY", ibmad.build_cm(attr, values), dqpn=1, sqpn=1,
                   qkey=0x80010000)
    return ib.build(t, slid=slid, dlid=dlid)


def _data(qp: int, psn: int, slid: int, dlid: int) -> bytes:
    return ib.build(_transport("RC_SEND_ONLY", b"abcd", dqpn=qp, psn=psn), slid=slid,
                    dlid=dlid)


def cm_frames() -> list[bytes]:
    """The exchange and the data packets, as link-type-247 frames."""
    return [
        _cm(0x10, {"localcommid": 0x77, "localqpn": 0x11, "startpsn": 100, "pppmtu": 5}, 2, 1),
        _cm(0x13, {"localcommid": 0x99, "remotecommid": 0x77, "localqpn": 0x22,
                   "startpsn": 500}, 1, 2),
        _cm(0x14, {"localcommid": 0x77, "remotecommid": 0x99}, 2, 1),
        _data(0x22, 100, 2, 1), _data(0x22, 101, 2, 1),
        _data(0x11, 501, 1, 2),  # the REP said 500
    ]
