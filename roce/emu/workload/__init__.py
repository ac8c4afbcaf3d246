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

from roce.emu.workload.cdf import BUILTIN, Cdf
from roce.emu.workload.collective import Collective
from roce.emu.workload.graph import Graph, IterationTime
from roce.emu.workload.openloop import FlowSource, OpenLoop
from roce.emu.workload.traffic import Source, Transfer, Workload

__all__ = ["BUILTIN", "Cdf", "Collective", "FlowSource", "Graph", "IterationTime",
           "OpenLoop", "Source", "Transfer", "Workload"]
