"""The UET family's straight-line header encoders (``build._plan``) give the bytes, and the
errors, of the checked encoder (``build._encode_checked``) for every header of every reading,
whatever the values: in range, out of range, signed offsets, None, bools, other types."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from roce.families.uet import build
from roce.families.uet.layouts import READINGS

HEADERS = [(r.name, key, h) for r in READINGS.values() for key, h in r.headers.items()]


def _value(bits: int) -> st.SearchStrategy[Any]:
    top = (1 << bits) - 1
    return st.one_of(st.integers(0, top), st.sampled_from([0, top, top + 1, -1, -0x8001]),
                     st.booleans(), st.none(), st.just(1.0), st.just("1"))


@st.composite
def _case(draw: st.DrawFn) -> tuple[Any, dict[str, Any], dict[str, str]]:
    _name, _key, h = draw(st.sampled_from(HEADERS))
    v = {}
    for key, f in zip(h.keys, h.layout.fields):
        if draw(st.booleans()) or f.bits > 16:
            v[key] = draw(_value(f.bits))
    renames = {}
    if h.keys and draw(st.booleans()):
        key = draw(st.sampled_from(h.keys))
        renames[key] = "renamed.value"
        v["renamed.value"] = draw(_value(16))
    return h, v, renames


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "bytes", fn(*args)
    except (ValueError, TypeError) as exc:
        return type(exc).__name__, str(exc)


@settings(max_examples=300)
@given(_case())
def test_plan_agrees_with_the_checked_encoder(case: tuple) -> None:
    h, v, renames = case
    assert _outcome(build._encode, h, v, renames) == _outcome(build._encode_checked, h, v,
                                                               renames)
