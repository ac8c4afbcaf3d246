"""Many captures at once: expanding files, directories and globs; running one task per file
in worker processes (``-j N``) or on a Dask cluster (``--scheduler``); one progress bar for
the set; ``roce stats --merge`` (the files of one session as one time-ordered stream).

A task is a top-level function of plain, picklable arguments returning plain data, so the
same task runs in this process, in a forked worker or on a Dask worker that has only
``pip install roce`` and the paths.  A member that cannot be read comes back as a
:class:`Failed` result: it is reported, the others go on, and the command exits 2.

Stopped (a signal, an error), a run stops its workers with it: queued tasks are dropped,
worker processes get SIGTERM (they remove their temporary files, ``roce.interrupts.worker``)
and SIGKILL after ``STOP_WAIT`` seconds, and tasks queued on Dask are cancelled.
"""

from __future__ import annotations

import contextlib
import glob
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from roce import interrupts
from roce.decoder.progress import Progress
from roce.errors import InputError, UsageError
from roce.outfile import remove_temporaries
from roce.pcapio import Batch, CaptureReader, open_capture

POLL = 0.2  # seconds between progress updates while workers run
STOP_WAIT = 5.0  # seconds a stopped worker has to remove its files before SIGKILL


@dataclass
class Failed:
    """A member that could not be read."""

    path: str
    message: str


def expand(items: Sequence[str]) -> list[str]:
    """Files, directories (their regular files, sorted, hidden ones skipped) and globs, in
    the order given; a name that matches nothing (or an empty directory) is kept, to be
    reported as unreadable."""
    out: list[str] = []
    for item in items:
        if item == "-":
            out.append(item)
        elif os.path.isdir(item):
            files = sorted(os.path.join(item, n) for n in os.listdir(item)
                           if not n.startswith(".") and os.path.isfile(os.path.join(item, n)))
            out += files or [item]  # an empty directory is reported as unreadable
        elif glob.has_magic(item):
            hits = sorted(p for p in glob.glob(item) if os.path.isfile(p))
            out += hits or [item]
        else:
            out.append(item)
    if "-" in out and len(out) > 1:
        raise UsageError("standard input (-) cannot be one of several inputs")
    return out


def size_of(path: str) -> int:
    try:
        st = os.stat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def default_jobs() -> int:
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


# -- progress shared with workers ---------------------------------------------------------------

_SHARED: Any = None  # a multiprocessing.Value in forked workers: bytes done by all tasks


def _init_worker(shared: Any) -> None:
    global _SHARED
    _SHARED = shared
    # the parent decides when to stop: SIGINT and SIGHUP (sent to the whole process group
    # by a terminal) are ignored here; the parent's SIGTERM removes this worker's
    # temporary files and ends it at once
    interrupts.worker(remove_temporaries)


class Ticker:
    """What a task calls as it reads: bytes done in its file.  In a worker the bytes go to
    the counter the parent shares; in-process straight to the bar."""

    def __init__(self, local: Callable[[int], None] | None = None) -> None:
        self.local = local
        self.last = 0

    def __call__(self, done: int) -> None:
        step, self.last = done - self.last, done
        if step <= 0:
            return
        if self.local is not None:
            self.local(step)
        elif _SHARED is not None:
            with _SHARED.get_lock():
                _SHARED.value += step


# -- running the tasks --------------------------------------------------------------------------


Done = Callable[[int, Any], None]  # called with (index, result) as each task finishes


def run(task: Callable[..., Any], paths: Sequence[Any], args: tuple[Any, ...], *, jobs: int,
        scheduler: str | None, label: str, out: Any = None,
        sizes: Sequence[int] | None = None, on_result: Done | None = None,
        unit: str = "files") -> list[Any]:
    """``task(path, *args, ticker)`` for every path, results in the paths' order; a task
    raising ``InputError`` gives a :class:`Failed`.  ``jobs`` worker processes (1: in this
    process), or the Dask scheduler at ``scheduler``.  The items need not be paths (``roce
    sweep`` passes run options): ``sizes`` then gives each one's weight on the progress bar
    (the units its task ticks), and ``on_result`` sees each result as it arrives, so a caller
    can save them before the set is done; ``unit`` names the items on the bar."""
    weights = [size_of(p) for p in paths] if sizes is None else list(sizes)
    bar = Progress(label, sum(weights), out, files=len(paths), unit=unit)
    finished = [0]

    def note(i: int, result: Any) -> None:
        finished[0] += 1
        if on_result is not None:
            on_result(i, result)

    try:
        if scheduler:
            return _run_dask(task, paths, args, scheduler, bar, weights, note)
        if jobs <= 1 or len(paths) <= 1:
            return _run_here(task, paths, args, bar, weights, note)
        return _run_pool(task, paths, args, jobs, bar, note)
    except KeyboardInterrupt as exc:
        if len(paths) > 1:
            exc.add_note(f"after {finished[0]} of {len(paths)} {unit}")
        raise
    finally:
        bar.close()


def _guarded(task: Callable[..., Any], path: str, args: tuple[Any, ...],
             ticker: Ticker) -> Any:
    try:
        return task(path, *args, ticker)
    except InputError as exc:
        return Failed(path, str(exc))


def guarded_remote(task: Callable[..., Any], path: str, args: tuple[Any, ...]) -> Any:
    """The Dask task: no progress channel back, the result tells when it is done."""
    return _guarded(task, path, args, Ticker())


def _run_here(task: Callable[..., Any], paths: Sequence[Any], args: tuple[Any, ...],
              bar: Progress, weights: list[int], note: Done) -> list[Any]:
    done, finished = 0, 0

    def local(step: int) -> None:
        nonlocal done
        done += step
        bar.update(done, None, files_done=finished)

    results = []
    for path in paths:
        results.append(_guarded(task, path, args, Ticker(local)))
        note(finished, results[-1])
        finished += 1
        done = sum(weights[:finished])
        bar.update(done, None, files_done=finished)
    return results


def _run_pool(task: Callable[..., Any], paths: Sequence[Any], args: tuple[Any, ...],
              jobs: int, bar: Progress, note: Done) -> list[Any]:
    # imported here, not at the top: `roce decode` / `roce stats` on one file import this
    # module for their options, and the pool machinery costs them ~15 ms of start-up
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

    # fork: workers start in milliseconds and inherit the imported package (the fast path
    # turns its OpenMP loops off in a forked child: roce.fast registers that at fork).
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    shared = ctx.Value("q", 0)
    with ProcessPoolExecutor(min(jobs, len(paths)), mp_context=ctx, initializer=_init_worker,
                             initargs=(shared,)) as pool:
        futures: dict[Future[Any], int] = {
            pool.submit(_guarded, task, p, args, Ticker()): i for i, p in enumerate(paths)}
        results: list[Any] = [None] * len(paths)
        pending = set(futures)
        finished = 0
        try:
            while pending:
                ready, pending = wait(pending, timeout=POLL, return_when=FIRST_COMPLETED)
                for fut in ready:
                    results[futures[fut]] = fut.result()
                    note(futures[fut], results[futures[fut]])
                    finished += 1
                bar.update(shared.value, None, files_done=finished)
        except BaseException as exc:
            # interrupted, or failed: tasks not started are dropped, running ones stopped
            stopped = _stop_workers(pool)
            if stopped and isinstance(exc, KeyboardInterrupt):
                exc.add_note(f"{stopped} worker process{'es' * (stopped > 1)} stopped")
            raise
    return results


def _stop_workers(pool: Any) -> int:
    """Stop a process pool now: queued tasks cancelled, every worker sent SIGTERM (it
    removes its temporary files and exits; ``interrupts.worker``), SIGKILL for one still
    there after ``STOP_WAIT`` seconds.  The number of workers that were running."""
    import time

    # Python before 3.14 has no public way to end a pool's workers; its process table is
    # the one place that lists them
    procs = [p for p in list((getattr(pool, "_processes", None) or {}).values())
             if p.is_alive()]
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        with contextlib.suppress(OSError):
            p.terminate()
    deadline = time.monotonic() + STOP_WAIT
    for p in procs:
        p.join(max(deadline - time.monotonic(), 0))
    for p in procs:
        if p.is_alive():
            with contextlib.suppress(OSError):
                p.kill()
            p.join(1)
    return len(procs)


def _run_dask(task: Callable[..., Any], paths: Sequence[Any], args: tuple[Any, ...],
              scheduler: str, bar: Progress, weights: list[int], note: Done) -> list[Any]:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise UsageError('--scheduler needs dask.distributed: pip install "roce[dask]"') \
            from None
    try:
        client = Client(scheduler, timeout=5)
    except (OSError, TimeoutError, ValueError) as exc:
        raise InputError(f"--scheduler {scheduler}: cannot reach the Dask scheduler ({exc})") \
            from None
    futures: list[Any] = []
    try:
        futures = [client.submit(guarded_remote, task, p, args, pure=False) for p in paths]
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[Any] = [None] * len(paths)
        done_bytes = finished = 0
        for fut in as_completed(futures):
            i = index[fut.key]
            results[i] = fut.result()
            note(i, results[i])
            finished += 1
            done_bytes += weights[i]
            bar.update(done_bytes, None, files_done=finished)
        return results
    except BaseException:
        # stopped: the cluster drops the tasks not started (a running one cannot be cut
        # short on a Dask worker; its output is written whole, under a temporary name)
        with contextlib.suppress(Exception):
            client.cancel(futures)
        raise
    finally:
        client.close()


# -- merging the files of one session -----------------------------------------------------------


def merged_batches(sources: Sequence[Iterable[Batch]]) -> Iterator[Batch]:
    """Batches of several captures merged in time order, as ``heapq.merge`` would merge
    their frames by timestamp (each capture's own order kept; equal times: the earlier
    source first), but cut in runs: captures that do not overlap in time (rotating files of
    one interface) pass through whole batches, which the flow engine takes in bulk."""
    its = [iter(src) for src in sources]
    heads: list[list[Any] | None] = [None] * len(its)  # [batch, position] per source

    def refill(i: int) -> None:
        for b in its[i]:
            if b.datas:
                heads[i] = [b, 0]
                return
        heads[i] = None

    for i in range(len(its)):
        refill(i)
    while True:
        live = [(h[0].ts_ns[h[1]], i) for i, h in enumerate(heads) if h is not None]
        if not live:
            return
        _, i = min(live)
        others = [(t, j) for t, j in live if j != i]
        limit, first = min(others) if others else (None, -1)
        batch, pos = heads[i]  # type: ignore[misc]
        ts = batch.ts_ns
        end = pos + 1
        if limit is None:
            end = len(ts)
        else:
            while end < len(ts) and (ts[end] < limit or (ts[end] == limit and i < first)):
                end += 1
        if pos == 0 and end == len(ts):
            yield batch
        else:
            yield Batch(batch.datas[pos:end], ts[pos:end], batch.caplen[pos:end],
                        batch.origlen[pos:end], batch.linktype)
        if end == len(ts):
            refill(i)
        else:
            heads[i][1] = end  # type: ignore[index]


def open_members(paths: list[str]) -> tuple[list[CaptureReader], list[Failed]]:
    """Open every capture; those that cannot be read become failures."""
    readers, failed = [], []
    for p in paths:
        try:
            readers.append(open_capture(p))
        except InputError as exc:
            failed.append(Failed(p, str(exc)))
    return readers, failed


__all__ = ["Failed", "Ticker", "default_jobs", "expand", "merged_batches", "open_members",
           "run", "size_of"]
