"""``--cc NAME`` -> the algorithm's class, and a validated configuration from ``--cc-profile``
and ``--cc-param``.  A new algorithm is one module with one class and one row here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import UsageError
from .base import CongestionControl, NoControl
from .dcqcn import Dcqcn
from .params import resolve
from .timely import Timely

ALGORITHMS: dict[str, type[CongestionControl]] = {
    "none": NoControl,
    "dcqcn": Dcqcn,
    "timely": Timely,
}


@dataclass(frozen=True)
class CcConfig:
    """One algorithm with its resolved parameters: what a device or QP is configured with."""

    algorithm: str = "none"
    profile: str = "default"
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def cls(self) -> type[CongestionControl]:
        return ALGORITHMS[self.algorithm]

    @property
    def uses_cnp(self) -> bool:
        return self.cls.uses_cnp

    @property
    def np_interval_ns(self) -> int:
        """The notification point's spacing (the DCQCN knob, or NVIDIA's default)."""
        us = self.params.get("np_min_time_between_cnps",
                             Dcqcn.PROFILES["nvidia"]["np_min_time_between_cnps"])
        return int(us * 1_000)

    def create(self, line_rate_bps: float, now: int = 0) -> CongestionControl:
        return self.cls(self.params, line_rate_bps, now)


def configure(algorithm: str = "none", profile: str | None = None,
              overrides: Iterable[str] = (), line_rate_gbps: float = 100.0) -> CcConfig:
    """Validate ``--cc``, ``--cc-profile``, ``--cc-param`` (UsageError naming the bad one)."""
    cls = ALGORITHMS.get(algorithm)
    if cls is None:
        raise UsageError(f"--cc {algorithm!r}: choose from {', '.join(ALGORITHMS)}")
    name = profile or cls.DEFAULT_PROFILE
    params = resolve(cls.PARAMS, cls.PROFILES, name, list(overrides), line_rate_gbps,
                     algorithm)
    return CcConfig(algorithm, name, params)


def profiles() -> dict[str, list[str]]:
    """Algorithm -> its profile names (for help texts and docs)."""
    return {n: list(c.PROFILES) for n, c in ALGORITHMS.items()}
