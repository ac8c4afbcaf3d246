"""Native InfiniBand: LRH, GRH, BTH and the extended headers, ICRC and VCRC (``native``,
``crc``), MADs, CM and IPoIB above the transport (``mad``), and the compiled one-line path
(``lines``, with ``_scan.pxi`` and ``_lines.pxi``, the C it twins, included by the fast path).
"""
