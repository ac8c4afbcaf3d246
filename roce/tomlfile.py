"""Reading a TOML file a command was given (``--topology-file``, ``roce sweep --grid
FILE.toml``): the document, or an InputError naming the file and what is wrong with it.

What a file may cost is bounded before it is parsed: at most ``MAX_BYTES`` are read (so
``/dev/zero`` or a FIFO cannot run memory up), and arrays and inline tables may nest at most
``MAX_NESTING`` deep.  Python's ``tomllib`` parses nesting by recursion, so a file nested a
few thousand levels deep would raise ``RecursionError``; the raw text is scanned for its
depth first (``nesting``).  Dotted keys and table headers (``a.b.c = 1``, ``[a.b.c]``) nest
without recursion in the parser, so the parsed document's depth is checked too, without
recursion, before anything walks it.
"""

from __future__ import annotations

from typing import Any

from roce.errors import InputError

MAX_BYTES = 16 << 20  # a topology of 64000 hosts and their links is about 5 MB
MAX_NESTING = 32  # no document roce reads nests deeper than 4


def nesting(text: str) -> tuple[int, int]:
    """The deepest nesting of arrays and inline tables in a TOML text, and the line where it
    is first reached, without parsing: brackets and braces in strings and comments do not
    count.  (Table headers count 1 or 2: ``[[t]]`` closes on its own line.)"""
    depth = deepest = 0
    line = where = 1
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        elif c in "\"'":
            i, line = _skip_string(text, i, line)
            continue
        elif c in "[{":
            depth += 1
            if depth > deepest:
                deepest, where = depth, line
        elif c in "]}":
            depth = max(0, depth - 1)
        i += 1
    return deepest, where


def _skip_string(text: str, i: int, line: int) -> tuple[int, int]:
    """The index after the string starting at ``text[i]`` (a quote), and the line there.  An
    unterminated string runs to the end of its line (single-line) or of the text; the parser
    reports it."""
    q = text[i]
    escapes = q == '"'
    if text.startswith(q * 3, i):
        i += 3
        while i < len(text):
            c = text[i]
            if c == "\n":
                line += 1
            elif escapes and c == "\\":
                if text[i + 1:i + 2] == "\n":
                    line += 1
                i += 2
                continue
            elif text.startswith(q * 3, i):
                i += 3
                # up to two more quotes belong to the string (``"""a""""`` is ``a"``)
                for _ in range(2):
                    if text[i:i + 1] == q:
                        i += 1
                return i, line
            i += 1
        return i, line
    i += 1
    while i < len(text):
        c = text[i]
        if c == "\n":
            return i, line
        if escapes and c == "\\":
            i += 2
            continue
        if c == q:
            return i + 1, line
        i += 1
    return i, line


def depth(doc: Any) -> int:
    """How deep tables and arrays nest in a parsed document (a scalar is 0), iteratively."""
    deepest = 0
    todo = [(doc, 1)]
    while todo:
        value, d = todo.pop()
        if isinstance(value, dict):
            items = value.values()
        elif isinstance(value, list):
            items = value
        else:
            continue
        deepest = max(deepest, d)
        if d > MAX_NESTING:  # enough to refuse: do not walk the rest
            return d
        todo.extend((x, d + 1) for x in items)
    return deepest


def load(path: str) -> dict[str, Any]:
    import tomllib  # Python 3.11+; imported only when a TOML file is given

    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None
    if len(data) > MAX_BYTES:
        raise InputError(f"{path}: larger than {MAX_BYTES >> 20} MB: not a file roce reads "
                         "as TOML")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not TOML: not UTF-8 text (byte {e.start})") from None
    deepest, line = nesting(text)
    if deepest > MAX_NESTING:
        raise InputError(f"{path}: line {line}: arrays and tables nested more than "
                         f"{MAX_NESTING} deep")
    try:
        doc = tomllib.loads(text)
    except ValueError as e:  # TOMLDecodeError, or an integer past int()'s digit limit
        raise InputError(f"{path}: not TOML: {e}") from None
    if depth(doc) > MAX_NESTING:
        raise InputError(f"{path}: keys nested more than {MAX_NESTING} deep")
    return doc
