"""The corpus of saved failures: each ``Failure`` as ``<harness>-<check>-<digest>.pcap``
(its frames) beside a ``.txt`` holding its one-line reason
(``harness/check key=value ...: detail``), and ``load_corpus`` to read them back as
``Saved`` records for replay."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from roce.locate import LINKTYPE_ETHERNET
from roce.outfile import make_directory, open_output
from roce.pcapio import PcapWriter, open_capture
from roce.testing.fuzz.results import Failure


def save_failure(directory: str | os.PathLike, f: Failure) -> Path:
    """Write ``f`` as ``<harness>-<check>-<digest>.pcap`` and a ``.txt`` reason line."""
    d = Path(directory)
    make_directory(str(d))
    stem = d / f"{f.harness}-{f.check}-{f.digest()}"
    # each file complete or absent (roce.outfile); the reason last: load_corpus reads a
    # failure from its .txt, so a failure is saved once its .pcap is
    with PcapWriter(str(stem) + ".pcap", linktype=f.linktype) as w:
        for i, frame in enumerate(f.frames):
            w.write(frame, ts_ns=i * 1000)
    with open_output(str(stem) + ".txt", "w", dash=False) as out:
        out.write(f.reason() + "\n")
    return Path(str(stem) + ".pcap")


@dataclass
class Saved:
    """A failure read back from a corpus directory."""

    path: Path  # the .pcap
    harness: str
    check: str
    keys: dict[str, str]
    detail: str
    frames: list[bytes]
    linktype: int


def load_corpus(directory: str | os.PathLike) -> list[Saved]:
    """Every failure saved in ``directory`` (in file-name order); a missing directory or a
    reason file that does not parse gives nothing."""
    out = []
    for txt in sorted(Path(directory).glob("*.txt")):
        text = txt.read_text().strip()
        line = text.splitlines()[0] if text else ""
        head, _, detail = line.partition(": ")
        words = head.split()
        if not words or "/" not in words[0]:
            continue
        harness, _, check = words[0].partition("/")
        keys = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        pcap = txt.with_suffix(".pcap")
        frames: list[bytes] = []
        linktype = int(keys.get("linktype", LINKTYPE_ETHERNET))
        if pcap.exists():
            with open_capture(str(pcap)) as cap:
                frames = [fr.data for fr in cap]
        out.append(Saved(pcap, harness, check, keys, detail, frames, linktype))
    return out
