"""The table ``roce sweep`` writes: CSV or Parquet (by the file's extension), one row per
run, read back to resume.

The columns are the union of the rows' keys in first-seen order (runs on a switched
network have ``fabric.*`` columns, a failed run has few), so the file is rewritten whole at
each save, atomically (a temporary file renamed over it): an interrupted sweep leaves the
rows saved so far, never half a file.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from typing import IO, Any

from roce.errors import InputError, UsageError
from roce.outfile import open_output

FORMATS = (".csv", ".parquet")


def table_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise UsageError(f"-o {path}: the file name must end in .csv or .parquet")
    if ext == ".parquet":
        from roce.extras import need_pyarrow

        need_pyarrow("-o FILE.parquet")
    return ext[1:]


def columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for r in rows:
        seen.update(dict.fromkeys(r))
    return list(seen)


def read(path: str) -> list[dict[str, Any]]:
    """The rows of an earlier sweep (none if the file does not exist)."""
    if not os.path.exists(path):
        return []
    try:
        if table_format(path) == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None
    except (csv.Error, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise InputError(f"{path}: not a sweep table to resume ({e})") from None


def write(path: str, rows: Sequence[dict[str, Any]]) -> None:
    """The whole table, in place of the last save (``roce.outfile``: under a temporary name,
    renamed when complete)."""
    if table_format(path) == "parquet":
        with open_output(path, "wb", dash=False) as f:
            _write_parquet(f, rows)
        return
    with open_output(path, "w", dash=False, newline="") as f:
        w = csv.DictWriter(f, columns(rows), restval="")
        w.writeheader()
        w.writerows(rows)


def _write_parquet(out: IO[bytes], rows: Sequence[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays = {}
    for name in columns(rows):
        values = [r.get(name) for r in rows]
        try:
            arrays[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            # a column whose runs disagree on the type (text in one, a number in another)
            arrays[name] = pa.array([None if v is None else str(v) for v in values])
    pq.write_table(pa.table(arrays), out)


__all__ = ["columns", "read", "table_format", "write"]
