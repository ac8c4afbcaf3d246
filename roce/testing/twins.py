"""Runs emulator scenarios from plain specs, for comparing the compiled emulator modules with
their interpreted form (roce/_compiled.py).

A spec is a JSON-able dict: ``{"net": bool, "cc": NAME, ...}`` (any algorithm ``--cc``
takes) plus any ``Scenario``/``NetScenario`` field (``link_down`` as lists ``[link, down_ns,
up_ns]``; with ``cdf`` or ``collective`` the run is a workload's, ``roce.emu.net.workrun``;
with ``uet``, a dict of ``UetOptions`` fields, a run of UET endpoints, ``roce.emu.uet.run``).
``run_spec`` returns the run's summary as a dict, less the fields that measure the machine
(CPU time and rates per CPU-second), so two runs of one spec are equal field by field when
the emulator's rules are the same.

    echo '[{"net": true, "topology": "incast:2", "size": 65536, "count": 1}]' \
        | ROCE_PURE=1 python -m roce.testing.twins
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

# what a run measures of the machine, not of the emulated network
CPU_FIELDS = ("cpu_s", "packets_per_cpu_s", "hops_per_cpu_s")


def run_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The summary of one spec's run, or ``{"error": ...}`` naming why it was refused (both
    forms must refuse alike)."""
    from roce.errors import RoceError

    try:
        return _run(spec)
    except RoceError as e:
        return {"error": f"{type(e).__name__}: {e}"}


def _run(spec: dict[str, Any]) -> dict[str, Any]:
    from roce.emu.cc import configure
    from roce.emu.net.runner import NetScenario, run_network, run_scenario
    from roce.emu.scenario import Scenario

    kw = dict(spec)
    net = kw.pop("net", False)
    cc = kw.pop("cc", "none")
    if "link_down" in kw:  # JSON lists: [link, down_ns, up_ns or null]
        from roce.emu.net.failures import LinkDown

        kw["link_down"] = [LinkDown(*x) for x in kw["link_down"]]
    if "uet" in kw:  # UET endpoints on the same network
        from roce.emu.uet.run import UetOptions, run_uet

        s = run_uet(Scenario(**{k: v for k, v in kw.items() if k != "uet"}),
                    UetOptions(**kw["uet"]))
    elif kw.get("cdf") or kw.get("collective"):  # a workload generator's transfers
        from roce.emu.net.workrun import WorkloadRun

        s = WorkloadRun(Scenario(**kw, cc=None if cc == "none" else configure(cc))).run()
    elif net:
        s = run_network(NetScenario(**kw, cc=None if cc == "none" else configure(cc)))
    else:
        s = run_scenario(Scenario(**kw))
    return summary_fields(s)


def summary_fields(summary: Any) -> dict[str, Any]:
    """A run's summary as JSON data, less ``CPU_FIELDS``: what two runs of the same rules
    must agree on."""
    d = summary.as_dict()
    for k in CPU_FIELDS:
        d.pop(k, None)
    return json.loads(json.dumps(d, sort_keys=True, default=repr))


def differences(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """Where two summaries (JSON data) differ: one line per differing field, by its path."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            yield from differences(a.get(k), b.get(k), f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from differences(x, y, f"{path}[{i}]")
    elif a != b:
        yield f"{path}: {a!r} != {b!r}"


def main() -> None:
    specs = json.load(sys.stdin)
    json.dump([run_spec(s) for s in specs], sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
