"""The registry of congestion-control algorithms: ``--cc NAME`` -> the algorithm's class, and a
validated configuration from ``--cc-profile`` and ``--cc-param``.

A new algorithm is one module with one class (its class attributes name it: ``name``,
``summary``, ``PARAMS``, ``PROFILES``; roce/emu/cc/base.py) and one row in ``_ROWS`` below.
``--cc``'s choices and help, ``--cc-profile``'s help, the NIC's engine and the docs' checks
all read the registry; the build compiles every module of this package that is not
configuration (roce/_compiled.py).  ``register`` adds one at run time (a plugin, a test)."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field

from roce.emu import defaults
from roce.emu.cc.base import CongestionControl, NoControl
from roce.emu.cc.params import resolve
from roce.errors import UsageError
from roce.headers import ECN_ECT0, ECN_ECT1

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

# --ecn-codepoint: what data packets carry in the IP ECN field (RFC 3168; RFC 8311 for ECT(1))
ECN_CODEPOINTS = {"ect0": ECN_ECT0, "ect1": ECN_ECT1}

# one row per algorithm, in --cc's order: RoCE's, then UET's (``protocol``): the name its
# class gives itself, and the module of this package and the class that implement it
_ROWS = (("none", "base", "NoControl"), ("dcqcn", "dcqcn", "Dcqcn"),
         ("timely", "timely", "Timely"), ("dctcp", "dctcp", "Dctcp"),
         ("swift", "swift", "Swift"), ("hpcc", "hpcc", "Hpcc"), ("nscc", "nscc", "Nscc"),
         ("rccc", "rccc", "Rccc"))


class _Registry(MutableMapping):
    """Name -> class, in registration order.  A row's module is imported when its class is
    first asked for, so a run (and ``--cc``'s choices) loads only the algorithm it uses."""

    def __init__(self, rows: Iterable[tuple[str, str, str]]) -> None:
        self._rows = {name: (module, cls) for name, module, cls in rows}
        self._classes: dict[str, type[CongestionControl]] = {}

    def __getitem__(self, name: str) -> type[CongestionControl]:
        cls = self._classes.get(name)
        if cls is None:
            module, attr = self._rows[name]  # KeyError: not registered
            cls = getattr(importlib.import_module(f"{__package__}.{module}"), attr)
            if cls.name != name:
                raise RuntimeError(f"_ROWS names {module}.{attr} {name!r}; its class "
                                   f"says {cls.name!r}")
            self._classes[name] = cls
        return cls

    def __setitem__(self, name: str, cls: type[CongestionControl]) -> None:
        self._rows.setdefault(name, (cls.__module__, cls.__qualname__))
        self._classes[name] = cls

    def __delitem__(self, name: str) -> None:
        del self._rows[name]
        self._classes.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, name: object) -> bool:
        return name in self._rows


ALGORITHMS: MutableMapping[str, type[CongestionControl]] = _Registry(_ROWS)


def register(cls: type[CongestionControl]) -> type[CongestionControl]:
    """Add an algorithm under the name its class gives itself (a UsageError if taken, or if
    the class names none of its own: it would take its base's)."""
    if "name" not in vars(cls):
        raise UsageError(f"congestion control {cls.__qualname__}: the class sets no name "
                         "of its own")
    hidden = _redeclared(cls)
    if hidden:
        raise UsageError(f"congestion control {cls.name!r}: its __slots__ declare "
                         f"{', '.join(hidden)} again, which CongestionControl has (the NIC "
                         "reads the interface's own: set them, do not declare them)")
    if cls.name in ALGORITHMS and ALGORITHMS[cls.name] is not cls:
        raise UsageError(f"congestion control {cls.name!r} is registered already")
    ALGORITHMS[cls.name] = cls
    return cls


def _redeclared(cls: type[CongestionControl]) -> list[str]:
    """The interface's attributes a subclass's ``__slots__`` declare again: a second slot of
    the name would hide the interface's from the NIC's driver, which reads the interface's
    (a C field of the compiled base), so the algorithm's window or rate would go unseen."""
    own = set(CongestionControl.__slots__)
    names: set[str] = set()
    for c in cls.__mro__:
        if c is CongestionControl:
            break
        slots = vars(c).get("__slots__", ())
        names.update((slots,) if isinstance(slots, str) else slots)
    return sorted(names & own)


@dataclass(frozen=True)
class CcConfig:
    """One algorithm with its resolved parameters: what a device or QP is configured with."""

    algorithm: str = "none"
    profile: str = "default"
    params: Mapping[str, Any] = field(default_factory=dict)
    ecn: int = ECN_ECT0  # the ECN codepoint of data packets

    @property
    def enabled(self) -> bool:
        return self.algorithm != "none"

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
                             ALGORITHMS["dcqcn"].PROFILES["nvidia"]["np_min_time_between_cnps"])
        return int(us * 1_000)

    def create(self, line_rate_bps: float, now: int = 0) -> CongestionControl:
        return self.cls(self.params, line_rate_bps, now)


def configure(algorithm: str = "none", profile: str | None = None,
              overrides: Iterable[str] = (), line_rate_gbps: float = defaults.RATE_GBPS,
              ecn: str = "ect0") -> CcConfig:
    """Validate ``--cc``, ``--cc-profile``, ``--cc-param``, ``--ecn-codepoint`` (UsageError
    naming the bad one)."""
    if ecn not in ECN_CODEPOINTS:
        raise UsageError(f"--ecn-codepoint {ecn!r}: choose from {', '.join(ECN_CODEPOINTS)}")
    cls = ALGORITHMS.get(algorithm)
    if cls is None:
        raise UsageError(f"--cc {algorithm!r}: choose from {', '.join(ALGORITHMS)}")
    name = profile or next(iter(cls.PROFILES))  # the first profile is the default
    params = resolve(cls.PARAMS, cls.PROFILES, name, list(overrides), line_rate_gbps,
                     algorithm)
    cls(params, line_rate_gbps * 1e9)  # the knobs together: an algorithm's own checks
    return CcConfig(algorithm, name, params, ECN_CODEPOINTS[ecn])


def for_protocol(protocol: str) -> list[str]:
    """The algorithms ``--cc`` takes with ``--protocol PROTOCOL`` (``none`` with any)."""
    return [n for n, c in ALGORITHMS.items() if _takes(c, protocol)]


def _takes(cls: type[CongestionControl], protocol: str) -> bool:
    return cls is NoControl or (cls.protocol == "uet") == (protocol == "uet")


def check_protocol(config: CcConfig | None, protocol: str) -> None:
    """A UsageError when ``--cc`` names another transport's algorithm (NSCC with RoCE,
    DCQCN with UET)."""
    if config is None or not config.enabled:
        return
    if not _takes(config.cls, protocol):  # (the others' modules stay unimported)
        raise UsageError(f"--cc {config.algorithm}: {config.cls.protocol.upper()}'s congestion "
                         f"control, not for --protocol {protocol} (it takes "
                         f"{', '.join(for_protocol(protocol))})")


def profiles() -> dict[str, list[str]]:
    """Algorithm -> its profile names (for help texts and docs)."""
    return {n: list(c.PROFILES) for n, c in ALGORITHMS.items()}


def choices_help() -> str:
    """``--cc``'s help: every algorithm with its summary, from the registry."""
    return ", ".join(f"{n} ({c.summary})" if c.summary else n for n, c in ALGORITHMS.items())
