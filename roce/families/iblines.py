"""One line per native InfiniBand packet, a batch at a time, from the compiled IB scan.

The same text as ``roce.families.ib.columns`` through ``Summarizer.line`` (tests hold the two
paths to identical output), built the way ``Summarizer.fast_lines`` builds RoCE's: a flat
loop over scan columns, the part of the line that depends only on addresses, opcode, QP and
length cached.  Packets the scan does not pass (malformed, cut, raw, not IBA) and UD packets
(MADs, CM, IPoIB get their own Info) go to ``slow``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from typing import Any

from ..dissect.summary import (
    FLAG_TEXT,
    K_AETH,
    K_CNP,
    K_DETH,
    K_IETH,
    K_IMM,
    K_NONE,
    K_RETH,
    KIND,
    NAMES,
    SYNDROME_PARTS,
    Summarizer,
)
from ..headers import LAYOUTS
from . import ib, ibmad

PROTOCOL = "InfiniBand"
BAD_VCRC = " [BAD VCRC]"
_GID_SRC = ib.LRH_SIZE + 8  # GRH source GID, then destination GID (16 bytes each)
_DESTQP = LAYOUTS["bth"].field("destqp")
_BTH_QP_END = (_DESTQP.bit_offset + _DESTQP.bits) // 8  # LRH .. BTH DestQP: the cache key


class IbLines:
    """Keeps the scan columns and caches of one ``roce decode`` run."""

    def __init__(self, summ: Summarizer) -> None:
        self.summ = summ
        self._cols: dict[str, Any] | None = None
        self._size = 0
        self._mid: dict[bytes, tuple[str, int]] = {}

    def _middle(self, key: bytes, lnh: int, slid: int, dlid: int, op: int, qp: int,
                ln: int) -> tuple[str, int]:
        """The columns between time and PSN; they depend only on the bytes from LRH to BTH
        DestQP (the cache key) and on the frame length."""
        if lnh == ib.LNH_GLOBAL:
            src = socket.inet_ntop(socket.AF_INET6, key[_GID_SRC:_GID_SRC + 16])
            dst = socket.inet_ntop(socket.AF_INET6, key[_GID_SRC + 16:_GID_SRC + 32])
        else:
            src, dst = f"LID: {slid}", f"LID: {dlid}"
        text = f"{src:>12} {self.summ.arrow} {dst:<12} {PROTOCOL} {ln} {NAMES[op]} QP=0x{qp:06x}"
        if len(self._mid) > 65536:
            self._mid.clear()
        value = self._mid[key] = (text, ln)
        return value

    def lines(self, batch: Any, first_number: int, limit: int,
              slow: Callable[[int, str], str]) -> list[str]:
        datas, origlens = batch.datas, batch.origlen
        n = len(datas)
        if self._cols is None or self._size < n:
            self._size = max(n, 2048)
            self._cols = ib.scan_columns(self._size)
        c = self._cols
        ib.scan_batch(datas, c)
        cols: list[Sequence[Any]] = [
            (c[k] if len(c[k]) == n else c[k][:n]).tolist()
            for k in ("status", "lnh", "opcode", "destqp", "psn", "flags", "dlid", "slid",
                      "bth_off", "icrc_ok", "vcrc_ok", "key0", "key1", "key2")]
        index: Sequence[int] = range(min(n, limit))
        numbers = range(first_number, first_number + len(index))
        labels = (list(map(str, numbers)) if numbers and numbers[0] >= 10000
                  else [f"{x:5d}" for x in numbers])
        texts = self.summ.times.batch(batch.ts_ns, index)
        mid, kinds, syn_parts, ud = self._mid, KIND, SYNDROME_PARTS, _UD_OPCODES
        out: list[str] = []
        add = out.append
        for i, num, tt, st, lnh, op, qp, psn, fl, dl, sl, b, iok, vok, k0, k1, k2, data, ln in \
                zip(index, labels, texts, *cols, datas, origlens):
            if st or op in ud:
                add(slow(i, tt))
                continue
            key = data[:b + _BTH_QP_END]
            mm = mid.get(key)
            if mm is None or mm[1] != ln:
                mm = self._middle(key, lnh, sl, dl, op, qp, ln)
            m = mm[0]
            flags = FLAG_TEXT[(1 if fl & 4 else 0) | (0 if iok else 4)]
            if not vok:
                flags += BAD_VCRC
            kind = kinds[op]
            if kind == K_NONE:
                add(f"{num} {tt} {m} PSN={psn}{flags}")
            elif kind == K_RETH:
                add(f"{num} {tt} {m} PSN={psn} VA=0x{k0:x} RKey=0x{k1:08x} Len={k2}{flags}")
            elif kind == K_AETH:
                pre, post = syn_parts[k0]
                add(f"{num} {tt} {m} PSN={psn} {pre} MSN={k1}{post}{flags}")
            elif kind == K_CNP:
                add(f"{num} {tt} {m}{flags}")
            elif kind == K_DETH:
                add(f"{num} {tt} {m} PSN={psn} QKey=0x{k0:08x} SrcQP=0x{k1:06x}{flags}")
            elif kind == K_IMM:
                add(f"{num} {tt} {m} PSN={psn} ImmDt=0x{k0:08x}{flags}")
            elif kind == K_IETH:
                add(f"{num} {tt} {m} PSN={psn} InvRKey=0x{k0:08x}{flags}")
            else:
                add(f"{num} {tt} {m} PSN={psn}{Summarizer._eth_text(data, b, op)}{flags}")
        return out


_UD_OPCODES = ibmad._UD
