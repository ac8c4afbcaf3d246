"""Loss recovery: go-back-N against selective repeat (IRN), in virtual time.

1. Goodput against random loss on the default p2p link (100 Gb/s, 1 us, 20 x 1 MiB WRITEs,
   seed 7), loss 0 to 5 %: a table, and a plot in docs/recovery-goodput.png.
2. Spraying: leaf-spine 4,2,4, permutation, 1 MiB WRITEs, PFC off: ``--lb ecmp --recovery
   gbn`` against ``--lb spray --recovery sr`` (aggregate goodput, completion-time tail).
3. IRN's headline comparison: the same traffic with PFC on + gbn against PFC off + sr, each
   without and with DCQCN; tail completion times (IRN: without PFC 6-83 % better).

    python bench/bench_recovery.py [--markdown] [--plot docs/recovery-goodput.png]
"""

from __future__ import annotations

import argparse

from roce.emu.cc import configure
from roce.emu.net.runner import NetRun, NetScenario
from roce.emu.scenario import Scenario, run_scenario

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


def net(lb: str, recovery: str, pfc: bool, cc: str = "none", count: int = 4) -> dict:
    sc = NetScenario(topology="leafspine:4,2,4", op="write", size=1 << 20, count=count,
                     pfc=pfc, lb=lb, recovery=recovery, cc=configure(cc), seed=1)
    s = NetRun(sc).run()
    assert s.data_verified, (lb, recovery, pfc, cc)
    return {"lb": lb, "recovery": recovery, "pfc": "on" if pfc else "off", "cc": cc,
            "goodput": s.goodput_gbps, "p50_us": s.fct_ns["p50"] / 1e3,
            "p99_us": s.fct_ns["p99"] / 1e3, "mean_us": s.fct_ns["mean"] / 1e3,
            "retx": s.retransmitted, "spurious": s.spurious_retransmissions,
            "cpu": s.cpu_s}


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
    runs = [net("ecmp", "gbn", False), net("spray", "sr", False), net("ecmp", "sr", False),
            net("spray", "gbn", False)]
    for cc in ("none", "dcqcn"):
        runs += [net("ecmp", "gbn", True, cc), net("ecmp", "sr", False, cc)]
    print("| lb | recovery | PFC | cc | goodput Gb/s | FCT p50 us | FCT p99 us | retx | "
          "spurious | CPU s |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|")
    seen = set()
    for r in runs:
        key = (r["lb"], r["recovery"], r["pfc"], r["cc"])
        if key in seen:
            continue
        seen.add(key)
        print(f"| {r['lb']} | {r['recovery']} | {r['pfc']} | {r['cc']} | {r['goodput']:.1f} | "
              f"{r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['retx']} | {r['spurious']} | "
              f"{r['cpu']:.2f} |")
    base, spray = runs[0], runs[1]
    print(f"\nspray+sr / ecmp+gbn aggregate goodput: {spray['goodput'] / base['goodput']:.2f}x; "
          f"p99 {spray['p99_us']:.0f} us vs {base['p99_us']:.0f} us")
    for cc in ("none", "dcqcn"):
        pfc = next(r for r in runs if r["pfc"] == "on" and r["cc"] == cc)
        irn = next(r for r in runs if r["pfc"] == "off" and r["cc"] == cc
                   and r["recovery"] == "sr" and r["lb"] == "ecmp")
        print(f"cc={cc}: PFC on + gbn p99 {pfc['p99_us']:.0f} us, PFC off + sr p99 "
              f"{irn['p99_us']:.0f} us: sr without PFC "
              f"{(1 - irn['p99_us'] / pfc['p99_us']) * 100:+.0f} % better at p99, "
              f"{(1 - irn['mean_us'] / pfc['mean_us']) * 100:+.0f} % on the mean")


if __name__ == "__main__":
    main()
