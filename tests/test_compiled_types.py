"""The emulator's extension types (roce/_compiled.py, ``CLASSES``): the declarations generated
from the .py files, the types the build really compiled, and no attribute set at run time
that the compiled form could not hold."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from roce import _compiled, fast

BUILT = fast.COMPILED and not _compiled.pure_requested()
needs_build = pytest.mark.skipif(not BUILT, reason="compiled modules not built, or ROCE_PURE")
HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement, not a C type


def _source(module: str) -> str:
    with open(os.path.join(os.path.dirname(_compiled.__file__), os.pardir,
                           *module.split(".")) + ".py") as f:
        return f.read()


def test_every_class_is_declared_from_its_module() -> None:
    assert set(_compiled.CLASSES) <= set(_compiled.MODULES)
    for module, classes in _compiled.CLASSES.items():
        text = _compiled.pxd_text(module, _source(module))
        assert text.startswith(_compiled.PXD_HEADER)
        for name in classes:
            assert f"\ncdef class {name}:\n" in text or f"\ncdef class {name}(" in text


def test_declarations_follow_the_source_and_the_table() -> None:
    text = _compiled.pxd_text("roce.emu.net.nic", _source("roce.emu.net.nic"))
    assert "from roce.emu.net.link cimport Wire\n" in text
    assert "    cdef public Wire wire\n" in text and "    cdef public object ctrl\n" in text
    assert "    cpdef _take(self, now, QueuePair qp, ring, prio)\n" in text
    assert "    @cython.locals(dev=Device, f=bytes, qp=QueuePair)\n" \
           "    cpdef receive(self, now, frame)\n" in text
    assert "    cpdef _rearm(self, now, qp=*)\n" in text
    assert "storm" not in text  # a closure inside: it stays a def
    sim = _compiled.pxd_text("roce.emu.net.sim", _source("roce.emu.net.sim"))
    assert "cpdef run_until_any(" in sim and " at(" not in sim  # marked "def"


SYNTHETIC = '''
from dataclasses import dataclass

@dataclass
class Stats:
    frames: int = 0
    bytes: int = 0

class Port:
    __slots__ = ("stats", "peer")

    def pull(self, now, extra=None):
        st = self.stats
        return st

    def later(self):
        return lambda: self.peer

class Loose:
    def run(self):
        self.x = 1

class FastPort(Port):
    __slots__ = ("lane",)

    def pull(self, now, extra=None):
        return self.lane

class Twice(Port, Stats):
    __slots__ = ()

def helper(x, y=2):
    return x + y

def closure():
    return lambda: 1
'''


def _with_table(monkeypatch: pytest.MonkeyPatch, table: dict) -> str:
    monkeypatch.setattr(_compiled, "CLASSES", {"pkg.mod": table})
    return _compiled.pxd_text("pkg.mod", SYNTHETIC)


def test_generator_output_for_a_small_module(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _with_table(monkeypatch, {"Stats": {}, "Port": {"stats": "Stats",
                                                           "pull.st": "Stats"}})
    assert text.splitlines()[1:] == [
        "cimport cython",
        "",
        "@cython.final",
        "cdef class Stats:",
        "    cdef public object frames",
        "    cdef public object bytes",
        "",
        "@cython.final",
        "cdef class Port:",
        "    cdef public Stats stats",
        "    cdef public object peer",
        "    @cython.locals(st=Stats)",
        "    cpdef pull(self, now, extra=*)",
    ]


def test_generator_declares_the_functions_of_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_compiled, "FUNCTIONS", {"pkg.mod": ("helper",)})
    assert _with_table(monkeypatch, {"Stats": {}}).endswith("\ncpdef helper(x, y=*)\n")
    for name in ("closure", "missing"):
        monkeypatch.setattr(_compiled, "FUNCTIONS", {"pkg.mod": (name,)})
        with pytest.raises(ValueError, match=f"pkg.mod.{name}: no such function that compiles"):
            _with_table(monkeypatch, {"Stats": {}})


def test_generator_cimports_the_functions_a_module_imports(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A function another compiled module declares ``cpdef`` (FUNCTIONS), or the fast path's
    (C_FUNCTIONS), imported by its own name, is cimported: the module calls it in C.  Renamed,
    or not in the tables, it stays a Python import."""
    source = ("from pkg.other import fast_one, slow_one\n"
              "from pkg.other import fast_one as renamed\n"
              "from roce.fast import assemble, walk\n" + SYNTHETIC)
    monkeypatch.setattr(_compiled, "CLASSES", {"pkg.mod": {"Stats": {}}})
    monkeypatch.setattr(_compiled, "FUNCTIONS", {"pkg.other": ("fast_one",)})
    monkeypatch.setattr(_compiled, "C_FUNCTIONS", {"roce.fast": ("roce._fastpath",
                                                                 ("assemble",))})
    lines = _compiled.pxd_text("pkg.mod", source).splitlines()
    cimports = [ln for ln in lines if " cimport " in ln and ln != "cimport cython"]
    assert cimports == ["from pkg.other cimport fast_one",
                        "from roce._fastpath cimport assemble"]


def test_the_emulator_calls_its_per_packet_functions_in_c() -> None:
    """The requester reaches PSN arithmetic and payload reads, the frames module the fast
    path's frame calls, through cimports."""
    req = _compiled.pxd_text("roce.emu.core.requester", _source("roce.emu.core.requester"))
    frames = _compiled.pxd_text("roce.emu.core.frames", _source("roce.emu.core.frames"))
    assert "from roce.psn cimport psn_diff" in req
    assert "from roce.emu.core.memory cimport take" in req
    for name in ("assemble", "bth_pack", "rx"):
        assert f"from roce._fastpath cimport {name}" in frames


def test_generator_types_attributes_and_locals_as_c_integers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``"attr": "long"`` or ``"method.local": "long"`` declares a C long (its arithmetic then
    runs in C); an argument keeps its Python type, so the table refuses it there."""
    text = _with_table(monkeypatch, {"Stats": {"frames": "long"}, "Port": {"pull.st": "long"}})
    assert "    cdef public long frames\n    cdef public object bytes\n" in text
    assert "    @cython.locals(st=long)\n    cpdef pull(self, now, extra=*)\n" in text
    assert "cimport long" not in text
    with pytest.raises(ValueError, match="Port: pull.now typed long: a C type is for an "
                                         "attribute or a method's locals"):
        _with_table(monkeypatch, {"Stats": {}, "Port": {"pull.now": "long"}})


def test_generator_types_attributes_and_locals_as_builtin_containers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``"list"`` or ``"set"`` types an attribute or a local as that builtin (Cython then
    indexes, tests and adds without a method call); an argument keeps its Python type."""
    text = _with_table(monkeypatch, {"Stats": {"frames": "list"},
                                     "Port": {"pull.st": "set"}})
    assert "    cdef public list frames\n" in text
    assert "    @cython.locals(st=set)\n    cpdef pull(self, now, extra=*)\n" in text
    assert "cimport list" not in text and "cimport set" not in text
    with pytest.raises(ValueError, match="Port: pull.now typed set: a builtin type is for an "
                                         "attribute or a method's locals"):
        _with_table(monkeypatch, {"Stats": {}, "Port": {"pull.now": "set"}})


def test_generator_declares_the_constants_of_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """``CONSTANTS`` declares a module's private top-level names as C globals (a C type or a
    builtin); a public name, one assigned twice or not at all, or another type is refused."""
    source = (SYNTHETIC + "\n_OFF = 14\n_A, _B = b'ab'\n_TABLE = bytes(4)\nPUBLIC = 1\n"
              "_TWICE = 1\n_TWICE = 2\n")
    monkeypatch.setattr(_compiled, "CLASSES", {"pkg.mod": {"Stats": {}}})
    monkeypatch.setattr(_compiled, "CONSTANTS", {"pkg.mod": {"_OFF": "long", "_B": "long",
                                                             "_TABLE": "bytes"}})
    text = _compiled.pxd_text("pkg.mod", source)
    assert "\ncdef long _OFF\ncdef long _B\ncdef bytes _TABLE\n" in text
    for name, t, what in (("PUBLIC", "long", "PUBLIC: a constant is a private name"),
                          ("_TWICE", "long", "_TWICE: a constant is a private name"),
                          ("_NONE", "long", "_NONE: a constant is a private name"),
                          ("_OFF", "Stats", "_OFF typed Stats: a constant is a C type")):
        monkeypatch.setattr(_compiled, "CONSTANTS", {"pkg.mod": {name: t}})
        with pytest.raises(ValueError, match=f"pkg.mod.{what}"):
            _compiled.pxd_text("pkg.mod", source)


def test_generator_types_the_arguments_the_table_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """A function's argument typed by ``FUNCTION_ARGS`` is declared as that class (its
    methods then called in C); one the function does not have, or a type that is no class of
    CLASSES, is refused."""
    monkeypatch.setattr(_compiled, "FUNCTIONS", {"pkg.mod": ("helper",)})
    monkeypatch.setattr(_compiled, "FUNCTION_ARGS", {"pkg.mod": {"helper.x": "Stats"}})
    assert _with_table(monkeypatch, {"Stats": {}}).endswith("\ncpdef helper(Stats x, y=*)\n")
    for key, t, what in (("helper.z", "Stats", "helper.z names no argument"),
                         ("helper.x", "Nothing", "helper.x typed Nothing, not a class")):
        monkeypatch.setattr(_compiled, "FUNCTION_ARGS", {"pkg.mod": {key: t}})
        with pytest.raises(ValueError, match=f"pkg.mod.{what}"):
            _with_table(monkeypatch, {"Stats": {}})


def test_generator_types_the_locals_the_table_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """A function's local in ``FUNCTION_ARGS`` is declared by ``@cython.locals``: a class of
    CLASSES, a C type or a builtin; an argument takes a class only, and a name the function
    neither takes nor assigns is refused."""
    source = SYNTHETIC + "\ndef summed(x, y):\n    total = x + y\n    return total\n"
    monkeypatch.setattr(_compiled, "CLASSES", {"pkg.mod": {"Stats": {}}})
    monkeypatch.setattr(_compiled, "FUNCTIONS", {"pkg.mod": ("summed",)})
    monkeypatch.setattr(_compiled, "FUNCTION_ARGS", {"pkg.mod": {"summed.total": "long"}})
    text = _compiled.pxd_text("pkg.mod", source)
    assert text.endswith("\n@cython.locals(total=long)\ncpdef summed(x, y)\n")
    assert text.splitlines()[1] == "cimport cython"
    for key, t, what in (("summed.x", "long", "typed long, not a class"),
                         ("summed.z", "long", "names no argument or local"),
                         ("summed.total", "Nothing", "typed Nothing, not a class")):
        monkeypatch.setattr(_compiled, "FUNCTION_ARGS", {"pkg.mod": {key: t}})
        with pytest.raises(ValueError, match=f"pkg.mod.{key} {what}"):
            _compiled.pxd_text("pkg.mod", source)


def test_generator_declares_a_subclass_of_a_class_of_the_table(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_compiled, "OPEN", frozenset({"Port"}))
    text = _with_table(monkeypatch, {"Stats": {}, "Port": {}, "FastPort": {"lane": "Stats"}})
    assert "\n\ncdef class Port:\n" in text  # open: not final
    assert "\n\ncdef class FastPort(Port):\n    cdef public Stats lane\n" \
           "    cpdef pull(self, now, extra=*)\n" in text  # its own attributes only
    monkeypatch.setattr(_compiled, "OPEN", frozenset())
    with pytest.raises(ValueError, match="FastPort: a compiled class has no base or one class "
                                         "of CLASSES that OPEN names"):
        _with_table(monkeypatch, {"Stats": {}, "Port": {}, "FastPort": {}})


@pytest.mark.parametrize("table, message", [
    ({"FastPort": {}}, "FastPort: a compiled class has no base or one class of CLASSES"),
    ({"Port": {}, "Stats": {}, "Twice": {}},
     "Twice: a compiled class has no base or one class of CLASSES"),
    ({"Loose": {}}, "Loose: a compiled class lists its attributes in __slots__"),
    ({"Port": {"stats": "Nothing"}}, "Port: stats typed Nothing, not a class of CLASSES"),
    ({"Stats": {}, "Port": {"pull.nope": "Stats"}}, "Port: pull.nope names nothing there"),
    ({"Stats": {}, "Port": {"speed": "Stats"}}, "Port: speed names nothing there"),
    ({"Port": {"gone": "def"}}, "Port: no method gone"),
    ({"Missing": {}}, "Missing: no such class"),
])
def test_generator_refuses_what_it_cannot_declare(monkeypatch: pytest.MonkeyPatch, table: dict,
                                                  message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _with_table(monkeypatch, table)


def test_the_classes_python_subclasses_are_the_open_ones() -> None:
    """A final extension type cannot be subclassed in Python: ``OPEN`` must name exactly the
    classes of CLASSES that some class in roce/ or in the tests derives from."""
    import ast
    compiled = {name for classes in _compiled.CLASSES.values() for name in classes}
    derived = set()
    root = os.path.dirname(_compiled.__file__)
    walks = [*os.walk(root), *os.walk(os.path.dirname(__file__))]
    for d, _dirs, files in walks:
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(d, f)) as src:
                    tree = ast.parse(src.read())
                derived |= {b.id for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
                            for b in n.bases if isinstance(b, ast.Name) and b.id in compiled}
    assert derived == _compiled.OPEN


def test_only_the_open_classes_are_declared_without_final() -> None:
    for module, classes in _compiled.CLASSES.items():
        lines = _compiled.pxd_text(module, _source(module)).splitlines()
        for name in classes:
            at = next(i for i, line in enumerate(lines)
                      if line.startswith((f"cdef class {name}:", f"cdef class {name}(")))
            above = lines[at - 1]
            subclass = lines[at].startswith(f"cdef class {name}(")  # Cython: never final
            assert (above == "@cython.final") == (name not in _compiled.OPEN and not subclass), \
                (module, name)


@needs_build
def test_a_final_class_refuses_a_python_subclass() -> None:
    from roce.emu.core.requester import Requester
    from roce.emu.net.switch import Switch
    with pytest.raises(TypeError):
        type("MySwitch", (Switch,), {})
    assert issubclass(type("MyRequester", (Requester,), {}), Requester)


@needs_build
def test_the_classes_are_compiled_as_extension_types() -> None:
    for module, classes in _compiled.CLASSES.items():
        mod = importlib.import_module(module)
        for name in classes:
            cls = getattr(mod, name)
            assert not cls.__flags__ & HEAPTYPE, f"{module}.{name} is not an extension type"
            assert "__dict__" not in dir(cls), f"{module}.{name} instances take any attribute"


_ARGSPEC_PROBE = """
import inspect, json
plain = inspect.getfullargspec
asked = []
def counting(func):
    asked.append(getattr(func, "__qualname__", repr(func)))
    return plain(func)
inspect.getfullargspec = counting
import roce.emu.net.runner
print(json.dumps({"asked": asked, "restored": inspect.getfullargspec is counting}))
"""


@needs_build
def test_compiled_dataclasses_ask_each_argument_spec_once() -> None:
    """Cython asks inspect.getfullargspec(dataclasses.field) once per field of a compiled
    dataclass; the loader answers a function asked about before from its memo, and puts
    inspect's own function back when the module has run."""
    env = dict(os.environ)
    env.pop("ROCE_PURE", None)
    out = json.loads(subprocess.run([sys.executable, "-c", _ARGSPEC_PROBE], env=env,
                                    capture_output=True, text=True, check=True).stdout)
    assert out["restored"]
    assert out["asked"] and len(out["asked"]) == len(set(out["asked"])) < 5
    loader = importlib.import_module("roce.emu.core.qp").__spec__.loader
    assert type(loader).__name__ == "_ExtensionLoader"


# Run in the interpreted form: every assignment to an attribute of a dataclass of CLASSES is
# checked against its fields (a slotted class refuses unknown attributes by itself); the
# scenarios touch the switched network with PFC, DCQCN, TIMELY, spraying and selective repeat,
# and the two-host fabric with every fault.
_WATCH = """
import json, sys
from importlib import import_module
from roce import _compiled
from roce.testing.twins import run_spec

bad = set()
for module, classes in _compiled.CLASSES.items():
    for name in classes:
        cls = getattr(import_module(module), name)
        if hasattr(cls, "__dataclass_fields__"):
            def watch(self, key, value, _fields=set(cls.__dataclass_fields__),
                      _name=f"{module}.{name}", _set=object.__setattr__):
                if key not in _fields:
                    bad.add(f"{_name}.{key}")
                _set(self, key, value)
            cls.__setattr__ = watch
for spec in json.load(sys.stdin):
    run_spec(spec)
print(json.dumps(sorted(bad)))
"""
SCENARIOS = [
    {"net": True, "topology": "incast:4", "size": 64 << 10, "count": 2, "pfc": True,
     "cc": "dcqcn", "buffer": 1 << 20},
    {"net": True, "topology": "leafspine:2,2,2", "size": 64 << 10, "count": 2, "lb": "spray",
     "recovery": "sr", "pfc": False, "mtu": 1024, "cc": "timely", "op": "read"},
    {"net": True, "topology": "incast:4", "size": 64 << 10, "count": 2, "pfc": False,
     "cc": "dctcp", "buffer": 256 << 10},
    {"net": True, "topology": "leafspine:2,2,2", "size": 64 << 10, "count": 2,
     "recovery": "sr", "pfc": False, "cc": "swift", "buffer": 256 << 10},
    {"net": False, "op": "write", "size": 32 << 10, "count": 6, "loss": 0.05, "reorder": 0.05,
     "dup": 0.02, "corrupt": 0.02, "recovery": "sr"},
    {"net": False, "op": "atomic", "size": 8, "count": 6, "loss": 0.05},
]


def test_no_attribute_outside_the_declared_ones_is_set() -> None:
    r = subprocess.run([sys.executable, "-c", _WATCH], input=json.dumps(SCENARIOS),
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, _compiled.PURE_ENV: "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout) == []
