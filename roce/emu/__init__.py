"""The RoCE emulator: sans-I/O RC, UC and UD queue pairs behind a pyverbs-style verbs API,
driven by the simulated network (``roce.emu.net``; ``Fabric`` builds two hosts of it one call
at a time) or by real transports (``roce.emu.real``).

    from roce.emu import *
    fab = Fabric(seed=7)
    a, b = fab.add_host("a", "10.0.0.1"), fab.add_host("b", "10.0.0.2")
    fab.connect(a, b, rate_gbps=100, delay_ns=1000)
"""

from roce.emu.core.constants import *  # noqa: F403 - the IBV_* names, as pyverbs exports them
from roce.emu.core.constants import (
           MTU,
           Access,
           QPAttrMask,
           QPState,
           QPType,
           SendFlags,
           WCOpcode,
           WCStatus,
)
from roce.emu.core.constants import WROpcode as WROpcode
from roce.emu.core.qp import AHAttr, QPAttr, QPCap
from roce.emu.core.states import QPStateError
from roce.emu.core.verbs import AH, CQ, MR, PD, QP, Context, QPInitAttr, connect
from roce.emu.core.work import SGE, WC, RecvWR, SendWR
from roce.emu.fabric import Fabric, Link, LinkConfig

__all__ = ["AH", "Fabric", "Link", "LinkConfig", "Context", "PD", "MR", "CQ", "QP", "QPInitAttr",
           "QPCap", "QPAttr", "AHAttr", "SendWR", "RecvWR", "SGE", "WC", "QPStateError",
           "connect", "MTU", "Access", "QPAttrMask", "QPState", "QPType", "SendFlags",
           "WCOpcode", "WCStatus", "WROpcode"]
