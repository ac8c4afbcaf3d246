"""What an installed (not editable) roce reads at run time is in the wheel: the sources the
compiled flow engines are checked against (``roce._compiled.twin_sources``) match the
package-data patterns of pyproject.toml, and a source an installation left out does not make
its engine count as edited."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

import pytest

from roce import _compiled

ROOT = Path(__file__).resolve().parent.parent
tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def package_data() -> dict[str, list[str]]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return doc["tool"]["setuptools"]["package-data"]


@pytest.mark.parametrize("name", sorted(_compiled.TWINS))
def test_every_twin_source_is_packaged(name: str) -> None:
    data = package_data()
    for rel in _compiled.twin_sources(name):
        package, _, base = rel.rpartition("/")
        if base.endswith(".py"):
            continue  # modules are packaged as modules
        patterns = data.get(package.replace("/", "."), [])
        assert any(fnmatch(base, p) for p in patterns), \
            f"{rel} is read at run time but pyproject.toml's package-data leaves it out"


def test_a_missing_source_is_not_an_edit(monkeypatch: pytest.MonkeyPatch) -> None:
    name = sorted(_compiled.TWINS)[0]
    real = _compiled.twin_sources(name)
    assert _compiled.stale_twin(name) == []  # as built
    monkeypatch.setattr(_compiled, "twin_sources", lambda n: [*real, "roce/no_such.pxd"])
    assert _compiled.stale_twin(name) == []
