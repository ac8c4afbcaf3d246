"""QP states and their legal transitions: the one table (IBA 10.3.1; ibv_modify_qp(3)).

``TRANSITIONS[(from, to)]`` gives, per QP type, the attributes a ``modify`` to that state
must carry.  Anything not in the table is illegal.  Any state may go to RESET or ERR.
"""

from __future__ import annotations

from roce.emu.core.constants import QPAttrMask as M
from roce.emu.core.constants import QPState as S
from roce.emu.core.constants import QPType as T
from roce.errors import QPStateError

_RC_RTR = (M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN
           | M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_MIN_RNR_TIMER)
_RC_RTS = (M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT | M.IBV_QP_RNR_RETRY | M.IBV_QP_SQ_PSN
           | M.IBV_QP_MAX_QP_RD_ATOMIC)
_INIT = M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT
_NONE = M(0)

# (from, to) -> {qp type: required attribute mask}
TRANSITIONS: dict[tuple[S, S], dict[T, M]] = {
    (S.IBV_QPS_RESET, S.IBV_QPS_INIT): {
        T.IBV_QPT_RC: _INIT | M.IBV_QP_ACCESS_FLAGS,
        T.IBV_QPT_UC: _INIT | M.IBV_QP_ACCESS_FLAGS,
        T.IBV_QPT_UD: _INIT | M.IBV_QP_QKEY},
    (S.IBV_QPS_INIT, S.IBV_QPS_INIT): {t: _NONE for t in T},
    (S.IBV_QPS_INIT, S.IBV_QPS_RTR): {
        T.IBV_QPT_RC: _RC_RTR,
        T.IBV_QPT_UC: M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN,
        T.IBV_QPT_UD: _NONE},
    (S.IBV_QPS_RTR, S.IBV_QPS_RTS): {
        T.IBV_QPT_RC: _RC_RTS,
        T.IBV_QPT_UC: M.IBV_QP_SQ_PSN,
        T.IBV_QPT_UD: M.IBV_QP_SQ_PSN},
    (S.IBV_QPS_RTS, S.IBV_QPS_RTS): {t: _NONE for t in T},
    (S.IBV_QPS_RTS, S.IBV_QPS_SQD): {t: _NONE for t in T},
    (S.IBV_QPS_SQD, S.IBV_QPS_SQD): {t: _NONE for t in T},
    (S.IBV_QPS_SQD, S.IBV_QPS_RTS): {t: _NONE for t in T},
    (S.IBV_QPS_SQE, S.IBV_QPS_RTS): {t: _NONE for t in (T.IBV_QPT_UC, T.IBV_QPT_UD)},
}
for _s in S:
    TRANSITIONS[(_s, S.IBV_QPS_RESET)] = {t: _NONE for t in T}
    TRANSITIONS[(_s, S.IBV_QPS_ERR)] = {t: _NONE for t in T}

# What each state lets the user and the wire do.
CAN_POST_RECV = frozenset({S.IBV_QPS_INIT, S.IBV_QPS_RTR, S.IBV_QPS_RTS, S.IBV_QPS_SQD,
                           S.IBV_QPS_SQE, S.IBV_QPS_ERR})
CAN_POST_SEND = frozenset({S.IBV_QPS_RTS, S.IBV_QPS_SQD, S.IBV_QPS_SQE, S.IBV_QPS_ERR})
CAN_RECEIVE = frozenset({S.IBV_QPS_RTR, S.IBV_QPS_RTS, S.IBV_QPS_SQD})
CAN_SEND = frozenset({S.IBV_QPS_RTS})


def check_transition(qp_type: T, current: S, new: S, mask: M) -> None:
    """Raise QPStateError unless ``current -> new`` is legal with the attributes in ``mask``."""
    rule = TRANSITIONS.get((current, new))
    if rule is None or qp_type not in rule:
        raise QPStateError(f"illegal QP transition {current.name} -> {new.name} "
                           f"for {qp_type.name}")
    missing = rule[qp_type] & ~mask
    if missing:
        names = ", ".join(m.name for m in M if m & missing)
        raise QPStateError(f"{current.name} -> {new.name} needs {names}")
