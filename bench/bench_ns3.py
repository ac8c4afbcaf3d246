"""roce against ns-3 on the same networks: packet-hops per CPU-second of the simulation loop,
and whole-process CPU time, medians of alternating runs.

ns-3 comes from the ``ns3`` package on PyPI (``pip install ns3``), whose wheel ships ns-3's
headers and shared libraries; this script compiles its own scenario, bench/ns3_scenario.cc,
with g++ against them (once per source and installation, cached under the system's temporary
directory) and feeds it the network roce builds: the same nodes, links and flows, 100 Gb/s
links with 1 us delay, frames of 1,082 bytes on the wire (roce: MTU 1024; ns-3: a 1,052-byte
UDP payload + IPv4, UDP and PPP headers), the same number of data frames per flow.  ns-3
runs UDP at line rate with no congestion control (OnOff sources, packet sinks), queues deep
enough that nothing drops, no queue disc; spraying is its per-packet random ECMP.  Where the
``ns3`` package is absent the script says "ns-3 not installed" and runs roce's side alone.

Cases:

- ``incast``: 16:1 incast, 1 MiB per sender, roce without congestion control (PFC on);
- ``incast-dcqcn``: the same with DCQCN and PFC (ns-3: the same no-CC run);
- ``p2p``: two hosts, one link, 16 x 1 MiB;
- ``leafspine``: leaf-spine 4,2,4, a permutation of 1 MiB per host, roce spraying with
  selective repeat; ns-3 spraying UDP over the same pairs.

A packet-hop is one frame received at the far end of one link (roce counts its ACKs and
CNPs too: they cross links; ns-3's UDP has none).  The loop's CPU time is the CPU clock
around each simulator's run loop (roce: ``run()``; ns-3: ``Simulator::Run()``), excluding
building the network.  ``whole``: the 16:1 incast with 8 MiB per sender, the CPU time
(user + system) of the whole process, ``roce emulate`` against the ns-3 binary, the same
data frames through the same network; and ``fixed``: the CPU time of ``roce emulate``
running one 4 KiB WRITE (process start, imports, setup, run, verification, summary).  roce
runs under this script's interpreter: in a venv holding an editable install, every start
includes setuptools' import hook (~10 ms), which the script points out; bench/RESULTS.md's
figures come from a plain venv.

Each round runs every case once on each side, the order of the two sides swapped every
round, each run a fresh process; the figures are medians over ``--rounds``.  The ratio is
given two ways: the ratio of the two sides' medians, and the median of each round's own
ratio (its two runs back to back: on a shared machine whose speed drifts between rounds,
the steadier of the two).

    python bench/bench_ns3.py [--rounds 5] [--cases incast,p2p,...] [--markdown]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
TREE = HERE.parent
SOURCE = HERE / "ns3_scenario.cc"
NS3_LIBS = ("applications", "internet", "point-to-point", "traffic-control", "network", "core")

MTU = 1024
PAYLOAD = 1082 - 28 - 2  # ns-3's UDP payload: a 1,082-byte frame on the wire with IPv4+UDP+PPP
MIB = 1 << 20

# case -> (roce's scenario keywords, lb spray on ns-3's side)
CASES: dict[str, tuple[dict, bool]] = {
    "incast": ({"topology": "incast:16", "size": MIB, "count": 1}, False),
    "incast-dcqcn": ({"topology": "incast:16", "size": MIB, "count": 1, "cc": "dcqcn"}, False),
    "p2p": ({"topology": "p2p", "size": MIB, "count": 16}, False),
    "leafspine": ({"topology": "leafspine:4,2,4", "traffic": "permutation", "size": MIB,
                   "count": 1, "lb": "spray", "recovery": "sr"}, True),
}
WHOLE = {"topology": "incast:16", "size": 8 * MIB, "count": 1}
LABELS = {
    "incast": "16:1 incast, no CC",
    "incast-dcqcn": "16:1 incast, DCQCN, PFC (ns-3: no CC)",
    "p2p": "p2p, 16 x 1 MiB",
    "leafspine": "leaf-spine 4,2,4, spray + selective repeat (ns-3: UDP, random ECMP)",
}

# roce's side of one case, in a fresh process of this tree: the network as ns-3 needs it
# (nodes, links, flows), the hops and the loop's CPU time.
CHILD = r"""
import json, sys
kw = json.loads(sys.argv[1])
from roce.emu.net.runner import NetRun, NetScenario
from roce.emu.cc import configure
if "cc" in kw:
    kw["cc"] = configure(kw["cc"])
sc = NetScenario(**kw)
run = NetRun(sc)
s = run.run()
assert s.data_verified, s.unverified
t = run.topology
index = {name: i for i, name in enumerate([*t.hosts, *t.switches])}
frames = -(-sc.size // sc.mtu) * sc.count
print(json.dumps({
    "hops": s.hops, "cpu_s": s.cpu_s, "virtual_ns": s.virtual_ns,
    "nodes": len(index),
    "links": [[index[ln.a], index[ln.b]] for ln in t.links],
    "flows": [[index[a], index[b], frames] for a, b in run.names],
}))
"""


def ns3_install() -> Path | None:
    """The ``ns3`` wheel's directory (``.../site-packages/ns3``, holding ``include`` and
    ``lib64``), or None when the package is not installed.  Found from its metadata: importing
    it would load cppyy."""
    try:
        dist = metadata.distribution("ns3")
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if str(f).endswith("include/ns3/core-module.h"):
            return Path(dist.locate_file(f)).parents[2]
    return None


def build(ns3: Path) -> Path:
    """Compile bench/ns3_scenario.cc against the wheel's headers and libraries (cached by the
    source's and the installation's identity)."""
    key = hashlib.sha256(SOURCE.read_bytes() + str(ns3).encode()).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / "roce-bench-ns3" / key / "scenario"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    lib = ns3 / "lib64"
    version = next(p.name for p in lib.glob("libns3.*-core.so")).split("-")[0][3:]
    cmd = ["g++", "-O2", "-std=c++20", f"-I{ns3 / 'include'}", "-o", str(out) + ".tmp",
           str(SOURCE), f"-L{lib}", f"-Wl,-rpath,{lib}",
           *(f"-l{version}-{name}" for name in NS3_LIBS)]
    print("building the ns-3 scenario:", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True)
    os.replace(str(out) + ".tmp", out)
    return out


def run_child(cmd: list[str], stdin: str | None = None, env: dict | None = None
              ) -> tuple[str, float]:
    """Run ``cmd`` to completion: its standard output and its CPU seconds (user + system),
    from the kernel's accounting of the child alone."""
    r, w = os.pipe()  # the child's standard output
    ri, wi = os.pipe()  # its standard input
    pid = os.fork()
    if pid == 0:  # child
        os.dup2(ri if stdin is not None else os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(w, 1)
        for fd in (r, w, ri, wi):
            os.close(fd)
        os.execvpe(cmd[0], cmd, env or os.environ)
    os.close(w)
    os.close(ri)
    if stdin is not None:
        with os.fdopen(wi, "wb") as f:
            f.write(stdin.encode())
    else:
        os.close(wi)
    chunks = []
    while chunk := os.read(r, 1 << 16):
        chunks.append(chunk)
    os.close(r)
    _, status, ru = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd)}: exit {os.waitstatus_to_exitcode(status)}")
    return b"".join(chunks).decode(), ru.ru_utime + ru.ru_stime


def roce_env() -> dict:
    """This tree, with Python's bytecode cache, as a user's shell has it (an environment
    that turns the cache off would time the compiling of every module at every start)."""
    env = {**os.environ, "PYTHONPATH": str(TREE)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def roce_case(kw: dict) -> dict:
    out, _ = run_child([sys.executable, "-c", CHILD, json.dumps(kw)], env=roce_env())
    return json.loads(out.strip().splitlines()[-1])


def ns3_case(binary: Path, net: dict, spray: bool) -> dict:
    lines = [f"nodes {net['nodes']}"]
    lines += [f"link {a} {b}" for a, b in net["links"]]
    lines += [f"flow {s} {d} {n}" for s, d, n in net["flows"]]
    out, cpu = run_child([str(binary), "100", "1000", str(PAYLOAD), str(int(spray))],
                         stdin="\n".join(lines) + "\n")
    r = json.loads(out)
    r["process_cpu_s"] = cpu
    want = sum(n for _, _, n in net["flows"])
    assert r["received"] == want, f"ns-3 delivered {r['received']} of {want} datagrams"
    return r


def emulate_cmd(kw: dict) -> list[str]:
    cmd = [sys.executable, "-m", "roce", "emulate", "--mtu", str(MTU), "--count",
           str(kw.get("count", 1)), "--size", str(kw["size"]), "--no-progress"]
    if kw.get("topology", "p2p") != "p2p":
        cmd += ["--topology", kw["topology"]]
    return cmd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cases", default=",".join([*CASES, "whole", "fixed"]))
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    names = args.cases.split(",")
    ns3 = ns3_install()
    binary = build(ns3) if ns3 else None
    if binary is None:
        print("ns-3 not installed (pip install ns3): roce's side only", file=sys.stderr)
    rates: dict[str, dict[str, list[float]]] = {n: {"roce": [], "ns3": []} for n in names}
    cpu: dict[str, dict[str, list[float]]] = {n: {"roce": [], "ns3": []} for n in names}
    hops: dict[str, dict[str, int]] = {n: {} for n in names}
    nets = {}  # case -> the network roce built (nodes, links, flows), for ns-3
    for name in names:
        if name != "fixed" and binary is not None:
            nets[name] = roce_case(dict(WHOLE if name == "whole" else CASES[name][0], mtu=MTU))
    for rnd in range(args.rounds):
        for name in names:
            if name == "fixed":
                _, c = run_child(emulate_cmd({"size": 4096}), env=roce_env())
                cpu[name]["roce"].append(c)
                continue
            kw, spray = (WHOLE, False) if name == "whole" else CASES[name]
            kw = dict(kw, mtu=MTU)
            for side in (["roce", "ns3"] if rnd % 2 == 0 else ["ns3", "roce"]):
                if side == "ns3" and binary is not None:
                    r = ns3_case(binary, nets[name], spray)
                    rates[name]["ns3"].append(r["hops"] / r["loop_cpu_s"])
                    cpu[name]["ns3"].append(r["process_cpu_s"])
                    hops[name]["ns3"] = r["hops"]
                elif side == "roce" and name == "whole":
                    _, c = run_child(emulate_cmd(kw), env=roce_env())
                    cpu[name]["roce"].append(c)
                elif side == "roce":
                    r = roce_case(kw)
                    rates[name]["roce"].append(r["hops"] / r["cpu_s"])
                    hops[name]["roce"] = r["hops"]
        print(f"round {rnd + 1} of {args.rounds} done", file=sys.stderr)
    report(names, rates, cpu, hops, args.markdown)


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def report(names: list[str], rates: dict, cpu: dict, hops: dict, markdown: bool) -> None:
    if markdown:
        print("| case | ns-3 hops | roce hops | ns-3 hops / CPU-s | roce hops / CPU-s | ratio "
              "| ratio, by round |")
        print("|---|---:|---:|---:|---:|---:|---:|")
    for name in names:
        if name in ("whole", "fixed"):
            continue
        a, b = med(rates[name]["ns3"]), med(rates[name]["roce"])
        ratio = b / a if rates[name]["ns3"] else float("nan")
        # the two sides of one round ran back to back: the median of the rounds' own ratios
        # is less moved by a shared machine's drift between rounds than the medians' ratio
        paired = med([r / n for r, n in zip(rates[name]["roce"], rates[name]["ns3"])]) \
            if rates[name]["ns3"] else float("nan")
        if markdown:
            print(f"| {LABELS[name]} | {hops[name].get('ns3', 0):,} | "
                  f"{hops[name].get('roce', 0):,} | {a:,.0f} | {b:,.0f} | {ratio:.2f} "
                  f"| {paired:.2f} |")
        elif not rates[name]["ns3"]:
            print(f"{LABELS[name]}: roce {b:,.0f} packet-hops per CPU-second of the loop "
                  "(ns-3 not run)")
        else:
            print(f"{LABELS[name]}: ns-3 {a:,.0f}, roce {b:,.0f} packet-hops per CPU-second "
                  f"of the loop, ratio {ratio:.2f} (by round {paired:.2f})")
    if "whole" in names and not cpu["whole"]["ns3"]:
        print(f"\nwhole process, 16:1 incast, 8 MiB per sender: roce emulate "
              f"{med(cpu['whole']['roce']):.3f} s CPU (ns-3 not run)")
    elif "whole" in names:
        a, b = med(cpu["whole"]["ns3"]), med(cpu["whole"]["roce"])
        print(f"\nwhole process, 16:1 incast, 8 MiB per sender: ns-3 {a:.3f} s CPU, roce "
              f"emulate {b:.3f} s CPU, ratio (ns-3 / roce) {a / b:.2f}")
    if "fixed" in names:
        c = cpu["fixed"]["roce"]
        print(f"roce emulate, one 4 KiB WRITE: {med(c):.3f} s CPU (median of {len(c)}; "
              f"{min(c):.3f}-{max(c):.3f})")
        if any(m.startswith("__editable__") for m in sys.modules):
            print("(this interpreter's site loads an editable install's import hook, ~10 ms of "
                  "every start of any program: run from a plain venv to time roce as a user's "
                  "install starts)")


if __name__ == "__main__":
    main()
