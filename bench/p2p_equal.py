"""Virtual-time equality of two-host runs between two trees: the same seed must give the same
summary, field by field, and the same frames at the same virtual times.

``dump`` runs three kinds of case and writes, per case, what it produced:

- scenarios (``run_scenario``, what ``roce emulate`` runs on ``--topology p2p``): every
  operation, RC/UC/UD, go-back-N and selective repeat with both loss rules, random loss,
  burst loss, reordering, duplication and corruption, several MTUs, depths, QP counts and
  PSN starts, a time-limited run and a stalled one.  Per case: the summary's ``as_dict()``
  less its CPU-time fields, and a SHA-256 of every recorded frame with its timestamp;
- verbs programs (``roce.testing.fuzz.programs.run_program``): seeded random sequences of
  verbs calls (posts, modifies to error and back, pauses of the clock) over lossy links;
  per case the result and the frame hash;
- targeted drops on the verbs API (``Fabric.connect`` with ``drop_nth``,
  ``drop_acks_between``): the frame hash and the clock after ``run_until_idle``.

``compare`` lists what differs between two dumps (exit 1 if anything does).

    PYTHONPATH=/path/to/other/tree python bench/p2p_equal.py dump other.json
    python bench/p2p_equal.py dump this.json
    python bench/p2p_equal.py compare other.json this.json
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import random
import sys
from collections.abc import Iterator
from typing import Any

import equal_cli

CPU_FIELDS = ("cpu_s", "packets_per_cpu_s", "hops_per_cpu_s")


class Hasher:
    """A recorder (``write(frame, ts_ns=...)``) that keeps a hash of what it was given."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.frames = 0

    def write(self, frame: bytes, ts_ns: int | None = None) -> None:
        self.h.update((ts_ns or 0).to_bytes(8, "big") + len(frame).to_bytes(4, "big"))
        self.h.update(bytes(frame))
        self.frames += 1

    def digest(self) -> str:
        return f"{self.frames}:{self.h.hexdigest()[:32]}"


def scenarios() -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, ``Scenario`` fields) of every scenario case."""
    rng = random.Random(2024)
    faults = [{}, {"loss": 0.01}, {"loss": 0.05}, {"burst": 0.01}, {"reorder": 0.05},
              {"dup": 0.02}, {"corrupt": 0.02},
              {"loss": 0.02, "reorder": 0.02, "dup": 0.01, "corrupt": 0.01}]
    ops = {"rc": ["write", "read", "send", "atomic", "mixed"], "uc": ["write", "send"],
           "ud": ["send"]}
    n = 0
    for qp_type, op_list in ops.items():
        for op, fault in itertools.product(op_list, faults):
            recoveries = [("gbn", "rack")]
            if qp_type == "rc":
                recoveries += [("sr", "rack"), ("sr", "dupthresh")]
            for recovery, loss_rule in recoveries:
                mtu = rng.choice([256, 1024, 4096])
                size = (rng.choice([8, 100, 4096, 20000, 65536]) if qp_type != "ud"
                        else rng.choice([8, 100, mtu]))
                kw = {"op": op, "qp_type": qp_type, "size": size, "mtu": mtu,
                      "count": rng.randint(2, 12), "depth": rng.choice([1, 4, 16]),
                      "qps": rng.choice([1, 1, 3]), "seed": rng.randrange(1 << 16),
                      "psn": rng.choice([0, 0xFFFFF0]), "recovery": recovery,
                      "loss_rule": loss_rule, "delay_ns": rng.choice([1000, 5000]),
                      "rate_gbps": rng.choice([100.0, 25.0]), **fault}
                n += 1
                yield f"{n:03d} {qp_type} {op} {recovery}/{loss_rule} {fault}", kw
    yield "big write lossy", {"op": "write", "size": 1 << 20, "count": 20, "loss": 0.01,
                              "seed": 7}
    yield "big write lossy sr", {"op": "write", "size": 1 << 20, "count": 20, "loss": 0.01,
                                 "seed": 7, "recovery": "sr"}
    yield "many qps", {"op": "write", "size": 4096, "count": 2, "qps": 300}
    yield "small sends", {"op": "send", "size": 64, "count": 500}
    yield "retry exceeded", {"op": "write", "size": 4096, "count": 2, "loss": 1.0,
                             "timeout": 8}
    yield "time limit", {"op": "write", "size": 4096, "count": 2, "loss": 1.0, "timeout": 31}
    yield "stall", {"op": "write", "size": 4096, "count": 1, "loss": 1.0, "timeout": 0}
    yield "rnr-free timeouts", {"op": "read", "size": 65536, "count": 8, "loss": 0.1,
                                "timeout": 10, "retry_cnt": 3, "seed": 5}


def run_scenario_case(kw: dict[str, Any]) -> dict[str, Any]:
    from roce.emu.scenario import Scenario
    from roce.errors import RoceError

    try:
        from roce.emu.net.runner import run_scenario
    except ImportError:  # a tree from before p2p ran on the switched network's runner
        from roce.emu.scenario import run_scenario

    rec = Hasher()
    try:
        s = run_scenario(Scenario(**kw), rec)
    except RoceError as e:
        return {"error": f"{type(e).__name__}: {e}"}
    d = s.as_dict()
    for k in CPU_FIELDS:
        d.pop(k, None)
    d = json.loads(json.dumps(d, sort_keys=True, default=repr))
    d["frames"] = rec.digest()
    return d


def run_program_case(seed: int) -> dict[str, Any]:
    """One seeded verbs program, every frame it put on the fabric hashed."""
    import roce.emu
    from roce.testing.fuzz.programs import random_program, run_program

    rec = Hasher()
    real = roce.emu.Fabric

    class Recorded(real):  # type: ignore[misc, valid-type]
        def __init__(self, seed: int = 0) -> None:
            super().__init__(seed)
            self.record(rec)

    roce.emu.Fabric = Recorded
    try:
        rng = random.Random(seed)
        program = random_program(rng, max_ops=16)
        link = [{}, {"loss": 0.05}, {"dup": 0.05, "reorder": 0.05},
                {"corrupt": 0.03, "loss": 0.03}][seed % 4]
        r = run_program(program, seed=seed, **link)
    finally:
        roce.emu.Fabric = real
    d = {k: v for k, v in dataclasses.asdict(r).items()}
    d["statuses"] = dict(sorted(r.statuses.items()))
    d["frames"] = rec.digest()
    return json.loads(json.dumps(d, sort_keys=True, default=repr))


def run_targeted_case(kind: str, seed: int) -> dict[str, Any]:
    """WRITEs and READs between two verbs hosts whose link drops chosen frames."""
    from roce.emu import (
        CQ,
        MR,
        PD,
        QP,
        Fabric,
        LinkConfig,
        QPInitAttr,
        QPType,
        SendWR,
        WROpcode,
        connect,
    )
    from roce.emu.core.constants import ALL_ACCESS

    fab = Fabric(seed=seed)
    rec = Hasher()
    fab.record(rec)
    a, b = fab.add_host("a", "10.0.0.1"), fab.add_host("b", "10.0.0.2")
    if kind == "drop_nth":
        fwd, back = LinkConfig(drop_nth=frozenset({2, 5, 9})), LinkConfig(drop_nth={3})
    else:
        fwd, back = LinkConfig(), LinkConfig(drop_acks_between=(2_000, 60_000))
    ab, ba = fab.connect(a, b, config=fwd, reverse=back)
    pda, pdb = PD(a), PD(b)
    src, dst = MR(pda, 1 << 16, ALL_ACCESS), MR(pdb, 1 << 16, ALL_ACCESS)
    src.write(random.Random(seed).randbytes(1 << 16))
    cqa, cqb = CQ(a), CQ(b)
    qa = QP(pda, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cqa, recv_cq=cqa))
    qb = QP(pdb, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cqb, recv_cq=cqb))
    connect(qa, qb, path_mtu=1024, timeout=6)
    for i in range(8):
        op = WROpcode.IBV_WR_RDMA_WRITE if i % 2 == 0 else WROpcode.IBV_WR_RDMA_READ
        qa.post_send(SendWR(wr_id=i, opcode=op, sg_list=[src.sge(i * 4096, 4096)],
                            remote_addr=dst.addr + i * 4096, rkey=dst.rkey))
    fab.run_until_idle()
    wcs = [(w.wr_id, int(w.status)) for w in cqa.poll(100)]
    return {"now": fab.now, "wcs": wcs, "frames": rec.digest(),
            "ab": dataclasses.asdict(ab.stats), "ba": dataclasses.asdict(ba.stats)}


def dump(path: str) -> None:
    out: dict[str, Any] = {}
    for name, kw in scenarios():
        out[f"scenario {name}"] = run_scenario_case(kw)
    for seed in range(40):
        out[f"program {seed}"] = run_program_case(seed)
    for kind in ("drop_nth", "drop_acks_between"):
        for seed in range(3):
            out[f"targeted {kind} {seed}"] = run_targeted_case(kind, seed)
    print(f"{len(out)} cases", file=sys.stderr)
    with open(path, "w") as f:
        json.dump(out, f, sort_keys=True)


def main() -> None:
    equal_cli.run(__doc__, dump, report)


def report(a: dict[str, Any], b: dict[str, Any]) -> int:
    """Print what differs between dumps ``a`` (before) and ``b`` (after); fields only ``b``
    has (a summary that grew) are listed apart.  1 if anything differs."""
    diffs: list[str] = []
    added: set[str] = set()

    def walk(x: Any, y: Any, case: str, path: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y), key=str):
                if k not in x:
                    added.add(f"{path}.{k}".lstrip("."))
                else:
                    walk(x.get(k), y.get(k), case, f"{path}.{k}")
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, case, f"{path}[{i}]")
        elif x != y:
            diffs.append(f"{case}: {path.lstrip('.')}: {x!r} != {y!r}")

    for case in sorted(set(a) | set(b)):
        walk(a.get(case), b.get(case), case, "")
    for d in diffs[:60]:
        print(d)
    if added:
        print("fields only the second dump has: " + ", ".join(sorted(added)))
    cases = {d.split(": ")[0] for d in diffs}
    print(f"{len(set(a) | set(b))} cases compared, {len(cases)} differing, {len(diffs)} "
          "differing fields")
    return 1 if diffs else 0

if __name__ == "__main__":
    main()
