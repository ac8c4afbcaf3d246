"""pytest fixtures for suites that test RoCE code with roce.

Registered as a ``pytest11`` entry point (``roce = "roce.testing.pytest_plugin"``), or by
``pytest_plugins = ["roce.testing.pytest_plugin"]`` in a ``conftest.py``.

Fixtures:

- ``roce_strategies``: the ``roce.testing.strategies`` module (hypothesis strategies; they
  need the ``fuzz`` extra, ``pip install "roce[fuzz]"``, and say so when it is missing);
- ``roce_mutator``: a ``roce.testing.mutate.Mutator`` seeded from the test's node id, so a
  test sees the same mutants on every run;
- ``roce_fabric``: a ``RoceFabric``: a seeded simulated ``Fabric`` with two hosts ``a``
  (10.0.0.1) and ``b`` (10.0.0.2) joined by a link, a PD, CQ and 64 KiB MR with full
  access on each, and connected RC queue pairs ``qa`` <-> ``qb`` (path MTU 1024);
  ``run()`` runs the fabric until idle.  The seed is ``--roce-seed`` (default 0).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("roce")
    group.addoption("--roce-seed", type=int, default=0,
                    help="seed of the roce_fabric and roce_mutator fixtures (default 0)")


@dataclass
class RoceFabric:
    """What ``roce_fabric`` hands a test (see the module docstring)."""

    fabric: Any
    a: Any
    b: Any
    pd_a: Any
    pd_b: Any
    cq_a: Any
    cq_b: Any
    mr_a: Any
    mr_b: Any
    qa: Any
    qb: Any
    seed: int

    def run(self, limit_ns: int = 1_000_000_000) -> int:
        """Run until no event is left, or ``limit_ns`` more virtual nanoseconds."""
        return self.fabric.run_until_idle(self.fabric.now + limit_ns)


def make_fabric(seed: int = 0, mtu: int = 1024, size: int = 1 << 16, **link: Any) -> RoceFabric:
    """Build what ``roce_fabric`` gives (``link``: ``LinkConfig`` fields, e.g. loss=0.01)."""
    from roce.emu import CQ, MR, PD, QP, Access, Fabric, QPInitAttr, QPType, connect

    full = (Access.IBV_ACCESS_LOCAL_WRITE | Access.IBV_ACCESS_REMOTE_WRITE
            | Access.IBV_ACCESS_REMOTE_READ | Access.IBV_ACCESS_REMOTE_ATOMIC)
    fab = Fabric(seed=seed)
    a = fab.add_host("a", "10.0.0.1")
    b = fab.add_host("b", "10.0.0.2")
    fab.connect(a, b, **link)
    pd_a, pd_b = PD(a), PD(b)
    cq_a, cq_b = CQ(a), CQ(b)
    mr_a, mr_b = MR(pd_a, size, full), MR(pd_b, size, full)
    rng = random.Random(seed)
    mr_a.write(rng.randbytes(size))
    qa = QP(pd_a, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cq_a, recv_cq=cq_a))
    qb = QP(pd_b, QPInitAttr(qp_type=QPType.IBV_QPT_RC, send_cq=cq_b, recv_cq=cq_b))
    connect(qa, qb, path_mtu=mtu, timeout=8, min_rnr_timer=1)
    return RoceFabric(fab, a, b, pd_a, pd_b, cq_a, cq_b, mr_a, mr_b, qa, qb, seed)


@pytest.fixture
def roce_strategies() -> Any:
    """The ``roce.testing.strategies`` module."""
    from roce.testing import strategies

    return strategies


@pytest.fixture
def roce_mutator(request: pytest.FixtureRequest) -> Any:
    """A ``Mutator`` seeded by ``--roce-seed`` and the test's id (stable across runs)."""
    from roce.testing.mutate import Mutator

    seed = request.config.getoption("--roce-seed", default=0)
    return Mutator(random.Random(f"{seed}:{request.node.nodeid}"))


@pytest.fixture
def roce_fabric(request: pytest.FixtureRequest) -> RoceFabric:
    """Two connected emulated hosts on a seeded simulated fabric."""
    return make_fabric(request.config.getoption("--roce-seed", default=0))
