"""Congestion control for the emulator's NICs (docs/congestion-control.md).

- ``base``: the interface (events in, rate/window/next timer out) and ``--cc none``;
- ``dcqcn``: DCQCN's reaction point with NVIDIA's knob names and three published profiles;
- ``timely``: TIMELY (RTT gradient), the second algorithm behind the same interface;
- ``dctcp``: DCTCP's window on ECN echoes (one CNP per CE-marked packet);
- ``swift``: Swift's window on a delay target scaled by hops and flow count;
- ``hpcc``: HPCC's reaction point on per-hop telemetry (not behind ``--cc`` yet: the
  switches stamp no telemetry);
- ``np``: DCQCN's notification point and the CNP frames it sends;
- ``params``: knobs, units, ranges, profiles and ``--cc-param`` overrides;
- ``algorithms``: the registry, ``--cc NAME`` -> class, and the validated ``CcConfig``;
- ``engine``: the NIC's glue (frames in, rates and windows out); ``experiments``: long runs.
"""

from roce.emu.cc.algorithms import ALGORITHMS, CcConfig, configure
from roce.emu.cc.base import CongestionControl, NoControl, Output
from roce.emu.cc.dcqcn import Dcqcn
from roce.emu.cc.dctcp import Dctcp
from roce.emu.cc.np import CnpBuilder, NotificationPoint, cnp_frame
from roce.emu.cc.swift import Swift
from roce.emu.cc.timely import Timely

__all__ = ["ALGORITHMS", "CcConfig", "CnpBuilder", "CongestionControl", "Dcqcn", "Dctcp",
           "NoControl", "NotificationPoint", "Output", "Swift", "Timely", "cnp_frame",
           "configure"]
