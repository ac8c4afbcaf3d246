"""roce/_deferred.py: ``inspect`` stands deferred until something needs it, and the
stand-in's one answer of its own, ``getfullargspec`` of a plain function or class, is the
real module's."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import keyword
import os
import subprocess
import sys
import types
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from roce import _deferred, opcodes, options

ROOT = Path(__file__).resolve().parent.parent


def _plain_callables(*modules: types.ModuleType) -> list[object]:
    found = []
    for module in modules:
        for value in vars(module).values():
            found.append(value)
            if isinstance(value, type):
                found.extend(vars(value).values())
    return found


def test_argspec_is_inspects_answer() -> None:
    """Over the functions and classes of a few modules: every one ``argspec`` answers for
    (a plain function or class) gets ``inspect``'s answer, field by field."""
    answered = 0
    for func in _plain_callables(dataclasses, functools, _deferred, opcodes, options,
                                 json.decoder, subprocess):
        spec = _deferred.argspec(func)
        if spec is None:
            continue  # not a plain function or class: the stand-in asks the real module
        real = inspect.getfullargspec(func)
        assert tuple(spec) == tuple(real), func
        assert [getattr(spec, f) for f in real._fields] == list(real), func
        answered += 1
    assert answered > 100


def test_argspec_answers_what_cython_asks() -> None:
    """Cython's compiled dataclasses ask about ``dataclasses.field`` and the class
    ``_DataclassParams``: both answered without the real module."""
    for func in (dataclasses.field, dataclasses._DataclassParams):
        assert tuple(_deferred.argspec(func)) == tuple(inspect.getfullargspec(func))


def test_argspec_leaves_what_it_cannot_read_to_inspect() -> None:
    def wrapped(a: int) -> int:
        return a

    @functools.wraps(wrapped)
    def wrapper(*args: object) -> object:
        return wrapped(*args)

    class Made(type):
        pass

    class WithNew:
        def __new__(cls, x: int) -> WithNew:
            return super().__new__(cls)

    class Derived(dataclasses._DataclassParams):
        pass

    for odd in (wrapper, functools.partial(wrapped, 1), len, str.join, Made("M", (), {}),
                WithNew, Derived, object(), 3):
        assert _deferred.argspec(odd) is None, odd


_NAMES = st.sampled_from([f"p{i}" for i in range(8)])


@st.composite
def _signatures(draw: st.DrawFn) -> str:
    """The text of a function definition: positional-only, positional, *args, keyword-only,
    **kwargs, defaults and annotations in any allowed mix."""
    names = iter(draw(st.lists(_NAMES, min_size=8, max_size=8, unique=True)))
    parts: list[str] = []

    def param(default_ok: bool) -> str:
        name = next(names)
        note = draw(st.sampled_from(["", ": int", ": 'str'", ": list[int]"]))
        if default_ok:
            return name + note + (" = " if note else "=") + draw(st.sampled_from(["1", "None"]))
        return name + note

    posonly, positional = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    defaults_from = draw(st.integers(0, posonly + positional))
    at = 0
    for _ in range(posonly):
        parts.append(param(at >= defaults_from))
        at += 1
    if posonly:
        parts.append("/")
    for _ in range(positional):
        parts.append(param(at >= defaults_from))
        at += 1
    star = draw(st.sampled_from(["", "*", "*args"]))
    kwonly = [param(draw(st.booleans())) for _ in range(draw(st.integers(0, 2)))]
    if star == "*args" or (star == "*" and kwonly):
        parts.append(star.replace("args", next(names)))
        parts.extend(kwonly)
    if draw(st.booleans()):
        parts.append("**" + next(names) + draw(st.sampled_from(["", ": dict"])))
    ret = draw(st.sampled_from(["", " -> None", " -> 'int'"]))
    return f"def f({', '.join(parts)}){ret}:\n    local = 1\n    return local\n"


@given(_signatures())
def test_argspec_agrees_with_inspect_on_any_signature(source: str) -> None:
    assert not keyword.iskeyword("f")
    space: dict[str, object] = {}
    exec(compile(source, "<signature>", "exec"), space)
    func = space["f"]
    assert tuple(_deferred.argspec(func)) == tuple(inspect.getfullargspec(func)), source


PROBE = """
import json, sys
import roce.emu.net.runner, roce.emu.core.qp  # compiled dataclasses among them
from roce import _deferred
import dataclasses
before = {"deferred": _deferred.deferred(), "ast": "ast" in sys.modules,
          "dis": "dis" in sys.modules, "tokenize": "tokenize" in sys.modules}
@dataclasses.dataclass
class NoDoc:
    x: int
import inspect
import importlib.util
after = {"deferred": _deferred.deferred(), "real": type(inspect) is type(sys),
         "spec": importlib.util.find_spec("inspect").origin == inspect.__file__,
         "doc": NoDoc.__doc__, "through": dataclasses.inspect.signature is inspect.signature,
         "dir": "signature" in dir(dataclasses.inspect)}
print(json.dumps({"before": before, "after": after}))
"""


def test_roce_starts_without_inspect_and_gives_the_real_one_when_asked() -> None:
    """Importing the emulator (compiled dataclasses included) leaves ``inspect`` deferred;
    the first real use (dataclasses writing a missing docstring) imports it, and the module
    that bound the stand-in reaches the real one through it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                       text=True, check=True, cwd=ROOT)
    out = json.loads(r.stdout)
    assert out["before"] == {"deferred": True, "ast": False, "dis": False, "tokenize": False}
    assert out["after"] == {"deferred": False, "real": True, "spec": True,
                            "doc": "NoDoc(x: int)", "through": True, "dir": True}


def test_roce_imported_after_inspect_changes_nothing() -> None:
    """In a process that has ``inspect`` already (this one: pytest), roce leaves it alone."""
    assert sys.modules["inspect"] is inspect
    _deferred.install()
    assert sys.modules["inspect"] is inspect and not _deferred.deferred()


def test_every_dataclass_of_roce_has_a_docstring() -> None:
    """``dataclasses`` writes a missing docstring from ``inspect.signature``: one class without
    its own would import the real ``inspect`` in every run that defines it."""
    import ast

    missing = []
    for path in sorted((ROOT / "roce").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.ClassDef) and ast.get_docstring(node) is None
                    and any("dataclass" in ast.unparse(d) for d in node.decorator_list)):
                missing.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert missing == []


SPEC_FIRST = """
import importlib.util, json, sys
import roce
from roce import _deferred
before = _deferred.deferred()
spec = importlib.util.find_spec("inspect")
still = _deferred.deferred()
import inspect
print(json.dumps([before, spec.origin == inspect.__file__, still,
                  type(inspect.signature(len)).__name__]))
"""


def test_the_spec_of_inspect_is_the_real_modules() -> None:
    """Asking for ``inspect``'s spec while the stand-in holds its place gives the real
    module's, without importing it; ``import inspect`` then gives the stand-in, which hands
    over the real module at its first use."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", SPEC_FIRST], env=env, capture_output=True,
                       text=True, check=True, cwd=ROOT)
    assert json.loads(r.stdout) == [True, True, True, "Signature"]
