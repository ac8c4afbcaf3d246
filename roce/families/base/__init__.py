"""RoCE's presentation: the flat fields of the Ethernet, IP, UDP and IBA transport headers a
walk located (``fields``), the one-line summary (``summary``) and the ``-V`` tree (``tree``).

Native InfiniBand carries the same IBA transport (BTH and its extended headers), so
``roce.families.ib`` builds on these modules too.
"""
