"""Congestion-control parameters: their names, units, valid ranges, and how a profile plus
``--cc-param NAME=VALUE`` overrides become one validated set (docs/congestion-control.md).

Names are NVIDIA's (mlx5 ``roce_rp``/``roce_np`` sysfs knobs, ``rp_``/``np_`` prefixed) for
DCQCN and the paper's for TIMELY.  A profile value is a number, or a function of the line rate
in Gb/s for the settings published "per 25 Gb/s of port rate".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from roce.errors import UsageError


@dataclass(frozen=True)
class Param:
    """One knob: its unit, meaning and valid closed range; ``integer`` rejects fractions."""

    name: str
    unit: str
    meaning: str
    lo: float
    hi: float
    integer: bool = True

    def parse(self, text: str | float | int) -> float | int:
        """A value for this knob from text or a number (a UsageError names the knob)."""
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise UsageError(f"--cc-param {self.name}: bad value {text!r} "
                             f"(a number in {self.unit})") from None
        if self.integer:
            if value != int(value):
                raise UsageError(f"--cc-param {self.name}: {text!r} is not a whole number "
                                 f"of {self.unit}")
            value = int(value)
        if not self.lo <= value <= self.hi:
            raise UsageError(f"--cc-param {self.name}: {text!r} is outside "
                             f"[{_fmt(self.lo)}, {_fmt(self.hi)}] {self.unit}")
        return value


def _fmt(x: float) -> str:
    return str(int(x)) if x == int(x) else str(x)


ProfileValue = float | int | Callable[[float], float]


def per_25g(base: float) -> Callable[[float], float]:
    """A value published for 25 Gb/s, scaled linearly with the line rate (HPCC ns-3 run.py)."""
    def scaled(line_gbps: float) -> float:
        return base * line_gbps / 25.0
    scaled.__doc__ = f"{_fmt(base)} x line rate / 25 Gb/s"
    return scaled


def split_override(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise UsageError(f"--cc-param {text!r}: expected NAME=VALUE")
    return name.strip(), value.strip()


def resolve(params: Mapping[str, Param], profiles: Mapping[str, Mapping[str, ProfileValue]],
            profile: str, overrides: Iterable[str], line_rate_gbps: float,
            algorithm: str) -> dict[str, float | int]:
    """The profile's values at this line rate, then each ``NAME=VALUE`` override, all checked
    against the knob's range (UsageError naming the knob, or the profile, otherwise)."""
    if profile not in profiles:
        raise UsageError(f"--cc-profile {profile!r}: {algorithm} has "
                         f"{', '.join(sorted(profiles))}")
    out: dict[str, float | int] = {}
    for name, value in profiles[profile].items():
        v = value(line_rate_gbps) if callable(value) else value
        p = params[name]
        out[name] = p.parse(round(v) if p.integer else v)
    for text in overrides:
        name, value = split_override(text)
        if name not in params:
            raise UsageError(f"--cc-param {name}: not a {algorithm} parameter (known: "
                             f"{', '.join(sorted(params)) or 'none'})")
        out[name] = params[name].parse(value)
    return out
