"""The dispatcher's parser: a usage error is one line naming the command that was being parsed
(``roce fuzz wire: error: ...``), never the top-level ``roce: error:``, whichever command and
sub-command it is, and whichever kind of error (an unknown option, a bad value, a missing
argument)."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from roce.cli import COMMANDS, build_parser, main


def _commands() -> list[list[str]]:
    """Every command path: ``[decode]``, ``[fuzz, wire]`` ..."""
    out = []
    for command in COMMANDS:
        top = build_parser(command)
        todo = [([command], p) for a in top._actions
                if isinstance(a, argparse._SubParsersAction)
                for name, p in a.choices.items() if name == command]
        while todo:
            prefix, parser = todo.pop()
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if not subs:
                out.append(prefix)
            for a in subs:
                todo += [([*prefix, name], p) for name, p in a.choices.items()]
    return out


PATHS = _commands()


def run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, err.getvalue()


def test_every_command_path_is_found() -> None:
    assert ["fuzz", "wire"] in PATHS and ["decode"] in PATHS and len(PATHS) >= len(COMMANDS)


@pytest.mark.parametrize("path", PATHS, ids=[" ".join(p) for p in PATHS])
def test_an_unknown_option_names_the_command(path: list[str]) -> None:
    code, err = run([*path, "--zz-no-such-option"])
    prog = "roce " + " ".join(path)
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: "), err
    assert lines[0].endswith(f"(see {prog} -h)"), err


WIRE = ["fuzz", "wire", "-i", "nosuchif0", "--target", "10.0.0.2", "--qpn", "0x11"]


def test_unrecognized_arguments_name_the_sub_command() -> None:
    code, err = run([*WIRE, "--bogus", "1"])
    assert (code, err) == (1, "roce fuzz wire: error: unrecognized arguments: --bogus 1 "
                              "(see roce fuzz wire -h)\n")
    code, err = run(["craft", "rc-send-only", "surplus"])
    assert (code, err) == (1, "roce craft: error: unrecognized arguments: surplus "
                              "(see roce craft -h)\n")


def test_fuzz_wire_takes_w_for_pcap(tmp_path) -> None:
    args = build_parser("fuzz").parse_args([*WIRE, "-w", str(tmp_path / "f.pcap")])
    assert args.pcap == str(tmp_path / "f.pcap")
    assert not hasattr(args, "_roce_parser")  # nothing of the parser leaks into the options
    # parsed, then refused by the environment (exit 2), not by the parser (exit 1)
    code, err = run([*WIRE, "-w", str(tmp_path / "f.pcap")])
    assert code == 2 and "nosuchif0" in err, err


def test_the_top_level_still_speaks_for_itself() -> None:
    code, err = run(["--zz"])
    assert code == 1 and err.startswith("roce: error: ") and "(see roce -h)" in err
    code, err = run(["nosuchcommand"])
    assert code == 1 and err.startswith("roce: error: "), err


def test_help_is_laid_out_to_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a parser lays nothing out (its formatters have a fixed width); help and usage
    still take the terminal's width (``COLUMNS``, as argparse reads it)."""
    texts = {}
    for columns in (60, 160):
        monkeypatch.setenv("COLUMNS", str(columns))
        parser = build_parser("emulate")
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        emulate = sub.choices["emulate"]
        texts[columns] = (emulate.format_help(), emulate.format_usage())
        assert not emulate._laying_out
    for narrow, wide in zip(texts[60], texts[160]):
        # the same words, laid out to each width: an option's help on one line when wide
        assert "".join(narrow.split()) == "".join(wide.split())
        assert len(narrow.splitlines()) > len(wide.splitlines())
        assert max(map(len, wide.splitlines())) > 100
