"""``roce stats`` on mirrored and tunnelled captures: the analyser sees the inner frames.

``Peel`` stands in for a ``CaptureReader`` and hands the analyser every batch with registered
tunnels (GRE, ERSPAN II/III, VXLAN) peeled (``roce.families.peel.peel``) and ERF records
unwrapped, so the flows of one mirror session are analysed as the RoCE flows they carry.
It reads batch by batch (not the record scanner), so ``roce stats`` uses it only when the
capture starts with a tunnel or ERF (``starts_with_tunnel`` peeks at a file's first frames);
plain RoCE captures keep the compiled record scanner.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any

from roce.families import registry
from roce.locate import LINKTYPE_ERF, WALK_LINKTYPES
from roce.pcapio import Batch, CaptureError, Frame, open_capture

# the link types the compiled walk reads: checked before the registry is loaded
ROCE_LINKS = WALK_LINKTYPES

PEEK = 16  # frames looked at before choosing the reader
PEEL_BATCH = 2048  # frames a batch when peeled frames are handed out one at a time


def capture_kind(path: str, udp_port: int) -> str | None:
    """What a capture file starts with, from its first frames: ``"tunnel"`` (ERF records or
    a registered tunnel), ``"ib"`` (native InfiniBand, also in ERF), or None (plain RoCE or
    anything else: nothing to do; decided without loading the registry when the first
    frames are RoCE)."""
    from roce import fast
    from roce.locate import OK

    if path == "-":
        return None
    try:
        with open_capture(path) as reader:
            frames = list(islice(iter(reader), PEEK))
    except (CaptureError, OSError):
        return None
    if all(fr.linktype in ROCE_LINKS and fast.walk(fr.data, fr.linktype, udp_port).status == OK
           for fr in frames):
        return None
    from roce.families.peel import starts_tunnel
    from roce.locate import LINKTYPE_INFINIBAND

    kind = None
    for fr in frames:
        if fr.linktype == LINKTYPE_INFINIBAND:
            return "ib"
        handler = registry(plugins=False).lookup("linktype", fr.linktype)
        if handler is not None and handler.skip is not None:
            step = handler.skip(fr.data, 0)
            if step is not None and step[1] == LINKTYPE_INFINIBAND:
                return "ib"
            kind = "tunnel"
        elif fr.linktype in ROCE_LINKS and starts_tunnel(
                Batch([fr.data], [fr.ts_ns], [fr.caplen], [fr.origlen], fr.linktype),
                udp_port):
            kind = "tunnel"
    return kind


def analysed(reader: Any, kind: str | None, udp_port: int) -> Any:
    """What ``roce stats`` analyses for a capture that ``capture_kind`` calls ``kind``: a
    ``Peel`` of ``reader`` when it starts with a tunnel or ERF records (native InfiniBand in
    ERF included), else ``reader`` itself (link type 247 is read in place, as RoCE is)."""
    from roce.locate import LINKTYPE_INFINIBAND

    if kind == "tunnel" or (kind == "ib" and reader.linktype != LINKTYPE_INFINIBAND):
        return Peel(reader, udp_port)
    return reader


def frames(reader: Any, udp_port: int) -> Iterator[Frame]:
    """The frames of a ``Peel`` (or any reader with batches), one at a time: the frames the
    analyser saw, for the second pass of ``roce stats --timeline``."""
    for b in reader.batches(PEEL_BATCH):
        lt = b.linktype
        for data, ts, cap, orig in zip(b.datas, b.ts_ns, b.caplen, b.origlen):
            yield Frame(data, ts, cap, orig, lt, 0)


class Peel:
    """A ``CaptureReader`` stand-in yielding batches with tunnels peeled."""

    def __init__(self, reader: Any, udp_port: int) -> None:
        self._reader = reader
        self._port = udp_port

    def can_scan_records(self) -> bool:
        return False

    def reads(self, linktype: int) -> bool:
        """Whether frames of ``linktype`` reach the analyser as frames it reads (RoCE,
        native InfiniBand, or unwrapped by a registered tunnel such as ERF)."""
        handler = registry(plugins=False).lookup("linktype", linktype)
        return linktype in ROCE_LINKS or (handler is not None and handler.unwrap is not None)

    def batches(self, n: int) -> Iterator[Batch]:
        from roce.families.peel import peel, unwrap_batch

        for batch in self._reader.batches(n):
            if batch.linktype not in ROCE_LINKS:
                handler = registry().lookup("linktype", batch.linktype)
                if handler is not None and handler.unwrap is not None:
                    # ERF: each record's packet, with its own lengths (erf.lengths)
                    batch = unwrap_batch(batch, handler) or batch
            if batch.linktype in ROCE_LINKS:
                batch = peel(batch, self._port)
            yield batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)


def cm_pairing(path: str) -> Any:
    """For a native InfiniBand capture (link type 247, or ERF records holding IB): the CM
    exchanges paired with the connections they set up (``roce.analysis.cm``); None for
    anything else.  A second pass over the file, frame by frame."""
    return cm_pairing_merged([path])


def cm_pairing_merged(paths: list[str]) -> Any:
    """``cm_pairing`` of several captures read as one time-ordered stream (``roce stats
    --merge``; frames numbered in that order, as the merged flow report numbers them); None
    when none of them holds native InfiniBand."""
    import heapq

    from roce.analysis import cm

    if "-" in paths:
        return None
    pairing = cm.CmPairing()
    readers = []
    try:
        for path in paths:
            readers.append(open_capture(path))
        merged = heapq.merge(*readers, key=lambda fr: fr.ts_ns) if len(readers) > 1 \
            else iter(readers[0])
        seen_ib = _pair(merged, pairing, stop_early=len(readers) == 1)
    except (CaptureError, OSError):
        return None
    finally:
        for r in readers:
            r.close()
    return pairing if seen_ib else None


def _pair(frames: Iterator[Frame], pairing: Any, stop_early: bool) -> bool:
    """Feed the native InfiniBand frames to ``pairing``; whether there were any (one
    capture: given up after ``PEEK`` frames without one)."""
    from roce.families.erf import unwrap
    from roce.families.ib import native as ib

    seen_ib = False
    for number, fr in enumerate(frames, 1):
        data = fr.data
        if fr.linktype == LINKTYPE_ERF:
            try:
                u = unwrap(data)
            except Exception:  # noqa: BLE001 - a bad record is not IB; skip it
                continue
            if u.linktype != ib.LINKTYPE_INFINIBAND:
                continue
            data = u.data[u.offset:]
        elif fr.linktype != ib.LINKTYPE_INFINIBAND:
            if stop_early and number > PEEK and not seen_ib:
                return False
            continue
        seen_ib = True
        d = ib.decode(data)
        if d.kind == "roce":
            pairing.feed(number, d.fields)
    return seen_ib
