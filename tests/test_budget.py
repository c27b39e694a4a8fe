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


def test_files_are_dealt_longest_first_into_blocks_of_equal_count_and_time():
    from order import block_sizes, dealt

    assert block_sizes(715, 3) == [238, 238, 239] and block_sizes(2, 3) == [0, 1, 1]
    ids = ["t/a.py::x", "t/b.py::x", "t/c.py::x", "t/c.py::y", "t/c.py::z", "t/d.py::x", "t/d.py::y", "t/d.py::z"]
    times = {"t/a.py::x": 10.0, "t/b.py::x": 8.0, "t/c.py::x": 0.1, "t/c.py::y": 0.1, "t/c.py::z": 0.1,
             "t/d.py::x": 0.1, "t/d.py::y": 0.1}  # d.py::z is new: a median test
    order = [ids[p] for p in dealt(ids, times, 2)]
    # The first half (worker 0's block): a, then the lighter of the short files; the second: b, then c.
    assert order == ["t/a.py::x", "t/d.py::x", "t/d.py::y", "t/d.py::z", "t/b.py::x", "t/c.py::x", "t/c.py::y",
                     "t/c.py::z"]
    assert sorted(dealt(ids, {}, 3)) == list(range(len(ids)))  # no times known: every test still runs once


def test_xdist_workers_agree_on_the_order_and_each_starts_with_a_long_file(tmp_path):
    (tmp_path / "tests").mkdir()
    ran = tmp_path / "ran.log"
    for name, count in (("a", 1), ("b", 1), ("c", 3), ("d", 3)):
        (tmp_path / "tests" / f"test_{name}.py").write_text("".join(
            f"def test_{i}():\n    import os\n    with open({str(ran)!r}, 'a') as f:\n"
            f"        f.write(os.environ['PYTEST_XDIST_WORKER'] + ' {name}\\n')\n" for i in range(count)))
    (tmp_path / "tests" / "durations.tsv").write_text("10.0\ttests/test_a.py::test_0\n8.0\ttests/test_b.py::test_0\n" + "".join(
        f"0.1\ttests/test_{name}.py::test_{i}\n" for name in "cd" for i in range(3)))
    (tmp_path / "tests" / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\n"
                                                    "import order\nfrom pathlib import Path\n"
                                                    "order.TIMES = Path(__file__).with_name('durations.tsv')\n"
                                                    "pytest_plugins = ['order']\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:floe_dev_slot",
                           "-n", "2", "--dist", "worksteal", "tests", "--rootdir", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and "8 passed" in done.stdout, done.stdout + done.stderr
    first: dict[str, str] = {}
    for line in ran.read_text().splitlines():
        worker, name = line.split()
        first.setdefault(worker, name)
    assert sorted(first.values()) == ["a", "b"], ran.read_text()  # in collection order gw1 would start on c
