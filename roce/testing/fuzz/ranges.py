"""Byte ranges for the memory invariants: where a buffer changed, and which of those bytes
no granted range covers (the responder harness and ``run_program`` both check that memory
changes only where a request was allowed to write)."""

from __future__ import annotations

Span = tuple[int, int]  # [lo, hi)


def changed(old: bytes, new: bytes) -> list[Span]:
    """[lo, hi) runs of differing bytes."""
    out = []
    i, n = 0, min(len(old), len(new))
    while i < n:
        if old[i] != new[i]:
            j = i
            while j < n and old[j] != new[j]:
                j += 1
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


def subtract(span: Span, allowed: list[Span]) -> list[Span]:
    """Parts of ``span`` covered by none of ``allowed``."""
    parts = [span]
    for a, b in allowed:
        nxt = []
        for lo, hi in parts:
            if b <= lo or a >= hi:
                nxt.append((lo, hi))
                continue
            if lo < a:
                nxt.append((lo, a))
            if b < hi:
                nxt.append((b, hi))
        parts = nxt
    return parts


def describe(allowed: list[Span]) -> str:
    """The first few ranges as ``lo..hi`` (inclusive), for a failure's detail."""
    if not allowed:
        return "nothing"
    return ", ".join(f"{a}..{b - 1}" for a, b in sorted(set(allowed))[:4])
