"""The traffic of real clusters, as generators a runner drives on virtual time.

One interface (``traffic``: a ``Workload`` makes a ``Source`` given the hosts, the line rate
and a seeded ``random.Random``; the runner calls ``ready(now)``, ``complete(transfer,
now)``, ``next_time()`` and reads ``done``), two kinds of workload:

- ``openloop``: flows with sizes from a published or user CDF (``cdf``) and Poisson
  arrivals at an offered load, as the HPCC simulator's generator makes them;
- ``collective``: ring, halving-doubling and pairwise collectives as dependency graphs
  (``graph``), with nccl-tests' algorithm and bus bandwidths;

and ``fct``: ideal flow completion times, per-flow rows (CSV, Parquet) and the binned
slowdown table.  Sans-I/O except ``cdf.read`` and ``fct.write_rows``; docs/workloads.md
holds the distributions, formulas and their sources.
"""

from roce.lazyexports import lazy_exports

# The collectives a run can name, each with its algorithms, the default first, and the cut
# and window of their transfers (``collective`` runs them; its docstring sources the
# defaults).  Here, not there: ``roce emulate`` offers them among its options, and a run that
# uses no workload imports none of the generators.
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "allreduce": ("ring", "halving-doubling"),
    "allgather": ("ring",),
    "reducescatter": ("ring",),
    "alltoall": ("pairwise",),
}
DEFAULT_CHUNK = 1 << 20  # NCCL: 4 MiB buffer / 8 steps * 2 steps per slice
DEFAULT_WINDOW = 4  # NCCL: 8 steps of FIFO / 2 steps per slice

# name -> the module defining it, imported when the name is first read
_EXPORTS = {
    "BUILTIN": "cdf", "Cdf": "cdf", "Collective": "collective", "FlowSource": "openloop",
    "Graph": "graph", "IterationTime": "graph", "OpenLoop": "openloop", "Source": "traffic",
    "Transfer": "traffic", "Workload": "traffic",
}
__getattr__, _ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted([*_EXPORTS, "ALGORITHMS", "DEFAULT_CHUNK", "DEFAULT_WINDOW"])


def __dir__() -> list[str]:
    return list(__all__)
