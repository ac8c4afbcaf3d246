"""The exceptions roce raises for bad input."""

from __future__ import annotations


class DecodeError(ValueError):
    """A frame that claims to be RoCE but is malformed.

    ``header`` names the header where decoding stopped (``"reth"``, ``"bth"``, ``"ip"`` ...),
    ``offset`` is the byte offset in the frame where the problem is.
    """

    def __init__(self, message: str, header: str = "", offset: int = 0) -> None:
        super().__init__(message)
        self.header = header
        self.offset = offset


class NotRoCE(ValueError):
    """A well-formed frame that is not RoCE (other EtherType, IP protocol or UDP port)."""

    def __init__(self, message: str, offset: int = 0) -> None:
        super().__init__(message)
        self.offset = offset
