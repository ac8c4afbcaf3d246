"""Two network namespaces joined by a veth pair: a private wire for tests and benchmarks.

``create()`` makes ``rocet<pid>x<n>A`` and ``...B`` with one veth end in each (created
directly inside the namespaces, so the host's own interfaces are never touched), IPv6 off
(no router solicitations or MLD reports on the wire), private addresses that crafted frames
never target (so B's kernel drops them quietly instead of answering with ICMP), and waits
until both ends report carrier.  ``VethPair.close()`` stops the processes started through
it (by pid) and deletes both namespaces, which destroys the veth pair with them; it is
safe to call twice and after a failed ``create``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_serial = itertools.count()
ADDR_A, ADDR_B = "192.168.177.1", "192.168.177.2"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                          check=check)


def unavailable_reason() -> str | None:
    """Why namespaces cannot be used here (None when they can)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "needs root (ip netns add, raw sockets)"
    if shutil.which("ip") is None:
        return "iproute2 ('ip') is not installed"
    probe = f"rocetprobe{os.getpid()}x{next(_serial)}"
    res = _ip("netns", "add", probe, check=False)
    if res.returncode != 0:
        return f"'ip netns add' does not work here: {res.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass
class VethPair:
    ns_a: str
    ns_b: str
    if_a: str
    if_b: str
    addr_a: str = ADDR_A
    addr_b: str = ADDR_B
    procs: list[subprocess.Popen] = field(default_factory=list)
    closed: bool = False

    def cmd(self, ns: str, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", ns, *argv]

    @staticmethod
    def roce(*args: str) -> list[str]:
        """argv of the ``roce`` command under this interpreter."""
        return [sys.executable, "-m", "roce", *args]

    def run(self, ns: str, argv: Sequence[str], timeout: float = 60,
            **kw: object) -> subprocess.CompletedProcess:
        return subprocess.run(self.cmd(ns, argv), capture_output=True, text=True,
                              timeout=timeout, **kw)  # type: ignore[call-overload]

    def run_many(self, ns: str, commands: Sequence[Sequence[str]],
                 timeout: float = 60) -> subprocess.CompletedProcess:
        """Run several ``roce`` command lines in one interpreter inside ``ns`` (each through
        ``roce.cli.main``, as the ``roce`` script does): interpreter start-up is paid once.
        The exit status is the highest of theirs."""
        code = ("import json, sys\nfrom roce.cli import main\n"
                "codes = [main(a) for a in json.load(sys.stdin)]\n"
                "sys.stdout.flush()\nsys.exit(max(codes, default=0))\n")
        return subprocess.run(self.cmd(ns, [sys.executable, "-c", code]),
                              input=json.dumps([list(c) for c in commands]),
                              capture_output=True, text=True, timeout=timeout)

    def popen(self, ns: str, argv: Sequence[str], **kw: object) -> subprocess.Popen:
        # SIGINT back to its default in the child: a shell without job control starts a
        # background job with SIGINT ignored (POSIX), the child would inherit that through
        # exec, and the tests that stop a process with Ctrl-C's signal would wait in vain
        proc = subprocess.Popen(self.cmd(ns, argv), preexec_fn=_default_sigint,
                                **kw)  # type: ignore[call-overload]
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen, timeout: float = 10) -> int:
        """Ask a process started here to stop (SIGINT, then SIGKILL); its exit status."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(2)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        return proc.returncode

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
        for ns in (self.ns_a, self.ns_b):
            _ip("netns", "del", ns, check=False)


def link_up(ns: str, name: str) -> bool:
    """Operstate UP with carrier (what the CLIs' interface check asks for)."""
    res = _ip("-n", ns, "-j", "link", "show", name, check=False)
    info = json.loads(res.stdout or "[{}]")[0]
    return info.get("operstate") == "UP" and "LOWER_UP" in info.get("flags", [])


def wait_link(pair: VethPair, up: bool = True, timeout: float = 10) -> None:
    """Carrier and operstate reach the flags through the kernel's link watch, which may
    lag a second behind 'ip link set': wait until both ends are up (or A is not)."""
    end = time.monotonic() + timeout
    while True:
        if up and link_up(pair.ns_a, pair.if_a) and link_up(pair.ns_b, pair.if_b):
            return
        if not up and not link_up(pair.ns_a, pair.if_a):
            return
        if time.monotonic() > end:
            raise RuntimeError(f"veth {pair.if_a}/{pair.if_b} not {'up' if up else 'down'} "
                               f"after {timeout} s")
        time.sleep(0.05)


def create(mtu: int = 1500) -> VethPair:
    """Two fresh namespaces and a veth pair between them (see the module docstring)."""
    n = next(_serial)
    pid = os.getpid()
    tag = f"{pid}x{n}"
    short = f"{pid % 1000000}{n}"[-9:]  # interface names: 15 characters at most
    pair = VethPair(f"rocet{tag}A", f"rocet{tag}B", f"rt{short}a", f"rt{short}b")
    try:
        for ns in (pair.ns_a, pair.ns_b):
            _ip("netns", "add", ns)
            # IPv6 off before the interface exists, so it never sends ND/MLD
            subprocess.run(pair.cmd(ns, ["sh", "-c",
                                         "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6;"
                                         "echo 1 > /proc/sys/net/ipv6/conf/default/"
                                         "disable_ipv6"]),
                           capture_output=True, timeout=30, check=False)
        _ip("link", "add", pair.if_a, "netns", pair.ns_a, "mtu", str(mtu), "type", "veth",
            "peer", "name", pair.if_b, "netns", pair.ns_b, "mtu", str(mtu))
        for ns, name, addr in ((pair.ns_a, pair.if_a, pair.addr_a),
                               (pair.ns_b, pair.if_b, pair.addr_b)):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", name)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", name, "up")
        wait_link(pair)
    except BaseException:
        pair.close()
        raise
    return pair


@contextlib.contextmanager
def veth_pair(mtu: int = 1500) -> Iterator[VethPair]:
    pair = create(mtu)
    try:
        yield pair
    finally:
        pair.close()


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_text(path: Path, text: str, proc: subprocess.Popen, timeout: float = 10) -> None:
    """Poll a process's stderr file until ``text`` appears (e.g. tcpdump's "listening")."""
    end = time.monotonic() + timeout
    while True:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"process exited ({proc.returncode}) before saying {text!r}: "
                               f"{path.read_text(errors='replace') if path.exists() else ''}")
        if time.monotonic() > end:
            raise RuntimeError(f"no {text!r} after {timeout} s")
        time.sleep(0.02)
