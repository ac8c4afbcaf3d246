"""``roce decode`` on selective repeat (docs/protocol.md, "Selective repeat (IRN) encoding"):
selective NAKs labelled in the one-line summary (fast and record paths) and the -V tree, the
``aeth.selective`` field for filters, -T fields and the columnar export, and its agreement
with what the emulator's responder sent."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_stats import ack, write_capture, write_only
from test_stats_spurious import sack

from roce.cli import main
from roce.headers import AETH_NAK, NAK_PSN_SEQUENCE_ERROR


def decode(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    capsys.readouterr()
    assert main(["decode", *map(str, argv)]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    return write_capture(tmp_path / "sr.pcap", [
        write_only(0), ack(0, msn=1),
        sack(1, 3),  # selective: MSN 3 is 2 ahead of the ePSN
        ack(1, AETH_NAK, NAK_PSN_SEQUENCE_ERROR, msn=1),  # go-back-N: MSN not ahead
        ack(1, AETH_NAK, 2, msn=3),  # another NAK code: never selective
        sack(0xFFFFFE, 2),  # ahead across the PSN wrap
    ])


SELECTIVE = "NAK PSN-sequence-error, selective: ePSN=1, PSN=3 out of order"


@pytest.mark.parametrize("record_path", [False, True], ids=["fast", "record"])
def test_one_line_names_the_epsn_and_the_out_of_order_psn(capsys, capture: Path,
                                                          record_path: bool) -> None:
    # A display filter sends every frame through the record decoder (summary.columns).
    argv = [capture, "-Y", "frame.number > 0"] if record_path else [capture]
    lines = decode(capsys, *argv)
    assert lines[2].endswith(f"PSN=1 {SELECTIVE}")
    assert lines[3].endswith("PSN=1 NAK PSN-sequence-error MSN=1")
    assert lines[4].endswith("PSN=1 NAK remote-access-error MSN=3")
    assert lines[5].endswith(
        "PSN=16777214 NAK PSN-sequence-error, selective: ePSN=16777214, PSN=2 out of order")
    assert lines[1].endswith("ACK MSN=1 credits=unlimited")


def test_the_tree_annotates_the_msn(capsys, capture: Path) -> None:
    out = "\n".join(decode(capsys, "-V", capture, "-Y", "frame.number in {3 4}"))
    assert ("        Message Sequence Number: 3 [selective NAK: PSN 3 arrived out of order, "
            "ePSN 1]") in out
    assert "        Message Sequence Number: 1\n" in out + "\n"


def test_filter_and_fields(capsys, capture: Path) -> None:
    got = decode(capsys, capture, "-Y", "aeth.selective", "-T", "fields", "-e",
                 "frame.number", "-e", "infiniband.aeth.selective", "-e", "aeth.msn")
    assert got == ["3\t1\t3", "6\t1\t2"]  # booleans as tshark writes them
    assert [x.split()[0] for x in decode(capsys, capture, "-Y", "aeth && !aeth.selective")] \
        == ["2", "4", "5"]


def test_columnar_column(tmp_path: Path, capture: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "p.parquet"
    assert main(["decode", str(capture), "-T", "parquet", "-w", str(out)]) == 0
    assert pq.read_table(out).column("aeth.selective").to_pylist() == [
        None, None, True, None, None, True]


def test_decode_shows_every_selective_nak_the_responder_sent(tmp_path: Path, capsys) -> None:
    """The per-packet rule (``flowrules.selective_aeth``) finds all of them; ``roce stats``
    (flow context) may count the first one of a flow, before any ACK, as a sequence NAK."""
    from test_emu_selective import _frames_of, _sr_capture

    from roce.analysis.flows import analyse

    path = tmp_path / "sr.pcap"
    p = _sr_capture(path)  # the reverse direction is lossless
    sent = p.qb.core.counters.sacks_sent
    assert sent > 5
    assert len(decode(capsys, path, "-Y", "aeth.selective")) == sent
    r = analyse(_frames_of(path))
    assert sent - 1 <= r.totals["selective_naks"] <= sent
