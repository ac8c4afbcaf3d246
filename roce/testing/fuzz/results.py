"""What a fuzz run reports: ``Failure`` (one broken invariant and the input that broke it)
and ``Summary`` (counts, the first failures per check, notes), shared by every harness."""

from __future__ import annotations

import hashlib
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roce.locate import LINKTYPE_ETHERNET, ROCE_PORT

MAX_FAILURES_PER_CHECK = 25  # failures kept (and saved) per check name; the rest are counted


@dataclass
class Failure:
    """One broken invariant and the input that broke it."""

    harness: str  # "decoder", "responder", "wire"
    check: str  # which invariant: "walk-twin", "parse-raised", "write-outside-grant" ...
    detail: str  # one line saying what was seen against what was expected
    frames: list[bytes]  # the input (the last frames sent, for the responder and wire)
    linktype: int = LINKTYPE_ETHERNET
    udp_port: int = ROCE_PORT
    context: dict[str, Any] = field(default_factory=dict)  # seed, step: how to get here again

    def digest(self) -> str:
        h = hashlib.sha1(self.check.encode())
        for f in self.frames:
            h.update(len(f).to_bytes(4, "big") + f)
        return h.hexdigest()[:12]

    def reason(self) -> str:
        """The one-line reason file: ``harness/check key=value ...: detail``."""
        keys = {"linktype": self.linktype, "udp_port": self.udp_port, **self.context}
        detail = " ".join(self.detail.split())
        return f"{self.harness}/{self.check} " + " ".join(
            f"{k}={v}" for k, v in keys.items()) + f": {detail}"


@dataclass
class Summary:
    """What a run did and found; ``lines()`` is deterministic for a seed and a count."""

    harness: str
    seed: int
    inputs: int = 0
    counts: Counter = field(default_factory=Counter)  # category -> count
    failed: Counter = field(default_factory=Counter)  # check -> count
    failures: list[Failure] = field(default_factory=list)  # the first ones per check
    elapsed: float = 0.0
    notes: list[str] = field(default_factory=list)

    def add_failure(self, f: Failure) -> None:
        self.failed[f.check] += 1
        if self.failed[f.check] <= MAX_FAILURES_PER_CHECK:
            self.failures.append(f)

    def merge(self, other: Summary) -> None:
        self.inputs += other.inputs
        self.counts.update(other.counts)
        for f in other.failures:
            if self.failed[f.check] < MAX_FAILURES_PER_CHECK:
                self.failures.append(f)
            self.failed[f.check] += 1
        # failures the other side counted but did not keep
        for check, n in other.failed.items():
            kept = sum(1 for f in other.failures if f.check == check)
            self.failed[check] += n - kept

    @property
    def ok(self) -> bool:
        return not self.failed

    def lines(self) -> list[str]:
        out = [f"roce fuzz {self.harness}: seed {self.seed}, {self.inputs} inputs, "
               f"{sum(self.failed.values())} failures"]
        for key in sorted(self.counts):
            out.append(f"  {key}: {self.counts[key]}")
        for check in sorted(self.failed):
            out.append(f"  FAILED {check}: {self.failed[check]}")
        for f in self.failures[:10]:
            out.append(f"    {f.check}: {f.detail[:200]}")
        out.extend(f"  note: {n}" for n in self.notes)
        out.append("result: " + ("OK" if self.ok else "FAILED"))
        return out


def exc_line(exc: BaseException) -> str:
    """An exception in one line, with where it was raised: the detail of a finding."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno} in {tb[-1].name}" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


def short(value: object) -> str:
    """``repr(value)`` cut to fit a one-line detail."""
    text = repr(value)
    return text if len(text) < 120 else text[:117] + "..."
