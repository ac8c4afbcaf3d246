"""Running a chunked harness: chunk ``i`` of ``n`` inputs is a pure function of the seed and
``i``, so chunks can go to worker processes and their summaries be merged in chunk order; a
run is then the same whatever the number of workers.

A chunked harness is built by a picklable *factory* (called once per worker) and has
``run_chunk(index, n) -> Summary``; the factory's ``harness_name`` names an empty run.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from roce.testing.fuzz.results import Summary

CHUNK = 2048  # inputs per chunk: the unit of seeding, scanning and parallel work

_WORKER: Any = None


def _worker_init(factory: Callable[[], Any]) -> None:
    global _WORKER
    _WORKER = factory()


def _worker_chunk(args: tuple[int, int]) -> Summary:
    return _WORKER.run_chunk(*args)


def run_chunks(factory: Callable[[], Any], seed: int, count: int | None,
               time_limit: float | None, jobs: int = 1, chunk: int = CHUNK,
               progress: Callable[[Summary], None] | None = None) -> Summary:
    """Run ``factory().run_chunk(i, n)`` for chunks 0, 1, ... until ``count`` inputs or
    ``time_limit`` seconds, on ``jobs`` processes; merge in chunk order (deterministic)."""
    start = time.monotonic()
    deadline = None if time_limit is None else start + time_limit
    total: Summary | None = None
    plan: Iterator[tuple[int, int]] = _plan(count, chunk)

    def more() -> bool:
        return deadline is None or time.monotonic() < deadline

    def merge(s: Summary) -> None:
        nonlocal total
        if total is None:
            total = s
        else:
            total.merge(s)
        if progress is not None:
            progress(total)

    if jobs <= 1:
        harness = factory()
        for args in plan:
            if not more():
                break
            merge(harness.run_chunk(*args))
    else:
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        with ctx.Pool(jobs, _worker_init, (factory,)) as pool:
            pending: deque = deque()
            exhausted = False
            while True:
                while not exhausted and len(pending) < 2 * jobs and more():
                    args = next(plan, None)
                    if args is None:
                        exhausted = True
                        break
                    pending.append(pool.apply_async(_worker_chunk, (args,)))
                if not pending:
                    break
                merge(pending.popleft().get())
    if total is None:
        total = Summary(getattr(factory, "harness_name", "fuzz"), seed)
    total.elapsed = time.monotonic() - start
    return total


def _plan(count: int | None, chunk: int) -> Iterator[tuple[int, int]]:
    i = 0
    left = count
    while left is None or left > 0:
        n = chunk if left is None else min(chunk, left)
        yield i, n
        i += 1
        if left is not None:
            left -= n
