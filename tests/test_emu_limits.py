"""``roce emulate`` and ``roce target`` under options that used to hurt: sizes past the IBA
maximum, memory a run cannot have, QP types the simulated fabric ignored, runs that end
unverified (exit 4) or stopped early (the summary says why), a missing interface (exit 2
at once); and the data model that lets large messages run without copies.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roce import cli
from roce.emu import budget
from roce.emu.core import payload
from roce.emu.net import schema
from roce.emu.net.runner import NetScenario, flow_bytes, run_scenario, topology_of
from roce.emu.scenario import Scenario, kind
from roce.errors import UsageError, VerificationError


def emulate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["emulate", "--no-progress", *args])
    out, err = capsys.readouterr()
    return code, out, err


# VmHWM, not ru_maxrss: the latter keeps the high-water mark of the process before exec
# (here the test runner), the former is this program's own
_RUN = ("import sys\n"
        "from roce.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
        "print('peak', hwm.split()[1], file=sys.stderr)\n"
        "sys.exit(code)\n")


def child(args: list[str], mem: int | None = None, timeout: float = 60) -> tuple[
        subprocess.CompletedProcess[str], int]:
    """``roce ARGS`` in a child process (under an address-space limit of ``mem`` bytes);
    returns the result (the peak line taken off stderr) and the child's own peak RSS."""
    def limit() -> None:
        if mem is not None:
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))

    res = subprocess.run([sys.executable, "-c", _RUN, *args], capture_output=True,
                         text=True, timeout=timeout, preexec_fn=limit)
    lines = res.stderr.splitlines()
    peak = int(lines.pop().split()[1]) * 1024 if lines and lines[-1].startswith("peak ") else 0
    res.stderr = "\n".join(lines) + ("\n" if lines else "")
    return res, peak


# -- sizes and memory ------------------------------------------------------------------------


@pytest.mark.parametrize("size", ["3G", str((1 << 31) + 1), "100G"])
def test_message_past_the_iba_maximum_is_a_usage_error(capsys, size: str) -> None:
    code, out, err = emulate(capsys, "--size", size)
    assert code == 1 and out == ""
    assert "--size" in err and "2^31" in err and "at most 2G" in err


def test_message_limit_is_on_the_workload_too(monkeypatch) -> None:
    monkeypatch.setattr(budget, "available", lambda: 1 << 40)
    with pytest.raises(UsageError, match="2\\^31"):
        Scenario(size=(1 << 31) + 1).check()
    Scenario(size=1 << 31).check()  # the maximum itself is a legal size


@pytest.mark.parametrize("args, option", [
    (["emulate", "--qps", "20000000"], "--qps"),
    (["emulate", "--qps", "200000", "--size", "64K"], "--qps"),
    (["emulate", "--size", "1G", "--qps", "4000"], "--qps"),
    (["target", "--transport", "udp", "--ip", "127.0.0.1", "--size", "100G"], "--size"),
    (["target", "--transport", "udp", "--ip", "127.0.0.1", "--qps", "20000000"], "--qps"),
    (["target", "--transport", "udp", "--ip", "127.0.0.1", "--recv-size", "1G",
      "--recv-depth", "64"], "--recv-size"),
])
def test_memory_a_run_cannot_have_is_refused_up_front(args: list[str], option: str) -> None:
    """Under a 1 GB address-space limit the refusal comes at once, exit 1, one line naming
    the option and its bound -- not a MemoryError (exit 3) or the kernel's OOM killer."""
    t0 = time.monotonic()
    res, _ = child(args, mem=1 << 30, timeout=30)
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "at most" in lines[0], res.stderr
    assert time.monotonic() - t0 < 10


def test_budget_names_the_bound(monkeypatch) -> None:
    monkeypatch.setattr(budget, "available", lambda: 100 << 20)
    with pytest.raises(UsageError, match=r"--size 1G: .* \(--size at most"):
        budget.workload(1 << 30, 1, 1, 2)
    with pytest.raises(UsageError, match=r"--qps 10000: .*--qps at most \d+"):
        budget.workload(4096, 1, 10000, 2)
    budget.workload(4096, 1, 100, 2)  # fits


def test_large_message_needs_no_copy_of_its_data() -> None:
    """A 128 MiB READ: the two emulated buffers are the only copies of the data at rest (no
    seeded buffer built whole, no expected image, no gathered message); the responder
    queues its response's frames at once (one more message): peak RSS stays under the
    baseline + 3 x 128 MiB + a quarter of one more.  A 128 MiB WRITE holds no buffer at all
    (its regions hold the seeded pattern, roce.emu.core.patterned): its peak is within a
    16th of one of a 1 MiB run's."""
    size = 128 << 20
    res, base = child(["emulate", "--size", "1M", "--count", "1", "-T", "json"])
    assert res.returncode == 0, res.stderr
    for op, lo, hi in (("read", 2 * size * 0.9, 3 * size + size // 4),
                       ("write", -size // 16, size // 16)):
        res, peak = child(["emulate", "--op", op, "--size", "128M", "--count", "1",
                           "-T", "json"], timeout=300)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["data_verified"] is True
        assert base and lo <= peak - base < hi, (op, (peak - base) / size)


@pytest.mark.parametrize("op", ["write", "read"])
def test_the_budget_counts_what_a_run_takes(op: str) -> None:
    """What the check counts before a run (the network, the QPs, their buffers or none,
    their frames in flight, the interpreter) is at least what the run takes at its peak,
    and not wildly more: a 16-host leaf-spine permutation of 1 MiB messages at 400 Gb/s."""
    spec = "leafspine:2,4,8"
    res, peak = child(["emulate", "--topology", spec, "--traffic", "permutation", "--op", op,
                       "--size", "1M", "--count", "1", "--rate", "400", "--lb", "spray",
                       "--recovery", "sr", "-T", "json"], timeout=120)
    assert res.returncode == 0, res.stderr
    sc = NetScenario(topology=spec, traffic="permutation", op=op, size=1 << 20, count=1,
                     rate_gbps=400.0, lb="spray", recovery="sr")
    t = topology_of(sc)
    need = schema.flows_need(t, sc.traffic, sc.qps, flow_bytes(sc, t, op == "write"))
    assert peak <= need < 3 * peak, (op, peak, need)


def test_8192_hosts_fit_in_8_gb_once_regions_hold_patterns(monkeypatch) -> None:
    """The 8,192-host permutation of 1 MiB WRITEs (leafspine:256,32,32, 400 Gb/s, spraying,
    selective repeat) is let through with 8 GB when its regions hold patterns, and refused
    when they would hold buffers (16 GiB of them): the check counts what each holds."""
    monkeypatch.setattr(budget, "available", lambda: 8 * 10**9)
    sc = NetScenario(topology="leafspine:256,32,32", traffic="permutation", size=1 << 20,
                     count=1, rate_gbps=400.0, lb="spray", recovery="sr")
    t = topology_of(sc)
    schema.check_flows(t, sc.traffic, sc.qps, flow_bytes(sc, t, True), "here")
    with pytest.raises(UsageError, match="8192 flows"):
        schema.check_flows(t, sc.traffic, sc.qps, flow_bytes(sc, t, False), "here")


def test_frames_in_flight_are_bounded_by_the_window() -> None:
    assert budget.in_flight(1 << 20, 2, 4096, 104) == 104
    assert budget.in_flight(10_000, 2, 4096, 104) == 6  # two messages of 3 frames
    assert budget.in_flight(0, 1, 4096, 104) == 1
    assert budget.in_flight(1 << 20, 1, 1024, None) == 1024  # no window: the message
    with_frames = budget.per_qp(1 << 20, 1, 2, True, 104, 4096)
    assert with_frames == 2 * budget.QP_OVERHEAD + 104 * (4096 + budget.FRAME_OVERHEAD)
    assert budget.per_qp(1 << 20, 1, 2) == 2 * (budget.QP_OVERHEAD + (1 << 20))


# -- QP types on the simulated fabric ---------------------------------------------------------


def test_uc_has_no_naks_and_no_retransmissions(capsys) -> None:
    code, out, err = emulate(capsys, "--qp-type", "uc", "--size", "64K", "--count", "20",
                             "--loss", "0.1", "--seed", "3", "-T", "json")
    s = json.loads(out)
    assert s["naks"] == {} and s["retransmitted"] == 0 and s["timeouts"] == 0
    assert s["completed"] == {"IBV_WC_SUCCESS": 20}  # UC completes once sent
    assert s["delivered"] < 20 and not s["data_verified"]  # lost messages stay lost
    assert code == 4 and "never reached the responder" in err


@pytest.mark.parametrize("op", ["write", "send"])
def test_uc_without_loss_is_verified(capsys, op: str) -> None:
    code, out, _ = emulate(capsys, "--qp-type", "uc", "--op", op, "--size", "10000",
                           "--count", "9", "--qps", "3", "--mtu", "1024", "-T", "json")
    s = json.loads(out)
    assert code == 0 and s["data_verified"] and s["delivered"] == 27
    assert s["packets"] == 27 * 10  # ten packets a message, nothing else on the wire


def test_ud_sends_one_packet_per_message(capsys) -> None:
    code, out, _ = emulate(capsys, "--qp-type", "ud", "--op", "send", "--size", "4K",
                           "--count", "7", "--qps", "2", "-T", "json")
    s = json.loads(out)
    assert code == 0 and s["data_verified"] and s["delivered"] == 14
    assert s["packets"] == 14


def test_ud_message_larger_than_the_mtu_is_a_usage_error(capsys) -> None:
    code, _, err = emulate(capsys, "--qp-type", "ud", "--op", "send", "--size", "64K")
    assert code == 1 and "--size" in err and "one packet" in err


@pytest.mark.parametrize("qp_type, op", [("uc", "read"), ("uc", "mixed"), ("ud", "write")])
def test_operations_a_qp_type_lacks_are_refused(capsys, qp_type: str, op: str) -> None:
    code, _, err = emulate(capsys, "--qp-type", qp_type, "--op", op, "--size", "1K")
    assert code == 1 and "--qp-type" in err and qp_type.upper() in err


def test_ud_loss_is_unverified_not_retried() -> None:
    s = run_scenario(Scenario(op="send", size=1024, count=50, qp_type="ud", loss=0.2, seed=1))
    assert s.retransmitted == 0 and s.naks == {}
    assert s.delivered < 50 and not s.data_verified


# -- exit codes and what the summary says --------------------------------------------------------


def test_unverified_run_exits_4(capsys) -> None:
    assert cli.EXIT_UNVERIFIED == 4
    assert (VerificationError, cli.EXIT_UNVERIFIED) in cli.EXIT_CODES
    code, out, err = emulate(capsys, "--size", "4K", "--count", "2", "--loss", "1.0")
    assert code == 4
    assert "data verified NO" in out and "RETRY_EXC_ERR" in out
    assert err.strip() == "roce emulate: data not verified: 2 of 2 message(s) did not " \
                          "complete successfully"


def test_retry_cnt_zero_exits_4(capsys) -> None:
    code, out, _ = emulate(capsys, "--size", "64K", "--count", "5", "--loss", "0.3",
                           "--retry-cnt", "0", "--seed", "2")
    assert code == 4 and "IBV_WC_RETRY_EXC_ERR=1" in out


def test_time_limit_says_what_happened(capsys) -> None:
    code, out, _ = emulate(capsys, "--timeout", "31", "--loss", "1.0", "--count", "2",
                           "--size", "4K")
    assert code == 4
    assert "errors: none; 2 not completed" in out
    assert "timer at 8796.093 s" in out and "past it" in out
    assert "data verified NO: 2 of 2 message(s) did not complete" in out


def test_stall_without_timers_says_so(capsys) -> None:
    code, out, _ = emulate(capsys, "--timeout", "0", "--loss", "1.0", "--count", "1",
                           "--size", "4K", "-T", "json")
    s = json.loads(out)
    assert code == 4 and not s["finished"] and s["outstanding"] == 1
    assert "no timer armed" in s["stopped"]


def test_listener_on_a_missing_interface_fails_at_once() -> None:
    t0 = time.monotonic()
    res, _ = child(["emulate", "--listen", "-i", "nosuchif0", "--port", "0"], timeout=30)
    assert res.returncode == 2
    assert "no such interface 'nosuchif0'" in res.stderr
    assert time.monotonic() - t0 < 10


def test_unwritable_pcap_is_exit_2(capsys, tmp_path) -> None:
    code, _, err = emulate(capsys, "--count", "1", "-w", str(tmp_path / "no" / "x.pcap"))
    assert code == 2 and "x.pcap" in err


# -- the data model --------------------------------------------------------------------------


@given(st.sampled_from(["write", "read", "send", "atomic", "mixed"]),
       st.integers(0, 40), st.integers(0, 12), st.integers(0, 2**32))
def test_expected_equals_a_byte_model(op: str, size: int, count: int, seed: int) -> None:
    """``Expected`` (symbolic) against the plain model: two bytearrays and the operations
    applied to them byte by byte."""
    slots = payload.slots_for(size, count)
    slot = payload.slot_bytes(size)
    local, remote = bytearray(slot * slots), bytearray(slot * slots)
    payload.fill(local, seed, 1, "local", size, slots)
    payload.fill(remote, seed, 1, "remote", size, slots)
    exp = payload.Expected(seed, 1, size, slots)
    assert exp.matches("local", local) and exp.matches("remote", remote)
    for i in range(count):
        what = kind(op, i)
        off = (i % slots) * slot
        if what in ("write", "send"):
            remote[off:off + size] = local[off:off + size]
        elif what == "read":
            local[off:off + size] = remote[off:off + size]
        else:
            old = int.from_bytes(remote[:8], "little")
            local[off:off + 8] = remote[:8]
            remote[:8] = ((old + 1) % 2**64).to_bytes(8, "little")
        exp.apply(what, i)
    assert exp.matches("local", local) and exp.matches("remote", remote)
    for j in range(slots):
        assert exp.read("local", j, size) == bytes(local[j * slot:j * slot + size])
    if count and size:
        remote[0] ^= 1
        assert not exp.matches("remote", remote)


def test_chunks_do_not_depend_on_how_they_are_cut() -> None:
    whole = b"".join(payload.seeded_chunks("x", 3 * payload.CHUNK + 5))
    assert len(whole) == 3 * payload.CHUNK + 5
    assert whole[:100] == b"".join(payload.seeded_chunks("x", 100))
    assert whole != b"".join(payload.seeded_chunks("y", len(whole)))


def test_slots_shrink_for_large_messages() -> None:
    assert payload.slots_for(1 << 20, 10) == 4
    assert payload.slots_for(1 << 20, 2) == 2
    assert payload.slots_for(32 << 20, 10) == 2
    assert payload.slots_for(1 << 30, 10) == 1
    assert payload.slots_for(0, 0) == 1
