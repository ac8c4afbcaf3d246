"""``roce emulate`` imports what its run needs and nothing more: a short run's CPU time is
mostly imports (bench/RESULTS.md, "roce against ns-3"), so the capture side of roce, the
optional heavy libraries and the build-time tools stay out of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import json, sys
from roce.cli import main
rc = main(sys.argv[1:])
from roce import _deferred
print(json.dumps({"rc": rc, "modules": sorted(sys.modules), "inspect": not _deferred.deferred()}))
"""

# never needed by a simulated run: the decoder, the flow analysis, plots and Scapy layers
# (roce's other commands), the heavy optional libraries, and importlib.abc, which brings
# importlib.resources; inspect, with the ast, dis and tokenize it brings (dataclasses imports
# it for one use roce never makes: roce/_deferred.py); typing, which only the type checker
# needs (docs/architecture.md); nor the standard modules only some options need: socket (a
# real link), ipaddress (an address option), csv (a trace), shutil with bz2 and lzma (help
# laid out to the terminal's width)
UNWANTED = ("roce.decoder", "roce.analysis", "roce.plot", "roce.wire", "roce.families.dispatch",
            "pandas", "pyarrow", "matplotlib", "numpy", "scapy", "dask", "hypothesis",
            "importlib.resources", "importlib.abc", "construct", "ast", "dis", "tokenize",
            "typing", "socket", "ipaddress", "csv", "shutil", "bz2", "lzma")


def _modules(*args: str, inspect: bool | None = None) -> list[str]:
    """What ``roce emulate ARGS`` imported; ``inspect``: whether it must have imported the
    real module (None: either)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", CHILD, "emulate", *args], env=env,
                       capture_output=True, text=True, check=True, cwd=ROOT)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["rc"] == 0, r.stdout
    assert inspect is None or out["inspect"] == inspect, out["inspect"]
    return out["modules"]


def _startup() -> set[str]:
    """What this interpreter imports before roce runs at all (site's .pth files may bring
    importlib.resources, say): not roce's doing, so not held against it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    probe = "import json, sys; print(json.dumps(sorted(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                       text=True, check=True, cwd=ROOT)
    return set(json.loads(r.stdout))


def _unwanted(modules: list[str]) -> list[str]:
    before = _startup()
    return [m for m in modules if m not in before
            and any(m == u or m.startswith(u + ".") for u in UNWANTED)]


# what only some runs need: the switched network (a switch, the scheduling NIC with pause
# frames, congestion control and INT), the workload generators, InfiniBand's routings
SWITCHED = ("roce.emu.net.switch", "roce.emu.net.nic", "roce.emu.net.buffer",
            "roce.emu.net.pfc", "roce.emu.cc.engine", "roce.families")
WORKLOADS = ("roce.emu.workload.cdf", "roce.emu.workload.collective",
             "roce.emu.workload.openloop", "roce.emu.workload.graph")
ROUTINGS = ("roce.emu.ib.lft", "roce.emu.ib.route_minhop", "roce.emu.ib.route_dmodk",
            "roce.emu.ib.route_updn", "roce.emu.ib.route_ftree")
UNRELIABLE = ("roce.emu.core.unreliable",)  # UC and UD queue pairs


def test_two_hosts_import_only_what_the_run_needs() -> None:
    modules = _modules("--size", "4K", "--count", "1", inspect=False)
    assert "roce.emu.net.runner" in modules  # the run did happen in this process
    assert _unwanted(modules) == []
    assert [m for m in (*SWITCHED, *WORKLOADS, *ROUTINGS, *UNRELIABLE) if m in modules] == []


def test_each_kind_of_run_imports_what_it_uses() -> None:
    collective = _modules("--topology", "incast:4", "--collective", "allreduce", "--size",
                          "64K")
    assert "roce.emu.workload.collective" in collective
    assert "roce.emu.net.switch" in collective
    assert "roce.emu.ib.route_minhop" not in collective
    ib = _modules("--protocol", "ib", "--topology", "incast:2", "--size", "4K", "--count", "1")
    assert "roce.emu.ib.route_minhop" in ib


def test_switched_network_imports_only_what_the_run_needs() -> None:
    modules = _modules("--topology", "incast:2", "--size", "4K", "--count", "1", inspect=False)
    assert "roce.emu.net.switch" in modules
    assert _unwanted(modules) == []


def test_only_the_chosen_congestion_control_is_imported() -> None:
    """``--cc``'s choices and help come from the registry's rows; a run imports the module
    of the algorithm it runs, not the others."""
    algorithms = ("dcqcn", "timely", "dctcp", "swift", "nscc", "rccc")
    plain = _modules("--size", "4K", "--count", "1")
    assert [a for a in algorithms if f"roce.emu.cc.{a}" in plain] == []
    dcqcn = _modules("--topology", "incast:2", "--cc", "dcqcn", "--size", "4K", "--count", "1")
    assert [a for a in algorithms if f"roce.emu.cc.{a}" in dcqcn] == ["dcqcn"]


FREEZE = """
import gc, json, sys
from roce.cli import main
sys.argv = ["roce", "emulate", "--size", "4K", "--count", "1"]
rc = main() if "{how}" == "process" else main(sys.argv[1:])
print(json.dumps({{"rc": rc, "frozen": gc.get_freeze_count()}}))
"""


def test_the_command_freezes_its_imports_a_library_call_does_not() -> None:
    """``roce COMMAND`` (``main()`` reading ``sys.argv``) puts what its imports made out of the
    collector's sight; ``main(argv)`` called by a program (the tests) leaves its caller's
    garbage collectable."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    seen = {}
    for how in ("process", "library"):
        r = subprocess.run([sys.executable, "-c", FREEZE.format(how=how)], env=env,
                           capture_output=True, text=True, check=True, cwd=ROOT)
        seen[how] = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["process"]["rc"] == 0 and seen["process"]["frozen"] > 10_000
    assert seen["library"] == {"rc": 0, "frozen": 0}
