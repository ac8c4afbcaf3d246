"""A run's own rows of the registry: ``-d TABLE==VALUE,FAMILY`` and ``--uet-layout``.

They are plain data (``RunRows``) so that a task sent to another process carries them: a
forked pool worker inherits the parent's registry, but a Dask worker is a process of its
own, started before the run.  ``applied`` restores the tables afterwards, so a worker that
serves several runs keeps none of one run's rows for the next.  A worker may run tasks in
threads: tasks of the same run share the applied rows (the last one out restores the
tables), and a task of a run with other rows waits until they are gone.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from roce.families.registry import Registry

RunRows = tuple[tuple[str, ...], str]  # (-d specs, UET reading)
NO_ROWS: RunRows = ((), "spec")


def run_rows(decode_as: Sequence[str] | None, layout: str | None) -> RunRows:
    return tuple(decode_as or ()), layout or "spec"


def apply(rows: RunRows) -> list[tuple[str, int, str]]:
    """Add the rows to the process-wide registry; each ``-d`` row as (table, value, family)."""
    from roce.families import registry, uet

    specs, layout = rows
    reg = registry()
    added = [reg.decode_as(spec) for spec in specs]
    if layout != "spec":  # every UET row, -d's included, reads the other layouts
        uet.use_reading(reg, layout)
    return added


class _InUse:
    """The rows applied by ``applied`` in this process, and how many tasks hold them."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.rows: RunRows | None = None
        self.holders = 0
        self.saved: dict[str, dict[int, object]] = {}


_IN_USE = _InUse()


@contextmanager
def applied(rows: RunRows) -> Iterator[Registry]:
    """The registry with ``rows`` for the body, as it was afterwards."""
    from roce.families import registry

    reg = registry()
    if rows == NO_ROWS:
        yield reg
        return
    use = _IN_USE
    with use.cond:
        while use.holders and use.rows != rows:
            use.cond.wait()
        if not use.holders:
            use.saved = {table: dict(values) for table, values in reg.tables.items()}
            try:
                apply(rows)
            except BaseException:
                _restore(reg, use.saved)
                raise
            use.rows = rows
        use.holders += 1
    try:
        yield reg
    finally:
        with use.cond:
            use.holders -= 1
            if not use.holders:
                _restore(reg, use.saved)
                use.rows = None
                use.cond.notify_all()


def _restore(reg: Registry, saved: dict[str, dict[int, object]]) -> None:
    for table, values in saved.items():
        reg.tables[table].clear()
        reg.tables[table].update(values)  # type: ignore[arg-type]


__all__ = ["NO_ROWS", "RunRows", "apply", "applied", "run_rows"]
