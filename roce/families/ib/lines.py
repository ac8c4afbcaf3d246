"""One line per native InfiniBand packet, a batch at a time, from the compiled IB scan.

The same text as ``roce.families.ib.native.columns`` through ``Summarizer.line`` (tests hold the two
paths to identical output).  The compiled formatter (``roce._fastpath.ib_lines``, twin
``format_reference``) writes the line of every frame the scan passed straight from the scan
columns, with no Python object per header or field: that is what makes the InfiniBand lines
cheaper than RoCE's (tshark, the yardstick, reads LRH frames faster than Ethernet/IP/UDP ones).
Packets the scan does not pass (malformed, cut, raw, not IBA) and UD packets (MADs, CM, IPoIB
get their own Info) go to ``slow``; opcodes with several extended headers to ``_line``.
"""

from __future__ import annotations

import socket
from array import array
from collections.abc import Callable
from typing import Any

from roce.families.base.summary import (
    _MAYBE_SACK,  # AETHs that may be a selective NAK: their text is aeth_text's, in Python
    K_AETH,
    K_CNP,
    K_DETH,
    K_IETH,
    K_IMM,
    K_NONE,
    K_RETH,
    K_SLOW,
    KIND,
    NAMES,
    NS,
    SYNDROME_PARTS,
    Summarizer,
    aeth_text,
)
from roce.families.ib import mad as ibmad
from roce.families.ib import native as ib
from roce.families.ib.flags import IB_FLAG_TEXT, flag_index
from roce.locate import FLAG_A, FLAG_BECN, FLAG_FECN

PROTOCOL = "InfiniBand"
_GID_SRC = ib.LRH_SIZE + 8  # GRH source GID, then destination GID (16 bytes each)


class IbLines:
    """Keeps the scan columns and caches of one ``roce decode`` run."""

    def __init__(self, summ: Summarizer) -> None:
        self.summ = summ
        self._cols: dict[str, Any] | None = None
        self._size = 0

    def lines(self, batch: Any, first_number: int, limit: int,
              slow: Callable[[int, str], str]) -> list[str]:
        datas = batch.datas
        n = len(datas)
        if self._cols is None or self._size < n:
            self._size = max(n, 2048)
            self._cols = ib.scan_columns(self._size)
        c = self._cols
        ib.scan_batch(datas, c)
        m = min(n, limit)
        # the time column: written by the formatter when the batch lies in one second of
        # `-t r` (the usual case), else texts from the TimeColumn
        texts: list[str] | None = None
        times = None
        plan = self.summ.times.relative_plan(batch.ts_ns, m)
        if plan is None:
            texts = self.summ.times.batch(batch.ts_ns, range(m))
        else:
            stamps = batch.ts_ns
            if not (isinstance(stamps, array) and stamps.typecode == "q"):
                stamps = array("q", stamps)
            times = (plan[0].encode(), plan[1], plan[2], stamps)
        arrow = self.summ.arrow
        out, missing = format_batch(datas, c, m, first_number, texts,
                                    list(batch.origlen[:m]), arrow.encode(), times)
        # what the formatter leaves: frames the scan did not pass, UD, several ext. headers
        for i in missing:
            tt = texts[i] if texts is not None else _planned_time(times, i)
            if c["status"][i] or c["opcode"][i] in _UD_OPCODES:
                out[i] = slow(i, tt)
            else:  # several extended headers, or a time text too long for the buffer
                op = c["opcode"][i]
                info = (f" PSN={c['psn'][i]}{Summarizer._eth_text(datas[i], c['bth_off'][i], op)}"
                        if KIND[op] == K_SLOW else None)
                out[i] = _line(datas, c, i, first_number + i, tt, batch.origlen[i], arrow, info)
        return out


def _planned_time(times: Any, i: int) -> str:
    """Frame ``i``'s time text from a ``TimeColumn.relative_plan`` (as ``_relative``)."""
    prefix, base, digits, stamps = times
    x = stamps[i] - base
    return prefix.decode() + (f"{x:09d}" if digits == 9 else f"{x // 1000:06d}")


def _line(datas: list[bytes], cols: dict[str, Any], i: int, number: int, tt: str, ln: int,
          arrow: str, info: str | None = None) -> str:
    """The line of frame ``i``, which the scan passed; ``info``: the Info text after ``QP=``
    (None: from the first extended header's key columns)."""
    op = cols["opcode"][i]
    if info is None:
        info = _info(KIND[op], cols["psn"][i], cols["key0"][i], cols["key1"][i],
                     cols["key2"][i])
    data, grh = datas[i], cols["lnh"][i] == ib.LNH_GLOBAL
    src = _address(data, grh, _GID_SRC, cols["slid"][i])
    dst = _address(data, grh, _GID_SRC + 16, cols["dlid"][i])
    return (f"{number:5d} {tt} {src:>12} {arrow} {dst:<12} {PROTOCOL} {ln} {NAMES[op]} "
            f"QP=0x{cols['destqp'][i]:06x}{info}"
            + _flags(cols["flags"][i], cols["icrc_ok"][i], cols["vcrc_ok"][i]))


def _flags(fl: int, iok: int, vok: int) -> str:
    """The flag suffix from the scan columns (BTH flags as ``locate.FLAG_*``, CRCs ok)."""
    return IB_FLAG_TEXT[flag_index(fl & FLAG_A, fl & FLAG_FECN, fl & FLAG_BECN, iok, vok)]


def _info(kind: int, psn: int, k0: int, k1: int, k2: int) -> str:
    """The Info text after ``QP=...`` for the opcodes the compiled formatter takes."""
    if kind == K_NONE:
        return f" PSN={psn}"
    if kind == K_RETH:
        return f" PSN={psn} VA=0x{k0:x} RKey=0x{k1:08x} Len={k2}"
    if kind == K_AETH:
        return f" PSN={psn} {aeth_text(k0, psn, k1)}"
    if kind == K_CNP:
        return ""
    if kind == K_DETH:
        return f" PSN={psn} QKey=0x{k0:08x} SrcQP=0x{k1:06x}"
    if kind == K_IMM:
        return f" PSN={psn} ImmDt=0x{k0:08x}"
    return f" PSN={psn} InvRKey=0x{k0:08x}"  # K_IETH


_FORMATTED = frozenset((K_NONE, K_RETH, K_AETH, K_CNP, K_DETH, K_IMM, K_IETH))
_MAX_TIME = 200  # the compiled twin's limits (roce/families/ib/_lines.pxi)
_MAX_PIECE = 64


def _address(data: bytes, grh: bool, at: int, lid: int) -> str:
    if grh:
        return socket.inet_ntop(socket.AF_INET6, data[at:at + 16])
    return f"LID: {lid}"


def format_reference(datas: list[bytes], cols: dict[str, Any], n: int, first_number: int,
                     texts: list[str] | None, origlens: list[int], arrow: bytes,
                     times: Any = None) -> tuple[list[str | None], list[int]]:
    """Pure-Python twin of ``roce._fastpath.ib_lines``: (the line of each of the first ``n``
    scanned frames, None where ``IbLines.lines`` makes it (not passed by the scan, UD,
    several extended headers); the indexes of those).  The time texts are ``texts``, or
    (``texts`` None) made from ``times``, a ``TimeColumn.relative_plan`` and the stamps."""
    if len(arrow) > _MAX_PIECE:
        return [None] * n, list(range(n))
    arrow_text = arrow.decode()
    out: list[str | None] = []
    for i in range(n):
        op = cols["opcode"][i]
        kind = KIND[op]
        if texts is not None:
            tt = texts[i]
        elif 0 <= times[3][i] - times[1] < NS:
            tt = _planned_time(times, i)
        else:
            tt = "x" * (_MAX_TIME + 1)  # outside the plan's second: left to Python
        if (cols["status"][i] or op in _UD_OPCODES or kind not in _FORMATTED
                or (kind == K_AETH and _MAYBE_SACK[cols["key0"][i]])
                or len(tt.encode()) > _MAX_TIME):
            out.append(None)
            continue
        out.append(_line(datas, cols, i, first_number + i, tt, origlens[i], arrow_text))
    return out, [i for i, line in enumerate(out) if line is None]


def configure(ext: Any) -> None:
    """Hand the compiled formatter its text tables, all from roce.families.base.summary."""
    ext.ib_lines_configure({
        "names": [t.encode() for t in NAMES],
        "syn_pre": [SYNDROME_PARTS[s][0].encode() for s in range(256)],
        "syn_post": [SYNDROME_PARTS[s][1].encode() for s in range(256)],
        "flags": [t.encode() for t in IB_FLAG_TEXT],
        "protocol": PROTOCOL.encode(), "kinds": list(KIND), "ud": set(_UD_OPCODES),
        "k": {"none": K_NONE, "reth": K_RETH, "aeth": K_AETH, "deth": K_DETH, "imm": K_IMM,
              "ieth": K_IETH, "cnp": K_CNP},
        "maybe_sack": list(_MAYBE_SACK), "flag_a": FLAG_A, "flag_fecn": FLAG_FECN,
        "flag_becn": FLAG_BECN, "lnh_global": ib.LNH_GLOBAL,
        "gid_src": _GID_SRC})


def _compiled() -> Any:
    from roce import fast

    ext = getattr(fast, "_ext", None)
    if ext is None or not hasattr(ext, "ib_lines"):
        return None
    configure(ext)
    return ext


_UD_OPCODES = ibmad._UD
_EXT = _compiled()
format_batch: Callable[..., tuple[list[str | None], list[int]]] = (
    _EXT.ib_lines if _EXT is not None else format_reference)
