"""Loss recovery: go-back-N against selective repeat (IRN), in virtual time.

1. Goodput against random loss on the default p2p link (100 Gb/s, 1 us, 20 x 1 MiB WRITEs,
   seed 7), loss 0 to 5 %: a table, and a plot in docs/recovery-goodput.png.
2. Spraying: leaf-spine 4,2,4, permutation, 1 MiB WRITEs, PFC off: ``--lb ecmp --recovery
   gbn`` against ``--lb spray --recovery sr`` (aggregate goodput, completion-time tail).
   ``--recovery sr`` counts its spurious retransmissions under both loss rules (``rack``, the
   default, time-based; ``dupthresh``, IRN's packet count).
3. IRN's headline comparison: PFC on + gbn against PFC off + sr, each without and with DCQCN;
   tail and mean completion times (IRN: without PFC 6-83 % better), on the permutation and on
   an incast-heavy mix where PFC pauses: the same leaf-spine, the permutation plus 12 hosts of
   leaves 2-4 writing to l1h1, 2 x 1 MiB WRITEs per flow. The default ECN thresholds differ
   with PFC on and off (docs/congestion-control.md, "Marking thresholds"); IRN runs both arms
   with the same ECN/DCQCN settings, so the DCQCN arms are run twice, both at the lossy-safe
   thresholds (the PFC-off defaults) and both at the rate-scaled PFC-on defaults.

    python bench/bench_recovery.py [--markdown] [--plot docs/recovery-goodput.png]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile

from roce.emu.cc import configure
from roce.emu.net import topology as topo
from roce.emu.net.runner import NetRun, NetScenario, run_scenario
from roce.emu.scenario import Scenario

LOSSES = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05)


def goodput_curve() -> list[dict]:
    rows = []
    for loss in LOSSES:
        row = {"loss": loss, "ideal": 100 * (1 - loss)}
        for mode in ("gbn", "sr"):
            s = run_scenario(Scenario(op="write", size=1 << 20, count=20, loss=loss, seed=7,
                                      recovery=mode))
            assert s.data_verified, (mode, loss)
            row[mode] = s.goodput_gbps
            row[f"{mode}_retx"] = s.retransmitted
            row[f"{mode}_cpu"] = s.cpu_s
        rows.append(row)
    return rows


def scenario(lb: str, recovery: str, pfc: bool, cc: str = "none", count: int = 4,
             loss_rule: str = "rack", topology_file: str | None = None,
             ecn: str = "on") -> NetScenario:
    return NetScenario(topology="leafspine:4,2,4", topology_file=topology_file, op="write",
                       size=1 << 20, count=count, pfc=pfc, lb=lb, recovery=recovery,
                       loss_rule=loss_rule, cc=configure(cc), seed=1, ecn=ecn)


def default_ecn(pfc: bool, topology_file: str | None = None) -> str:
    """The default (``--ecn on``) thresholds the switches get with ``pfc`` on or off, as an
    explicit ``KMIN,KMAX,PMAX``: the lowest over the fabric's ports (without PFC they follow
    each switch's drop point, so leaves and spines differ by a fraction of a percent)."""
    run = NetRun(scenario("ecmp", "gbn" if pfc else "sr", pfc, "dcqcn",
                          topology_file=topology_file))
    marks = [p.marker for sw in run.net.switches.values() for p in sw.ports]
    return (f"{min(m.kmin for m in marks)},{min(m.kmax for m in marks)},"
            f"{min(m.pmax for m in marks):g}")


def net(lb: str, recovery: str, pfc: bool, cc: str = "none", count: int = 4,
        loss_rule: str = "rack", topology_file: str | None = None,
        victims_of: str | None = None, ecn: str = "on", label: str = "") -> dict:
    sc = scenario(lb, recovery, pfc, cc, count, loss_rule, topology_file, ecn)
    s = NetRun(sc).run()
    assert s.data_verified, (lb, recovery, pfc, cc)
    row = {"lb": lb, "recovery": recovery, "pfc": "on" if pfc else "off", "cc": cc,
           "rule": loss_rule if recovery == "sr" else "",
           "goodput": s.goodput_gbps, "p50_us": s.fct_ns["p50"] / 1e3,
           "p99_us": s.fct_ns["p99"] / 1e3, "mean_us": s.fct_ns["mean"] / 1e3,
           "retx": s.retransmitted, "spurious": s.spurious_retransmissions,
           "drops": s.fabric["drops"], "pfc_frames": s.fabric["pfc_frames"], "cpu": s.cpu_s,
           "ecn": ecn, "label": label or cc, "timeouts": s.timeouts,
           "selective": s.selective_retransmitted, "cnps": s.fabric["cnps_sent"],
           "marked": s.fabric["ecn_marked"], "virtual_us": s.virtual_ns / 1e3}
    if victims_of is not None:  # the flows not into the incast's receiver
        v = [f["fct_ns"] for f in s.flows if f["dst"] != victims_of]
        into = [f["fct_ns"] for f in s.flows if f["dst"] == victims_of]
        row["incast_p99_us"] = max(f["p99"] for f in into) / 1e3
        row["victim_mean_us"] = sum(f["mean"] for f in v) / len(v) / 1e3
        row["victim_p99_us"] = max(f["p99"] for f in v) / 1e3
    return row


INCAST_TARGET = "l1h1"


def incast_mix(path: str, fan_in: int = 12) -> None:
    """A TOML topology (roce.emu.net.topology.load): leaf-spine 4,2,4, the seeded
    permutation, plus ``fan_in`` hosts of the other leaves writing to ``INCAST_TARGET``."""
    t = topo.leafspine(4, 2, 4)
    flows = topo.permutation(t, random.Random(1))
    far = [h for h in t.hosts if t.leaf_of[h] != t.leaf_of[INCAST_TARGET]]
    flows += [(h, INCAST_TARGET) for h in far[:fan_in]]
    out = [f'[hosts.{h}]\nip = "{ip}"' for h, ip in t.hosts.items()]
    out += [f"[switches.{sw}]" for sw in t.switches]
    out += [f'[[links]]\na = "{ln.a}"\nb = "{ln.b}"' for ln in t.links]
    out += [f'[[traffic]]\nsrc = "{a}"\ndst = "{b}"' for a, b in flows]
    with open(path, "w") as fh:
        fh.write("\n".join(out) + "\n")


def headline(rows: list[dict], title: str) -> None:
    """The table, then PFC off + sr against PFC on + gbn at each setting (equal thresholds),
    and the DCQCN pair at each arm's own default (what this table showed before)."""
    victims = "victim_mean_us" in rows[0]
    print(f"\n{title}\n")
    print("| cc, ECN thresholds | PFC + recovery | goodput Gb/s | FCT mean us | FCT p99 us | "
          + ("victims mean us | victims worst p99 us | " if victims else "")
          + "drops | PFC frames | retx | timeouts | CNPs |")
    print("|---|---|---:|---:|---:|" + ("---:|---:|" if victims else "")
          + "---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['label']} | {r['pfc']} + {r['recovery']} | {r['goodput']:.1f} | "
              f"{r['mean_us']:.0f} | {r['p99_us']:.0f} | "
              + (f"{r['victim_mean_us']:.0f} | {r['victim_p99_us']:.0f} | " if victims else "")
              + f"{r['drops']} | {r['pfc_frames']} | {r['retx']} | {r['timeouts']} | "
              f"{r['cnps']} |")
    print()

    def compare(name: str, pfc: dict, irn: dict) -> None:
        def better(key: str) -> str:
            return f"{(1 - irn[key] / pfc[key]) * 100:+.0f} %"

        line = (f"- {name}: PFC off + sr against PFC on + gbn: {better('p99_us')} at p99, "
                f"{better('mean_us')} on the mean")
        if victims:
            line += (f"; victims {better('victim_mean_us')} on the mean, "
                     f"{better('victim_p99_us')} on the worst p99")
        print(line + " (positive: sr without PFC better)")

    labels = list(dict.fromkeys(r["label"] for r in rows))
    for label in labels:
        pair = [r for r in rows if r["label"] == label]
        compare(label, next(r for r in pair if r["pfc"] == "on"),
                next(r for r in pair if r["pfc"] == "off"))
    dc = [r for r in rows if r["cc"] == "dcqcn"]
    own = [r for r in dc if r["ecn"] == r["own_ecn"]]
    if len(own) == 2:
        compare("dcqcn, each arm at its own default (unequal thresholds)",
                next(r for r in own if r["pfc"] == "on"),
                next(r for r in own if r["pfc"] == "off"))


def headline_rows(count: int, topology_file: str | None = None,
                  victims_of: str | None = None) -> list[dict]:
    """PFC on + gbn and PFC off + sr (ECMP): without CC, then with DCQCN at the same explicit
    thresholds in both arms - the PFC-off defaults, then the PFC-on defaults."""
    ecn = {pfc: default_ecn(pfc, topology_file) for pfc in (False, True)}
    settings = [("none", "on", "none")]
    settings += [("dcqcn", ecn[False], f"dcqcn, {kb(ecn[False])} (PFC-off defaults)"),
                 ("dcqcn", ecn[True], f"dcqcn, {kb(ecn[True])} (PFC-on defaults)")]
    rows = []
    for cc, thresholds, label in settings:
        for pfc, recovery in ((True, "gbn"), (False, "sr")):
            r = net("ecmp", recovery, pfc, cc, count=count, topology_file=topology_file,
                    victims_of=victims_of, ecn=thresholds, label=label)
            r["own_ecn"] = ecn[pfc]
            rows.append(r)
    return rows


def kb(ecn: str) -> str:
    kmin, kmax, pmax = ecn.split(",")
    return f"{int(kmin) / 1e3:.0f} KB / {int(kmax) / 1e3:.0f} KB / {pmax}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--plot", metavar="PNG", help="draw the goodput curve (plot extra)")
    args = ap.parse_args()
    curve = goodput_curve()
    print("| loss | link x (1 - loss), Gb/s | gbn Gb/s | sr Gb/s | sr / ideal | gbn retx | "
          "sr retx |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in curve:
        print(f"| {r['loss'] * 100:g} % | {r['ideal']:.1f} | {r['gbn']:.1f} | {r['sr']:.1f} | "
              f"{r['sr'] / r['ideal']:.3f} | {r['gbn_retx']} | {r['sr_retx']} |")
    if args.plot:
        from roce.plot.figure import new_figure, save

        fig, (ax,) = new_figure(1, 4.0)
        xs = [r["loss"] * 100 for r in curve]
        ax.plot(xs, [r["ideal"] for r in curve], "k:", label="link rate x (1 - loss)")
        ax.plot(xs, [r["gbn"] for r in curve], "o-", label="go-back-N (gbn)")
        ax.plot(xs, [r["sr"] for r in curve], "s-", label="selective repeat (sr, IRN)")
        ax.set_xlabel("random loss per frame and direction (%)")
        ax.set_ylabel("goodput (Gb/s)")
        ax.set_title("roce emulate --op write --size 1M --count 20, 100 Gb/s p2p link")
        ax.legend()
        save(fig, args.plot)
    print()
    runs = [net("ecmp", "gbn", False), net("spray", "sr", False),
            net("spray", "sr", False, loss_rule="dupthresh"), net("ecmp", "sr", False),
            net("spray", "gbn", False)]
    print("| lb | recovery | PFC | cc | goodput Gb/s | FCT p50 us | FCT p99 us | retx | "
          "spurious | CPU s |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        rec = f"{r['recovery']} ({r['rule']})" if r["rule"] else r["recovery"]
        print(f"| {r['lb']} | {rec} | {r['pfc']} | {r['cc']} | {r['goodput']:.1f} | "
              f"{r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['retx']} | {r['spurious']} | "
              f"{r['cpu']:.2f} |")
    base, spray, irn = runs[0], runs[1], runs[2]
    print(f"\nspray+sr / ecmp+gbn aggregate goodput: {spray['goodput'] / base['goodput']:.2f}x; "
          f"p99 {spray['p99_us']:.0f} us vs {base['p99_us']:.0f} us; spurious "
          f"retransmissions {spray['spurious']} (rack) against {irn['spurious']} (dupthresh)")
    headline(headline_rows(4), "Permutation (ECMP), 4 x 1 MiB per flow")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "incast_mix.toml")
        incast_mix(path)
        mix = headline_rows(2, path, INCAST_TARGET)
    headline(mix, "Permutation + 12-to-1 incast into l1h1 (ECMP), 2 x 1 MiB per flow")


if __name__ == "__main__":
    main()
