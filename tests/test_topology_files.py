"""Topology files and topology strings are checked before anything is built: every bad value,
type, name or size is one line naming the file and the key (or the option), exit 1 or 2,
never exit 3; and building a network costs memory linear in its hosts and links.

The cases are those of the issue "Untrusted peers and interrupted runs" (files and values the
tool builds from); the hypothesis fuzzer is tests/test_topology_fuzz.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_hostile_options import _limit, _peak_rss_mb, assert_one_line_error, run_here, run_limited
from test_topology_build import build_bytes

from roce.emu.fabric import LinkConfig
from roce.emu.net import schema, topology
from roce.errors import InputError
from roce.tomlfile import MAX_BYTES, MAX_NESTING
from roce.tomlfile import load as load_toml

RUN = ["--size", "4K", "--count", "2", "--no-progress", "-T", "json"]


def net_file(tmp: Path, h1: str = "", h2: str = "", sw: str = "", link0: str = "",
             link1: str = "", traffic: str = 'src = "h1"\ndst = "h2"', top: str = "",
             extra: str = "", whole: str | None = None) -> Path:
    """Two hosts on one switch, h1 -> h2, with lines added where a case puts its defect (or
    ``whole``, the file's whole text)."""
    path = tmp / "net.toml"
    if whole is not None:
        path.write_text(whole)
        return path
    path.write_text(f"""{top}
[hosts.h1]
{h1}
[hosts.h2]
{h2}
[switches.sw]
{sw}
[[links]]
a = "h1"
b = "sw"
{link0}
[[links]]
a = "h2"
b = "sw"
{link1}
[[traffic]]
{traffic}
{extra}
""")
    return path


def emulate_file(path: Path, *more: str):
    return run_here("emulate", "--topology-file", str(path), *RUN, *more)


# -- the cases, and their kin: one line naming the file and the key, exit 2 ---------


BAD_FILES = [
    (dict(h1='ip = "10.0.0.300"'), "hosts.h1.ip", "10.0.0.300"),
    (dict(h1='ip = "fe80::1"'), "hosts.h1.ip", "fe80::1"),
    (dict(h1="ip = 10"), "hosts.h1.ip", "string"),
    (dict(h1='ip = "10.0.0.7"', h2='ip = "10.0.0.7"'), "hosts.h2.ip", "hosts.h1"),
    (dict(link0='faults = { loss = "x" }'), "links[0].faults.loss", "'x'"),
    (dict(link0="faults = { loss = nan }"), "links[0].faults.loss", "nan"),
    (dict(link0="faults = { loss = -1 }"), "links[0].faults.loss", "-1"),
    (dict(link0="faults = { loss = inf }"), "links[0].faults.loss", "inf"),
    (dict(link0="faults = { dup = 1.5 }"), "links[0].faults.dup", "1.5"),
    (dict(link0="faults = { loss = true }"), "links[0].faults.loss", "found true"),
    (dict(link0="faults = { drop_nth = [0] }"), "links[0].faults.drop_nth[0]", "0"),
    (dict(link0="faults = { drop_nth = 5 }"), "links[0].faults.drop_nth", "array"),
    (dict(link0="faults = { drop_acks_between = [5, 1] }"), "links[0].faults.drop_acks_between",
     "5"),
    (dict(link0="faults = { drop_acks_between = [1] }"), "links[0].faults.drop_acks_between",
     "two"),
    (dict(link0='faults = { drop_filter = "bth.opcode ==" }'), "links[0].faults.drop_filter",
     "filter"),
    (dict(link0='faults = { drop_filter = "bth.opcde == 3" }'),
     "links[0].faults.drop_filter", "unknown field 'bth.opcde'"),
    (dict(link0="faults = { rate_gbps = 5 }"), "links[0].faults.rate_gbps", "rate"),
    (dict(link0="faults = { lose = 0.1 }"), "links[0].faults.lose", "unknown"),
    (dict(link0="faults = 0.1"), "links[0].faults", "table"),
    (dict(link0='reverse_faults = { corrupt = "often" }'), "links[0].reverse_faults.corrupt",
     "often"),
    (dict(link0='rate = "0"'), "links[0].rate", "'0'"),
    (dict(link0='rate = "fast"'), "links[0].rate", "fast"),
    (dict(link0='delay = "-1us"'), "links[0].delay", "-1us"),
    (dict(link0='rtae = "1G"'), "links[0].rtae", "unknown"),
    (dict(sw='pfc = "maybe"'), "switches.sw.pfc", "maybe"),
    (dict(sw='buffer = "lots"'), "switches.sw.buffer", "lots"),
    (dict(sw='buffer = "-1M"'), "switches.sw.buffer", "-1M"),
    (dict(sw='ecn = "1,2"'), "switches.sw.ecn", "1,2"),
    (dict(sw='ecn = "400K,100K,0.2"'), "switches.sw.ecn", "KMIN <= KMAX"),
    (dict(traffic='src = "h1"\ndst = "h1"'), "traffic[0]", "itself"),
    (dict(traffic='src = "h1"\ndst = "nobody"'), "traffic[0].dst", "nobody"),
    (dict(traffic='src = "h1"'), "traffic[0].dst", "missing"),
    (dict(traffic='src = "sw"\ndst = "h2"'), "traffic[0].src", "switch"),
    (dict(top="bogus = 1"), "bogus", "unknown"),
    (dict(whole="hosts = 5"), "hosts", "table"),
    (dict(whole="links = [1]"), "links[0]", "table"),
    (dict(whole="[[hosts]]"), "hosts", "table"),
    (dict(whole='[hosts.h1]\nip = 2024-01-01'), "hosts.h1.ip", "date"),
    (dict(extra='[[links]]\na = "h1"\nb = "nobody"'), "links[2].b", "nobody"),
    (dict(extra='[[links]]\na = "sw"\nb = "sw"'), "links[2]", "itself"),
    (dict(extra='[[links]]\na = "h1"\nb = "sw"'), "hosts.h1", "2 links"),
    (dict(extra="[hosts.h3]"), "hosts.h3", "0 links"),
    (dict(extra="[switches.h1]"), "switches.h1", "host"),
    (dict(extra='[hosts."a b"]'), "hosts", "'a b'"),
]


@pytest.mark.parametrize(("parts", "key", "word"), BAD_FILES,
                         ids=[f"{k}-{w}" for _p, k, w in BAD_FILES])
def test_bad_topology_files_name_file_and_key(tmp_path: Path, parts: dict[str, str], key: str,
                                              word: str) -> None:
    path = net_file(tmp_path, **parts)
    res = emulate_file(path)
    assert_one_line_error(res, (2,), f"{path}: {key}", word)


def test_load_raises_input_error_naming_the_key(tmp_path: Path) -> None:
    path = net_file(tmp_path, h1='ip = "10.0.0.300"')
    with pytest.raises(InputError, match=r"net\.toml: hosts\.h1\.ip: .*10\.0\.0\.300"):
        topology.load(str(path))


def test_an_automatic_address_skips_the_ones_given(tmp_path: Path) -> None:
    # h1 has no ip; h2 takes the first automatic one: h1 gets the next free address
    t = topology.load(str(net_file(tmp_path, h2='ip = "10.0.0.1"')))
    assert t.hosts == {"h1": "10.0.0.2", "h2": "10.0.0.1"}
    res = emulate_file(net_file(tmp_path, h2='ip = "10.0.0.1"'))
    assert res.returncode == 0, res.stderr


def test_a_drop_filter_in_a_file_drops_what_it_matches(tmp_path: Path) -> None:
    # h2 -> sw carries h2's ACKs: the one for message 1 is dropped, later ones cover it (the
    # filter is roce decode -Y's: its macros, rc.ack, too)
    path = net_file(tmp_path, link1='faults = { drop_filter = "rc.ack and aeth.msn == 1" }')
    res = emulate_file(path, "--count", "4")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["data_verified"]
    assert doc["link"]["h2->sw:1"]["filtered"] == 1
    assert doc["link"]["h1->sw:0"]["filtered"] == 0


def test_a_drop_filter_needs_a_compiler_in_python(tmp_path: Path) -> None:
    path = net_file(tmp_path, link0='faults = { drop_filter = "bth.psn == 3" }')
    with pytest.raises(InputError, match=r"links\[0\]\.faults\.drop_filter"):
        topology.load(str(path))
    t = topology.load(str(path), compile_filter=lambda text: (lambda fields: False))
    assert callable(t.links[0].faults["drop_filter"])


def test_every_link_fault_is_a_key() -> None:
    # a LinkConfig field the schema does not describe would be unreachable from a file;
    # ``fcs`` is not a fault but what the run's protocol checks (UET: the port's FCS)
    fields = set(LinkConfig.__dataclass_fields__) - {"rate_gbps", "delay_ns", "fcs"}
    assert set(schema.FAULTS.keys) == fields


def test_documented_keys_are_the_schema() -> None:
    """docs/guide/emulate.md's table of a topology file's keys is the schema's."""
    text = (Path(__file__).parent.parent / "docs/guide/emulate.md").read_text()
    table = text.split("<!-- topology-keys -->")[1].split("<!-- /topology-keys -->")[0]
    assert table.strip() == schema.key_table()


# -- nesting, size and bytes: the file itself ---------------------------------------------


@pytest.mark.parametrize("body", [
    "a = " + "[" * 5000 + "]" * 5000,
    "a = " + "{b = " * 5000 + "1" + "}" * 5000,
    "a = [" + "[" * 3000,  # not even closed
    ".".join(["a"] * 5000) + " = 1",  # dotted keys: no recursion in tomllib, but as deep
    "[" + ".".join(["t"] * 5000) + "]",
])
@pytest.mark.parametrize("where", ["topology-file", "grid"])
def test_deeply_nested_toml_is_an_input_error(tmp_path: Path, body: str, where: str) -> None:
    path = tmp_path / "deep.toml"
    path.write_text(body + "\n")
    argv = (["emulate", "--topology-file", str(path), *RUN] if where == "topology-file" else
            ["sweep", "--grid", str(path), "-o", str(tmp_path / "out.csv")])
    res = run_limited(*argv)
    assert_one_line_error(res, (2,), str(path), f"nested more than {MAX_NESTING}")


def test_nesting_inside_strings_and_comments_does_not_count(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    deep = "[" * 100
    path.write_text(f'a = "{deep}"\nb = \'{deep}\'\nc = """\n{deep}\n"""\n'
                    f"d = '''{deep}'''\n# {deep}\ne = \"\\\"{deep}\"\nf = [[1], [2]]\n"
                    f'g = """x""""\nh = {{ i = [{{ j = 1 }}] }}\n')
    doc = load_toml(str(path))
    assert doc["a"] == deep and doc["c"] == deep + "\n" and doc["g"] == 'x"'


@pytest.mark.parametrize(("content", "word"), [
    (b"\xff\xfe not utf-8", "UTF-8"),
    (b"a = 1\nb = \n", "not TOML"),
    (b"\x00" * 100, "not TOML"),
    (b"a = " + b"1" * 5000, "not TOML"),  # past int()'s digit limit
])
def test_undecodable_files_are_input_errors(tmp_path: Path, content: bytes, word: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    res = emulate_file(path)
    assert_one_line_error(res, (2,), str(path), word)


@pytest.mark.parametrize("path", ["/dev/zero", "{tmp}"])
def test_endless_or_odd_files_are_input_errors(tmp_path: Path, path: str) -> None:
    path = path.format(tmp=tmp_path)
    res = run_limited("emulate", "--topology-file", path, *RUN)
    assert_one_line_error(res, (2,), path)


def test_a_huge_value_is_named_in_a_short_line(tmp_path: Path) -> None:
    path = net_file(tmp_path, h1=f'ip = "{"9" * 1_000_000}"')
    res = emulate_file(path)
    assert_one_line_error(res, (2,), f"{path}: hosts.h1.ip", "bad IPv4 address")
    assert len(res.stderr) < 500


def test_an_oversized_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    with open(path, "w") as f:
        f.write("# " + "x" * (MAX_BYTES + 10) + "\n")
    res = emulate_file(path)
    assert_one_line_error(res, (2,), str(path), "larger than")


# -- topology strings: checked by --topology's own type, before anything is built -----------


@pytest.mark.parametrize(("spec", "word"), [
    ("ring:3", "expected"),
    ("incast:0", "expected"),
    ("incast:-1", "expected"),
    ("incast:1e3", "expected"),
    ("leafspine:2,2", "expected"),
    ("dumbbell:1000000", "64000 hosts"),
    ("incast:70000", "64000 hosts"),
    ("leafspine:33000,33000,1", "65535 switches"),
    ("leafspine:1,65534,3", "65536 ports"),
    ("incast:100000000", "64000 hosts"),
    ("leafspine:1,70000,1", "65535 switches"),
])
def test_bad_topology_strings_exit_1_naming_the_option(spec: str, word: str) -> None:
    res = run_limited("emulate", "--topology", spec, *RUN)
    assert_one_line_error(res, (1,), "--topology", spec, word)


def test_a_topology_too_big_for_memory_is_refused_by_the_budget(monkeypatch) -> None:
    from roce.emu import budget

    monkeypatch.setattr(budget, "available", lambda: 50 << 20)
    with pytest.raises(Exception) as exc:
        schema.parse_topology("leafspine:10,2,1000")
    msg = str(exc.value)
    assert "leafspine:10,2,1000" in msg and "memory" in msg and "available" in msg
    schema.parse_topology("leafspine:2,2,10")  # small enough


def test_incast_4000_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """Refused (a 12M buffer cannot carve reserves and headroom for 4001 ports) once its
    switch is built: that took 530 MB when building was quadratic in hosts, 134 MB now."""
    proc = subprocess.Popen([sys.executable, "-m", "roce", "emulate", "--topology",
                             "incast:4000", *RUN], stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, preexec_fn=_limit)
    peak_mb = _peak_rss_mb(proc)
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stderr.close()
    assert_one_line_error(subprocess.CompletedProcess([], proc.returncode, "", err), (1,),
                          "switch sw", "too small", "--buffer")
    assert 5 < peak_mb < 300, peak_mb


def test_dumbbell_million_is_refused_at_once() -> None:
    res = run_limited("emulate", "--topology", "dumbbell:1000000", *RUN)
    assert_one_line_error(res, (1,), "--topology", "dumbbell:1000000", "64000 hosts")


def test_all_to_all_flows_are_counted_by_the_budget() -> None:
    """leafspine:2,2,200 --traffic all-to-all passed the budget (it counted one flow), then
    died in MemoryError: 159600 flows are counted now, before anything is built."""
    res = run_limited("emulate", "--topology", "leafspine:2,2,200", "--traffic", "all-to-all",
                      "--size", "1M", "--count", "1", "--no-progress")
    assert_one_line_error(res, (1,), "--traffic all-to-all", "159600 flows", "memory")


def test_tap_ports_are_checked_against_the_topology(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for spec in ("sw:-1", "sw:+0", "sw: 0", "sw:3", "nobody:0", "sw", "sw:0x1"):
        res = run_here("emulate", "--topology", "incast:2", "--tap", spec, *RUN)
        assert_one_line_error(res, (1,), "--tap", spec)
    assert list(tmp_path.iterdir()) == []
    res = run_here("emulate", "--topology", "incast:2", "--tap", "sw:2", *RUN)
    assert res.returncode == 0, res.stderr


# -- the cost model ---------------------------------------------------------------------------


def test_the_cost_model_is_at_least_what_building_takes() -> None:
    """The budget's estimate of a network may be generous, never short."""
    for spec in ("incast:500", "dumbbell:300", "leafspine:6,3,40"):
        shape = schema.shape_of(topology.parse(spec))
        built = build_bytes(spec)
        assert built <= schema.cost(shape) < 3 * built, (spec, built)
