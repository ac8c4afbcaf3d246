"""A run's registry rows (``roce.families.rows``): applied for a task, gone afterwards, shared
by the threads of one run and kept apart from another run's."""

from __future__ import annotations

import threading

import pytest

from roce.errors import UsageError
from roce.families import registry, rows

RUN_A = rows.run_rows(["udp.port==49150,uet"], "spec")
RUN_B = rows.run_rows(["udp.port==49151,uet"], "ref-prov")


def port(value: int) -> str | None:
    h = registry().tables["udp.port"].get(value)
    return None if h is None else h.name


def test_applied_for_the_body_only() -> None:
    before = port(4793)
    with rows.applied(RUN_A):
        assert port(49150) == "uet"
    assert port(49150) is None and port(4793) == before


def test_the_other_reading_and_back() -> None:
    spec = port(4793)
    with rows.applied(RUN_B):
        assert port(49151) == port(4793) != spec  # every UET row reads the provider's layouts
    assert port(4793) == spec and port(49151) is None


def test_threads_of_one_run_share_and_the_last_restores() -> None:
    inside, release = threading.Event(), threading.Event()

    def first() -> None:
        with rows.applied(RUN_A):
            inside.set()
            release.wait(10)

    t = threading.Thread(target=first)
    t.start()
    assert inside.wait(10)
    with rows.applied(RUN_A):  # the second task of the run, while the first still holds
        assert port(49150) == "uet"
    assert port(49150) == "uet"  # the first one still runs
    release.set()
    t.join(10)
    assert port(49150) is None


def test_another_runs_task_waits_for_the_rows_to_go() -> None:
    seen: list[tuple[str | None, str | None]] = []

    def other() -> None:
        with rows.applied(RUN_B):
            seen.append((port(49150), port(49151)))

    with rows.applied(RUN_A):
        t = threading.Thread(target=other)
        t.start()
        t.join(0.2)
        assert t.is_alive() and not seen  # waiting: run A's rows are in use
    t.join(10)
    (a_row, b_row), = seen  # it ran once A's rows were gone, with its own
    assert a_row is None and b_row is not None and b_row.startswith("uet")
    assert port(49151) is None


def test_a_bad_row_leaves_nothing() -> None:
    with pytest.raises(UsageError), rows.applied(rows.run_rows(["udp.port==1,nosuch"], "spec")):
        pass
    with rows.applied(RUN_A):
        assert port(49150) == "uet"
