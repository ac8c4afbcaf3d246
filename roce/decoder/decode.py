"""``roce decode``: a tshark-style capture decoder for RoCE.

::

    roce decode capture.pcap                       one line per packet
    roce decode -V -c 3 capture.pcap               full header tree
    roce decode -Y 'nak or rnr' capture.pcap       display filter (macros, opcode names)
    roce decode -T fields -e bth.psn -e reth.va f  tab-separated fields (also json/jsonl/csv)

Three paths produce the output.  The one-line path (no ``-Y``, no ``-T``, no ``-V``) scans
frames a batch at a time with ``roce.fast.scan`` and formats lines straight from its
columns (``summary.Summarizer.fast_lines``); nothing per header becomes a Python object.
``-T json`` / ``jsonl`` and ``-V`` without ``-Y`` go through ``decode_text``: a good frame's
JSON object or tree is written as text by code generated per header chain
(``_compile_json``, ``_compile_tree``) from the values it reads, with no dict and no
record.  Every other mode (and every frame that is not a whole RoCE packet) goes through
``decode_frames``, which yields one ``Record`` per frame with the flat field dict
(``bth.psn``, ``reth.va``...) that filters, writers, the summary and the tree read; for
good frames that dict comes from a decoder generated per header chain (``_compile_plan``).
The three generated functions come from one reading of the layouts (``_plan_source``).

``decode_frames`` is also the reusable API (``roce sniff`` feeds it live frames).

Exit status: 0 when the capture was read (malformed packets inside are reported, not
fatal), 1 for bad usage or a bad filter, 2 when the input is not a readable capture.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from roce import fast
from roce.codecache import compiled
from roce.errors import DecodeError, NotRoCE
from roce.families.base import fields, macctrl
from roce.headers import (
    LAYOUTS,
    NAK_CODES,
    SIZE_OF,
    SYNDROME_TYPE_SHIFT,
    SYNDROME_VALUE_MASK,
    selective_aeth,
)
from roce.locate import (
    L3_GRH,
    L3_IPV4,
    L3_IPV6,
    LINKTYPE_ETHERNET,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    OK,
    ROCE_PORT,
    Walk,
    explain,
    is_malformed,
    macc_offset,
)
from roce.opcodes import OPCODES, Operation, Transport, lookup
from roce.packet import Packet, parse
from roce.pcapio import Frame

NS = 1_000_000_000
BATCH = 2048  # frames per fast-path batch: big enough to amortise, small enough to stream
PIPE_BATCH = 64  # from a pipe, frames trickle in: do not wait for 2048 of them

Headers = dict[str, dict[str, Any]]

# -- records ------------------------------------------------------------------------------------

_SINGLE = fields.SINGLE_FIELD
_KEYS = fields.FLAT_KEYS
header_fields = fields.header_fields


class Record:
    """One decoded frame.

    ``kind`` is ``"roce"`` (decoded), ``"truncated"`` (cut by the capture's snaplen),
    ``"malformed"`` (claims RoCE, breaks a rule; ``error`` says which) or ``"other"``
    (not RoCE; ``error`` is the ``NotRoCE`` saying why).  ``fields`` is the flat dict of
    ``Packet.fields()`` plus ``frame.*`` facts, ``malformed`` / ``truncated`` messages and
    Wireshark's either-direction fields (``ip.addr``, ``udp.port``); ``layers`` names the
    headers found, in wire order.  ``headers`` (one dict per header) and ``packet`` (a
    ``roce.Packet``) are made on first use.
    """

    __slots__ = ("number", "ts_ns", "rel_ns", "delta_ns", "frame", "walk", "layers", "fields",
                 "error", "kind", "udp_port", "columns", "_headers", "_packet",
                 "family", "decoded", "outer")

    def __init__(self, number: int, ts_ns: int, rel_ns: int, delta_ns: int, frame: Frame,
                 walk: Walk, layers: tuple[str, ...], fields: dict[str, Any],
                 error: DecodeError | NotRoCE | None, kind: str, udp_port: int,
                 headers: Headers | None = None) -> None:
        self.number = number
        self.ts_ns = ts_ns
        self.rel_ns = rel_ns
        self.delta_ns = delta_ns
        self.frame = frame
        self.walk = walk
        self.layers = layers
        self.fields = fields
        self.error = error
        self.kind = kind
        self.udp_port = udp_port
        self.columns: dict[str, Any] | None = None  # summary columns, when an output wants them
        self._headers = headers
        self._packet: Packet | None = None
        # set by roce.decoder.records: the family that decoded it, what it decoded, and
        # the tunnel layers around it
        self.family: Any = None
        self.decoded: Any = None
        self.outer: Any = None

    @property
    def headers(self) -> Headers:
        """The decoded headers, one dict of field values per header, in wire order."""
        if self._headers is None:
            self._headers = _regroup(self.fields, self.layers)
        return self._headers

    @property
    def packet(self) -> Packet | None:
        """The frame as a ``roce.Packet`` (partial for truncated frames); None if the frame
        is not RoCE or is malformed."""
        if self._packet is None and self.kind in ("roce", "truncated"):
            try:
                self._packet = parse(self.frame[0], self.frame[4], self.udp_port,
                                     partial=True)
            except (DecodeError, NotRoCE):
                return None
        return self._packet

    @property
    def message(self) -> str | None:
        """Why the frame is not a whole RoCE packet (None when it is)."""
        return None if self.error is None else str(self.error)

    def __repr__(self) -> str:
        return f"<Record {self.number} {self.kind} {self.fields.get('bth.opcode')}>"


_FIELD_NAMES = {name: tuple(f.name for f in lay.fields) for name, lay in LAYOUTS.items()}
_FIELD_NAMES["vlan2"] = _FIELD_NAMES["vlan"]


def _regroup(fields: Mapping[str, Any], layers: Iterable[str]) -> Headers:
    h: Headers = {}
    for name in layers:
        single = _SINGLE.get(name)
        if single is not None:
            h[name] = {single: fields[name]}
            continue
        h[name] = {n: fields[k] for n, k in zip(_FIELD_NAMES[name], _KEYS[name])}
    if "ip.options" in fields:
        h["ip"]["options"] = fields["ip.options"]
    return h


# -- the flat decoder of a good RoCE frame ---------------------------------------------------
# A frame's fields are decided by its header chain: link type, VLAN tags, network layer and
# opcode.  For each chain seen, straight-line Python is generated from LAYOUTS (the way
# roce.headers compiles its codecs): two struct reads (link and network layer from byte 0;
# UDP, BTH and extended headers from the UDP header on) split the headers into byte-aligned
# words, each field is a shift and mask of a small word, and the flat dict is one dict
# display.  Reading a header as one 160-bit integer would make every field a big-integer
# shift, which costs three times as much.  Values are exactly those of roce.headers
# (tests compare with Packet.fields()).

_L2 = {LINKTYPE_ETHERNET: "eth", LINKTYPE_LINUX_SLL: "sll", LINKTYPE_LINUX_SLL2: "sll2"}
_L3 = {L3_IPV4: "ip", L3_IPV6: "ipv6", L3_GRH: "grh"}
_PAIRS = fields.PAIRS
_SYNDROME_KEYS = ("aeth.syndrome.credit_count", "aeth.syndrome.timer",
                  "aeth.syndrome.reserved_value", "aeth.syndrome.error_code")
_WORD = {1: "B", 2: "H", 4: "I", 8: "Q"}
# What aeth.selective is decided from (headers.selective_aeth): kept in locals.
_SELECTIVE_FROM = ("aeth.syndrome", "aeth.msn", "bth.psn")


class _Plan(NamedTuple):
    decode: Callable[..., dict[str, Any]]
    layers: tuple[str, ...]


class _Segment(NamedTuple):
    start: int  # byte offsets in the header
    end: int
    fields: tuple[Any, ...]  # roce.headers.Field
    raw: bool  # read as bytes (addresses, odd sizes)


def _segments(base: str) -> list[_Segment]:
    """Split a header into the words struct reads: fields sharing bytes share a word; a
    word of odd size joins its neighbour when together they make 2, 4 or 8 bytes."""
    segs: list[list[Any]] = []
    for f in LAYOUTS[base].fields:
        first, end = f.bit_offset // 8, (f.bit_offset + f.bits + 7) // 8
        if f.kind != "addr" and segs and not segs[-1][3] and first < segs[-1][1]:
            segs[-1][1] = max(segs[-1][1], end)
            segs[-1][2].append(f)
        else:
            segs.append([first, end, [f], f.kind == "addr"])
    merged: list[list[Any]] = []
    for seg in segs:
        prev = merged[-1] if merged else None
        if (not seg[3] and seg[1] - seg[0] not in _WORD and prev is not None and not prev[3]
                and seg[1] - prev[0] in _WORD):
            prev[1] = seg[1]
            prev[2] += seg[2]
        else:
            merged.append(seg)
    return [_Segment(a, e, tuple(fs), raw or e - a not in _WORD) for a, e, fs, raw in merged]


def _address_memo(convert: Callable[[int], str]) -> tuple[dict[bytes, str],
                                                           Callable[[bytes], str]]:
    """(cache, fill) keyed by the address bytes: frames repeat a few addresses, so each
    is converted once."""
    cache: dict[bytes, str] = {}

    def fill(raw: bytes) -> str:
        if len(cache) > 65536:
            cache.clear()
        text = cache[raw] = convert(int.from_bytes(raw, "big"))
        return text

    return cache, fill


_MEMOS: dict[Callable[..., str], tuple[dict[bytes, str], Callable[[bytes], str]]] = {}


class _Source(NamedTuple):
    """A header chain's decoder as source pieces, from which the flat dict's function and
    the ``-T json`` and ``-V`` texts' functions are generated: one reading of the layouts."""
    env: dict[str, Any]
    body: list[str]  # the statements that read the words and set the locals
    items: list[tuple[str, str, str]]  # (flat key, expression, kind) in the dict's order
    selective: str | None  # the condition for aeth.selective (added when true)
    options: bool  # IPv4: ip.options follows when the header is longer than 20 bytes
    layers: tuple[str, ...]
    name: str


def _plan_source(linktype: int, vlans: int, l3_kind: int, opcode: int) -> _Source:
    env: dict[str, Any] = {"_B": (False, True), "NS": NS, "from_bytes": int.from_bytes,
                           "icrc_of": fast.icrc_of, "_SYN": _SYNDROME_KEYS,
                           "_SEL": selective_aeth}
    # kinds (output.json_member's): "int", "float", "bool", "true" (a constant True), "str",
    # "pair:K1:K2" (a tuple of two locals)
    items = [("frame.number", "number", "int"), ("frame.time_epoch", "ts / NS", "float"),
             ("frame.time_relative", "rel / NS", "float"),
             ("frame.time_delta", "delta / NS", "float"), ("frame.len", "origlen", "int"),
             ("frame.cap_len", "caplen", "int")]
    pre: list[str] = []  # statements after the struct reads
    layers: list[str] = []
    local: dict[str, str] = {}  # flat key -> local variable holding the value
    kinds: dict[str, str] = {}  # flat key -> kind, for the pairs
    groups: list[tuple[list[str], list[str]]] = [([], []), ([], [])]  # (format, vars)

    def header(name: str, group: int) -> None:
        base = "vlan" if name == "vlan2" else name
        layers.append(name)
        fmt, names = groups[group]
        single = _SINGLE.get(name)
        if single is None:
            items.append((name, "True", "true"))
        pair = _PAIRS.get(name, ())
        keys = dict(zip((f.name for f in LAYOUTS[base].fields), _KEYS[name]))
        for seg in _segments(base):
            var = f"s{sum(len(g[1]) for g in groups)}"
            size = seg.end - seg.start
            fmt.append(f"{size}s" if seg.raw else _WORD[size])
            names.append(var)
            for fld in seg.fields:
                key = keys[fld.name]
                if fld.kind == "addr":
                    memo = _MEMOS.get(fld.decode)  # type: ignore[arg-type]
                    if memo is None:
                        memo = _MEMOS[fld.decode] = _address_memo(fld.decode)  # type: ignore
                    env[f"C{var}"], env[f"F{var}"] = memo
                    pre.append(f"{var} = C{var}.get({var}) or F{var}({var})")
                    expr, kind = var, "str"
                else:
                    word = f"from_bytes({var}, 'big')" if seg.raw else var
                    shift = (seg.end * 8) - fld.bit_offset - fld.bits
                    expr = word if shift == 0 and fld.bits == size * 8 else (
                        f"(({word} >> {shift}) & {fld.mask:#x})" if shift else
                        f"({word} & {fld.mask:#x})")
                    kind = "int"
                    if fld.kind == "bool":
                        expr, kind = f"_B[{expr}]", "bool"
                if fld.name in pair or key in _SELECTIVE_FROM:
                    loc = local[key] = f"x{len(local)}"
                    pre.append(f"{loc} = {expr}")
                    expr = loc
                kinds[key] = kind
                items.append((name if single else key, expr, kind))

    l2 = _L2.get(linktype)
    if l2 is not None:
        header(l2, 0)
        for i in range(vlans):
            header(fields.VLAN_NAMES[i], 0)
    l3 = _L3[l3_kind]
    header(l3, 0)
    if l3 != "grh":
        header("udp", 1)
    header("bth", 1)
    for name in OPCODES[opcode].headers:
        header(name, 1)
    if "aeth" in layers:
        syn = local["aeth.syndrome"]
        kind = f"({syn} >> {SYNDROME_TYPE_SHIFT}) & 3"
        pre.append(f"k = {kind}")
        items += [("aeth.syndrome.reserved", f"{syn} >> 7", "int"),
                  ("aeth.syndrome.opcode", "k", "int"),
                  ("_SYN[k]", f"{syn} & {SYNDROME_VALUE_MASK}", "int")]
    v1 = l3 == "grh"
    items += [("payload.len", "w.pad_off - w.payload_off", "int"),
              ("roce.version", str(1 if v1 else 2), "int"), ("roce", "True", "true"),
              (f"roce.v{1 if v1 else 2}", "True", "true"), ("icrc", "stored", "int"),
              ("icrc.valid", "icrc_of(data, w) == stored", "bool")]
    for name, (first, second, both) in _PAIRS.items():
        if name in layers:
            a, b = f"{name}.{first}", f"{name}.{second}"
            items.append((both, f"({local[a]}, {local[b]})", f"pair:{kinds[a]}:{kinds[b]}"))
    body = []
    for i, (fmt, names) in enumerate(groups):
        env[f"U{i}"] = struct.Struct("!" + "".join(fmt)).unpack_from
        start = "0" if i == 0 else ("w.bth_off" if v1 else "w.udp_off")
        body.append(f"{', '.join(names)}, = U{i}(data, {start})")
    body += [*pre, "stored = from_bytes(data[w.icrc_off:w.l4_end], 'big')"]
    selective = (f"_SEL({local['aeth.syndrome']}, {local['bth.psn']}, {local['aeth.msn']})"
                 if "aeth" in layers else None)
    return _Source(env, body, items, selective, l3 == "ip", tuple(layers),
                   f"{linktype}/{vlans}/{l3}/{opcode:#x}")


def _key_source(key: str) -> str:
    """A flat key as a dict display's key: a literal, or the expression that picks it (the
    syndrome value's name, ``_SYN[k]``)."""
    return key if key.startswith("_SYN[") else repr(key)


def _compile_plan(linktype: int, vlans: int, l3_kind: int, opcode: int) -> _Plan:
    src = _plan_source(linktype, vlans, l3_kind, opcode)
    lines = ["def decode(data, w, number, ts, rel, delta, origlen, caplen):"]
    lines += [f"    {stmt}" for stmt in src.body]
    lines.append("    f = {" + ", ".join(f"{_key_source(k)}: {e}" for k, e, _ in src.items)
                 + "}")
    if src.selective is not None:  # present only when true, as Wireshark's analysis flags
        lines += [f"    if {src.selective}:", "        f['aeth.selective'] = True"]
    if src.options:
        lines += [f"    if w.l3_len > {SIZE_OF['ip']}:",
                  f"        f['ip.options'] = data[w.l3_off + {SIZE_OF['ip']}:"
                  "w.l3_off + w.l3_len]"]
    lines.append("    return f")
    text = "\n".join(lines) + "\n"
    env = src.env
    exec(compiled(text, f"<roce.decoder.decode plan {src.name}>", __name__), env)
    return _Plan(env["decode"], src.layers)


def _compile_json(linktype: int, vlans: int, l3_kind: int, opcode: int) -> Callable[..., str]:
    """The ``-T json`` text of a good frame of this header chain, straight from the words
    its decoder reads: what ``json.dumps(output.json_object(record))`` writes for the
    record ``decode_frames`` makes of it (the members' texts are ``output.json_member``'s;
    tests/test_decode_text.py holds the two to it), without the dict and the record."""
    from roce.decoder import output

    src = _plan_source(linktype, vlans, l3_kind, opcode)
    env = src.env
    env.update(output.JSON_ENV)
    env["_SYNJ"] = tuple(output.json_key(k) for k in _SYNDROME_KEYS)
    pieces = []
    for key, expr, kind in src.items:
        if key == "frame.len":  # json_object puts the exact arrival time before it
            pieces.append(output.json_member("frame.time_ns", "ts", "int"))
        if key.startswith("_SYN["):  # the syndrome value's name depends on its type
            pieces.append(f"{{_SYNJ[k]}}{output.json_member(None, expr, kind)}")
            continue
        pieces.append(output.json_member(key, expr, kind))
    lines = ["def json_text(data, w, number, ts, rel, delta, origlen, caplen):"]
    lines += [f"    {stmt}" for stmt in src.body]
    lines.append(f"    t = f'''{{{{{', '.join(pieces)}'''")
    if src.selective is not None:
        member = output.json_member("aeth.selective", "True", "true")
        lines += [f"    if {src.selective}:", f"        t += f''', {member}'''"]
    if src.options:
        member = output.json_member("ip.options",
                                    f"data[w.l3_off + {SIZE_OF['ip']}:w.l3_off + w.l3_len]",
                                    "bytes")
        lines += [f"    if w.l3_len > {SIZE_OF['ip']}:", f"        t += f''', {member}'''"]
    lines.append("    return t + '}'")
    text = "\n".join(lines) + "\n"
    exec(compiled(text, f"<roce.decoder.decode json {src.name}>", __name__), env)
    return env["json_text"]  # type: ignore[no-any-return]


# (header, RoCEv1) -> its bytes -> its block of the tree: the blocks of the link, network and
# UDP headers, and BTH's but for the PSN, depend on those bytes alone (and BTH's on the
# InfiniBand node's title, RoCEv1 or v2, above it), and a capture's frames repeat them (a few
# hosts, ports, lengths and QPs), so each is written once (``_compile_tree``)
_BLOCKS: dict[tuple[str, bool], dict[bytes, str]] = {}
BLOCKS_KEPT = 4096  # blocks kept per header; the table starts over past it


def _compile_tree(linktype: int, vlans: int, l3_kind: int, opcode: int) -> Callable[..., str]:
    """The ``-V`` tree of a good frame of this header chain, straight from the words its
    decoder reads: what ``tree.render`` writes for the record ``decode_frames`` makes of it
    (the same generated f-strings, ``tree.block_sources``, over the decoded values instead
    of the record's dict; tests/test_decode_text.py holds the two to it).  The blocks of
    the link, network and UDP headers, and BTH's but for its PSN, are looked up by the
    header's bytes (``_BLOCKS``)."""
    from roce.families.base import tree

    src = _plan_source(linktype, vlans, l3_kind, opcode)
    env = src.env
    exprs = {key: expr for key, expr, _ in src.items if not key.startswith("_SYN[")}
    ip = SIZE_OF["ip"]
    maybe = {"aeth.selective": src.selective or "None",
             "ip.options": (f"data[w.l3_off + {ip}:w.l3_off + w.l3_len] if w.l3_len > {ip} "
                            "else None") if src.options else "None"}
    # BTH's block but for the PSN, its last field (byte-aligned): by the bytes before it
    psn_at = LAYOUTS["bth"].fields[-1].bit_offset // 8
    blocks = tree.block_sources(src.layers, env, value=lambda key: f"({exprs[key]})",
                                optional=lambda key: f"({maybe[key]})",
                                last_apart=frozenset(("bth",)))
    l2 = _L2.get(linktype)
    where = {"ip": "w.l3_off:w.l3_off + w.l3_len", "ipv6": f"w.l3_off:w.l3_off + {SIZE_OF['ipv6']}",
             "grh": f"w.l3_off:w.l3_off + {SIZE_OF['grh']}",
             "udp": f"w.udp_off:w.udp_off + {SIZE_OF['udp']}",
             "bth": f"w.bth_off:w.bth_off + {psn_at}"}
    if l2 is not None:
        where[l2] = f"0:{SIZE_OF[l2]}"
        for i in range(vlans):
            at = SIZE_OF[l2] + i * SIZE_OF["vlan"]
            where[fields.VLAN_NAMES[i]] = f"{at}:{at + SIZE_OF['vlan']}"
    body = []
    out = []
    for i, (header, block) in enumerate(blocks):
        if header not in where:
            out.append(block)
            continue
        env[f"M{i}"] = _BLOCKS.setdefault((header, l3_kind == L3_GRH), {})
        body += [f"k{i} = data[{where[header]}]", f"b{i} = M{i}.get(k{i})",
                 f"if b{i} is None:",
                 f"    if len(M{i}) >= {BLOCKS_KEPT}:", f"        M{i}.clear()",
                 f'    b{i} = M{i}[k{i}] = f"{block}"']
        out.append(f"{{b{i}}}")
    env.update(_FRAME=tree.frame_text, _TAIL=tree.roce_tail, _LAYERS=src.layers)
    in_ib = any(h in tree.IB_HEADERS for h in src.layers)
    lines = ["def tree_text(data, w, number, ts, rel, delta, origlen, caplen):"]
    lines += [f"    {stmt}" for stmt in src.body + body]
    lines.append(f'    return f"{{_FRAME(number, ts, rel, delta, caplen, origlen, {linktype}, '
                 f'_LAYERS)}}\\n{"".join(out)}{{_TAIL(data, w, stored, '
                 f'icrc_of(data, w) == stored, {in_ib})}}\\n\\n"')
    text = "\n".join(lines) + "\n"
    exec(compiled(text, f"<roce.decoder.decode tree {src.name}>", __name__), env)
    return env["tree_text"]  # type: ignore[no-any-return]


_PLANS: dict[tuple[int, int, int, int], _Plan] = {}
# per output ("json", "tree"): header chain -> the function writing a good frame's text
_TEXT_PLANS: dict[str, dict[tuple[int, int, int, int], Callable[..., str]]] = {
    "json": {}, "tree": {}}
_TEXT_COMPILERS = {"json": _compile_json, "tree": _compile_tree}


def _plan(linktype: int, vlans: int, l3_kind: int, opcode: int) -> _Plan:
    key = (linktype, vlans, l3_kind, opcode)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _compile_plan(*key)
    return plan


def _text_plan(output: str, linktype: int, vlans: int, l3_kind: int,
               opcode: int) -> Callable[..., str]:
    key = (linktype, vlans, l3_kind, opcode)
    plans = _TEXT_PLANS[output]
    plan = plans.get(key)
    if plan is None:
        plan = plans[key] = _TEXT_COMPILERS[output](*key)
    return plan


def decode_frames(frames: Iterable[Frame], udp_port: int = ROCE_PORT,
                  only_roce: bool = False) -> Iterator[Record]:
    """Decode frames (``roce.pcapio.Frame`` or any tuple of the same shape) into records.

    Frames are numbered from 1 in arrival order, hidden ones included (as tshark does),
    and ``rel_ns`` / ``delta_ns`` refer to the first and the previous *captured* frame.
    With ``only_roce`` frames that are not RoCE are skipped; malformed frames that got
    as far as the RoCE headers (or the RoCEv2 port) are kept.
    """
    return _decode(frames, udp_port, only_roce, None)  # type: ignore[return-value]


def decode_text(frames: Iterable[Frame], output: str, udp_port: int = ROCE_PORT,
                only_roce: bool = False, batch: int = BATCH) -> Iterator[Record | str]:
    """``decode_frames`` for one output, ``"json"`` (``-T json``: a good frame's object,
    for ``output.JsonWriter.add_text``) or ``"tree"`` (``-V``: its whole tree, as
    ``tree.render`` writes it): a good RoCE frame comes as its text, written by code
    generated per header chain (``_compile_json``, ``_compile_tree``) from the values it
    reads, with no dict and no record; every other frame as its record.  A classic pcap
    reader's records are cut in C ``batch`` at a time (``CaptureReader.batches``)."""
    if output not in _TEXT_PLANS:
        raise ValueError(f"no text output {output!r}: {', '.join(_TEXT_PLANS)}")
    return _decode(_batched(frames, batch), udp_port, only_roce, output)


def _batched(frames: Iterable[Frame], batch: int) -> Iterable[tuple[Any, ...]]:
    """The frames of a classic pcap reader not read yet as Frame-shaped tuples from its
    batches (cut in C: no Frame made per frame); any other iterable as it is."""
    can = getattr(frames, "can_scan_records", None)
    if can is None or not can():
        return frames
    return itertools.chain.from_iterable(
        zip(b.datas, b.ts_ns, b.caplen, b.origlen, itertools.repeat(b.linktype),
            itertools.repeat(0))
        for b in frames.batches(batch))  # type: ignore[attr-defined]


def _decode(frames: Iterable[Frame], udp_port: int, only_roce: bool,
            output: str | None) -> Iterator[Record | str]:
    walk = fast.walk
    plans = _PLANS
    texts = _TEXT_PLANS[output] if output is not None else None
    first = prev = None
    for number, fr in enumerate(frames, 1):
        data, ts, caplen, origlen, linktype = fr[0], fr[1], fr[2], fr[3], fr[4]
        if first is None:
            first = prev = ts
        delta = ts - prev
        prev = ts
        w = walk(data, linktype, udp_port)
        if w.status == OK:
            if texts is not None:
                text = texts.get((linktype, w.vlans, w.l3_kind, w.opcode))
                if text is None:
                    text = _text_plan(output,  # type: ignore[arg-type]
                                      linktype, w.vlans, w.l3_kind, w.opcode)
                yield text(data, w, number, ts, ts - first, delta, origlen, caplen)
                continue
            plan = plans.get((linktype, w.vlans, w.l3_kind, w.opcode))
            if plan is None:
                plan = _plan(linktype, w.vlans, w.l3_kind, w.opcode)
            yield Record(number, ts, ts - first, delta, fr, w, plan.layers,
                         plan.decode(data, w, number, ts, ts - first, delta, origlen, caplen),
                         None, "roce", udp_port)
            continue
        if texts is not None and type(fr) is not Frame:  # ``_batched``'s tuples
            fr = Frame(*fr)  # a record's frame is a Frame
        record = _unusual(number, ts, ts - first, delta, fr, w, udp_port, only_roce)
        if record is not None:
            yield record


_RECORDS: list[Any] = []  # roce.decoder.records, imported for the first frame not RoCE


def _records() -> Any:
    from roce.decoder import records

    _RECORDS.append(records)
    return records


def _unusual(number: int, ts: int, rel: int, delta: int, fr: Frame, w: Walk, udp_port: int,
             only_roce: bool) -> Record | None:
    """The record of a frame that is not a whole RoCE packet (None if it is hidden)."""
    data, caplen, origlen, linktype = fr[0], fr[2], fr[3], fr[4]
    st = w.status
    if not is_malformed(st):
        records = _RECORDS[0] if _RECORDS else _records()
        claimed = records.record(number, ts, rel, delta, fr, w, udp_port, only_roce, Record,
                                 decode_frames)
        if claimed is not None:
            return None if claimed is records.HIDDEN else claimed
        kind = "other"
    elif fields.is_capture_cut(w, caplen, origlen):
        kind = "truncated"
    else:
        kind = "malformed"
    if only_roce and (kind == "other" or not fields.is_roce_like(w)):
        return None
    error = explain(w)
    h = fields.known_headers(data, w, linktype)
    f: dict[str, Any] = {
        "frame.number": number, "frame.time_epoch": ts / NS, "frame.time_relative": rel / NS,
        "frame.time_delta": delta / NS, "frame.len": origlen, "frame.cap_len": caplen}
    header_fields(h, f)
    macc_at = macc_offset(w)
    if macc_at >= 0:  # PAUSE / PFC: not RoCE, but decoded (macctrl)
        macc_fields, macc_error = macctrl.fields(data, macc_at)
        f.update(macc_fields)
        h[macctrl.PROTOCOL] = {k.partition(".")[2]: v for k, v in macc_fields.items()}
        if macc_error is not None:
            f["malformed"] = str(macc_error)
    if "bth" in h:
        v1 = "grh" in h
        if w.payload_off >= 0 and kind == "truncated":
            f["payload.len"] = len(data) - w.payload_off
        f["roce.version"] = 1 if v1 else 2
        f["roce"] = True
        f["roce.v1" if v1 else "roce.v2"] = True
    if kind != "other":
        f[kind] = str(error)  # "malformed" or "truncated": the message, for filters and JSON
    for name, (a, b, both) in _PAIRS.items():
        if name in h:
            f[both] = (f[f"{name}.{a}"], f[f"{name}.{b}"])
    return Record(number, ts, rel, delta, fr, w, tuple(h), f, error, kind, udp_port, h)


# -- display filter -----------------------------------------------------------------------------

_EXTRA_FIELDS = ("frame.number", "frame.len", "frame.cap_len", "frame.time_epoch",
                 "frame.time_relative", "frame.time_delta", "payload.len", "roce",
                 "roce.version", "roce.v1", "roce.v2", "icrc", "icrc.valid", "malformed",
                 "truncated", "ip.options", "ip.addr", "ipv6.addr", "udp.port", "eth.addr",
                 "aeth.syndrome.reserved", "aeth.syndrome.opcode",
                 "aeth.syndrome.credit_count", "aeth.syndrome.timer",
                 "aeth.syndrome.reserved_value", "aeth.syndrome.error_code", "aeth.selective")


def known_fields() -> frozenset[str]:
    """Every field name a record may carry (for ``-Y`` typo checks and ``-e``)."""
    from roce.families import registry

    names = (set(_EXTRA_FIELDS) | {macctrl.PROTOCOL, *macctrl.FIELD_NAMES}
             | registry().field_names())
    for header, keys in _KEYS.items():
        if header in _SINGLE:
            names.add(header)
        else:
            names.update(keys)
            names.add(header)
    return frozenset(names)


# Address widths in the layouts -> the filter's type for them.
_ADDRESS_KINDS = {48: "mac", 32: "ipv4", 128: "ipv6"}


def field_types() -> dict[str, Any]:
    """The type of every field whose values a filter can check (``-Y``): the header fields
    from ``roce.headers`` (integers with their width, flags, addresses) and the derived
    ones whose type is fixed."""
    from roce.decoder.filter import FieldType  # only with -Y, as make_filter
    from roce.icrc import to_trailer

    types: dict[str, FieldType] = {}
    for header, keys in _KEYS.items():
        base = "vlan" if header == "vlan2" else header
        for f, key in zip(LAYOUTS[base].fields, keys):
            key = header if header in _SINGLE else key
            if f.kind == "bool":
                types[key] = FieldType("bool")
            elif f.kind == "addr":
                types[key] = FieldType(_ADDRESS_KINDS[f.bits])
            else:
                types[key] = FieldType("uint", f.bits)
    types.update({"icrc": FieldType("uint", len(to_trailer(0)) * 8),
                  "icrc.valid": FieldType("bool"), "aeth.selective": FieldType("bool"),
                  "ip.addr": types["ip.src"],
                  "ipv6.addr": types["ipv6.src"],
                  "eth.addr": types["eth.src"], "udp.port": types["udp.srcport"]})
    return types


_SYNDROME_NAMES = {"ack": 0, "rnr": 1, "rnr_nak": 1, "rnr-nak": 1, "reserved": 2, "nak": 3}
_NAK_NAMES = {name.lower().replace(" ", sep): code for code, name in NAK_CODES.items()
              for sep in ("-", "_")}


def resolve_value(field: str, text: str) -> int | None:
    """Symbolic values in filters: opcode names for ``bth.opcode`` (any spelling
    ``roce.opcodes.lookup`` takes, dots allowed: ``rc.send.only``), ``ack``/``rnr``/``nak``
    for ``aeth.syndrome.opcode``, NAK names for ``aeth.syndrome.error_code``."""
    if field == "bth.opcode":
        for spelling in (text, text.replace(".", "-")):
            try:
                return lookup(spelling).code
            except KeyError:
                pass
        import difflib  # only on this error path: keeps start-up short

        slugs = [op.slug for op in OPCODES.values()]
        near = difflib.get_close_matches(text.lower().replace("_", "-").replace(".", "-"),
                                         slugs, n=1)
        hint = f"did you mean {near[0]}?" if near else "roce opcodes lists the names"
        raise ValueError(f"not an opcode name; {hint}")
    if field == "aeth.syndrome.opcode":
        return _SYNDROME_NAMES[text.lower()]
    if field == "aeth.syndrome.error_code":
        return _NAK_NAMES[text.lower()]
    return None


def _opcode_set(pred: Callable[[Any], bool]) -> str:
    codes = sorted(c for c, op in OPCODES.items() if pred(op))
    return "bth.opcode in {" + " ".join(f"0x{c:02x}" for c in codes) + "}"


def filter_macros() -> dict[str, str]:
    """Named tests for ``-Y``: traffic classes and one per opcode (slug with dots)."""
    op = Operation
    macros = {
        "ack": "(" + _opcode_set(lambda o: o.operation in (op.ACK, op.ATOMIC_ACK))
               + " and aeth.syndrome.opcode == 0)",
        "nak": "aeth.syndrome.opcode == 3",
        "rnr": "aeth.syndrome.opcode == 1",
        "cnp": _opcode_set(lambda o: o.transport is Transport.CNP),  # RoCE's and IB's
        "read": _opcode_set(lambda o: o.operation in (op.RDMA_READ, op.READ_RESPONSE)),
        "write": _opcode_set(lambda o: o.operation is op.RDMA_WRITE),
        "send": _opcode_set(lambda o: o.operation is op.SEND),
        "atomic": _opcode_set(lambda o: o.operation in (op.ATOMIC, op.ATOMIC_ACK,
                                                       op.ATOMIC_WRITE)),
        "bad_icrc": "icrc.valid == false",
        # IPv6 carries ECN in the low two bits of the traffic class; native InfiniBand's
        # mark is the BTH FECN (on RoCE that bit is not a mark: docs/protocol.md)
        "ecn_ce": "ip.dsfield.ecn == 3 or ipv6.tclass in {"
                  + " ".join(str(t) for t in range(3, 256, 4)) + "} or (lrh and bth.fecn == 1)",
    }
    macros.update(macctrl.macros())
    for code, o in OPCODES.items():
        macros.setdefault(o.slug.replace("-", "."), f"bth.opcode == 0x{code:02x}")
        if o.operation is op.ACK and o.transport is not Transport.CNP:
            macros.setdefault(f"{o.transport.value.lower()}.ack", f"bth.opcode == 0x{code:02x}")
    return macros


def make_filter(expr: str) -> Callable[[Mapping[str, object]], bool]:
    """Compile a ``-Y`` expression; raises ``FilterError`` (message with a caret line)."""
    from roce.decoder.filter import compile_filter  # only with -Y: the filter compiler is big
    from roce.decoder.names import resolver  # the names -e takes (infiniband.bth.psn ...)

    return compile_filter(expr, resolve=resolve_value, macros=filter_macros(),
                          known_fields=known_fields(), field_types=field_types(),
                          names=resolver())


__all__ = ["Record", "decode_frames", "decode_text", "filter_macros", "header_fields",
           "known_fields", "make_filter", "resolve_value"]
