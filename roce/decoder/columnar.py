"""Columnar output of ``roce decode -T parquet|arrow``: one row per packet (the tables of
``roce stats -T parquet`` are ``roce.analysis.tables``).  The schema is documented in
docs/columnar-schema.md.

Packet columns are the decoder's field names (``bth.psn``, ``ip.src``: the names ``-Y`` and
``-e`` take, ``roce decode -G fields`` lists them) and their types come from the layouts
(``roce.headers.LAYOUTS``): unsigned integers of the field's width, booleans, addresses as
dictionary-encoded strings, fields wider than 64 bits as fixed-size binary.  Frame times are
nanosecond timestamps / durations.  A field the packet does not carry is null.

Two builders make the same table (a test holds them to it):

* the bulk one (no ``-Y``): ``colscan.extract`` walks a batch of frames in C and copies
  every chosen field into Arrow buffers; only frames that are not whole RoCE (malformed,
  truncated, not RoCE) go through the record decoder, one by one;
* the record one: rows from ``decode.decode_frames`` records (``-Y`` filters records).

Rows are written as they stream, a row group every ``ROW_GROUP`` rows, so memory does not
grow with the capture.  pyarrow is optional (``pip install "roce[parquet]"``); without it
``-T parquet`` is a usage error saying so.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from roce import interrupts
from roce.decoder import colscan
from roce.errors import UsageError
from roce.extras import need_pyarrow
from roce.families.base import fields
from roce.headers import LAYOUTS, NAK_CODE_OF, NAK_PSN_SEQUENCE_ERROR, selective_aeth
from roce.locate import OK, ROCE_PORT
from roce.outfile import Output, make_directory
from roce.pcapio import Batch, Frame, open_capture

ROW_GROUP = 32768  # rows per Parquet row group / Arrow record batch
BATCH = 4096  # frames per extraction
FORMATS = ("parquet", "arrow")


# -- the packet schema --------------------------------------------------------------------------

# Either-direction pairs (ip.addr = (src, dst)) are filter conveniences, not columns: a row
# has ip.src and ip.dst.
PAIR_FIELDS = frozenset(("ip.addr", "ipv6.addr", "udp.port", "eth.addr"))
_SYNDROME_VALUE = ("aeth.syndrome.credit_count", "aeth.syndrome.timer",
                   "aeth.syndrome.reserved_value", "aeth.syndrome.error_code")


@dataclass(frozen=True)
class Column:
    """One packet column: its name, Arrow type (as a name ``_arrow_type`` reads) and, for a
    header field, where the bulk extractor finds it."""

    name: str
    kind: str  # (u)int8..(u)int64, bool, string (dictionary), binaryN, binary, timestamp,
    # duration
    header: str | None = None  # flat-field header (vlan2 included)
    field: str | None = None  # layout field name
    presence: bool = False  # the header's presence marker ("bth": true when carried)
    record_only: bool = False  # never in a whole RoCE frame: the record decoder fills it


def _int_kind(bits: int) -> str:
    for width in (8, 16, 32, 64):
        if bits <= width:
            return f"uint{width}"
    return f"binary{(bits + 7) // 8}"


def _layout_columns() -> list[Column]:
    cols: list[Column] = []
    for header, keys in fields.FLAT_KEYS.items():
        base = "vlan" if header == "vlan2" else header
        single = header in fields.SINGLE_FIELD
        if not single:
            cols.append(Column(header, "bool", header, None, presence=True))
        for f, key in zip(LAYOUTS[base].fields, keys):
            kind = "bool" if f.kind == "bool" else "string" if f.kind == "addr" else (
                _int_kind(f.bits))
            cols.append(Column(header if single else key, kind, header, f.name))
    return cols


def _macc_columns() -> list[Column]:
    """PAUSE / PFC fields (``roce.macc`` layouts): frames that are not RoCE, so the record
    decoder fills them and whole RoCE rows hold nulls."""
    from roce import macc

    cols = [Column(macc.PROTOCOL, "bool", presence=True, record_only=True)]
    for header, lay in macc.LAYOUTS.items():
        for f in lay.fields:
            name = macc.flat_name(header, f.name)
            if name in macc.FIELD_NAMES:
                kind = "bool" if f.kind == "bool" else _int_kind(f.bits)
                cols.append(Column(name, kind, record_only=True))
    return cols


def _family_columns() -> list[Column]:
    """Fields of the registry's families and tunnels (``roce.decoder.fieldtypes``): frames
    the compiled RoCE path does not decode, so the record decoder fills them."""
    from roce.decoder import fieldtypes as columns

    kinds = {"bool": "bool", "string": "string", "binary": "binary"}
    return [Column(name, kinds.get(kind) or (_int_kind(bits) if kind != "sint" else
                                             _int_kind(bits)[1:]),
                   presence=presence, record_only=True)
            for name, kind, bits, presence in columns.specs()]


# Fields the decoder adds to the layouts' (decode.known_fields lists them all); their
# types are decided here, the layouts have none for them.
_EXTRA_KINDS = {
    "frame.number": "uint64", "frame.time_epoch": "timestamp",
    "frame.time_relative": "duration", "frame.time_delta": "duration",
    "frame.len": "uint32", "frame.cap_len": "uint32", "payload.len": "uint32",
    "roce": "bool", "roce.version": "uint8", "roce.v1": "bool", "roce.v2": "bool",
    "icrc": "uint32", "icrc.valid": "bool", "malformed": "string", "truncated": "string",
    "ip.options": "binary", "aeth.syndrome.reserved": "uint8",
    "aeth.syndrome.opcode": "uint8", **{k: "uint8" for k in _SYNDROME_VALUE},
    "aeth.selective": "bool",
}


def _seq_nak_syndromes() -> Any:
    pa = need_pyarrow()
    return pa.array([s for s in range(256) if NAK_CODE_OF[s] == NAK_PSN_SEQUENCE_ERROR],
                    pa.uint64())


def all_columns() -> dict[str, Column]:
    """Every packet column, by name, in default order (frame facts, headers in layout
    order, then the decoder's derived fields)."""
    from roce.decoder.decode import known_fields

    frame = [Column(n, _EXTRA_KINDS[n]) for n in _EXTRA_KINDS if n.startswith("frame.")]
    rest = [Column(n, k) for n, k in _EXTRA_KINDS.items() if not n.startswith("frame.")]
    cols = {c.name: c for c in [*frame, *_layout_columns(), *rest, *_macc_columns(),
                                *_family_columns()]}
    known = known_fields() - PAIR_FIELDS
    # One registry: the columns are exactly the decoder's fields (less the pairs).
    assert set(cols) == known, sorted(set(cols) ^ known)
    return cols


def default_names() -> list[str]:
    """The columns written without ``-e``: every field, presence markers left out (a
    header is there when its fields are not null)."""
    return [c.name for c in all_columns().values() if not c.presence]


def resolve_names(names: Iterable[str]) -> list[Column]:
    """The columns ``-e`` asks for (roce or plain ``infiniband.`` names); UsageError for
    names that are not columns."""
    from roce.decoder import output
    from roce.decoder.names import resolver

    cols = all_columns()
    keys = resolver()
    out = []
    for name in names:
        if output.is_column(name):
            raise UsageError(f"-e {name}: summary columns are not written to columnar files")
        found = keys(name)
        if len(found) > 1:
            raise UsageError(f"-e {name}: stands for {' or '.join(found)}; name one")
        key = found[0]
        if key in PAIR_FIELDS:
            raise UsageError(f"-e {name}: a pair of fields; select its two fields instead")
        col = cols.get(key)
        if col is None:
            raise UsageError(f"-e {name}: unknown field (roce decode -G fields lists them)")
        out.append(col)
    return out


def _arrow_type(pa: Any, kind: str) -> Any:
    if kind.startswith(("uint", "int")):
        return getattr(pa, kind)()
    if kind.startswith("binary") and kind != "binary":
        return pa.binary(int(kind[6:]))
    return {"bool": pa.bool_(), "string": pa.dictionary(pa.int32(), pa.string()),
            "binary": pa.binary(), "timestamp": pa.timestamp("ns", tz="UTC"),
            "duration": pa.duration("ns")}[kind]


def packet_schema(columns: list[Column]) -> Any:
    pa = need_pyarrow()
    return pa.schema([pa.field(c.name, _arrow_type(pa, c.kind)) for c in columns])


# -- the record builder -------------------------------------------------------------------------


# Columns a record holds as attributes (exact nanoseconds, the frame's lengths), not in
# ``fields`` (where the times are float seconds, for filters and JSON).
_RECORD_ATTRS: dict[str, Callable[[Any], Any]] = {
    "frame.number": lambda r: r.number, "frame.time_epoch": lambda r: r.ts_ns,
    "frame.time_relative": lambda r: r.rel_ns, "frame.time_delta": lambda r: r.delta_ns,
    "frame.len": lambda r: r.frame[3], "frame.cap_len": lambda r: r.frame[2],
}


def records_table(records: list[Any], columns: list[Column], schema: Any) -> Any:
    """A table of decoded records (``decode.Record``), one row each.  A record carries a few
    of the few hundred columns: its fields are put in their columns, and a column none of
    them has is one null array (a value per row and column would cost a hundred times
    more)."""
    pa = need_pyarrow()
    n = len(records)
    index = {c.name: k for k, c in enumerate(columns)}
    values: list[list[Any] | None] = [None] * len(columns)
    for j, rec in enumerate(records):
        for name, v in rec.fields.items():
            k = index.get(name)
            if k is None or v is None or name in _RECORD_ATTRS:
                continue
            got = values[k]
            if got is None:
                got = values[k] = [None] * n
            got[j] = v
    for name, get in _RECORD_ATTRS.items():
        if name in index:
            values[index[name]] = [get(r) for r in records]
    arrays = []
    for col, fld, vals in zip(columns, schema, values):
        if vals is None:
            arrays.append(pa.nulls(n, fld.type))
        elif col.kind == "string":
            arrays.append(pa.array(vals, pa.string()).dictionary_encode())
        elif col.kind in ("timestamp", "duration"):
            arrays.append(pa.array(vals, pa.int64()).cast(fld.type))
        elif col.kind.startswith("binary") and col.kind != "binary":
            width = int(col.kind[6:])
            arrays.append(pa.array([None if v is None else v.to_bytes(width, "big")
                                    for v in vals], fld.type))
        else:
            arrays.append(pa.array(vals, fld.type))
    return pa.Table.from_arrays(arrays, schema=schema)


# -- the bulk builder ---------------------------------------------------------------------------


def _compute() -> Any:
    import pyarrow.compute as pc

    return pc


def _true_or_null(pa: Any, pc: Any, mask: Any) -> Any:
    """Presence-style booleans: true where ``mask`` holds, null elsewhere (as an absent
    field is null)."""
    return pc.if_else(mask, True, pa.scalar(None, pa.bool_()))


def _addresses(pa: Any, raw: Any, col: Column) -> Any:
    """Raw address bytes -> dictionary-encoded text, each distinct address converted once
    by the layout's own converter (the text the decoder prints)."""
    convert = LAYOUTS["vlan" if col.header == "vlan2" else col.header].field(  # type: ignore
        col.field).decode  # type: ignore[arg-type]
    enc = raw.dictionary_encode()
    texts = [convert(int.from_bytes(b, "big")) for b in enc.dictionary.to_pylist()]
    return pa.DictionaryArray.from_arrays(enc.indices, pa.array(texts, pa.string()))


def _decode(frames: list[Frame], udp_port: int, only_roce: bool) -> Iterator[Any]:
    from roce.decoder.decode import decode_frames

    return decode_frames(frames, udp_port, only_roce)


class BulkBuilder:
    """Tables of whole batches of frames (``pcapio.Batch``), fields copied by
    ``colscan.extract``; frames are numbered and timed across batches as the decoder does
    (``frame.time_delta`` from the previous frame, hidden ones included)."""

    def __init__(self, columns: list[Column], udp_port: int = ROCE_PORT,
                 only_roce: bool = False) -> None:
        self.pa = need_pyarrow()
        self.columns = columns
        self.schema = packet_schema(columns)
        self.udp_port = udp_port
        self.only_roce = only_roce
        names = {c.name for c in columns}
        # Header fields the extractor reads: the chosen ones, plus those the derived
        # columns and presence markers are computed from.
        wanted: list[tuple[str, str]] = []
        for c in columns:
            if c.record_only:
                continue
            if c.field is not None:
                wanted.append((c.header, c.field))  # type: ignore[arg-type]
            elif c.presence:
                wanted.append(_first_field(c.header))  # type: ignore[arg-type]
        if names & {"aeth.syndrome.reserved", "aeth.syndrome.opcode", *_SYNDROME_VALUE,
                    "aeth.selective"}:
            wanted.append(("aeth", "syndrome"))
        if "aeth.selective" in names:
            wanted += [("aeth", "msn"), ("bth", "psn")]
        if names & {"roce", "roce.version", "roce.v1", "roce.v2"}:
            wanted.append(("grh", "ipver"))
        if "ip.options" in names:
            wanted.append(("ip", "ihl"))
        self._index: dict[tuple[str, str], int] = {}
        for hf in wanted:
            self._index.setdefault(hf, len(self._index))
        self.specs = [colscan.field_spec(h, f) for h, f in self._index]
        self.check_icrc = "icrc.valid" in names
        self.number = 0  # frames seen so far
        self.first_ts: int | None = None
        self.prev_ts = 0

    def table(self, batch: Batch) -> Any:
        """The rows of one batch (with ``only_roce``, frames the decoder hides left out)."""
        pa, pc = self.pa, _compute()
        n = len(batch.datas)
        # Fresh buffers each batch: the Arrow arrays made from them (and casts of them,
        # which share the validity bitmap) live until the row group is written.
        cols = colscan.extract(batch.datas, batch.linktype, self.udp_port, self.specs,
                               colscan.buffers(self.specs, n), self.check_icrc)
        if not n:
            return self.schema.empty_table()
        if self.first_ts is None:
            self.first_ts = self.prev_ts = batch.ts_ns[0]
        ts = pa.array(batch.ts_ns, pa.int64())
        prev = pa.concat_arrays([pa.array([self.prev_ts], pa.int64()), ts.slice(0, n - 1)])
        self.prev_ts = batch.ts_ns[n - 1]
        base = self.number
        self.number += n
        ok = pc.equal(pa.array(cols.status, pa.uint8()), OK)
        ctx = _Ctx(pa, pc, batch, cols, n, base, ts, prev, ok)
        arrays = [self._column(c, f.type, ctx) for c, f in zip(self.columns, self.schema)]
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        if cols.status.count(OK) == n:
            return table
        return self._patch(table, batch, cols, base, prev)

    def raw(self, ctx: _Ctx, hf: tuple[str, str]) -> Any:
        """The extracted column of one header field (uint64 or fixed-size binary)."""
        arr = ctx.raw.get(hf)
        if arr is None:
            pa, k = self.pa, self._index[hf]
            s = self.specs[k]
            typ = pa.uint64() if s.kind == colscan.X_INT else pa.binary(s.n)
            arr = ctx.raw[hf] = pa.Array.from_buffers(
                typ, ctx.n, [pa.py_buffer(ctx.cols.valid[k]),
                             pa.py_buffer(ctx.cols.values[k])])
        return arr

    def _column(self, col: Column, typ: Any, ctx: _Ctx) -> Any:
        pa, pc, n, name = ctx.pa, ctx.pc, ctx.n, col.name
        if col.record_only:  # one all-null array per type, shared by the family columns
            key = (str(typ), n)
            nulls = ctx.nulls.get(key)
            if nulls is None:
                nulls = ctx.nulls[key] = pa.nulls(n, typ)
            return nulls
        if col.field is not None:
            arr = self.raw(ctx, (col.header, col.field))  # type: ignore[arg-type]
            if col.kind == "string":
                return _addresses(pa, arr, col)
            if col.kind.startswith("binary"):
                return arr
            return arr.cast(typ, safe=False)
        if col.presence:
            return _true_or_null(pa, pc, pc.is_valid(self.raw(ctx, _first_field(col.header))))
        b = ctx.batch
        if name == "frame.number":
            return pa.array(range(ctx.base + 1, ctx.base + n + 1), typ)
        if name == "frame.time_epoch":
            return ctx.ts.cast(typ)
        if name == "frame.time_relative":
            return pc.subtract(ctx.ts, self.first_ts).cast(typ)
        if name == "frame.time_delta":
            return pc.subtract(ctx.ts, ctx.prev).cast(typ)
        if name == "frame.len":
            return pa.array(b.origlen, typ)
        if name == "frame.cap_len":
            return pa.array(b.caplen, typ)
        ok = ctx.ok
        if name in ("roce", "roce.v1", "roce.v2", "roce.version"):
            v1 = pc.is_valid(self.raw(ctx, ("grh", "ipver")))
            if name == "roce":
                return _true_or_null(pa, pc, ok)
            if name == "roce.version":
                return pc.if_else(ok, pc.if_else(v1, 1, 2), None).cast(typ)
            mask = pc.and_(ok, v1 if name == "roce.v1" else pc.invert(v1))
            return _true_or_null(pa, pc, mask)
        if name == "payload.len":
            return pc.if_else(ok, pa.array(ctx.cols.paylen, pa.int32()), None).cast(typ)
        if name == "icrc":
            return pc.if_else(ok, pa.array(ctx.cols.icrc, typ), None)
        if name == "icrc.valid":
            got = pa.array(ctx.cols.icrc_ok, pa.uint8()).cast(typ)
            return pc.if_else(ok, got, pa.scalar(None, typ))
        if name.startswith("aeth.syndrome."):
            syn = self.raw(ctx, ("aeth", "syndrome"))
            kind = pc.bit_wise_and(pc.shift_right(syn, 5), 3)
            if name == "aeth.syndrome.reserved":
                return pc.shift_right(syn, 7).cast(typ)
            if name == "aeth.syndrome.opcode":
                return kind.cast(typ)
            which = _SYNDROME_VALUE.index(name)
            return pc.if_else(pc.equal(kind, which), pc.bit_wise_and(syn, 0x1F),
                              None).cast(typ)
        if name == "aeth.selective":
            return self._selective(ctx, typ)
        if name == "ip.options":
            return self._options(ctx)
        if name in ("malformed", "truncated"):  # whole RoCE rows; others are patched
            return pa.nulls(n, typ)
        raise AssertionError(name)  # pragma: no cover - all_columns() lists them all

    def _selective(self, ctx: _Ctx, typ: Any) -> Any:
        """True where flowrules.selective_aeth says so, else null (as the decoder, which sets
        the field only when true); the rule is asked only for NAK PSN sequence errors, the
        one syndrome it can be true for."""
        pa, pc = ctx.pa, ctx.pc
        syn = self.raw(ctx, ("aeth", "syndrome"))
        maybe = pc.fill_null(pc.is_in(syn, value_set=_seq_nak_syndromes()), False)
        rows = pc.indices_nonzero(maybe).to_pylist()
        if not rows:
            return pa.nulls(ctx.n, typ)
        psn, msn = self.raw(ctx, ("bth", "psn")), self.raw(ctx, ("aeth", "msn"))
        flags: list[bool | None] = [None] * ctx.n
        for i in rows:
            if selective_aeth(syn[i].as_py(), psn[i].as_py(), msn[i].as_py()):
                flags[i] = True
        return pa.array(flags, typ)

    def _options(self, ctx: _Ctx) -> Any:
        """IP options are rare and of any length: the record decoder reads the rows that
        have them (IHL above the bare header)."""
        pa, pc = ctx.pa, ctx.pc
        bare = LAYOUTS["ip"].size // 4  # IHL counts 32-bit words
        values: list[bytes | None] = [None] * ctx.n
        longer = pc.fill_null(pc.greater(self.raw(ctx, ("ip", "ihl")), bare), False)
        for i in pc.indices_nonzero(longer).to_pylist():
            rec = next(_decode([_frame(ctx.batch, i)], self.udp_port, False), None)
            if rec is not None:
                values[i] = rec.fields.get("ip.options")
        return pa.array(values, pa.binary())

    def _patch(self, table: Any, batch: Batch, cols: colscan.Columns, base: int,
               prev: Any) -> Any:
        """Rows of frames that are not whole RoCE come from the record decoder (and go,
        with ``only_roce``, when the decoder hides them).  The rows are gathered into one
        new table (``take`` over the bulk rows and the decoded ones): a table of one-row
        slices would keep a chunk per frame in every column, a few hundred bytes of buffers
        and metadata each, until the row group is written."""
        n = len(cols.status)
        recs: list[Any] = []
        order: list[int] = []  # output rows: i for bulk row i, n + j for decoded row j
        prev_ts = prev.to_pylist()
        for i, status in enumerate(cols.status):
            if status == OK:
                order.append(i)
                continue
            rec = next(_decode([_frame(batch, i)], self.udp_port, self.only_roce), None)
            if rec is None:
                continue
            rec.number = base + i + 1
            rec.rel_ns = rec.ts_ns - self.first_ts  # type: ignore[operator]
            rec.delta_ns = rec.ts_ns - prev_ts[i]
            order.append(n + len(recs))
            recs.append(rec)
        if not order:
            return self.schema.empty_table()
        if not recs:
            return table.take(self.pa.array(order, self.pa.int64()))
        both = self.pa.concat_tables([table, records_table(recs, self.columns, self.schema)])
        return both.take(self.pa.array(order, self.pa.int64())).combine_chunks()


@dataclass
class _Ctx:
    """One batch being turned into columns (``raw``: extracted arrays, made on first use)."""

    pa: Any
    pc: Any
    batch: Batch
    cols: colscan.Columns
    n: int
    base: int
    ts: Any
    prev: Any
    ok: Any
    raw: dict[tuple[str, str], Any] = field(default_factory=dict)
    nulls: dict[tuple[str, int], Any] = field(default_factory=dict)  # by (type, rows)


def _first_field(header: str) -> tuple[str, str]:
    return header, LAYOUTS["vlan" if header == "vlan2" else header].fields[0].name


def _frame(batch: Batch, i: int) -> Frame:
    return Frame(batch.datas[i], batch.ts_ns[i], batch.caplen[i], batch.origlen[i],
                 batch.linktype, 0)


# -- writing ------------------------------------------------------------------------------------


class TableSink:
    """Tables of one schema into a Parquet file or an Arrow IPC stream, ``ROW_GROUP`` rows at
    a time (a row group, or an IPC record batch, each): memory holds one group at most.

    Arrow IPC is written as a *stream* (``pyarrow.ipc.open_stream`` reads it): each record
    batch may carry its own address dictionaries, which the IPC file format forbids.

    A path (``-``: standard output) is written through ``roce.outfile.Output``: ``close()``
    completes it (the Parquet footer, the IPC end-of-stream) and names it; ``abort(exc)``
    removes a file, or ends a stream with the rows written so far (a stream cannot be taken
    back: it is left readable)."""

    def __init__(self, target: str | IO[bytes], fmt: str, schema: Any) -> None:
        pa = need_pyarrow(f"-T {fmt}")
        self.pa, self.schema, self.fmt = pa, schema, fmt
        self.rows = 0
        self._pending: list[Any] = []
        self._count = 0
        if fmt not in ("parquet", "arrow"):
            raise UsageError(f"unknown columnar format {fmt!r}")
        self._output = Output(target) if isinstance(target, str) else None
        dest = self._output.file if self._output is not None else target
        try:
            if fmt == "parquet":
                import pyarrow.parquet as pq

                self._writer = pq.ParquetWriter(dest, schema, compression="snappy")
            else:
                self._writer = pa.ipc.new_stream(dest, schema)
        except BaseException as exc:
            if self._output is not None:
                self._output.discard(exc)
            raise

    @property
    def taken(self) -> int:
        """Rows handed in so far (written or pending)."""
        return self.rows + self._count

    def write(self, table: Any) -> None:
        if not table.num_rows:
            return
        self._pending.append(table)
        self._count += table.num_rows
        if self._count >= ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        table = self.pa.concat_tables(self._pending)
        self._pending.clear()
        self._count = 0
        # whole or not at all: a row group cut by a stop signal would leave a stream that
        # cannot be ended (its reader gets whole row groups, and the footer, or nothing)
        with interrupts.held():
            if self.fmt == "parquet":
                self._writer.write_table(table, row_group_size=table.num_rows)
            else:
                self._writer.write_table(table, max_chunksize=table.num_rows)
            self.rows += table.num_rows

    def close(self) -> None:
        """Every row is in: write the rest and the footer, and complete the output."""
        try:
            self._flush()
            self._writer.close()
        except BaseException as exc:
            self.abort(exc)
            raise
        if self._output is not None:
            self._output.commit()

    def abort(self, exc: BaseException | None = None) -> None:
        """The rows stop short (``exc`` says why): a file is removed; a stream (standard
        output, a pipe) is ended after the rows written so far, when an interrupt stopped
        them, so what its reader has is a valid file."""
        finish = isinstance(exc, KeyboardInterrupt) and (
            self._output is None or self._output.in_place)
        with contextlib.suppress(Exception), interrupts.held():
            if finish:
                self._flush()
            self._writer.close()  # else pyarrow would try again when it is collected
        if hasattr(self._writer, "is_open"):
            self._writer.is_open = False
        if self._output is not None:
            self._output.discard(exc)
            if finish and exc is not None:
                exc.add_note(f"{self._output.name} ends after {self.rows:,} rows")


def _position(reader: Any, stream_bytes: int) -> int:
    """How far through the file: the compressed bytes decompressed so far for a gzip
    capture (``CaptureReader.compressed_done``), else the bytes of the records read."""
    done = reader.compressed_done
    return stream_bytes if done is None else done


@dataclass
class DecodeResult:
    """What writing one capture gave: rows written, frames read, reader problems."""

    path: str
    target: str
    rows: int
    frames: int
    problems: list[str]


def decode_to(path: str, target: str | IO[bytes], fmt: str, names: list[str] | None,
              display_filter: str | None = None, udp_port: int = ROCE_PORT,
              only_roce: bool = False, count: int | None = None,
              tick: Callable[[int], None] | None = None) -> DecodeResult:
    """Decode the capture at ``path`` into a columnar file: the task ``roce decode -T
    parquet|arrow`` runs per input (in a worker, or on a Dask worker).  ``names`` are the
    ``-e`` columns (None: ``default_names()``); ``tick(bytes read)`` now and then."""
    columns = resolve_names(names if names else default_names())
    flt = None
    if display_filter is not None:
        from roce.decoder.decode import make_filter

        flt = make_filter(display_filter)
    limit = count or -1
    reader = open_capture(path)
    schema = packet_schema(columns)
    own = isinstance(target, str) and target != "-"
    if own:
        make_directory(os.path.dirname(os.path.abspath(target)))  # type: ignore[arg-type]
    sink = TableSink(target, fmt, schema)
    done = frames = 0
    try:
        if flt is None:
            bulk = BulkBuilder(columns, udp_port, only_roce)
            for batch in reader.batches(BATCH):
                table = bulk.table(batch)
                frames += len(batch.datas)
                if 0 <= limit - sink.taken < table.num_rows:
                    table = table.slice(0, limit - sink.taken)
                sink.write(table)
                if tick is not None:
                    done += sum(batch.caplen) + 16 * len(batch.datas)
                    tick(_position(reader, done))
                if 0 <= limit <= sink.taken:
                    break
        else:
            recs: list[Any] = []
            taken = 0
            for rec in _decode(reader, udp_port, only_roce):  # type: ignore[arg-type]
                frames += 1
                if tick is not None:
                    done += rec.frame.caplen + 16
                    if not frames % BATCH:
                        tick(_position(reader, done))
                if not flt(rec.fields):
                    continue
                recs.append(rec)
                taken += 1
                if len(recs) >= BATCH:
                    sink.write(records_table(recs, columns, schema))
                    recs.clear()
                if taken == limit:
                    break
            if recs:
                sink.write(records_table(recs, columns, schema))
    except BaseException as exc:
        # the output is complete or absent: an interrupted or failed file is removed
        if isinstance(exc, KeyboardInterrupt):
            exc.add_note(f"after {frames:,} frames")
        sink.abort(exc)
        raise
    else:
        sink.close()
    finally:
        reader.close()
    return DecodeResult(path, target if own else "-", sink.rows, frames,  # type: ignore
                        [p.message for p in reader.problems])


__all__ = ["BulkBuilder", "Column", "DecodeResult", "FORMATS", "ROW_GROUP", "TableSink",
           "all_columns", "decode_to", "default_names", "packet_schema", "records_table",
           "resolve_names"]
