"""The ``roce`` entry point: a bug inside a command is one line on stderr and exit status 3,
not a traceback; ROCE_DEBUG=1 lets the traceback through."""

from __future__ import annotations

import pytest

from roce import cli
from roce.cli import stats


def _broken(args: object) -> int:
    raise ZeroDivisionError("division by zero")


def test_a_bug_is_one_line(monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("ROCE_DEBUG", raising=False)
    monkeypatch.setattr(stats, "run", _broken)
    assert cli.main(["stats", "x.pcap"]) == cli.INTERNAL_ERROR == 3
    err = capsys.readouterr().err
    assert err == ("roce stats: internal error: ZeroDivisionError: division by zero "
                   "(a bug; ROCE_DEBUG=1 shows the traceback)\n")


def test_roce_debug_shows_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCE_DEBUG", "1")
    monkeypatch.setattr(stats, "run", _broken)
    with pytest.raises(ZeroDivisionError):
        cli.main(["stats", "x.pcap"])


def test_the_reference_lists_every_command() -> None:
    """docs/guide/reference.md's command table names exactly the commands roce has."""
    from pathlib import Path

    from roce.cli import COMMANDS

    text = (Path(__file__).resolve().parent.parent / "docs" / "guide" / "reference.md").read_text()
    table = text.split("## Commands", 1)[1].split("##", 1)[0]
    listed = [line.split("`")[1].split()[1] for line in table.splitlines()
              if line.startswith("| `roce ")]
    assert sorted(listed) == sorted(COMMANDS)
