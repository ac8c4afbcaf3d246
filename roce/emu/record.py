"""The ``-w FILE`` capture of the emulator's commands (``roce emulate``, ``roce target``).

One helper opens it, so every command reports an unwritable path the same way (an
``InputError``: exit 2, naming the file) and ends it the same way: complete when the run
ends, removed when it fails or is interrupted (``roce.outfile``); a ``live`` capture
(``roce target``: what happened, as it happened) is written in place and kept, on whole
records, however the command ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from roce.pcapio import PcapWriter


@contextlib.contextmanager
def pcap_writer(path: str | None, live: bool = False) -> Iterator[PcapWriter | None]:
    """A ``PcapWriter`` on ``path`` for the ``with`` block (None when no path is given)."""
    if not path:
        yield None
        return
    with PcapWriter(path, live=live) as writer:
        yield writer
