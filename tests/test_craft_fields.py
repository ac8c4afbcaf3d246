"""``roce craft --field NAME=VALUE`` over every field name the decoder knows (``roce decode -G
fields``), boundary and wrong-typed values, and every kind of frame craft builds (RoCEv2 over
IPv4 and IPv6, RoCEv1, VLAN-tagged, native InfiniBand with and without a GRH, each tunnel).

Each case either builds (exit 0) a frame that, decoded back by ``roce decode``, has the
field set as asked, or is refused (exit 1) in one line that names the field.  Never exit 3,
never a frame that silently lacks what was asked.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import io
import ipaddress
import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

import roce
from roce.cli import INTERNAL_ERROR, build_parser, exit_code
from roce.errors import RoceError
from roce.options import mac_bytes
from roce.packet import resolve_field

KINDS: dict[str, list[str]] = {
    "v2": [], "v2-ipv6": ["--ipv6"], "v1": ["--roce-version", "1"],
    "vlan": ["--vlan", "7"], "vlan-v1": ["--vlan", "7", "--roce-version", "1"],
    "ib": ["--link", "ib"], "ib-grh": ["--link", "ib", "--roce-version", "1"],
    "erspan2": ["--encap", "erspan2"], "erspan3": ["--encap", "erspan3"],
    "gre": ["--encap", "gre"], "vxlan": ["--encap", "vxlan", "--ipv6"],
}
# opcodes whose extended headers cover every layout: RETH, AtomicETH, AETH, AtomicAckETH,
# ImmDt, IETH, DETH, RDETH, XRCETH, FETH, the CNP's padding
OPCODES = ["rc-rdma-write-only", "rc-send-only-with-immediate", "rc-compare-swap",
           "rc-acknowledge", "rc-atomic-acknowledge", "rc-send-only-with-invalidate",
           "ud-send-only", "rd-send-only", "xrc-rdma-write-first", "rc-flush", "cnp",
           "rc-rdma-read-response-middle"]


@functools.cache
def _parser(command: str) -> argparse.ArgumentParser:
    return build_parser(command)


def _run(argv: list[str]) -> tuple[int, str, str]:
    """``roce ARGV`` in this process, as ``roce.cli.main`` runs it (a RoceError is its exit
    status, any other exception is exit 3), with each command's parser built once: most of
    a run's time is argparse building parsers."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            args = _parser(argv[0]).parse_args(argv)
            code = int(importlib.import_module(args._module).run(args) or 0)
        except SystemExit as exc:
            code = int(exc.code or 0)
        except RoceError as exc:
            print(f"roce {argv[0]}: {exc}", file=sys.stderr)
            code = exit_code(exc)
        except Exception as exc:  # what main reports as a bug
            print(f"internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
            code = INTERNAL_ERROR
    return code, out.getvalue(), err.getvalue()


def _field_names() -> list[str]:
    code, out, err = _run(["decode", "-G", "fields"])
    assert code == 0, err
    return out.split()


FIELDS = _field_names()
# names craft knows besides the decoder's: its aliases and short forms
ALIASES = ["dqpn", "psn", "va", "rkey", "msn", "qkey", "sqpn", "smac", "dmac", "sport", "imm",
           "ttl", "hlim", "src", "dst", "reserved", "syndrome", "icrc", "pad", "ipv6", "vlan",
           "payload_size", "opcode", "ecn", "dscp"]


def _values(bits: int) -> list[str]:
    """Boundary and wrong-typed values for a field of ``bits`` bits (or any field)."""
    top = (1 << bits) - 1
    return [str(top), hex(top + 1), "0", "1", "2", "-1", str(1 << 200), "true", "false",
            "10.0.0.9", "0.0.0.0", "fd00::9", "fe80::1:2", "02:00:00:00:00:09",
            "ff:ff:ff:ff:ff:ff", "::ffff:10.0.0.1", "zz", "0x", "1.5"]


WIDTHS = (1, 2, 3, 4, 8, 12, 13, 16, 20, 24, 32, 48, 64, 128)
VALUES = sorted({v for b in WIDTHS for v in _values(b)})


def _same(asked: str, got: object) -> bool:
    """Is the decoded value the value asked for?"""
    low = asked.lower()
    if isinstance(got, bool) or low in ("true", "false"):
        want = {"true": 1, "false": 0}.get(low)
        if want is None:
            want = int(asked, 0)
        return int(got) == want  # type: ignore[arg-type]
    if isinstance(got, int):
        try:
            return int(asked, 0) == got
        except ValueError:
            return False
    if isinstance(got, str):
        try:
            return ipaddress.ip_address(got) == ipaddress.ip_address(asked)
        except ValueError:
            pass
        try:
            return mac_bytes(got) == mac_bytes(asked)
        except ValueError:
            pass
        try:  # an address asked for as a number
            n = int(asked, 0)
        except ValueError:
            return False
        try:
            return int(ipaddress.ip_address(got)) == n
        except ValueError:
            return int.from_bytes(mac_bytes(got), "big") == n
    return False


def check(tmp: Path, opcode: str, kind: str, name: str, value: str) -> str:
    """Craft one frame with ``--field name=value``; check the outcome; return it."""
    path = tmp / "f.pcap"
    path.unlink(missing_ok=True)
    argv = ["craft", opcode, *KINDS[kind], "--field", f"{name}={value}", "-q", "-w",
            str(path)]
    code, _out, err = _run(argv)
    assert code in (0, 1), (argv, code, err)
    if code == 1:
        lines = err.strip().splitlines()
        assert len(lines) == 1, (argv, err)
        assert name in lines[0], (argv, err)
        assert not path.exists() or path.stat().st_size <= 24, argv  # nothing half written
        return "refused"
    assert err == "", (argv, err)
    code, out, err = _run(["decode", "-T", "jsonl", str(path)])
    assert code == 0, (argv, err)
    (record,) = [json.loads(line) for line in out.splitlines()]
    key = name if name in FIELDS else _decoder_name(opcode, kind, name)
    assert key in record, (argv, "the field is not in the frame", record)
    assert _same(value, record[key]), (argv, record[key])
    return "set"


def _decoder_name(opcode: str, kind: str, alias: str) -> str:
    """The decoder's name of the field a craft alias (``dqpn``, ``va``, ``src``) names in
    this frame: by ``roce.packet``'s naming rule (innermost header wins)."""
    flags = KINDS[kind]
    kw = {"ipv6": "--ipv6" in flags, "roce_version": 1 if "--roce-version" in flags else 2,
          "vlan": 7 if "--vlan" in flags else None}
    header, field = resolve_field(roce.craft(opcode, **kw).headers, alias)
    return header if header == field else f"{header}.{field}"


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fields")


def test_the_issue_cases(tmp: Path) -> None:
    assert check(tmp, "rc-send-only", "v2", "eth.src", "true") == "refused"
    assert check(tmp, "rc-send-only", "v1", "ipv6", "0") == "refused"
    assert check(tmp, "rc-send-only", "vlan", "vlan", "4294967295") == "refused"
    assert check(tmp, "rc-send-only", "vlan", "vlan.id", "4095") == "set"
    assert check(tmp, "rc-send-only", "v1", "grh.hoplmt", "7") == "set"
    assert check(tmp, "rc-send-only", "ib", "ip.ttl", "7") == "refused"  # no IP on IB
    assert check(tmp, "rc-send-only", "ib-grh", "grh.hoplmt", "7") == "set"
    assert check(tmp, "rc-send-only", "vxlan", "ipv6.hlim", "7") == "set"  # the inner one
    assert check(tmp, "rc-send-only", "vxlan", "outer.ip.ttl", "7") == "refused"


@pytest.mark.parametrize("name", FIELDS + ALIASES)
def test_every_field_name(tmp: Path, name: str) -> None:
    """Every name once in every kind of frame, with a value of a width its field may
    have (rotating), so that the names that can be set are set somewhere."""
    i = sum(map(ord, name))
    for j, kind in enumerate(KINDS):
        opcode = OPCODES[(i + j) % len(OPCODES)]
        value = ["1", "0", "02:00:00:00:00:09", "10.0.0.9", "fd00::9", "true"][(i + j) % 6]
        check(tmp, opcode, kind, name, value)


@settings(max_examples=examples(400), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(OPCODES), st.sampled_from(list(KINDS)),
       st.sampled_from(FIELDS + ALIASES), st.sampled_from(VALUES))
def test_any_field_any_value_any_frame(tmp: Path, opcode: str, kind: str, name: str,
                                       value: str) -> None:
    check(tmp, opcode, kind, name, value)
