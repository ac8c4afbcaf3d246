"""Unit and value parsers for command-line options, under the names some modules import.

They live in ``roce.options``, the one validation layer of every command's options; this
module names them for the modules that import them from here.
"""

from __future__ import annotations

from roce.options import parse_int as parse_non_negative
from roce.options import parse_ipv4_text as parse_ipv4
from roce.options import parse_mac, parse_probability, parse_rate, parse_size, parse_time

__all__ = ["parse_ipv4", "parse_mac", "parse_non_negative", "parse_probability", "parse_rate",
           "parse_size", "parse_time"]
