"""The ``-w FILE`` capture of the emulator's commands (``roce emulate``, ``roce target``).

One helper opens it, so every command reports an unwritable path the same way (an
``InputError``: exit 2, naming the file) and closes it however the run ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from roce.errors import InputError
from roce.pcapio import PcapWriter


@contextlib.contextmanager
def pcap_writer(path: str | None) -> Iterator[PcapWriter | None]:
    """A ``PcapWriter`` on ``path`` for the ``with`` block (None when no path is given)."""
    if not path:
        yield None
        return
    try:
        writer = PcapWriter(path)
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or e}") from None
    try:
        yield writer
    finally:
        writer.close()
