"""Unit parsers for command-line options: sizes, times, rates, probabilities.

They live in ``roce.options``, the one validation layer of every command's options; this
module names them for the modules that import them from here.
"""

from __future__ import annotations

from .options import parse_probability, parse_rate, parse_size, parse_time

__all__ = ["parse_probability", "parse_rate", "parse_size", "parse_time"]
