"""The decoder: captures in, records out (``roce decode``'s library).

It walks each frame (``roce.locate`` / the fast path), hands what RoCE's walk does not claim
to the family registry (``roce.families``), and gives records with Wireshark-named flat
fields (``decode``), display filters over them (``filter``), the text, JSON, CSV and
fields outputs (``output``), columnar output (``columnar``, ``colscan``), the records and
lines of family-decoded frames (``records``, ``familylines``), and the machinery for many
captures (``multifile``) with its progress bar (``progress``).  The presentation of each
protocol (one-line text, ``-V`` tree, fields) belongs to its family.
"""
