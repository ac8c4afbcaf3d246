"""The progress bar ``roce decode`` and ``roce stats`` draw on stderr during long runs.

It appears only when stderr is a terminal that is not also showing the output, and only
once a run has lasted ``ROCE_PROGRESS_AFTER`` seconds (default 1; 0 shows it at once).
rich draws it, transient: it is gone when the run ends.  With the file's size known it
shows bytes done and time left, otherwise frames only.  Over a set of files (``files``) it is
one bar for them all: bytes of the whole set, rate, time left and files done.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

AFTER_DEFAULT = 1.0


def _after() -> float:
    try:
        return max(float(os.environ.get("ROCE_PROGRESS_AFTER", AFTER_DEFAULT)), 0.0)
    except ValueError:
        return AFTER_DEFAULT


class Progress:
    """``update(bytes done or None, frames)`` as the run goes; ``close()`` at the end."""

    def __init__(self, label: str, total: int, out: TextIO | None = None,
                 files: int | None = None, unit: str = "files") -> None:
        self.label = label
        self.total = max(total, 0)
        self.files = files  # a set of files: their count, shown as "k/N files"
        self.unit = unit  # what the set holds: "files" (sized in bytes), or "runs" (counted)
        self._frames = 0
        self._files_done = 0
        self.after = _after()
        self.start = time.monotonic()
        self._bar: Any = None
        self._task: Any = None
        shared = out is not None and getattr(out, "isatty", None) is not None and out.isatty()
        self.enabled = sys.stderr.isatty() and not shared

    def update(self, done: int | None, frames: int | None,
               files_done: int | None = None) -> None:
        """``frames`` or ``files_done`` None: unchanged."""
        if not self.enabled:
            return
        if frames is not None:
            self._frames = frames
        if files_done is not None:
            self._files_done = files_done
        if self._bar is None:
            if time.monotonic() - self.start < self.after:
                return
            self._open()
        self._bar.update(self._task, frames=self._frames, files=self._files_done,
                         completed=min(done, self.total) if done is not None and self.total
                         else None)

    def _open(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )
        from rich.progress import Progress as Bar

        columns: list[Any] = [TextColumn(self.label), BarColumn()]
        if self.total and self.unit == "files":
            columns.append(DownloadColumn())
            if self.files is not None:
                columns.append(TransferSpeedColumn())
            columns.append(TimeRemainingColumn())
        if self.files is not None:
            if self.unit != "files":
                columns.append(TimeRemainingColumn())
            columns.append(TextColumn(f"{{task.fields[files]}}/{self.files} {self.unit}"))
        else:
            columns.append(TextColumn("{task.fields[frames]:,} frames"))
        self._bar = Bar(*columns, console=Console(file=sys.stderr), transient=True)
        self._task = self._bar.add_task(self.label, total=self.total or None, frames=0,
                                        files=0)
        self._bar.start()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
