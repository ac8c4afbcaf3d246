"""What a topology may be, checked before anything is built: the keys of a topology file, the
topology strings, the limits every topology meets, and what a network costs to build.

**The file** (``--topology-file``): ``FILE`` describes every key once -- its TOML type, the
parser of its value and what it means.  Values go through ``roce.options``' parsers, the
same definition the command line's option of that name uses (``rate`` is ``--rate``'s
``parse_link_rate``, a fault is ``--loss``'s ``parse_probability`` ...).  ``check`` walks a parsed
document against ``FILE`` and raises an ``InputError`` naming the file and the key of the
first problem (``net.toml: hosts.h1.ip: bad IPv4 address '10.0.0.300'``), then checks the
document as a whole: names are unique across hosts and switches, addresses are unique, link
ends exist, every host has exactly one link, no host sends to itself.
``roce.emu.net.topology.load`` builds from what it returns.  The guide's table of keys
(docs/guide/emulate.md) is held to ``FILE`` by a test.

**The strings** (``--topology``): ``parse_topology`` is the option's type: ``p2p``,
``incast:N``, ``dumbbell:N``, ``leafspine:L,S,H``, ``fattree:K``, their sizes checked by arithmetic
(``named_shape``) before one host exists.

**The limits**, whatever describes the topology: automatic addresses run from 10.0.0.1 to
10.0.255.250 (``MAX_AUTO_HOSTS``); a switch port's MAC holds the switch's number and the
port's number in 16 bits each (``MAX_SWITCHES``, ``MAX_PORTS``); and what it costs to
build -- the ``Shape``: hosts, switches, links, route entries -- is checked against the memory
budget (``roce.emu.budget``) by ``check_shape``.  Building is linear in hosts and links (a
host resolves every peer to its gateway; routes are one entry per switch and host it
reaches, computed by one search per switch that has hosts), so ``cost`` is a sum of per-item
costs.  The workload's flows (``check_flows``) are counted the same way, before a QP is made.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from roce import options
from roce.emu import budget
from roce.emu.net.stages import EcnConfig
from roce.errors import InputError, UsageError

TYPE_CHECKING = False  # typing's flag, without importing typing at start (docs/architecture.md)
if TYPE_CHECKING:
    from typing import Any

MAX_AUTO_HOSTS = 256 * 250  # 10.0.0.1 .. 10.0.255.250: hosts without an address of their own
MAX_SWITCHES = (1 << 16) - 1  # switches are numbered from 1 in 16 bits of their ports' MACs
MAX_PORTS = 1 << 16  # ports are numbered from 0 in 16 bits of their MACs
# patterns as text, compiled by re at first use (not at every start)
NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
NAME_RULE = "letters, digits, _ . -, at most 64, starting with a letter or digit"

# What building costs, in bytes of Python objects (measured with tracemalloc on this
# emulator, rounded up; tests/test_topology_files.py holds ``cost`` above what a build takes)
HOST_BYTES = 12_000  # NIC (its queues, pause state), Context, Device, neighbour table
SWITCH_BYTES = 8_000  # switch, buffer, forwarder (and its generator with spraying)
PORT_BYTES = 12_000  # a switch port: queues, accounts, PFC sender, RED marker and its RNG
LINK_BYTES = 14_000  # two wires, their faults and the faults' random generators
ROUTE_BYTES = 120  # one route entry: a switch toward one host
SPEC_BYTES = 600  # the description itself, per host or link (names, addresses, specs)


class Bad(ValueError):
    """One value is wrong: ``message`` says why, ``where`` extends the key (``[2]``)."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.where = where


# -- what a TOML value is, in words -----------------------------------------------------------


def describe(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:40]) + "..."
    if isinstance(value, (int, float)):
        text = str(value)
        return text if len(text) <= 40 else text[:40] + "..."
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"  # TOML dates and times


def _expected(what: str, value: Any) -> Bad:
    return Bad(f"expected {what}, found {describe(value)}")


# -- value kinds: a TOML value in, a checked value out ---------------------------------------


def _parsed(parse: Callable[[str], Any], value: Any) -> Any:
    try:
        return parse(value)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        raise Bad(str(exc)) from None


@dataclass(frozen=True)
class Key:
    """One key: ``what`` its value is (errors and the guide say it), ``meaning`` what it does,
    ``check`` turns the TOML value into the checked one (raising ``Bad``)."""

    what: str
    meaning: str
    check: Callable[[Any], Any]
    required: bool = False


def text_key(what: str, meaning: str, parse: Callable[[str], Any], *,
             numbers: bool = True, required: bool = False) -> Key:
    """A value an option parser reads: a string, or (``numbers``) a TOML number, read as
    its text (``rate = 25`` is ``rate = "25"``)."""
    def check(value: Any) -> Any:
        if isinstance(value, str):
            return _parsed(parse, value)
        if numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
            return _parsed(parse, repr(value) if isinstance(value, float) else str(value))
        raise _expected(what if numbers else f"{what} (a string)", value)

    return Key(what, meaning, check, required)


def flag_key(meaning: str) -> Key:
    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise _expected("true or false", value)
        return value

    return Key("true or false", meaning, check)


def _name(value: Any) -> str:
    if not isinstance(value, str):
        raise _expected("a name (a string)", value)
    if not re.fullmatch(NAME, value):
        raise Bad(f"{describe(value)} is not a name ({NAME_RULE})")
    return value


def name_key(meaning: str) -> Key:
    return Key("a name", meaning, _name, required=True)


def _frame_numbers(value: Any) -> frozenset[int]:
    if not isinstance(value, list):
        raise _expected("an array of frame numbers", value)
    out = set()
    parse = options.bounded_int(1, options.MAX_COUNT, "a frame number")
    for i, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, int):
            raise Bad(f"expected a frame number (an integer), found {describe(x)}", f"[{i}]")
        try:
            out.add(parse(str(x)))
        except argparse.ArgumentTypeError as exc:
            raise Bad(str(exc), f"[{i}]") from None
    return frozenset(out)


TIME = text_key("a time", "", options.parse_time)


def _window(value: Any) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise Bad(f"expected two times [start, end], found {describe(value)}"
                  + (f" of {len(value)}" if isinstance(value, list) else ""))
    ends = []
    for i, x in enumerate(value):
        try:
            ends.append(TIME.check(x))
        except Bad as exc:
            raise Bad(str(exc), f"[{i}]") from None
    if ends[0] > ends[1]:
        raise Bad(f"the window's start {ends[0]} ns is after its end {ends[1]} ns")
    return ends[0], ends[1]


def _filter_text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _expected("a display filter (a string)", value)
    return value


def ecn(text: str) -> EcnConfig:
    """``on`` (the defaults, scaled to each port's rate), ``off``, or ``KMIN,KMAX,PMAX``
    (sizes, and a probability); ArgumentTypeError otherwise (``--ecn`` and a switch's
    ``ecn``)."""
    t = text.strip().lower()
    if t == "on":
        return EcnConfig()
    if t == "off":
        return EcnConfig(enabled=False)
    parts = t.split(",")
    try:
        if len(parts) != 3:
            raise ValueError
        kmin, kmax = options.parse_size(parts[0]), options.parse_size(parts[1])
        pmax = options.parse_probability(parts[2])
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected KMIN,KMAX,PMAX (e.g. 100K,400K,0.2), on or off") from None
    if kmin > kmax:
        raise argparse.ArgumentTypeError(f"{text!r}: needs KMIN <= KMAX")
    return EcnConfig(kmin, kmax, pmax)


def parse_ecn_text(text: str) -> str:
    """``--ecn``'s type: the text, once ``ecn`` accepts it."""
    ecn(text)
    return text


# -- the file's description -------------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    """A TOML table with these keys (``extra``: its key names are names, each holding
    ``item``: ``[hosts.NAME]``)."""

    what: str
    keys: Mapping[str, Key | Table | Array] = field(default_factory=dict)
    item: Table | None = None  # for a table of named tables
    meaning: str = ""


@dataclass(frozen=True)
class Array:
    """An array of tables (``[[links]]``)."""

    what: str
    item: Table
    meaning: str = ""


PROBABILITY = "a probability"


def _fault(meaning: str) -> Key:
    return text_key(PROBABILITY, meaning, options.parse_probability)


FAULTS = Table("a table of faults", {
    "loss": _fault("probability a frame is lost"),
    "burst_p": _fault("Gilbert-Elliott: probability of going from the good state to the bad"),
    "burst_r": _fault("Gilbert-Elliott: probability of going from the bad state to the good"),
    "burst_loss": _fault("Gilbert-Elliott: loss probability in the bad state"),
    "reorder": _fault("probability a frame is delayed by up to reorder_jitter_ns"),
    "reorder_jitter_ns": text_key("a time", "the most a reordered frame is delayed",
                                  options.parse_time),
    "dup": _fault("probability a frame is duplicated"),
    "corrupt": _fault("probability a frame is corrupted"),
    "drop_nth": Key("an array of frame numbers", "drop these frames (1 is the first) of "
                    "this direction", _frame_numbers),
    "drop_acks_between": Key("two times [start, end]", "drop every ACK this direction "
                             "carries from start until end (virtual time)", _window),
    "drop_filter": Key("a display filter", "drop the frames it matches (roce decode -Y)",
                       _filter_text),
}, meaning="faults from a to b (LinkConfig's fields)")

HOST = Table("a table", {
    "ip": text_key("an IPv4 address", "the host's address (default: the next free one "
                   "from 10.0.0.1)", options.parse_ipv4_text, numbers=False),
})
SWITCH = Table("a table", {
    "buffer": text_key("a size", "shared buffer (default --buffer)", options.parse_size),
    "ecn": text_key("on, off or KMIN,KMAX,PMAX", "RED marking (default --ecn)", ecn,
                    numbers=False),
    "pfc": flag_key("PFC for the lossless class (default --pfc)"),
})
LINK = Table("a table", {
    "a": name_key("one end: a host or a switch"),
    "b": name_key("the other end"),
    "rate": text_key("a rate", "Gb/s (default --rate)", options.parse_link_rate),
    "delay": text_key("a time", "propagation delay (default --delay)", options.parse_time),
    "faults": FAULTS,
    "reverse_faults": Table(FAULTS.what, FAULTS.keys, meaning="faults from b to a (default: "
                            "those of faults)"),
})
TRAFFIC = Table("a table", {
    "src": name_key("the sending host"),
    "dst": name_key("the receiving host"),
})
FILE = Table("a table", {
    "hosts": Table("a table of hosts ([hosts.NAME])", item=HOST,
                   meaning="one table per host, by name"),
    "switches": Table("a table of switches ([switches.NAME])", item=SWITCH,
                      meaning="one table per switch, by name"),
    "links": Array("an array of links ([[links]])", LINK, "one table per link"),
    "traffic": Array("an array of flows ([[traffic]])", TRAFFIC,
                     "who sends to whom (default: --traffic, or a permutation)"),
})
# the faults' fields that are the link's own keys instead
LINK_OWN = {"rate_gbps": "rate", "delay_ns": "delay"}


def key_rows() -> list[tuple[str, str, str]]:
    """(key, what its value is, what it means) for every key a file may hold, as the guide's
    table lists them (``links.faults.loss``; a table described once: ``reverse_faults``
    holds ``faults``' keys)."""
    rows: list[tuple[str, str, str]] = []
    seen: dict[int, str] = {}

    def walk(table: Table, prefix: str) -> None:
        for k, v in table.keys.items():
            name = f"{prefix}.{k}" if prefix else k
            if isinstance(v, Key):
                rows.append((name, v.what + (" (required)" if v.required else ""), v.meaning))
                continue
            inner = v.item if isinstance(v, Array) or v.item is not None else v
            assert inner is not None
            if id(inner.keys) in seen:
                rows.append((name, v.what, f"{v.meaning}; the keys of {seen[id(inner.keys)]}"))
                continue
            rows.append((name, v.what, v.meaning))
            seen[id(inner.keys)] = f"`{name}`"
            walk(inner, name + (".NAME" if isinstance(v, Table) and v.item is not None else ""))

    walk(FILE, "")
    return rows


def key_table() -> str:
    """The guide's table of a topology file's keys (docs/guide/emulate.md; a test holds the
    page to it)."""
    lines = ["| key | value | meaning |", "|---|---|---|"]
    lines += [f"| `{k}` | {what} | {meaning} |" for k, what, meaning in key_rows()]
    return "\n".join(lines)


# -- checking a document ----------------------------------------------------------------------


def _check_table(spec: Table, value: Any, key: str) -> dict[str, Any]:
    """``value`` checked against ``spec``: the checked values by key (missing optional keys
    left out).  ``Bad`` is raised as ``_Located`` with the full key."""
    if not isinstance(value, dict):
        raise _Located(key, _expected(spec.what, value))
    if spec.item is not None:
        out = {}
        for name, body in value.items():
            if not re.fullmatch(NAME, name):
                raise _Located(key, Bad(f"{describe(name)} is not a name ({NAME_RULE})"))
            out[name] = _check_table(spec.item, body, f"{key}.{name}")
        return out
    out = {}
    for k, v in value.items():
        sub = f"{key}.{_key_text(k)}" if key else _key_text(k)
        spec_k = spec.keys.get(k)
        if spec_k is None:
            if spec.keys is FAULTS.keys and k in LINK_OWN:
                raise _Located(sub, Bad(f"the link's {LINK_OWN[k]} is the link's own key "
                                        f"({LINK_OWN[k]} = ...), not a fault"))
            raise _Located(sub, Bad("unknown key (expected one of: "
                                    f"{', '.join(spec.keys)})"))
        if isinstance(spec_k, Table):
            out[k] = _check_table(spec_k, v, sub)
        elif isinstance(spec_k, Array):
            if not isinstance(v, list):
                raise _Located(sub, _expected(spec_k.what, v))
            out[k] = [_check_table(spec_k.item, x, f"{sub}[{i}]") for i, x in enumerate(v)]
        else:
            try:
                out[k] = spec_k.check(v)
            except Bad as exc:
                raise _Located(sub + exc.where, exc) from None
    for k, spec_k in spec.keys.items():
        if isinstance(spec_k, Key) and spec_k.required and k not in out:
            raise _Located(f"{key}.{k}" if key else k, Bad(f"missing ({spec_k.what}: "
                                                            f"{spec_k.meaning})"))
    return out


def _key_text(k: str) -> str:
    return k if re.fullmatch(NAME, k) else repr(k)


MAX_MESSAGE = 200  # characters of a problem's description (a value may be megabytes)


class _Located(Exception):
    def __init__(self, key: str, bad: Bad) -> None:
        why = str(bad)
        if len(why) > MAX_MESSAGE:
            why = why[:MAX_MESSAGE] + "..."
        super().__init__(f"{key}: {why}")


@dataclass
class Checked:
    """A checked topology file: hosts (name -> address, in the file's order), switches (name
    -> their keys), links and traffic (checked keys), the host each link end is."""

    hosts: dict[str, str]
    switches: dict[str, dict[str, Any]]
    links: list[dict[str, Any]]
    traffic: list[tuple[str, str]]


def check(doc: Mapping[str, Any], path: str) -> Checked:
    """A parsed topology file checked against ``FILE`` and as a whole; ``InputError`` naming
    ``path`` and the key otherwise."""
    try:
        return _check(doc)
    except _Located as exc:
        raise InputError(f"{path}: {exc}") from None


def _check(doc: Mapping[str, Any]) -> Checked:
    d = _check_table(FILE, dict(doc), "")
    hosts: dict[str, dict[str, Any]] = d.get("hosts", {})
    switches: dict[str, dict[str, Any]] = d.get("switches", {})
    links: list[dict[str, Any]] = d.get("links", [])
    traffic: list[dict[str, Any]] = d.get("traffic", [])
    for name in switches:
        if name in hosts:
            raise _Located(f"switches.{name}", Bad(f"{name!r} is the name of a host too"))
    # addresses: the ones given are unique; the others are the next free automatic ones
    owner: dict[str, str] = {}
    for name, h in hosts.items():
        ip = h.get("ip")
        if ip is not None:
            if ip in owner:
                raise _Located(f"hosts.{name}.ip", Bad(f"{ip} is hosts.{owner[ip]}'s address "
                                                       "too"))
            owner[ip] = name
    addresses: dict[str, str] = {}
    k = 0
    for name, h in hosts.items():
        ip = h.get("ip")
        if ip is None:
            while True:
                if k >= MAX_AUTO_HOSTS:
                    raise _Located(f"hosts.{name}", Bad(
                        f"no automatic address left (10.0.0.1 .. {auto_ip(MAX_AUTO_HOSTS - 1)}"
                        " are taken): give it an ip"))
                ip = auto_ip(k)
                k += 1
                if ip not in owner:
                    break
        addresses[name] = ip
    degree: dict[str, int] = {}
    for i, ln in enumerate(links):
        for end in ("a", "b"):
            if ln[end] not in hosts and ln[end] not in switches:
                raise _Located(f"links[{i}].{end}", Bad(f"{ln[end]!r} is neither a host nor "
                                                        "a switch"))
        if ln["a"] == ln["b"]:
            raise _Located(f"links[{i}]", Bad(f"links {ln['a']} to itself"))
        for end in (ln["a"], ln["b"]):
            degree[end] = degree.get(end, 0) + 1
    for name in hosts:
        n = degree.get(name, 0)
        if n != 1:
            raise _Located(f"hosts.{name}", Bad(f"a host needs exactly one link, has {n} "
                                                f"link{'s' if n != 1 else ''}"))
    for name in switches:
        if degree.get(name, 0) > MAX_PORTS:
            raise _Located(f"switches.{name}", Bad(
                f"{degree[name]} links: a switch has at most {MAX_PORTS} ports"))
    if len(switches) > MAX_SWITCHES:
        raise _Located("switches", Bad(f"{len(switches)} switches: at most {MAX_SWITCHES}"))
    pairs = []
    for i, tr in enumerate(traffic):
        for end in ("src", "dst"):
            if tr[end] not in hosts:
                why = "a switch, not a host" if tr[end] in switches else "not a host"
                raise _Located(f"traffic[{i}].{end}", Bad(f"{tr[end]!r} is {why}"))
        if tr["src"] == tr["dst"]:
            raise _Located(f"traffic[{i}]", Bad(f"{tr['src']} sends to itself"))
        pairs.append((tr["src"], tr["dst"]))
    return Checked(addresses, switches, links, pairs)


def auto_ip(k: int) -> str:
    """The ``k``-th automatic address (from 0): 10.0.0.1 .. 10.0.0.250, 10.0.1.1 ..."""
    return f"10.0.{k // 250}.{k % 250 + 1}"


# -- shapes and what they cost ----------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """What building a network makes: ``ports`` are the link ends at switches, ``routes``
    the route entries (one per switch and host it reaches)."""

    hosts: int
    switches: int
    links: int
    ports: int
    routes: int

    def text(self) -> str:
        return (f"{self.hosts} hosts, {self.switches} switches, {self.links} links, "
                f"{self.routes} routes")


def cost(shape: Shape) -> int:
    """Bytes a network of this shape takes to describe and build."""
    return (shape.hosts * (HOST_BYTES + SPEC_BYTES) + shape.switches * SWITCH_BYTES
            + shape.ports * PORT_BYTES + shape.links * (LINK_BYTES + SPEC_BYTES)
            + shape.routes * ROUTE_BYTES)


KINDS = {"incast": 1, "dumbbell": 1, "leafspine": 3, "fattree": 1}
SYNTAX = ("expected p2p, incast:N, dumbbell:N, leafspine:L,S,H or fattree:K (positive "
          "integers)")
_NUMBERS = r"[1-9][0-9]{0,17}(?:,[1-9][0-9]{0,17})*"


def named(spec: str) -> tuple[str, list[int]]:
    """``incast:4`` -> ("incast", [4]); ValueError (saying what is expected) otherwise."""
    kind, _, arg = spec.partition(":")
    if kind not in KINDS or not re.fullmatch(_NUMBERS, arg):
        raise ValueError(SYNTAX)
    nums = [int(x) for x in arg.split(",")]
    if len(nums) != KINDS[kind]:
        raise ValueError(SYNTAX)
    return kind, nums


def named_shape(kind: str, nums: list[int]) -> Shape:
    """The shape of a named topology, by arithmetic (nothing is built)."""
    if kind == "incast":
        n = nums[0]
        return Shape(n + 1, 1, n + 1, n + 1, n + 1)
    if kind == "dumbbell":
        n = nums[0]
        return Shape(2 * n, 2, 2 * n + 1, 2 * n + 2, 2 * 2 * n)
    if kind == "fattree":
        # k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 cores, k/2 hosts per
        # edge: k^3/4 hosts and k^3/4 links in each tier; every switch routes to every host
        k = nums[0]
        half = k // 2
        hosts, switches = k * half * half, k * k + half * half
        return Shape(hosts, switches, 3 * hosts, hosts + 4 * hosts, switches * hosts)
    leaves, spines, per_leaf = nums
    hosts = leaves * per_leaf
    return Shape(hosts, leaves + spines, leaves * spines + hosts, 2 * leaves * spines + hosts,
                 (leaves + spines) * hosts)


def _limits(kind: str, nums: list[int], shape: Shape) -> str | None:
    """Why a named topology cannot be built whatever the memory, or None."""
    if kind == "fattree" and (nums[0] < 2 or nums[0] % 2):
        return f"K={nums[0]}: a k-ary fat tree has an even K of at least 2"
    if shape.hosts > MAX_AUTO_HOSTS:
        return (f"{shape.hosts} hosts: at most {MAX_AUTO_HOSTS} hosts (automatic addresses "
                f"10.0.0.1 .. {auto_ip(MAX_AUTO_HOSTS - 1)})")
    if shape.switches > MAX_SWITCHES:
        return f"{shape.switches} switches: at most {MAX_SWITCHES} switches"
    widest = {"incast": shape.hosts, "dumbbell": nums[0] + 1,
              "fattree": nums[0]}.get(kind) or max(nums[0], nums[1] + nums[2])
    if widest > MAX_PORTS:
        return f"a switch with {widest} ports: at most {MAX_PORTS} ports per switch"
    return None


def shape_error(shape: Shape) -> tuple[int, int] | None:
    """(bytes needed, bytes available) when building ``shape`` does not fit the budget."""
    need, have = cost(shape), budget.available()
    return (need, have) if need > have else None


def check_named(spec: str) -> None:
    """A topology string checked before it is built: UsageError naming ``--topology``."""
    if spec == "p2p":
        return
    try:
        kind, nums = named(spec)
    except ValueError as exc:
        raise UsageError(f"--topology {spec}: {exc}") from None
    shape = named_shape(kind, nums)
    why = _limits(kind, nums, shape)
    if why:
        raise UsageError(f"--topology {spec}: {why}")
    over = shape_error(shape)
    if over:
        need, have = over
        # the largest last number that fits (cost grows with it): a bound to state
        lo, hi = 0, nums[-1]
        step = 2 if kind == "fattree" else 1  # a fat tree's K is even
        while lo < hi:
            mid = (lo + hi + 1) // 2 // step * step
            if mid > lo and cost(named_shape(kind, [*nums[:-1], mid])) <= have:
                lo = mid
            else:
                hi = mid - 1 if mid > lo else lo
        last = {"incast": "N", "dumbbell": "N", "leafspine": "H", "fattree": "K"}[kind]
        raise UsageError(f"--topology {spec}: {shape.text()} would need {budget.human(need)} "
                         f"of memory to build, {budget.human(have)} is available here "
                         f"({last} at most {lo})")


def parse_topology(text: str) -> str:
    """``--topology``'s type: the text, once ``check_named`` accepts it."""
    try:
        check_named(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--topology ")) from None
    return text


def shape_of(t: Any) -> Shape:
    """The shape of a ``Topology`` (a file's, once checked): routes counted per connected
    group of switches (a switch reaches the hosts on switches it is linked to)."""
    parent: dict[str, str] = {s: s for s in t.switches}

    def root(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    ports = 0
    for ln in t.links:
        a_sw, b_sw = ln.a in parent, ln.b in parent
        ports += a_sw + b_sw
        if a_sw and b_sw:
            ra, rb = root(ln.a), root(ln.b)
            if ra != rb:
                parent[ra] = rb
    switches_in: dict[str, int] = {}
    for s in parent:
        r = root(s)
        switches_in[r] = switches_in.get(r, 0) + 1
    routes = sum(switches_in[root(sw)] for sw in t.leaf_of.values() if sw in parent)
    return Shape(len(t.hosts), len(t.switches), len(t.links), ports, routes)


def check_shape(shape: Shape, what: str) -> None:
    """UsageError when a network of ``shape`` does not fit the memory budget; ``what`` names
    where it comes from (a file, an option)."""
    over = shape_error(shape)
    if over:
        need, have = over
        raise UsageError(f"{what}: {shape.text()} would need {budget.human(need)} of memory "
                         f"to build, {budget.human(have)} is available here")


def flow_count(t: Any, traffic: str | None) -> int:
    """How many (source, destination) flows ``traffic`` makes on ``t`` (as
    ``roce.emu.net.runner.traffic_of`` chooses them), without listing them."""
    n = len(t.hosts)
    if traffic == "all-to-all":
        return n * (n - 1)
    if traffic == "permutation" or (traffic is None and not t.traffic):
        return n
    return len(t.traffic)


def flows_need(t: Any, traffic: str | None, qps: int, per_qp: int) -> int:
    """Bytes a run of the flows of ``traffic`` on ``t`` takes at most: ``qps`` QPs each
    costing ``per_qp`` bytes (``budget.per_qp``: with its frames in flight), the network
    itself and the interpreter."""
    return (budget.INTERPRETER + cost(shape_of(t))
            + flow_count(t, traffic) * qps * per_qp)


def check_flows(t: Any, traffic: str | None, qps: int, per_qp: int, where: str) -> None:
    """UsageError when ``flows_need`` does not fit the budget."""
    flows = flow_count(t, traffic)
    structure = cost(shape_of(t))
    have = budget.available()
    need = flows_need(t, traffic, qps, per_qp)
    if need <= have:
        return
    most = max(0, (have - budget.INTERPRETER - structure) // max(1, qps * per_qp))
    how = f"--traffic {traffic}" if traffic else "its traffic"
    raise UsageError(f"{where} with {how}: {flows} flows of {qps} QP(s) would need "
                     f"{budget.human(need)} of memory, {budget.human(have)} is available "
                     f"here (at most {most} flows with this --qps, --size and --count)")


__all__ = ["FAULTS", "FILE", "MAX_AUTO_HOSTS", "MAX_PORTS", "MAX_SWITCHES", "Bad", "Checked",
           "Shape", "auto_ip", "check", "check_flows", "check_named", "check_shape", "cost",
           "flows_need",
           "key_rows", "key_table", "ecn", "flow_count", "named", "named_shape",
           "parse_ecn_text", "parse_topology", "shape_of"]
