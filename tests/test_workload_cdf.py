"""Flow-size CDFs (roce/emu/workload/cdf.py): the built-ins are HPCC's files, sampling fits
the CDF (chi-square over its segments, Kolmogorov-Smirnov over all sizes, fixed seeds), the
mean is the distribution's, and every bad user file is refused naming the file and line."""

from __future__ import annotations

import pickle
import random

import pytest
from workload_helpers import chi2_sf, kolmogorov_sf, ks_statistic

from roce import WorkloadFileError
from roce.cli import exit_code
from roce.emu.workload import cdf
from roce.emu.workload.cdf import BUILTIN
from roce.errors import UsageError

# HPCC's traffic_gen/*.txt as published (size in bytes, cumulative percent); written out
# here again so the table in the code is checked against the source, not against itself
HPCC = {
    "websearch": "0 0;10000 15;20000 20;30000 30;50000 40;80000 53;200000 60;1000000 70;"
                 "2000000 80;5000000 90;10000000 97;30000000 100",
    "fbhadoop": "0 0;100 1;200 2;300 5;350 15;400 20;500 30;600 40;700 50;1000 60;2000 67;"
                "7000 70;30000 72;50000 82;80000 87;120000 90;300000 95;1000000 97.5;"
                "2000000 99;10000000 100",
    "alistorage": "0 0;4000 22.93;8000 69.21;16000 80.61;32000 90.47;64000 93.53;"
                  "128000 96.77;256000 97.53;2000000 100",
}
N = 20_000
P_MIN = 1e-3  # a fit this unlikely fails the test


def points(name: str) -> list[tuple[float, float]]:
    return [tuple(map(float, p.split())) for p in HPCC[name].split(";")]


def test_statistics_helpers_match_tables() -> None:
    """The tail functions the fits use agree with printed tables (chi-square 95 % points,
    Kolmogorov's 5 % and 0.1 % points)."""
    assert chi2_sf(18.307, 10) == pytest.approx(0.05, abs=1e-4)
    assert chi2_sf(28.869, 18) == pytest.approx(0.05, abs=1e-4)
    assert chi2_sf(24.322, 7) == pytest.approx(0.001, abs=1e-5)
    assert kolmogorov_sf(1.358) == pytest.approx(0.05, abs=1e-3)
    assert kolmogorov_sf(1.949) == pytest.approx(0.001, abs=1e-4)


@pytest.mark.parametrize("name", list(HPCC))
def test_builtin_is_hpcc_file(name: str) -> None:
    assert BUILTIN[name].points == tuple(points(name))


def test_user_file_of_a_builtin_samples_alike(tmp_path) -> None:
    path = tmp_path / "ws.cdf"
    path.write_text("# DCTCP web search, from HPCC\n"
                    + "\n".join(HPCC["websearch"].split(";")) + "\n")
    mine = cdf.load(str(path))
    assert mine.points == BUILTIN["websearch"].points
    a, b = random.Random(3), random.Random(3)
    assert [mine.sample(a) for _ in range(500)] == [BUILTIN["websearch"].sample(b)
                                                   for _ in range(500)]


def segment_fit(samples: list[int], pts: list[tuple[float, float]]) -> float:
    """Chi-square p-value of the samples' counts per CDF segment [x0, x1): a segment holds
    y1 - y0 percent of the flows (integer points: int() of a size in [x0, x1) stays
    there; a size of 0 becomes 1, still in the first segment)."""
    edges = [x for x, _ in pts]
    counts = [0] * (len(pts) - 1)
    for s in samples:
        for i in range(len(edges) - 1):
            if s < edges[i + 1]:
                counts[i] += 1
                break
        else:
            raise AssertionError(f"size {s} above the last point")
    n = len(samples)
    stat = 0.0
    for c, (y0, y1) in zip(counts, zip([y for _, y in pts], [y for _, y in pts][1:])):
        expected = n * (y1 - y0) / 100
        stat += (c - expected) ** 2 / expected
    return chi2_sf(stat, len(counts) - 1)


def percent_at(pts: list[tuple[float, float]], x: float) -> float:
    """The CDF at ``x`` by linear interpolation between the points (the test's own)."""
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x < x1:
            return 0.0 if x < x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return 100.0


def ks_fit(samples: list[int], pts: list[tuple[float, float]]) -> float:
    """KS p-value against the sizes the rule makes: P(size <= k) = P(X < k + 1) for k >= 1."""
    def cdf_int(k: int) -> float:
        return 0.0 if k < 1 else percent_at(pts, k + 1) / 100

    d = ks_statistic(samples, cdf_int)
    return kolmogorov_sf(d * len(samples) ** 0.5)


@pytest.mark.parametrize("name", list(HPCC))
def test_samples_fit_the_cdf(name: str) -> None:
    rng = random.Random(20240601)
    samples = [BUILTIN[name].sample(rng) for _ in range(N)]
    assert min(samples) >= 1
    assert segment_fit(samples, points(name)) > P_MIN
    assert ks_fit(samples, points(name)) > P_MIN


def test_the_fits_catch_a_wrong_sampler() -> None:
    """The same checks fail a sampler that is slightly off: percents drawn in [0, 99)
    (the top 1 % never drawn), and sizes taken at a segment's start (no interpolation)."""
    web = BUILTIN["websearch"]
    rng = random.Random(20240601)
    short = [max(1, int(web.size_at(rng.random() * 99))) for _ in range(N)]
    assert segment_fit(short, points("websearch")) < P_MIN
    snapped = []
    for _ in range(N):
        r = rng.random() * 100
        snapped.append(max(1, int(next(x0 for (x0, _), (_, y1) in zip(web.points, web.points[1:])
                                       if r <= y1))))
    assert ks_fit(snapped, points("websearch")) < P_MIN


@pytest.mark.parametrize("name", list(HPCC))
def test_mean_is_the_integral_of_the_survival(name: str) -> None:
    """E[X] = integral of (1 - F); F is linear between points, so the trapezoid rule on
    the points is exact.  And the sample mean agrees within 3 standard errors."""
    pts = points(name)
    integral = sum((x1 - x0) * (1 - (y0 + y1) / 200) for (x0, y0), (x1, y1) in zip(pts, pts[1:]))
    assert BUILTIN[name].mean() == pytest.approx(integral, rel=1e-12)
    rng = random.Random(7)
    samples = [BUILTIN[name].sample(rng) for _ in range(N)]
    mean = sum(samples) / N
    sd = (sum((s - mean) ** 2 for s in samples) / (N - 1)) ** 0.5
    assert abs(mean - integral) < 3 * sd / N ** 0.5 + 1  # int() takes half a byte off


def test_percent_and_size_are_inverse() -> None:
    c = BUILTIN["fbhadoop"]
    for p in (0, 0.5, 1, 14.2, 50, 97.5, 99.99, 100):
        assert c.percent_at(c.size_at(p)) == pytest.approx(p)
    assert c.percent_at(-1) == 0 and c.percent_at(2e7) == 100


BAD = [
    ("0 0\n100 50\n90 100\n", 3, "size 90 is not above 100 on line 2"),
    ("0 0\n100 50\n200 50\n300 100\n", 3, "cumulative 50% is not above 50% on line 2"),
    ("0 0\n100 50\n200 97\n", 3, "the last point is at 97%"),
    ("0 0\nabc 50\n", 2, "size 'abc' is not a number"),
    ("0 0\n100 nan\n", 2, "cumulative 'nan' is not a number"),
    ("0 0\n100 inf\n", 2, "cumulative 'inf' is not a number"),
    ("0 0\n1_000 100\n", 2, "size '1_000' is not a number"),
    ("0 0\n100 50 7\n", 2, "expected 'size cumulative%', got 3 fields"),
    ("0 0\n100\n", 2, "got 1 field"),
    ("0 5\n100 100\n", 1, "the first point is at 5%"),
    ("0 0\n100 150\n", 2, "cumulative 150% is outside 0..100"),
    ("-5 0\n100 100\n", 1, "size -5 is outside"),
    ("0 0\n3000000000 100\n", 2, "size 3e+09 is outside 0..2147483648 bytes"),
    ("# a comment\n0 0\n\n50 60\n40 100\n", 5, "size 40 is not above 50 on line 4"),
    ("", 0, "no points"),
    ("# only comments\n\n", 0, "no points"),
]


@pytest.mark.parametrize("text,line,why", BAD)
def test_bad_file_names_file_and_line(tmp_path, text: str, line: int, why: str) -> None:
    path = tmp_path / "mine.cdf"
    path.write_text(text)
    with pytest.raises(WorkloadFileError) as e:
        cdf.load(str(path))
    assert e.value.path == str(path) and e.value.line == line
    assert why in e.value.why
    assert str(e.value).startswith(f"{path}:{line}: " if line else f"{path}: ")
    assert exit_code(e.value) == 2
    again = pickle.loads(pickle.dumps(e.value))
    assert (again.path, again.line, again.why) == (e.value.path, line, e.value.why)


def test_too_many_lines_stops_reading(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(cdf, "MAX_LINES", 5)
    path = tmp_path / "long.cdf"
    path.write_text("0 0\n" + "# more\n" * 100 + "10 100\n")
    with pytest.raises(WorkloadFileError, match=r":6: more than 5 lines"):
        cdf.read(str(path))


def test_long_line_and_bad_encoding(tmp_path) -> None:
    path = tmp_path / "wide.cdf"
    path.write_text("0 0\n" + "1" * (cdf.MAX_LINE + 1) + " 100\n")
    with pytest.raises(WorkloadFileError, match=rf":2: longer than {cdf.MAX_LINE} characters"):
        cdf.read(str(path))
    path.write_bytes(b"0 0\n10 \xff100\n")
    with pytest.raises(WorkloadFileError, match=r":2: not UTF-8 text"):
        cdf.read(str(path))


def test_a_huge_line_is_not_read_whole(tmp_path) -> None:
    """A file that is one enormous line is refused after reading ``MAX_LINE`` bytes of it."""
    path = tmp_path / "blob.cdf"
    path.write_bytes(b"7" * (50 << 20))
    with pytest.raises(WorkloadFileError, match=r":1: longer than"):
        cdf.read(str(path))


def test_names_and_unreadable_files(tmp_path) -> None:
    assert cdf.load("websearch") is BUILTIN["websearch"]
    with pytest.raises(UsageError, match=r"--workload websarch: neither a built-in workload "
                       r"\(websearch, fbhadoop, alistorage\) nor a file") as e:
        cdf.load("websarch")
    assert exit_code(e.value) == 1
    with pytest.raises(WorkloadFileError, match=r"Is a directory"):
        cdf.load(str(tmp_path))
