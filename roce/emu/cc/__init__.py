"""Congestion control for the emulator's NICs (docs/congestion-control.md).

- ``base``: the interface (events in, rate/window/next timer out) and ``--cc none``;
- ``dcqcn``: DCQCN's reaction point with NVIDIA's knob names and three published profiles;
- ``timely``: TIMELY (RTT gradient), the second algorithm behind the same interface;
- ``np``: DCQCN's notification point and the CNP frames it sends;
- ``params``: knobs, units, ranges, profiles and ``--cc-param`` overrides;
- ``registry``: ``--cc NAME`` -> class, and the validated ``CcConfig``.
"""

from roce.emu.cc.algorithms import ALGORITHMS, CcConfig, configure
from roce.emu.cc.base import CongestionControl, NoControl, Output
from roce.emu.cc.dcqcn import Dcqcn
from roce.emu.cc.np import CnpBuilder, NotificationPoint, cnp_frame
from roce.emu.cc.timely import Timely

__all__ = ["ALGORITHMS", "CcConfig", "CnpBuilder", "CongestionControl", "Dcqcn", "NoControl",
           "NotificationPoint", "Output", "Timely", "cnp_frame", "configure"]
