"""Flow analysis (``roce stats``' library): PSN gaps, retransmissions, NAKs, CNPs, ECN marks,
bad CRCs, messages, per RC flow and connection, plus PFC/PAUSE accounting (``pauses``),
congestion-control figures (``ccstats``), time series (``timeline``), the CM exchanges of
native InfiniBand (``cm``), tunnelled captures (``inner``) and the text report
(``statsview``).  The rules are written once, in ``flowrules``; ``flows`` picks an engine.
"""
