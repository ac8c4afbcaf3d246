"""Install time: ``pip install .`` of a fresh clone into a fresh venv, wall and CPU time.

Each round clones the repository (its committed state at REF) into a new directory, makes a
new venv there with this Python, and times ``pip install .`` in it: wall time, and CPU time
(user + system of pip and everything it ran: the isolated build environment, Cython, the C
compiler).  Then, in the same clone and venv, ``pip install -e ".[test]"`` (the test command's
install; ``--second`` changes it, ``--second ''`` skips it): it must not compile again.
Dependencies come from pip's cache after the first round, so what is timed is mostly the build
of roce itself.  The machine's load average is printed with every figure: on a shared machine
the wall time moves with it, the CPU time much less.

Several REFs (``--refs 55315c9,HEAD``) run alternately, round by round.  Not run by the test
suite (minutes).

    python bench/bench_install.py [--rounds 3] [--refs HEAD] [--second '-e .[test]'] [--keep]
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str], cwd: str, log: str) -> dict:
    """Run ``cmd``; wall and CPU seconds, the load average before and after."""
    load0 = os.getloadavg()[0]
    cpu0, t0 = cpu_children(), time.monotonic()
    with open(log, "w") as out:
        r = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    wall, cpu = time.monotonic() - t0, cpu_children() - cpu0
    if r.returncode:
        sys.exit(f"{shlex.join(cmd)} failed ({r.returncode}); see {log}")
    return {"wall": wall, "cpu": cpu, "load": (load0, os.getloadavg()[0])}


def one_round(ref: str, second: str, work: str) -> dict:
    clone, venv = os.path.join(work, "clone"), os.path.join(work, "venv")
    subprocess.run(["git", "clone", "-q", REPO, clone], check=True)
    subprocess.run(["git", "checkout", "-q", ref], cwd=clone, check=True)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip = [os.path.join(venv, "bin", "python"), "-m", "pip"]
    out = {"commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone,
                                    capture_output=True, text=True).stdout.strip()}
    out["first"] = timed(pip + ["install", "."], clone, os.path.join(work, "first.log"))
    if second:
        out["second"] = timed(pip + ["install", *shlex.split(second)], clone,
                              os.path.join(work, "second.log"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--refs", default="HEAD", help="commits to time, comma-separated")
    ap.add_argument("--second", default='-e .[test]',
                    help="pip install arguments timed after the first install ('': none)")
    ap.add_argument("--keep", action="store_true", help="keep the clones, venvs and logs")
    args = ap.parse_args()
    refs = args.refs.split(",")
    # resolve the refs here: a clone's HEAD is this repository's current branch
    refs = [subprocess.run(["git", "rev-parse", r], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.strip() for r in refs]
    results: dict[str, list[dict]] = {r: [] for r in refs}
    for n in range(args.rounds):
        for ref in refs if n % 2 == 0 else refs[::-1]:
            work = tempfile.mkdtemp(prefix="roce-install-")
            r = one_round(ref, args.second, work)
            results[ref].append(r)
            f = r["first"]
            print(f"round {n + 1} {r['commit']}: pip install . {f['wall']:.1f} s wall, "
                  f"{f['cpu']:.1f} s CPU, load {f['load'][0]:.1f}-{f['load'][1]:.1f}"
                  + (f"; then {r['second']['wall']:.1f} s wall, {r['second']['cpu']:.1f} s "
                     "CPU" if "second" in r else "") + (f" ({work})" if args.keep else ""),
                  flush=True)
            if not args.keep:
                shutil.rmtree(work)
    print(f"\n{os.cpu_count()} cores, Python {sys.version.split()[0]}, {args.rounds} rounds, "
          "median (min-max)\n")
    steps = ["first"] + (["second"] if args.second else [])
    names = {"first": "pip install .", "second": f"then pip install {args.second}"}
    print("| commit | step | wall s | CPU s (user+sys) | load during |")
    print("|---|---|---:|---:|---|")
    for rows in results.values():
        for step in steps:
            wall = [r[step]["wall"] for r in rows]
            cpu = [r[step]["cpu"] for r in rows]
            load = [x for r in rows for x in r[step]["load"]]
            print(f"| {rows[0]['commit']} | {names[step]} | {statistics.median(wall):.1f} "
                  f"({min(wall):.1f}-{max(wall):.1f}) | {statistics.median(cpu):.1f} "
                  f"({min(cpu):.1f}-{max(cpu):.1f}) | {min(load):.1f}-{max(load):.1f} |")


if __name__ == "__main__":
    main()
