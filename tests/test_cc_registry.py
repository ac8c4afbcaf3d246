"""Adding a congestion-control algorithm is one class and one registry row
(docs/architecture.md, "Where a change goes"): a toy algorithm added that way is offered by
``--cc``, described by its help, configured with its own profile and knobs, and drives the
emulated NICs, with nothing else edited."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from roce import cli
from roce.emu.cc import algorithms
from roce.emu.cc.base import CongestionControl, Output
from roce.emu.cc.params import Param
from roce.errors import UsageError


class Fraction(CongestionControl):
    """Sends at ``share`` x line rate from the first packet on."""

    name = "fraction"
    summary = "a fixed share of line rate"
    PARAMS = {p.name: p for p in (
        Param("share", "", "of line rate, held whatever happens", 0.01, 1.0, integer=False),)}
    PROFILES = {"half": {"share": 0.5}, "quarter": {"share": 0.25}}

    __slots__ = ()

    def __init__(self, params, line_rate_bps: float, now: int = 0) -> None:
        super().__init__(params, line_rate_bps, now)
        self.rate = self.line_rate * self.params["share"]

    def on_ack(self, now: int, rtt_ns: int, acked: int = 0) -> Output:
        return self.output()


@pytest.fixture
def toy() -> Iterator[type[CongestionControl]]:
    algorithms.register(Fraction)  # the one row
    yield Fraction
    del algorithms.ALGORITHMS["fraction"]


def _emulate(capsys, *extra: str) -> dict:
    code = cli.main(["emulate", "--topology", "incast:1", "--op", "write", "--size", "256K",
                     "--count", "2", "--seed", "1", "-T", "json", *extra])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def test_a_registered_algorithm_is_offered_and_described(toy, capsys) -> None:
    parser = cli.build_parser("emulate")
    with pytest.raises(SystemExit):
        parser.parse_args(["emulate", "-h"])
    text = " ".join(capsys.readouterr().out.split())
    assert "fraction (a fixed share of line rate)" in text
    assert "fraction: half/quarter" in text  # --cc-profile's help lists its profiles


def test_the_toy_algorithm_drives_the_nics(toy, capsys) -> None:
    none = _emulate(capsys)
    half = _emulate(capsys, "--cc", "fraction")
    quarter = _emulate(capsys, "--cc", "fraction", "--cc-profile", "quarter")
    assert none["data_verified"] and half["data_verified"] and quarter["data_verified"]
    # one sender through one switch: at a fixed share of line rate the run takes about as
    # much longer as that share is smaller
    assert 1.8 < half["virtual_ns"] / none["virtual_ns"] < 2.1
    assert 1.8 < quarter["virtual_ns"] / half["virtual_ns"] < 2.1
    knob = _emulate(capsys, "--cc", "fraction", "--cc-param", "share=0.25")
    assert knob["virtual_ns"] == quarter["virtual_ns"]


def test_its_knobs_are_checked_by_the_shared_parameter_rules(toy) -> None:
    with pytest.raises(UsageError, match="share"):
        algorithms.configure("fraction", overrides=["share=2"])
    with pytest.raises(UsageError, match="registered already"):
        algorithms.register(type("Other", (CongestionControl,), {"name": "fraction"}))
    # a class without a name of its own would take its base's
    with pytest.raises(UsageError, match="Unnamed: the class sets no name of its own"):
        algorithms.register(type("Unnamed", (Fraction,), {}))
    # a slot declared again would hide the interface's from the NIC, which reads its own
    with pytest.raises(UsageError, match="'windowed': its __slots__ declare rate, window "
                                         "again"):
        algorithms.register(type("Windowed", (Fraction,), {
            "name": "windowed", "__slots__": ("window", "cwnd", "rate")}))
    assert "windowed" not in algorithms.ALGORITHMS


def test_unregistered_names_are_refused_with_the_registry_listed() -> None:
    with pytest.raises(UsageError, match="none, dcqcn, timely, dctcp, swift, hpcc, nscc, rccc$"):
        algorithms.configure("fraction")


def test_rows_name_the_classes_they_load() -> None:
    """A row's name is its class's: the registry imports the module on first use and
    refuses a row that names the class otherwise."""
    names = list(algorithms.ALGORITHMS)
    assert names[:2] == ["none", "dcqcn"] and len(names) == len(set(names))
    for name, cls in algorithms.ALGORITHMS.items():
        assert cls.name == name and cls.__module__.startswith("roce.emu.cc.")
    wrong = algorithms._Registry([("dctcp", "dcqcn", "Dcqcn")])
    assert "dctcp" in wrong and list(wrong) == ["dctcp"]
    with pytest.raises(RuntimeError, match="its class says 'dcqcn'"):
        wrong["dctcp"]
