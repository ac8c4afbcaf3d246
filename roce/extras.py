"""The optional extras some paths need, and the error that names the extra to install.

pyarrow (columnar output: ``-T parquet|arrow``, ``roce stats -T parquet``, sweep tables)
comes with the ``parquet`` extra (``pip install "roce[parquet]"``; pyproject.toml lists it).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from roce.errors import UsageError

INSTALL_HINT = 'pip install "roce[parquet]"'


def need_pyarrow(what: str = "-T parquet") -> Any:
    """pyarrow, or a UsageError naming the extra that brings it."""
    if "pyarrow" not in sys.modules:
        # The system allocator gives freed row groups back to the OS; pyarrow's default
        # pool (jemalloc/mimalloc) keeps them: ~25 MB more at the peak on a 200 MB capture.
        # Read once, when pyarrow loads: a program that loaded it first keeps its choice.
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    try:
        import pyarrow
    except ImportError:
        raise UsageError(f"{what} needs pyarrow: {INSTALL_HINT}") from None
    return pyarrow


__all__ = ["INSTALL_HINT", "need_pyarrow"]
