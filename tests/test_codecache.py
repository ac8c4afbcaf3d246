"""The start-up cache (roce/codecache.py): dataclass methods and source digests are served
from it in the next process, exactly as compiled; a damaged or unwritable cache costs time,
never a run."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from roce import codecache

ROOT = Path(__file__).resolve().parents[1]
PROBE = ("import json, roce.codecache as c, roce.emu.net.runner; "
         "print(json.dumps(dict(c.stats, path=c.path())))")


def child(prefix: Path, *flags: str, code: str = PROBE) -> dict:
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(prefix), PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, *flags, "-c", code], env=env, cwd=prefix,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_second_start_compiles_nothing(tmp_path: Path) -> None:
    first = child(tmp_path)
    assert first["compiled"] > 50  # the emulator's classes (some share a method's text)
    assert Path(first["path"]).is_file() and first["path"].startswith(str(tmp_path))
    second = child(tmp_path)
    assert second["compiled"] == 0
    assert second["hits"] == first["compiled"] + first["hits"]
    assert second["hashed"] == 0  # the sources' digests too


def tables(where: Path) -> dict[str, dict[str, object]]:
    """The cache file's tables: module -> {key: code}."""
    data = where.read_bytes()
    assert data.startswith(codecache._HEADER)
    table = marshal.loads(data[len(codecache._HEADER):])
    return {module: marshal.loads(blob) for module, blob in table["code"].items()}


def test_cached_code_is_what_exec_compiles(tmp_path: Path) -> None:
    code = tables(Path(child(tmp_path)["path"]))
    assert "roce.emu.net.runner" in code and "roce.headers" in code
    assert sum(map(len, code.values())) > 50
    for module, table in code.items():
        assert module.startswith("roce.")
        for key, compiled in table.items():
            filename, sep, source = key.partition("\0")  # generated code names its file
            if not sep:  # dataclasses' methods: compiled as its module compiles them
                assert compiled == compile(key, "<string>", "exec", dont_inherit=True)
            else:  # roce's generated code: as its module (future annotations) compiled it
                assert compiled == compile(source, filename, "exec")


def test_dataclass_methods_keep_their_annotations() -> None:
    """The served ``__init__`` is the one ``dataclasses`` compiles: its annotations are the
    fields' (a compile under roce's ``from __future__ import annotations`` would make them
    the text of dataclasses' local names, ``'_type_addr'``), for roce's classes and others."""
    import dataclasses

    from roce.emu.core.work import SGE
    assert SGE.__init__.__annotations__ == {
        **{f.name: f.type for f in dataclasses.fields(SGE)}, "return": None}
    Other = dataclasses.make_dataclass("Other", [("x", int)])
    assert Other.__init__.__annotations__ == {"x": int, "return": None}


def test_tables_are_read_when_their_module_asks(tmp_path: Path) -> None:
    child(tmp_path)  # the emulator's classes
    probe = ("import json, roce.codecache as c; print(json.dumps(dict(c.stats, "
             "loaded=sorted(c._tables), kept=sorted(c._blobs), path=c.path())))")
    out = child(tmp_path, code=probe)
    assert "roce.emu.net.runner" in out["kept"] and "roce.emu.net.runner" not in out["loaded"]
    assert out["compiled"] == 0
    before = tables(Path(out["path"]))["roce.emu.net.runner"]
    # a process that compiles other modules' code writes the tables it did not read back
    # as they were
    out = child(tmp_path, code=probe.replace("import json", "import json, roce.cli.stats"))
    assert out["compiled"] > 0 and "roce.emu.net.runner" not in out["loaded"]
    after = tables(Path(out["path"]))
    assert after["roce.emu.net.runner"] == before and len(after) > len(out["loaded"])


def test_a_file_past_the_limit_keeps_what_this_process_used(tmp_path: Path) -> None:
    where = Path(child(tmp_path)["path"])
    data = where.read_bytes()
    table = marshal.loads(data[len(codecache._HEADER):])
    # stale code, as a module's sources change: more than the file may hold
    text = "x = '" + "a" * 1000 + "'  # {}\n"
    junk = {text.format(i): compile(text.format(i), "<string>", "exec")
            for i in range(codecache.CODE_LIMIT // 1000 + 1)}
    table["code"]["roce.emu.net.runner"] = marshal.dumps(
        {**marshal.loads(table["code"]["roce.emu.net.runner"]), **junk})
    table["code"]["roce.stale.module"] = marshal.dumps(junk)
    where.write_bytes(codecache._HEADER + marshal.dumps(table))
    assert where.stat().st_size > codecache.CODE_LIMIT
    # a source not cached yet makes the process write its tables
    child(tmp_path, code=PROBE.replace("roce.emu.net.runner; ", "roce.emu.net.runner; "
                                       "from dataclasses import make_dataclass as m; "
                                       "m('Probe', ['a'], namespace={'__module__': "
                                       "'roce.emu.net.runner'}); "))
    kept = tables(where)
    assert where.stat().st_size < codecache.CODE_LIMIT // 4
    assert "roce.stale.module" not in kept
    assert 0 < len(kept["roce.emu.net.runner"]) < 100
    assert not any(k.startswith("x = ") for t in kept.values() for k in t)
    assert child(tmp_path)["compiled"] == 0  # what the run uses is all there


@pytest.mark.parametrize("damage", [b"", b"garbage", None])
def test_damaged_cache_is_rebuilt(tmp_path: Path, damage: bytes | None) -> None:
    where = Path(child(tmp_path)["path"])
    good = where.read_bytes()
    # cut in the middle, not ours, or another Python's magic number
    where.write_bytes(good[:len(good) // 2] if damage is None else damage)
    again = child(tmp_path)
    assert again["compiled"] > 50
    assert child(tmp_path)["compiled"] == 0  # rewritten whole


def test_nothing_written_without_bytecode(tmp_path: Path) -> None:
    out = child(tmp_path, "-B")
    assert out["compiled"] > 50 and not Path(out["path"]).exists()


def test_unwritable_cache_costs_only_time(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = child(blocker.parent, code=PROBE.replace("import json", "import sys; "
                f"sys.pycache_prefix = {str(blocker)!r}; import json"))
    assert out["compiled"] > 50 and out["path"].startswith(str(blocker))


def test_only_roce_classes_are_served() -> None:
    before = dict(codecache.stats)

    @dataclass(frozen=True)
    class Outside:  # this module is not roce's: compiled by dataclasses as always
        a: int
        b: str = "x"

    assert codecache.stats == before
    assert Outside(1) == Outside(1, "x")
    assert repr(Outside(2)) == "test_only_roce_classes_are_served.<locals>.Outside(a=2, b='x')"


def test_file_hash_follows_the_file(tmp_path: Path) -> None:
    f = tmp_path / "src.py"
    f.write_text("a = 1\n")
    calls: list[str] = []

    def digest(p: str) -> str:
        calls.append(p)
        return Path(p).read_text()

    assert codecache.file_hash(str(f), digest) == "a = 1\n"
    assert codecache.file_hash(str(f), digest) == "a = 1\n" and len(calls) == 1
    f.write_text("a = 22\n")  # size and time change
    assert codecache.file_hash(str(f), digest) == "a = 22\n" and len(calls) == 2
    st = f.stat()
    f.write_text("a = 33\n")  # same size: the time tells
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert codecache.file_hash(str(f), digest) == "a = 33\n" and len(calls) == 3
