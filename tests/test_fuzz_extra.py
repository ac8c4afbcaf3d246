"""The ``fuzz`` extra: what needs hypothesis says how to get it, what does not works without
it, and pyproject.toml lists it once (the ``test`` extra pulls it in).  Also: the fuzz
package has no reason to import the ``roce`` command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from roce.testing._extras import FUZZ_EXTRA_HINT, missing_extra

REPO = Path(__file__).resolve().parents[1]

# hypothesis made unimportable, as on a machine where only `pip install roce` ran
NO_HYPOTHESIS = "import sys\nsys.modules['hypothesis'] = None\n"


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


def test_strategies_without_hypothesis_name_the_extra():
    res = run_python(NO_HYPOTHESIS + "import roce.testing.strategies\n")
    assert res.returncode == 1
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: roce.testing.strategies needs hypothesis")
    assert 'pip install "roce[fuzz]"' in last


def test_the_rest_of_roce_testing_works_without_hypothesis():
    res = run_python(NO_HYPOTHESIS + (
        "from roce.testing import fuzz, mutate, pytest_plugin, atheris_harness\n"
        "from roce.cli import fuzz as fuzz_cli\n"
        "from roce import cli\n"
        "res = fuzz.run_program([('post_recv', 64), ('send', 64, None)], auto_recv=True)\n"
        "assert res.problems == [] and dict(res.statuses) == {'IBV_WC_SUCCESS': 1}, res\n"
        "sys.exit(cli.main(['fuzz', 'decoder', '--count', '300', '-j', '1', '-q']))\n"))
    assert res.returncode == 0, res.stderr
    assert "300 inputs, 0 failures" in res.stdout and "result: OK" in res.stdout


def test_roce_strategies_fixture_without_hypothesis_names_the_extra():
    res = run_python(NO_HYPOTHESIS + (
        "from roce.testing import pytest_plugin\n"
        "try:\n"
        "    pytest_plugin.roce_strategies.__wrapped__()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"))
    assert res.returncode == 0, res.stderr
    assert FUZZ_EXTRA_HINT in res.stdout


def test_a_broken_hypothesis_keeps_its_own_error():
    inner = ModuleNotFoundError("No module named 'sortedcontainers'", name="sortedcontainers")
    assert missing_extra("hypothesis", "x", inner) is inner
    outer = ModuleNotFoundError("No module named 'hypothesis'", name="hypothesis")
    err = missing_extra("hypothesis", "roce.testing.strategies", outer)
    assert type(err) is ImportError and FUZZ_EXTRA_HINT in str(err)


def test_pyproject_lists_the_fuzz_extra_once_and_test_pulls_it_in():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from packaging.requirements import Requirement

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    fuzz = {r.name: r for r in map(Requirement, extras["fuzz"])}
    assert set(fuzz) == {"hypothesis", "atheris"}
    # atheris builds only where it has wheels or a toolchain: CPython < 3.12 on x86-64
    marker = fuzz["atheris"].marker
    assert marker is not None
    assert marker.evaluate({"python_version": "3.11", "platform_machine": "x86_64"})
    assert not marker.evaluate({"python_version": "3.12", "platform_machine": "x86_64"})
    assert not marker.evaluate({"python_version": "3.11", "platform_machine": "aarch64"})
    test = [Requirement(r) for r in extras["test"]]
    assert any(r.name == "roce" and r.extras == {"fuzz"} for r in test)
    # one place for each: the test extra does not repeat what the fuzz extra lists
    assert not {r.name for r in test} & set(fuzz)


def test_fuzzing_does_not_import_other_commands():
    """The decoder harness drives ``roce decode`` and no other command."""
    res = run_python(
        "import sys\n"
        "from roce.testing import fuzz\n"
        "from roce.cli import fuzz as fuzz_cli\n"
        "d = fuzz.DecoderFuzzer(seed=0, decode_every=1)\n"
        "s = d.run_chunk(0, 64)\n"
        "assert s.counts['roce decode runs'] == 1 and s.ok, s.lines()\n"
        "extra = {m for m in sys.modules if m.startswith('roce.cli.') and '._' not in m}\n"
        "extra -= {'roce.cli.decode', 'roce.cli.fuzz'}\n"
        "assert not extra, extra\n")
    assert res.returncode == 0, res.stderr
