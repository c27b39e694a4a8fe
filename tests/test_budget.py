"""The suite's time budget (tests/budget.py) as a run shows it: a run of part of the suite says its time and
its slowest tests, and every test's time is written out for whoever looks for what to make faster."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

TESTS = '''
import time

def test_slow():
    time.sleep(0.3)  # the time measured is the point here

def test_fast():
    pass
'''


def test_a_run_says_its_time_and_slowest_tests_and_writes_every_time(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_timed.py").write_text(TESTS)
    (tmp_path / "tests" / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\n"
                                                    "pytest_plugins = ['budget']\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:floe_dev_slot",
                           "tests/test_timed.py", "--rootdir", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "time budget" in out and "these 2 tests took 0m0" in out and "the whole suite's budget: 15m00s" in out
    slowest = out.split("the 2 slowest (set-up, call and tear-down):\n")[1].splitlines()
    assert slowest[0].endswith("tests/test_timed.py::test_slow") and float(slowest[0].split("s")[0]) >= 0.3, out
    times = [line.split("\t") for line in (tmp_path / ".test-durations.tsv").read_text().splitlines()]
    assert [name for _, name in times] == ["tests/test_timed.py::test_slow", "tests/test_timed.py::test_fast"]
