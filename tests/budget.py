"""The suite's time budget, said at the end of every run: its wall time against the budget and its ten
slowest tests (set-up, call and tear-down together), so each new capability sees what its tests cost.

A run of part of the suite says its time too, without the budget line. It never fails a run: a loaded
machine is slower, and the budget is for `./scripts/test` on 2 quiet cores (README.md).
"""

from __future__ import annotations

import time
from collections import defaultdict

BUDGET_SECONDS = 15 * 60
SHOWN = 10
DURATIONS = ".test-durations.tsv"


class Budget:
    def __init__(self, config) -> None:
        self.config = config
        self.started = time.monotonic()
        self.seconds: dict[str, float] = defaultdict(float)
        self.deselected = 0

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[report.nodeid] += report.duration  # under xdist too: the workers' reports come here

    def pytest_deselected(self, items) -> None:
        self.deselected += len(items)

    def pytest_terminal_summary(self, terminalreporter, config) -> None:
        if not self.seconds:
            return
        wall = time.monotonic() - self.started
        write = terminalreporter.write_line
        terminalreporter.section("time budget")
        whole = not self.deselected and not _selection(config)
        if whole:
            verdict = "within" if wall <= BUDGET_SECONDS else "OVER"
            write(f"the suite took {_clock(wall)}: {verdict} its budget of {_clock(BUDGET_SECONDS)} on 2 cores")
        else:
            write(f"these {len(self.seconds)} tests took {_clock(wall)} (the whole suite's budget: "
                  f"{_clock(BUDGET_SECONDS)})")
        ranked = sorted(self.seconds.items(), key=lambda item: item[1], reverse=True)
        # Every test's time, for whoever looks for what to make faster next (git ignores the file).
        (config.rootpath / DURATIONS).write_text("".join(f"{s:.1f}\t{n}\n" for n, s in ranked))
        slowest = ranked[:SHOWN]
        write(f"the {len(slowest)} slowest (set-up, call and tear-down):")
        for nodeid, seconds in slowest:
            write(f"{seconds:8.1f}s  {nodeid}")


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def pytest_configure(config) -> None:
    if not hasattr(config, "workerinput"):  # xdist's workers report to the controller, which says it
        config.pluginmanager.register(Budget(config), "floe-budget")


def _selection(config) -> bool:
    """True when the run was given test paths or node ids, -k or -m: a part of the suite, not all of it."""
    import pytest

    tests = config.rootpath / "tests"
    given = config.args_source == pytest.Config.ArgsSource.ARGS and any(
        (config.invocation_params.dir / a.split("::")[0]).resolve() != tests for a in config.args)
    return given or bool(config.option.keyword) or bool(config.option.markexpr)
