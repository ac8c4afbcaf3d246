"""Machine-readable outputs of ``roce decode``: ``-T json``, ``jsonl``, ``fields`` and ``csv``.

Every writer takes decoded records (``roce.decoder.decode.Record``: ``number``, ``ts_ns``,
``fields``, ``columns``) one at a time and writes in large chunks, so output cost stays
small next to decoding.  Values are rendered by type, the same way in every format:

* JSON keeps numbers and booleans, writes ``bytes`` as hex strings and repeated fields
  (``ip.addr``) as lists.  A malformed packet carries ``"_malformed": "why"``.
* ``fields`` prints each value as tshark does: the fields Wireshark shows in hex in hex
  with their width (``bth.destqp`` ``0x000048``, ``reth.va`` ``0x0000000000001000``,
  ``vcrc`` ``0x1dbf``; ``display_formats`` says which: the tree's table of the RoCE headers
  and the families' own), other integers in decimal, booleans as ``1``/``0``, bytes as hex,
  absent fields as the empty string.  ``-E raw=y`` (a roce option; tshark has none) prints
  every integer in decimal instead.
* ``csv`` prints integers in decimal, what spreadsheets and scripts read without help.

Field names are roce's (``bth.psn``, ``reth.va``); Wireshark's ``infiniband.`` names are
accepted too and mean what Wireshark means by them (``roce.decoder.names``, the table
``-Y`` reads as well: ``infiniband.reth.va`` is also the AtomicETH address,
``infiniband.invariant.crc`` is ``icrc``).  Column names
``_ws.col.Info`` (and ``No.``, ``Time``, ``Source``, ``Destination``, ``Protocol``,
``Length``) give the one-line summary's columns.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TextIO

from roce.decoder import names as names_table

NS = 1_000_000_000
FLUSH_EVERY = 512  # records per write() call

# Summary columns, by their tshark names (``-e _ws.col.Info``); also the default CSV set.
COLUMNS = ("No.", "Time", "Source", "Destination", "Protocol", "Length", "Info")
_COLUMN_KEYS = {f"_ws.col.{c}".lower(): c for c in COLUMNS}
_COLUMN_KEYS.update({"_ws.col.number": "No.", "_ws.col.def_src": "Source",
                     "_ws.col.def_dst": "Destination"})



class RecordLike(Protocol):
    number: int
    ts_ns: int
    rel_ns: int
    delta_ns: int
    fields: dict[str, Any]
    columns: dict[str, Any] | None


# -- values -----------------------------------------------------------------------------------


def json_value(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    return v


def text_value(v: Any, aggregator: str = ",") -> str:
    if v is None:
        return ""
    if v is True:
        return "1"
    if v is False:
        return "0"
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, (list, tuple)):
        return aggregator.join(text_value(x) for x in v)
    return str(v)


def _exact_seconds(ns: int) -> str:
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // NS}.{ns % NS:09d}"


_TIME_ATTRS = {"frame.time_epoch": "ts_ns", "frame.time_relative": "rel_ns",
               "frame.time_delta": "delta_ns"}


def field_getter(name: str, keys: Callable[[str], tuple[str, ...]] | None = None,
                 ) -> Callable[[RecordLike], Any]:
    """How to read ``name`` (a column, or a field name as ``roce.decoder.names`` reads it:
    ``keys``, its resolver) from a record (the caller checks the name exists first)."""
    col = _COLUMN_KEYS.get(name.lower())
    if col is not None:
        return lambda r: (r.columns or {}).get(col)
    found = (keys or names_table.resolver())(name)
    attr = _TIME_ATTRS.get(found[0])
    if attr is not None:
        # exact nanoseconds, not the float kept in ``fields`` for filters and JSON
        return lambda r: _exact_seconds(getattr(r, attr))
    if len(found) > 1:

        def first_present(r: RecordLike) -> Any:
            f = r.fields
            for n in found:
                v = f.get(n)
                if v is not None:
                    return v
            return None

        return first_present
    key = found[0]
    return lambda r: r.fields.get(key)


def display_formats() -> dict[str, str]:
    """Flat name -> ``str.format`` spec of the fields ``-T fields`` prints in hex, as tshark
    does: the RoCE headers' and MAC Control's (the tree's table,
    ``roce.families.base.tree.fields_display``) and every family's (its handler's
    ``display``, which its own tree uses).  Other fields print in decimal."""
    from roce.families import registry
    from roce.families.base.tree import fields_display

    return {**fields_display(), **registry().display()}


def is_column(name: str) -> bool:
    return name.lower() in _COLUMN_KEYS


# -- writers ----------------------------------------------------------------------------------


class _Chunked:
    """Collects text and writes it in chunks."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._parts: list[str] = []

    def _emit(self, text: str) -> None:
        self._parts.append(text)
        if len(self._parts) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        if self._parts:
            self.out.write("".join(self._parts))
            self._parts.clear()
        self.out.flush()

    needs_columns = False

    def add(self, record: RecordLike) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        self.flush()


def json_object(record: RecordLike) -> dict[str, Any]:
    """The JSON object for one record: frame facts first, then every decoded field."""
    obj: dict[str, Any] = {}
    for k, v in record.fields.items():
        if k == "frame.len":
            # exact arrival time next to the float seconds (a double cannot hold ns)
            obj["frame.time_ns"] = record.ts_ns
        if k == "malformed":
            k = "_malformed"
        obj[k] = json_value(v)
    return obj


# -- JSON text from generated code ---------------------------------------------------------------
# roce.decoder.decode generates, per header chain, a function that writes a good frame's
# JSON object as text straight from the values it decodes (no dict, no record, no
# json.dumps).  These are the rules it writes each member by, the same as ``json_object``
# and ``json.dumps`` (default separators, ``ensure_ascii=False``) make of a value of that
# kind; tests/test_decode_json.py compares the two on drawn frames.

JSON_ENV: dict[str, Any] = {"_JB": ("false", "true"),
                            "_JS": json.encoder.encode_basestring}  # type: ignore[attr-defined]


def json_key(key: str) -> str:
    """A member's name and the separator after it: ``"bth.psn": ``."""
    return json.dumps(key, ensure_ascii=False) + ": "


def _json_value(expr: str, kind: str) -> str:
    if kind == "int":  # str(int) is int.__repr__, what json writes
        return f"{{{expr}}}"
    if kind == "float":  # finite seconds: json writes float.__repr__
        return f"{{{expr}!r}}"
    if kind == "bool":  # a bool, or a 0/1 int that json_object would have as one
        return f"{{_JB[{expr}]}}"
    if kind == "true":
        return "true"
    if kind == "str":
        return f"{{_JS({expr})}}"
    if kind == "bytes":  # json_value: bytes as hex
        return f'"{{({expr}).hex()}}"'
    if kind.startswith("pair:"):  # a tuple of two locals: a list
        first, second = kind.split(":")[1:]
        a, b = expr.strip("()").split(", ")
        return f"[{_json_value(a, first)}, {_json_value(b, second)}]"
    raise ValueError(f"no JSON rule for a value of kind {kind!r}")


def json_member(key: str | None, expr: str, kind: str) -> str:
    """The source of one member in a generated f-string (triple-quoted): ``key``'s name
    (None: the caller writes it) and the value of the Python expression ``expr`` as JSON
    writes a value of ``kind`` ("int", "float", "bool", "true", "str", "bytes", or
    "pair:KIND:KIND", a tuple of two locals)."""
    name = "" if key is None else json_key(key)
    if "{" in name or "}" in name or "'" in name or "\\" in name:
        raise ValueError(f"field name {key!r} cannot be written in a generated f-string")
    return name + _json_value(expr, kind)


class JsonWriter(_Chunked):
    """``-T json``: one array, one object per packet; ``-T jsonl``: one object a line.

    The array is streamed (opened on the first record, closed by ``close``) so memory
    stays flat however long the capture is.
    """

    def __init__(self, out: TextIO, lines: bool = False) -> None:
        super().__init__(out)
        self.lines = lines
        self.count = 0

    def add(self, record: RecordLike) -> None:
        self.add_text(json.dumps(json_object(record), ensure_ascii=False, allow_nan=False))

    def add_text(self, text: str) -> None:
        """Add one packet's object, written already (``roce.decoder.decode.decode_json``)."""
        if self.lines:
            self._emit(text + "\n")
        else:
            self._emit(("[\n  " if self.count == 0 else ",\n  ") + text)
        self.count += 1

    def close(self) -> None:
        if not self.lines:
            self._emit("\n]\n" if self.count else "[]\n")
        super().close()


class FieldsWriter(_Chunked):
    """``-T fields``: the ``-e`` fields separated by a tab (``-E separator=``)."""

    def __init__(self, out: TextIO, names: Iterable[str], header: bool = False,
                 separator: str = "\t", quote: str = "", aggregator: str = ",",
                 raw: bool = False) -> None:
        super().__init__(out)
        self.names = list(names)
        keys = names_table.resolver()
        self.getters = [field_getter(n, keys) for n in self.names]
        if not raw:
            shown = display_formats()
            self.getters = [_displayed(g, shown[key]) if (key := keys(n)[0]) in shown
                            else g for g, n in zip(self.getters, self.names)]
        self.separator = separator
        self.quote = quote
        self.aggregator = aggregator
        self.needs_columns = any(is_column(n) for n in self.names)
        if header:
            self._emit(separator.join(self._quoted(n) for n in self.names) + "\n")

    def _quoted(self, text: str) -> str:
        q = self.quote
        return f"{q}{text}{q}" if q else text

    def add(self, record: RecordLike) -> None:
        agg, q = self.aggregator, self.quote
        values = [text_value(g(record), agg) for g in self.getters]
        if q:
            values = [f"{q}{v}{q}" for v in values]
        self._emit(self.separator.join(values) + "\n")


def _displayed(get: Callable[[RecordLike], Any], spec: str) -> Callable[[RecordLike], Any]:
    """``get`` with its integer values written with ``spec`` (``0x{:06x}``)."""
    fmt = spec.format

    def shown(r: RecordLike) -> Any:
        v = get(r)
        return fmt(v) if type(v) is int else v

    return shown


class CsvWriter(_Chunked):
    """``-T csv``: a header row, then one row per packet (RFC 4180 quoting).

    Without ``-e`` the columns are the one-line summary's, as Wireshark's "Export Packet
    Dissections as CSV" writes them.
    """

    def __init__(self, out: TextIO, names: Iterable[str] | None = None) -> None:
        super().__init__(out)
        names = list(names or ())
        if names:
            self.names, labels = names, names
        else:
            self.names = [f"_ws.col.{c}" for c in COLUMNS]
            labels = list(COLUMNS)
        keys = names_table.resolver()
        self.getters = [field_getter(n, keys) for n in self.names]
        self.needs_columns = any(is_column(n) for n in self.names)
        self._buf = io.StringIO()
        self._csv = csv.writer(self._buf, lineterminator="\n")
        self._csv.writerow(labels)
        self._drain()

    def _drain(self) -> None:
        self._emit(self._buf.getvalue())
        self._buf.seek(0)
        self._buf.truncate()

    def add(self, record: RecordLike) -> None:
        self._csv.writerow([text_value(g(record)) for g in self.getters])
        self._drain()


__all__ = ["COLUMNS", "CsvWriter", "FieldsWriter", "JsonWriter", "display_formats",
           "field_getter", "is_column", "json_object", "json_value", "text_value"]
