"""``roce plot``: figures of RoCE traffic (matplotlib, the optional ``roce[plot]`` extra).

- ``capture``: from a capture, per-QP throughput over time with CNPs, PAUSE/PFC frames and
  retransmissions marked, and a PSN-versus-time graph (as tcptrace draws TCP);
- ``trace``: from an emulator ``--trace`` file, queue depth per port, rate per QP, pause state;
- ``figure``: the Agg-backed figure and saving by extension (PNG, SVG, PDF);
- ``cli``: the command.

Every series is a labelled ``Line2D`` (markers for events) so tests read what was plotted.
"""
