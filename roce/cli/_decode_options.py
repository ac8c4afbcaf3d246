"""The decoding and output options ``roce decode`` and ``roce sniff`` share: ``-V``, ``-P``,
``-x``, ``-T``, ``-e``, ``-E``, ``-Y``, ``-c``, ``-t``, ``--only-roce``, ``--udp-port`` and
the colour switches; their checks (``check_output_options``), tshark's ``-E`` options
(``field_options``) and whether to colour (``want_colour``).  The decoder
(``roce.decoder.decode``) is the library both commands drive; what its options mean on a
command line is written here, once.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, TextIO

from roce.errors import UsageError
from roce.families.base import summary
from roce.locate import ROCE_PORT
from roce.options import parse_port, parse_positive


def add_output_arguments(parser: Any) -> None:
    """The decoding and output options ``roce decode`` and ``roce sniff`` share (a parser or
    an argument group)."""
    parser.add_argument("-V", "--verbose", action="store_true",
                        help="print the full header tree of each packet")
    parser.add_argument("-P", "--print-summary", action="store_true", dest="print_summary",
                        help="with -V: print the one-line summary above each tree")
    parser.add_argument("-x", "--hex", action="store_true", dest="hexdump",
                        help="add a hex and ASCII dump of each frame")
    parser.add_argument("-T", "--format", choices=("text", "json", "jsonl", "fields", "csv"),
                        default="text", help="output format (default text)")
    parser.add_argument("-e", "--field", action="append", default=[], dest="fields",
                        metavar="FIELD", help="field for -T fields/csv (repeat)")
    parser.add_argument("-E", action="append", default=[], dest="field_options",
                        metavar="OPT=VALUE",
                        help="-T fields option: header=y|n, separator=/t|/s|C, quote=d|s|n, "
                             "aggregator=C, raw=y|n (integers in decimal, not tshark's hex)")
    parser.add_argument("-Y", "--display-filter", metavar="EXPR", dest="filter",
                        help="show only packets matching this display filter")
    parser.add_argument("-c", "--count", type=parse_positive, metavar="N",
                        help="stop after N displayed packets")
    parser.add_argument("-t", dest="time_format", choices=summary.TIME_MODES, default="r",
                        help="time column: r relative to first (default), d delta, dd delta "
                             "displayed, a absolute, ad absolute with date, e epoch, "
                             "u/ud UTC")
    parser.add_argument("--only-roce", action="store_true", help="hide frames that are not RoCE")
    parser.add_argument("--udp-port", type=parse_port, default=ROCE_PORT, metavar="N",
                        help=f"RoCEv2 UDP port (default {ROCE_PORT})")
    parser.add_argument("--color", "--colour", choices=("auto", "always", "never"),
                        default="auto", dest="color",
                        help="colour lines (auto: when stdout is a terminal and NO_COLOR "
                             "is unset)")
    parser.add_argument("--no-color", "--no-colour", action="store_const", const="never",
                        dest="color", help="same as --color never")


def field_options(opts: list[str]) -> dict[str, Any]:
    """Parse tshark's ``-E`` options."""
    res: dict[str, Any] = {"header": False, "separator": "\t", "quote": "", "aggregator": ",",
                           "raw": False}
    special = {"/t": "\t", "/s": " ", "\\t": "\t"}
    for opt in opts:
        key, sep, value = opt.partition("=")
        key = key.strip().lower()
        if not sep:
            raise UsageError(f"-E {opt!r}: expected OPTION=VALUE")
        if key in ("header", "raw"):
            if value.lower() not in ("y", "n", "yes", "no"):
                raise UsageError(f"-E {key}={value}: use y or n")
            res[key] = value.lower().startswith("y")
        elif key in ("separator", "aggregator"):
            if not value:
                raise UsageError(f"-E {key}= needs a character")
            res[key] = special.get(value, value)
        elif key == "quote":
            quotes = {"d": '"', "s": "'", "n": ""}
            if value.lower() not in quotes:
                raise UsageError(f"-E quote={value}: use d, s or n")
            res["quote"] = quotes[value.lower()]
        else:
            raise UsageError(f"-E {key}: unknown option (header, separator, quote, "
                             "aggregator, raw)")
    return res


def _check_field_names(names: list[str]) -> None:
    if not names:  # known_fields() loads every family's layouts: only when -e asks
        return
    from roce.decoder import output
    from roce.decoder.decode import known_fields
    from roce.decoder.names import resolver  # the names -Y takes too

    known = known_fields()
    keys = resolver()
    for name in names:
        if output.is_column(name):
            continue
        if not all(k in known for k in keys(name)):
            raise UsageError(f"-e {name}: unknown field (roce decode -G fields lists them)")


def want_colour(choice: str, out: TextIO) -> bool:
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty())


def check_output_options(args: argparse.Namespace) -> dict[str, Any]:
    """The output-option checks ``roce decode`` and ``roce sniff`` share (-T, -e, -E, -V,
    -x); raises UsageError, returns the parsed -E options."""
    fmt = args.format
    if args.fields and fmt not in ("fields", "csv"):
        raise UsageError("-e needs -T fields or -T csv")
    if fmt == "fields" and not args.fields:
        raise UsageError("-T fields needs at least one -e FIELD")
    if args.field_options and fmt != "fields":
        raise UsageError("-E needs -T fields")
    if fmt != "text" and (args.verbose or args.hexdump):
        raise UsageError(f"-V and -x print text; they do not combine with -T {fmt}")
    _check_field_names(args.fields)
    return field_options(args.field_options)


__all__ = ["add_output_arguments", "check_output_options", "field_options", "want_colour"]
