"""The record of header layouts (``roce/_layoutrecord.py``) is what Construct derives from the
definitions modules now, and a record made from other definitions is never used."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from roce import _layoutrecord
from roce import headers as H

RECORD_FILE = Path(H.__file__).with_name("_layoutrecord.py")


@pytest.mark.parametrize("module", H.RECORDED)
def test_record_is_what_construct_derives(module: str) -> None:
    assert H.recorded(module) == H.derived(module)


def test_record_file_is_current() -> None:
    """Regenerate after editing a definitions module:
    python -c "import roce.headers as h; h.write_record()"."""
    assert set(_layoutrecord.RECORD) == set(H.RECORDED)
    assert RECORD_FILE.read_text() == H.record_text()


def test_layouts_read_by_the_codec_come_from_the_definitions() -> None:
    from roce import headerdefs, macc
    from roce.families import intmd

    assert H.LAYOUTS == {n: H.derive(n, c) for n, c in headerdefs.HEADERS.items()}
    assert H.LRH_LAYOUT == H.derive("lrh", headerdefs.LRH)
    assert macc.LAYOUTS == H.derived("roce.maccdefs")
    assert intmd.HOP_LAYOUT == H.derived("roce.families.intmddefs")["hop"]


DEFS = '''
from construct import BitsInteger, BitStruct
DEFINITIONS = {{"x": BitStruct("a" / BitsInteger({a}), "b" / BitsInteger({b}))}}
'''


def test_a_stale_record_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A definitions module edited after the record was made: its layouts are derived again
    (the edit shows), with a warning naming the module."""
    (tmp_path / "staledefs.py").write_text(DEFS.format(a=8, b=8))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "staledefs", raising=False)
    entry = ("0" * 64, {"x": ("x", 2, (("a", 8, "int", "a"), ("b", 8, "int", "b")))})
    monkeypatch.setitem(_layoutrecord.RECORD, "staledefs", entry)
    # the record holds a=8, b=8; the module now says a=4, b=12
    (tmp_path / "staledefs.py").write_text(DEFS.format(a=4, b=12))
    with pytest.warns(RuntimeWarning, match="staledefs differs from what"):
        got = H.recorded("staledefs")
    assert [(f.name, f.bits, f.shift) for f in got["x"].fields] == [("a", 4, 12), ("b", 12, 0)]


def test_a_current_record_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the module's hash the record is read as it is, without importing the module."""
    path = tmp_path / "freshdefs.py"
    path.write_text(DEFS.format(a=4, b=12))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "freshdefs", raising=False)
    entry = (H.source_hash(str(path)),
             {"x": ("x", 2, (("a", 4, "int", "a"), ("b", 12, "bool", "b")))})
    monkeypatch.setitem(_layoutrecord.RECORD, "freshdefs", entry)
    got = H.recorded("freshdefs")
    assert [f.kind for f in got["x"].fields] == ["int", "bool"]  # the record's, not Construct's
    assert "freshdefs" not in sys.modules


def test_a_module_missing_from_the_record_is_derived(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "newdefs.py").write_text(DEFS.format(a=8, b=8))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "newdefs", raising=False)
    with pytest.warns(RuntimeWarning, match="newdefs"):
        assert H.recorded("newdefs")["x"].size == 2
