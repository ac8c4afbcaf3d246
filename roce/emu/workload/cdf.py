"""Flow-size distributions: the published CDFs and user files of ``size cumulative%`` lines.

A CDF is a list of points (size in bytes, cumulative percent of flows), sizes and percents
both strictly increasing, from 0 % to 100 %.  Sizes between two points are interpolated
linearly, which makes each segment uniform in size: a segment from ``(x0, y0)`` to
``(x1, y1)`` holds ``y1 - y0`` percent of the flows, spread evenly over ``x0..x1``.

Sampling is the inverse-CDF rule of the HPCC ns-3 simulator's generator
(alibaba-edu/High-Precision-Congestion-Control, ``traffic_gen/custom_rand.py``): draw
``r`` uniform in [0, 100), take the first point whose percent is at least ``r``, interpolate
the size between it and the point before, truncate to an integer, and make a size of 0
one byte.  The mean is the same piecewise-linear integral (``getAvg``: each segment's
midpoint size times its share); the generator's Poisson arrivals are paced by it
(``roce.emu.workload.openloop``).

The three built-in CDFs are the files of that repository (``traffic_gen/``), point for
point: ``websearch`` (WebSearch_distribution.txt, DCTCP's web-search cluster), ``fbhadoop``
(FbHdp_distribution.txt, Facebook's Hadoop cluster) and ``alistorage``
(AliStorage2019.txt, Alibaba's storage cluster in 2019).  docs/workloads.md lists them, and
a test holds that page to ``BUILTIN``.

A user file (``FILE.cdf``) has one point per line, ``size cumulative%`` separated by blanks;
blank lines and lines starting with ``#`` are skipped.  Every problem is a
``WorkloadFileError`` naming the file and the line: a line that is not two finite numbers, a
size below 0 or above ``MAX_FLOW_BYTES`` (an RDMA message: each flow is one message), a
percent outside 0..100, a first percent other than 0, a size or percent not above the line
before, a last percent other than 100, more than ``MAX_LINES`` lines or a line longer than
``MAX_LINE`` characters (so reading a wrong file costs little).
"""

from __future__ import annotations

import math
import os
import random
from bisect import bisect_left
from dataclasses import dataclass

from roce.emu.scenario import MAX_MESSAGE
from roce.errors import UsageError, WorkloadFileError

MAX_FLOW_BYTES = MAX_MESSAGE  # a flow is one RDMA message (IBA: at most 2^31 bytes)
MAX_LINES = 10_000  # lines a CDF file may have, comments and blank lines included
MAX_LINE = 200  # characters on one line


@dataclass(frozen=True)
class Cdf:
    """A flow-size distribution: ``points`` are (size in bytes, cumulative percent)."""

    name: str
    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        # the two coordinates apart, for bisect (the points are checked by their maker)
        object.__setattr__(self, "_sizes", tuple(x for x, _ in self.points))
        object.__setattr__(self, "_percents", tuple(y for _, y in self.points))

    def mean(self) -> float:
        """The mean size in bytes of the interpolated distribution (each segment's midpoint
        times its share: HPCC's ``getAvg``)."""
        return sum((x0 + x1) / 2 * (y1 - y0) for (x0, y0), (x1, y1)
                   in zip(self.points, self.points[1:])) / 100

    def size_at(self, percent: float) -> float:
        """The interpolated size at ``percent`` (0..100): the inverse of ``percent_at``."""
        ys = self._percents  # type: ignore[attr-defined]
        i = max(1, bisect_left(ys, percent))
        (x0, y0), (x1, y1) = self.points[i - 1], self.points[i]
        return x0 + (x1 - x0) / (y1 - y0) * (percent - y0)

    def percent_at(self, size: float) -> float:
        """The percent of flows of at most ``size`` bytes, interpolated (0 below the first
        point, 100 from the last)."""
        xs = self._sizes  # type: ignore[attr-defined]
        if size <= xs[0]:
            return 0.0
        if size >= xs[-1]:
            return 100.0
        i = bisect_left(xs, size)
        (x0, y0), (x1, y1) = self.points[i - 1], self.points[i]
        return y0 + (y1 - y0) / (x1 - x0) * (size - x0)

    def sample(self, rng: random.Random) -> int:
        """One flow size in bytes (at least 1), drawn with ``rng`` by HPCC's rule."""
        size = int(self.size_at(rng.random() * 100))
        return size if size > 0 else 1


def check(name: str, points: list[tuple[float, float]], lines: list[int]) -> Cdf:
    """``points`` as a ``Cdf``, or a ``WorkloadFileError`` naming ``name`` and the line
    (``lines[i]`` is where point ``i`` was read) of the first point that breaks a rule."""
    if not points:
        raise WorkloadFileError(name, 0, "no points (lines of 'size cumulative%')")
    for i, ((x, y), line) in enumerate(zip(points, lines)):
        if not 0 <= x <= MAX_FLOW_BYTES:
            raise WorkloadFileError(name, line, f"size {x:g} is outside 0..{MAX_FLOW_BYTES} "
                                    "bytes (a flow is one RDMA message)")
        if not 0 <= y <= 100:
            raise WorkloadFileError(name, line, f"cumulative {y:g}% is outside 0..100")
        if i == 0:
            if y != 0:
                raise WorkloadFileError(name, line, f"the first point is at {y:g}%: a CDF "
                                        "starts at 0% (the smallest size)")
            continue
        px, py = points[i - 1]
        if x <= px:
            raise WorkloadFileError(name, line, f"size {x:g} is not above {px:g} on line "
                                    f"{lines[i - 1]}: sizes must increase")
        if y <= py:
            raise WorkloadFileError(name, line, f"cumulative {y:g}% is not above {py:g}% on "
                                    f"line {lines[i - 1]}: percents must increase")
    if points[-1][1] != 100:
        raise WorkloadFileError(name, lines[-1], f"the last point is at {points[-1][1]:g}%: "
                                "a CDF ends at 100%")
    return Cdf(name, tuple(points))


def _number(text: str, what: str, name: str, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or "_" in text:
        raise WorkloadFileError(name, line, f"{what} {text!r} is not a number")
    return value


def parse(text_lines: list[str], name: str) -> Cdf:
    """A CDF from the lines of a file called ``name`` (each already within the limits)."""
    points: list[tuple[float, float]] = []
    where: list[int] = []
    for number, raw in enumerate(text_lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise WorkloadFileError(name, number, f"expected 'size cumulative%', got "
                                    f"{len(parts)} field{'s' if len(parts) != 1 else ''}")
        points.append((_number(parts[0], "size", name, number),
                       _number(parts[1], "cumulative", name, number)))
        where.append(number)
    return check(name, points, where)


def read(path: str) -> Cdf:
    """The CDF in the file at ``path``: a ``WorkloadFileError`` (exit 2) naming the line at
    fault, or the file when it cannot be read."""
    lines: list[str] = []
    try:
        with open(path, "rb") as f:
            for number in range(1, MAX_LINES + 2):
                raw = f.readline(MAX_LINE + 2)  # a line, its newline, one more: too long
                if not raw:
                    break
                if number > MAX_LINES:
                    raise WorkloadFileError(path, number, f"more than {MAX_LINES} lines (a "
                                            f"CDF file has at most {MAX_LINES})")
                text = raw.rstrip(b"\r\n")
                if len(text) > MAX_LINE:
                    raise WorkloadFileError(path, number, f"longer than {MAX_LINE} "
                                            "characters")
                try:
                    lines.append(text.decode("utf-8"))
                except UnicodeDecodeError:
                    raise WorkloadFileError(path, number, "not UTF-8 text") from None
    except OSError as e:
        raise WorkloadFileError(path, 0, e.strerror or str(e)) from None
    return parse(lines, path)


def _builtin(name: str, points: tuple[tuple[float, float], ...]) -> Cdf:
    return check(name, list(points), list(range(1, len(points) + 1)))


# The HPCC repository's traffic_gen/ files, point for point (module docstring).
BUILTIN: dict[str, Cdf] = {cdf.name: cdf for cdf in (
    _builtin("websearch", (
        (0, 0), (10000, 15), (20000, 20), (30000, 30), (50000, 40), (80000, 53),
        (200000, 60), (1000000, 70), (2000000, 80), (5000000, 90), (10000000, 97),
        (30000000, 100))),
    _builtin("fbhadoop", (
        (0, 0), (100, 1), (200, 2), (300, 5), (350, 15), (400, 20), (500, 30), (600, 40),
        (700, 50), (1000, 60), (2000, 67), (7000, 70), (30000, 72), (50000, 82),
        (80000, 87), (120000, 90), (300000, 95), (1000000, 97.5), (2000000, 99),
        (10000000, 100))),
    _builtin("alistorage", (
        (0, 0), (4000, 22.93), (8000, 69.21), (16000, 80.61), (32000, 90.47),
        (64000, 93.53), (128000, 96.77), (256000, 97.53), (2000000, 100))),
)}


def load(spec: str) -> Cdf:
    """``--workload``'s value: a built-in name, or the path of a CDF file.  A name that is
    neither is a ``UsageError`` (exit 1) listing the built-ins; a file with a bad line a
    ``WorkloadFileError`` (exit 2)."""
    if spec in BUILTIN:
        return BUILTIN[spec]
    if not os.path.exists(spec):
        raise UsageError(f"--workload {spec}: neither a built-in workload "
                         f"({', '.join(BUILTIN)}) nor a file")
    return read(spec)


__all__ = ["BUILTIN", "Cdf", "MAX_FLOW_BYTES", "MAX_LINE", "MAX_LINES", "check", "load",
           "parse", "read"]
