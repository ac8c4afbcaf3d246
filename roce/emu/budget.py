"""How much memory and time an emulator run may take, checked before anything is allocated.

An emulated device keeps its registered memory in RAM, so ``--size``, ``--qps`` and their
product decide how much a run needs.  ``check`` compares that with what this process can
get -- the smaller of the memory the kernel reports available and the address-space limit
(``RLIMIT_AS``) left over -- and refuses with a ``UsageError`` naming the option and its
bound, so a typo costs a millisecond rather than the machine's memory.

``duration`` does the same for time: work that no link could carry within the run's time
limit (``--count`` messages of ``--size`` bytes on ``--qps`` QPs) is refused rather than
started.  Both serve requests from a peer too (``roce.emu.real.remote``), which names the
peer's field instead of the option.
"""

from __future__ import annotations

import resource

from roce.errors import UsageError
from roce.qpn import QPN_COUNT

QP_OVERHEAD = 16 << 10  # bytes one emulated QP costs beyond its buffers (objects, queues)
# bytes a frame in flight costs beyond its payload: its headers and ICRC, the bytes object,
# the event that carries it across a link (243 for a 4 KiB WRITE: bench/bench_scale.py
# ``frame_bytes``), and the ACKs, selective NAKs and queue places that go with it; at peak
# the hosts of a leaf-spine permutation have ~85 % of their window in flight
# (bench/RESULTS.md, "Scale")
FRAME_OVERHEAD = 512
# what the interpreter and roce's modules take before a run makes anything (the peak RSS of
# a run of one 4 KiB WRITE between two hosts: 35 MB here, rounded up)
INTERPRETER = 48 << 20
MAX_QPNS = QPN_COUNT - 0x11  # QPNs are 24 bits (roce.qpn); rxe numbers QPs from 17
# bytes one posted receive costs (the work request, its scatter entry, its place in the
# receive queue); tests/test_oob_schema.py measures it
RECV_WR_BYTES = 1 << 10
# No link carries more than the fastest Ethernet (IEEE 802.3df: 800 Gb/s), and no frame on
# it takes fewer than 84 bytes of wire time (the 64-byte minimum, 8 of preamble, 12 of
# inter-frame gap); every message is at least one frame.
FASTEST_LINK_BPS = 800e9
SHORTEST_FRAME_ON_WIRE = 84


def _meminfo(key: str) -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _vm_size() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def available() -> int:
    """Bytes this process can still allocate, as far as the system says (3/4 of it: the
    run needs some memory besides the emulated buffers)."""
    limits = []
    avail = _meminfo("MemAvailable")
    if avail is not None:
        limits.append(avail)
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append(max(0, soft - _vm_size()))
    return min(limits) * 3 // 4 if limits else 1 << 40


def human(n: int) -> str:
    for unit, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g}{unit}"
    return str(n)


def check(need: int, option: str, value: object, bound: str, what: str) -> None:
    """Refuse ``need`` bytes for ``what`` when they exceed ``available()``: the message
    names ``option`` (with the ``value`` typed) and ``bound``, what it may be here."""
    have = available()
    if need > have:
        raise UsageError(f"{option} {value}: {what} would need {human(need)} of memory, "
                         f"{human(have)} is available here ({option} at most {bound})")


def per_qp(size: int, slots: int, sides: int, patterned: bool = False,
           frames: int = 0, mtu: int = 0) -> int:
    """Bytes one QP of a workload costs: its overhead and ``slots`` message buffers on each of
    ``sides`` devices in this process (``patterned``: regions holding seeded patterns,
    ``roce.emu.core.patterned``, no buffers), and its ``frames`` in flight at most, of
    ``mtu`` bytes of payload each (``in_flight``)."""
    from roce.emu.core.payload import slot_bytes

    return (sides * (QP_OVERHEAD + (0 if patterned else slots * slot_bytes(size)))
            + frames * (min(size, mtu) + FRAME_OVERHEAD))


def in_flight(size: int, depth: int, mtu: int, window: int | None) -> int:
    """Frames one QP can have in flight at once: its ``depth`` outstanding messages of
    ``size`` bytes in ``mtu`` packets, at most ``window`` (the requester's PSNs in flight;
    None: no window, UC and UD)."""
    frames = depth * max(1, -(-size // max(mtu, 1)))
    return frames if window is None else min(window, frames)


def workload(size: int, slots: int, qps: int, sides: int, patterned: bool = False) -> None:
    """Check a workload of ``qps`` QPs with ``slots`` slots for ``size``-byte messages on
    ``sides`` devices in this process (2 on the simulated fabric, 1 at each end of a real
    link): ``--qps`` first (its bound counts the buffers too), then ``--size``."""
    from roce.emu.core.payload import slot_bytes

    per = per_qp(size, slots, sides, patterned)
    have = available()
    most = min(MAX_QPNS, have // per)
    if qps > most and (most >= 1 or qps > MAX_QPNS):  # not even one QP fits: --size
        why = ("a device numbers QPs with 24 bits from 0x11" if most == MAX_QPNS else
               f"{qps} QPs would need {human(qps * per)} of memory, {human(have)} is "
               "available here")
        raise UsageError(f"--qps {qps}: {why} (--qps at most {most}"
                         f"{' with --size ' + human(size) if most < MAX_QPNS else ''})")
    room = (have // qps - sides * QP_OVERHEAD) // (sides * slots)  # bytes per slot
    check(qps * per, "--size", human(size),
          human(max(room, 0)) + (f" with --qps {qps}" if qps > 1 else ""),
          f"{qps} QP(s) of {human(slot_bytes(size))} messages")


def duration(count: int, qps: int, payload: int, seconds: float) -> None:
    """Refuse ``count`` messages on each of ``qps`` QPs, ``payload`` bytes in all, when not
    even the fastest link carries that many frames or bytes within ``seconds`` (the run's
    time limit): a ``UsageError`` naming ``--count`` and its bound, before any work."""
    frames = int(seconds * FASTEST_LINK_BPS / (8 * SHORTEST_FRAME_ON_WIRE))
    carried = int(seconds * FASTEST_LINK_BPS / 8)
    messages = count * qps
    with_qps = f" with --qps {qps}" if qps > 1 else ""
    if messages > frames:
        raise UsageError(f"--count {count}: {messages} messages cannot complete within the "
                         f"time limit of {seconds:g} s: an {FASTEST_LINK_BPS / 1e9:g} Gb/s link "
                         f"carries at most {frames} frames in that time (--count at most "
                         f"{frames // qps}{with_qps})")
    if payload > carried:
        raise UsageError(f"--count {count}: {human(payload)} bytes cannot cross within the "
                         f"time limit of {seconds:g} s: an {FASTEST_LINK_BPS / 1e9:g} Gb/s link "
                         f"carries at most {human(carried)} in that time (--count at most "
                         f"{count * carried // payload}{with_qps})")
