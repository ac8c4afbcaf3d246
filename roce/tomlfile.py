"""Reading a TOML file a command was given (``--topology-file``, ``roce sweep --grid
FILE.toml``): the document, or an InputError naming the file and what is wrong with it."""

from __future__ import annotations

from typing import Any

from roce.errors import InputError


def load(path: str) -> dict[str, Any]:
    import tomllib  # Python 3.11+; imported only when a TOML file is given

    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: not TOML: {e}") from None
