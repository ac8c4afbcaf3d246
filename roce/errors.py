"""Every public exception roce raises on purpose, in one module (``roce`` exports them all).

``RoceError`` is the one base: a caller catches it to catch anything roce reports about bad
input, a bad option, a broken file or an unusable interface.  ``UsageError`` (exit 1),
``InputError`` (exit 2) and ``VerificationError`` (exit 4) say whose fault it is; the others
name what failed: a capture, an interface, a transport, a peer, a QP state change, a memory
access.  The CLI maps these classes to exit codes in one table (``roce.cli.EXIT_CODES``).
"""

from __future__ import annotations

import signal


class RoceError(Exception):
    """Base of every error roce raises on purpose."""


class UsageError(RoceError):
    """A bad option or a bad combination of options (exit 1)."""


class FilterError(UsageError, ValueError):
    """A display or capture filter that cannot be compiled (exit 1).

    ``position`` is the 0-based offset into ``expr`` of the offending token, ``message``
    the bare description; ``str(err)`` renders both with a caret line under the spot.  Without
    an ``expr`` (a capture filter that libpcap refused as a whole) it is the message alone.
    """

    message: str
    expr: str | None
    position: int

    def __init__(self, message: str, expr: str | None = None, position: int = 0) -> None:
        self.message = message
        self.expr = expr
        self.position = position
        super().__init__(message if expr is None else _render_error(message, expr, position))

    def __reduce__(self) -> tuple[type[FilterError], tuple[str, str | None, int]]:
        # The default pickling would call __init__ with the rendered text only.
        return (type(self), (self.message, self.expr, self.position))


def _render_error(message: str, expr: str, position: int) -> str:
    position = max(0, min(position, len(expr)))
    start = expr.rfind("\n", 0, position) + 1
    end = expr.find("\n", position)
    if end < 0:
        end = len(expr)
    line = expr[start:end]
    # Tabs are kept so the caret stays under the right column in a terminal.
    pad = "".join(c if c == "\t" else " " for c in line[: position - start])
    return f"bad filter: {message} at position {position}\n  {line}\n  {pad}^"


class InputError(RoceError):
    """An input file, device or stream that cannot be read or used (exit 2)."""


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived: SIGINT (Ctrl-C), SIGTERM or SIGHUP (``signal`` its name).  A
    ``KeyboardInterrupt``, so what cleans up after Ctrl-C cleans up after all three; the
    command exits 130 (``roce.interrupts`` raises it, ``roce.cli`` words it).  Layers it
    passes through may add notes (``add_note``): what was done, which output was removed."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        self.signum = int(signum)
        self.signal = signal.Signals(signum).name
        super().__init__(self.signal)

    def __reduce__(self) -> tuple[type[Interrupted], tuple[int]]:
        return (type(self), (self.signum,))


class VerificationError(RoceError):
    """A run finished but its data did not check out: messages lost, corrupted or not
    completed (``roce emulate``: exit 4, so a script can tell it from a usage error)."""


class DecodeError(RoceError, ValueError):
    """A frame that claims to be RoCE but is malformed.

    ``header`` names the header where decoding stopped (``"reth"``, ``"bth"``, ``"ip"`` ...),
    ``offset`` is the byte offset in the frame where the problem is.
    """

    def __init__(self, message: str, header: str = "", offset: int = 0) -> None:
        super().__init__(message)
        self.header = header
        self.offset = offset


class NotRoCE(RoceError, ValueError):
    """A well-formed frame that is not RoCE (other EtherType, IP protocol or UDP port)."""

    def __init__(self, message: str, offset: int = 0) -> None:
        super().__init__(message)
        self.offset = offset


class WorkloadFileError(InputError):
    """A workload file that cannot be used (a flow-size CDF, ``roce.emu.workload.cdf``):
    ``path`` and ``line`` (1-based; 0 for the file as a whole) say where, ``why`` what is
    wrong; ``str(err)`` is ``path:line: why``, as compilers write it (exit 2)."""

    def __init__(self, path: str, line: int, why: str) -> None:
        self.path = path
        self.line = line
        self.why = why
        super().__init__(f"{path}:{line}: {why}" if line else f"{path}: {why}")

    def __reduce__(self) -> tuple[type[WorkloadFileError], tuple[str, int, str]]:
        return (type(self), (self.path, self.line, self.why))


class CaptureError(InputError, ValueError):
    """The input cannot be read as a capture (missing, unreadable, not pcap/pcapng)."""


class InterfaceError(InputError):
    """The environment stops us: unknown or down interface, no privilege (exit status 2)."""


class TransportError(InterfaceError, OSError):
    """The transport cannot do its job (interface missing, frame too big, address in use):
    exit 2, like any interface the environment refuses us."""

    def __str__(self) -> str:
        return str(self.strerror or super().__str__())


class OOBError(InputError):
    """The out-of-band exchange failed; the message says with whom and why (exit 2: the
    peer, not the options, is at fault)."""


class PeerMessageError(OOBError):
    """A peer's out-of-band message that breaks the protocol (``roce.emu.real.messages``),
    refused before any of it is used: ``message_type`` names the message (``hello``,
    ``params`` ...; ``message`` when not even its type is known), ``field`` the field as a
    path (``scenario.mtu``, ``qps[0].ip``; "" for the message as a whole)."""

    def __init__(self, message_type: str, field: str, why: str) -> None:
        self.message_type = message_type
        self.field = field
        self.why = why
        where = f'field "{field}": ' if field else ""
        super().__init__(f"peer {message_type}: {where}{why}")

    def __reduce__(self) -> tuple[type[PeerMessageError], tuple[str, str, str]]:
        return (type(self), (self.message_type, self.field, self.why))


class RemoteError(UsageError):
    """A remote run cannot be set up as asked: options missing or in conflict (exit 1)."""


class QPStateError(RoceError, ValueError):
    """An illegal modify: wrong transition or missing attributes."""


class RecoveryError(UsageError):
    """A bad recovery mode or knob, or one set on a QP that left RESET."""


class AccessError(RoceError):
    """A key, PD, range, access or alignment check failed; ``why`` names it, ``check`` says
    which (``key``, ``pd``, ``access``, ``range``, ``align``; "" when not said)."""

    def __init__(self, why: str, check: str = "") -> None:
        super().__init__(why)
        self.why = why
        self.check = check


class FieldNameError(UsageError, TypeError):
    """A layer given one field under both its names (``dqpn`` and ``destqp``)."""


class FieldValueError(UsageError, ValueError):
    """A value too wide for contrib's part of one of our fields (``reserved1``)."""


class LayoutMismatch(RoceError, TypeError):
    """Contrib's class and our layout no longer describe the same bits (a Scapy change)."""


class RecoveryMismatch(RemoteError):
    """The listener was told a loss recovery other than the connector's (exit 1)."""
