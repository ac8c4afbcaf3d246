"""``roce relay IF_A IF_B``: an impairing wire between two interfaces, where the kernel has no
``tc netem``: every frame from one is sent out of the other, through the simulated fabric's
seeded fault model (``roce.emu.fabric.Faults``: loss, bursts, reordering, duplication,
corruption, delay).  ``roce.emu.real.relay`` does the work; it prints ``ready`` once both
interfaces are open and its counters as one JSON line when it stops (Ctrl-C, SIGTERM,
``--duration``)."""

from __future__ import annotations

import argparse
import json
import signal
from dataclasses import asdict

from roce.emu.fabric import LinkConfig
from roce.emu.real.relay import Relay
from roce.options import parse_positive_seconds, parse_probability, parse_seed, parse_time

FAULTS = ("loss", "burst", "reorder", "dup", "corrupt")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("if_a", metavar="IF_A")
    p.add_argument("if_b", metavar="IF_B")
    for name in FAULTS:
        p.add_argument(f"--{name}", type=parse_probability, default=0.0, metavar="P",
                       help=f"probability of {name} per frame, each way (0)")
    p.add_argument("--delay", type=parse_time, default=0, help="base delay (0)")
    p.add_argument("--jitter", type=parse_time, default=1_000_000,
                   help="extra delay of a reordered frame, at most (1ms)")
    p.add_argument("--seed", type=parse_seed, default=0)
    p.add_argument("--duration", type=parse_positive_seconds, default=None,
                   help="seconds (forever)")


def run(args: argparse.Namespace) -> int:
    cfg = LinkConfig(rate_gbps=1e6, delay_ns=args.delay, loss=args.loss, burst_p=args.burst,
                     reorder=args.reorder, reorder_jitter_ns=args.jitter, dup=args.dup,
                     corrupt=args.corrupt)
    relay = Relay(args.if_a, args.if_b, cfg, LinkConfig(**asdict(cfg)), seed=args.seed)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    print(f"relay {args.if_a} <-> {args.if_b} ready", flush=True)
    try:
        relay.run(args.duration, stop=lambda: bool(stopping))
    except KeyboardInterrupt:
        pass
    finally:
        print(json.dumps(relay.stats()), flush=True)
        relay.close()
    return 0
