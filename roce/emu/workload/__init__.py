"""The traffic of real clusters, as generators a runner drives on virtual time.

One interface (``traffic``: a ``Workload`` makes a ``Source`` given the hosts, the line rate
and a seeded ``random.Random``; the runner calls ``ready(now)``, ``complete(transfer,
now)``, ``next_time()`` and reads ``done``); flow-size distributions in ``cdf``.
"""

from roce.emu.workload.cdf import BUILTIN, Cdf
from roce.emu.workload.traffic import Source, Transfer, Workload

__all__ = ["BUILTIN", "Cdf", "Source", "Transfer", "Workload"]
