"""What makes roce.wire.layers and Scapy's own RoCE layer, ``scapy.contrib.roce``, one layer set.

This module owns the bridge, not the layers:

* ``ORIGINALS``: contrib's classes (``BTH``, ``AETH``, ``GRH``, ``CNPPadding``) as contrib made
  them, kept here whatever ``scapy.contrib.roce`` names later;
* ``aliases``: for one of contrib's classes, which of our fields each of its fields is.  It is
  found by laying contrib's ``fields_desc`` over ``roce.headers.LAYOUTS`` bit by bit, so no
  name is retyped: ``dqpn`` is ``destqp`` because both are bits 40..63 of BTH, ``reserved1``
  is the upper half of CNP's ``reserved`` because it is bits 0..63 of it;
* ``Aliased``, the mixin through which our layers are built, read, set and deleted by those
  names, and ``LayerMeta``, the metaclass through which contrib's classes count as ours while
  the two are joined;
* ``join`` / ``part``: point ``scapy.contrib.roce``'s class names (and the copies Scapy's
  ``load_contrib`` put in ``builtins``) at our classes, and back.

Contrib's names keep contrib's meaning where the two differ (see ``Aliased``).
"""

from __future__ import annotations

import builtins
import importlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from scapy.base_classes import Packet_metaclass
from scapy.fields import Field, TrailerField
from scapy.packet import Packet

from roce.errors import FieldNameError, FieldValueError, LayoutMismatch
from roce.headers import Layout

CONTRIB_NAME = "scapy.contrib.roce"

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # its import noise is contrib's, not ours
    CONTRIB_MODULE = importlib.import_module(CONTRIB_NAME)

# Contrib's own layer classes, by name, as contrib defined them.
ORIGINALS: dict[str, type[Packet]] = {
    name: obj for name, obj in vars(CONTRIB_MODULE).items()
    if isinstance(obj, type) and issubclass(obj, Packet) and obj.__module__ == CONTRIB_NAME}


@dataclass(frozen=True)
class Alias:
    """One of contrib's field names on one of our layers."""

    name: str  # contrib's
    field: str  # ours, which holds it
    shift: int  # of contrib's value inside ours
    mask: int  # of contrib's value
    whole: bool  # same bits as ours: a plain second name
    conv: Field  # contrib's field: converts and shows the value of a part


def _bits(fld: Field) -> int:
    return round(fld.sz * 8)  # BitField keeps a fractional byte size


def aliases(theirs: type[Packet], layout: Layout,
            trailer: tuple[str, ...] = ()) -> dict[str, Alias]:
    """Contrib's field names of ``theirs`` that are not ours, mapped onto ``layout``'s fields.

    ``trailer`` names our fields that sit after the payload (BTH's ICRC): contrib's trailer
    fields must be among them, under the same name.  A contrib field that straddles two of
    ours, or a header of another size, is a LayoutMismatch at import: the two no longer
    agree."""
    out: dict[str, Alias] = {}
    pos = 0
    for fld in theirs.fields_desc:
        if isinstance(fld, TrailerField):
            if fld.name not in trailer:
                raise LayoutMismatch(f"{theirs.__name__}.{fld.name}: a trailer {layout.name} lacks")
            continue
        bits = _bits(fld)
        mine = next((f for f in layout.fields
                     if f.bit_offset <= pos and pos + bits <= f.bit_offset + f.bits), None)
        if mine is None:
            raise LayoutMismatch(f"{theirs.__name__}.{fld.name} straddles fields of {layout.name}")
        whole = bits == mine.bits
        if fld.name != mine.name:
            out[fld.name] = Alias(fld.name, mine.name, mine.bit_offset + mine.bits - pos - bits,
                                  (1 << bits) - 1, whole, fld)
        elif not whole:
            raise LayoutMismatch(
                f"{theirs.__name__}.{fld.name} is part of {layout.name}.{mine.name}")
        pos += bits
    if pos != layout.size * 8:
        raise LayoutMismatch(f"{theirs.__name__} has {pos} bits, {layout.name} {layout.size * 8}")
    return out


class Aliased:
    """Layer methods that take contrib's field names (``contrib_aliases``) as well as ours.

    Where the two layers differ in meaning, a name keeps its own layer's meaning:

    * a layer constructed with any of contrib's names is put on lower layers as contrib's
      class is (``contrib_class._overload_fields``): under UDP that means Scapy computes the
      UDP checksum, as with contrib, where our names leave RoCE's 0;
    * ``_alias_set`` lets a layer give a name more meaning (BTH: contrib's ``padcount`` is a
      header field only, the pad bytes being in the payload).
    """

    __slots__ = ()
    contrib_aliases: ClassVar[dict[str, Alias]] = {}
    contrib_class: ClassVar[type[Packet] | None] = None

    def __init__(self, _pkt: bytes = b"", *args: Any, **fields: Any) -> None:
        table = self.contrib_aliases
        named = {n: fields.pop(n) for n in [n for n in fields if n in table]}
        for n, value in named.items():
            a = table[n]
            if a.whole:
                if a.field in fields:
                    raise FieldNameError(
                        f"{type(self).__name__}: {n} and {a.field} name the same field")
                fields[a.field] = value
        super().__init__(_pkt, *args, **fields)  # type: ignore[call-arg]
        for n, value in named.items():
            if table[n].whole:
                self._alias_set(n)
            else:
                self.setfieldval(n, value)
        if named:
            self._as_contrib_builds()

    def _as_contrib_builds(self) -> None:
        theirs = self.contrib_class
        own: dict = self._overload_fields  # type: ignore[attr-defined]
        if theirs is not None:
            style = {lower: theirs._overload_fields.get(lower, fval)  # type: ignore[attr-defined]
                     for lower, fval in own.items()}
            object.__setattr__(self, "overload_fields", style)

    def _alias_set(self, name: str) -> None:
        """Called after contrib's name ``name`` was given a value."""

    # ``a / b`` stacks copies: they must keep the way this layer goes on lower layers.
    def copy(self) -> Any:
        clone = super().copy()  # type: ignore[misc]
        object.__setattr__(clone, "overload_fields", self.overload_fields)  # type: ignore[attr-defined]
        return clone

    def clone_with(self, payload: Any = None, **kargs: Any) -> Any:
        clone = super().clone_with(None, **kargs)  # type: ignore[misc]
        object.__setattr__(clone, "overload_fields", self.overload_fields)  # type: ignore[attr-defined]
        if payload is not None:
            clone.add_payload(payload)
        return clone

    def getfieldval(self, attr: str) -> Any:
        a = self.contrib_aliases.get(attr)
        if a is None:
            return super().getfieldval(attr)  # type: ignore[misc]
        value = super().getfieldval(a.field)  # type: ignore[misc]
        return value if a.whole or value is None else (value >> a.shift) & a.mask

    def getfield_and_val(self, attr: str) -> tuple[Field, Any]:
        a = self.contrib_aliases.get(attr)
        if a is None:
            return super().getfield_and_val(attr)  # type: ignore[misc]
        fld, value = super().getfield_and_val(a.field)  # type: ignore[misc]
        if a.whole:
            return fld, value
        return a.conv, None if value is None else (value >> a.shift) & a.mask

    def get_field(self, fld: str) -> Field:
        a = self.contrib_aliases.get(fld)
        if a is None:
            return super().get_field(fld)  # type: ignore[misc]
        return super().get_field(a.field) if a.whole else a.conv  # type: ignore[misc]

    def setfieldval(self, attr: str, val: Any) -> None:
        a = self.contrib_aliases.get(attr)
        if a is None:
            return super().setfieldval(attr, val)  # type: ignore[misc]
        if not a.whole:
            part = a.conv.any2i(self, val)
            if not 0 <= part <= a.mask:
                raise FieldValueError(f"{type(self).__name__}.{attr} = {part:#x} does not fit "
                                      f"in {a.mask.bit_length()} bits")
            whole = super().getfieldval(a.field) or 0  # type: ignore[misc]
            val = (whole & ~(a.mask << a.shift)) | (part << a.shift)
        super().setfieldval(a.field, val)  # type: ignore[misc]
        self._alias_set(attr)
        return None

    def delfieldval(self, attr: str) -> None:
        a = self.contrib_aliases.get(attr)
        if a is None:
            return super().delfieldval(attr)  # type: ignore[misc]
        if a.whole:
            return super().delfieldval(a.field)  # type: ignore[misc]
        default = self.default_fields[a.field] or 0  # type: ignore[attr-defined]
        self.setfieldval(attr, (default >> a.shift) & a.mask)
        return None


# Our class -> contrib's, while joined: LayerMeta counts contrib's as a subclass of ours.
_TWINS: dict[type, type] = {}


class LayerMeta(Packet_metaclass):
    """Scapy's packet metaclass, plus: while the layer sets are joined, contrib's class of the
    same name counts as a subclass of ours.  Contrib's own code finds its layers by the names
    in its module, which then are ours (``pkt[BTH]`` in its ICRC code); Scapy compares with
    ``issubclass`` for classes whose ``match_subclass`` is set, which ``join`` sets on
    contrib's."""

    def __subclasscheck__(cls, sub: type) -> bool:
        if type.__subclasscheck__(cls, sub):
            return True
        twin = _TWINS.get(cls)
        return twin is not None and isinstance(sub, type) and type.__subclasscheck__(twin, sub)

    def __instancecheck__(cls, obj: Any) -> bool:
        return cls.__subclasscheck__(type(obj))


# What join() changed, as the steps that undo it.
_undo: list[Callable[[], None]] = []


def _swap(space: dict, name: str, old: object, new: object) -> None:
    if space.get(name) is old:
        space[name] = new

        def back() -> None:
            if space.get(name) is new:
                space[name] = old
        _undo.append(back)


def join(ours: dict[str, type[Packet]]) -> None:
    """Make ``ours`` (class name -> class) the classes ``scapy.contrib.roce`` names: its module
    attributes, and the ``builtins`` copies ``load_contrib("roce")`` made, are pointed at ours;
    contrib's classes get ``match_subclass`` and count as subclasses of ours."""
    for name, cls in ours.items():
        orig = ORIGINALS.get(name)
        if orig is None:
            continue
        _swap(vars(CONTRIB_MODULE), name, orig, cls)
        _swap(vars(builtins), name, orig, cls)
        _TWINS[cls] = orig
        had = orig.__dict__.get("match_subclass", _MISSING)
        orig.match_subclass = True

        def back(orig: type[Packet] = orig, had: object = had, cls: type = cls) -> None:
            _TWINS.pop(cls, None)
            if had is _MISSING:
                del orig.match_subclass
            else:
                orig.match_subclass = had  # type: ignore[assignment]
        _undo.append(back)


def part() -> None:
    """Undo ``join``: contrib's names, and its classes, are contrib's again."""
    while _undo:
        _undo.pop()()


_MISSING = object()
