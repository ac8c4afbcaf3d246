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

from roce.lazyexports import lazy_exports

# name -> the module defining it, imported when the name is first read: a run loads only
# the algorithm it uses
_EXPORTS = {
    "ALGORITHMS": "algorithms", "CcConfig": "algorithms", "configure": "algorithms",
    "CongestionControl": "base", "NoControl": "base", "Output": "base", "Dcqcn": "dcqcn",
    "Dctcp": "dctcp", "CnpBuilder": "np", "NotificationPoint": "np", "cnp_frame": "np",
    "Swift": "swift", "Timely": "timely",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
