"""`floe tui` in a real terminal (tmux): create a stream through the wizard, watch rows
arrive, pause it, run a query and read the result, then close the terminal and see the
engine it started keep ingesting."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from appliance.config.settings import load_settings
from appliance.views.engine import engine_status

from conftest import ROOT, floe, pizza_values, wait_for


class Terminal:
    """A tmux session on a tmux server of its own (`-L`): two tests' terminals at once (pytest-xdist) never meet
    on the default server, which exits when its last session closes, under the other's `new-session` ("server
    exited unexpectedly")."""

    def __init__(self, command: str, env: dict[str, str], size=(200, 50)) -> None:
        self.name = f"floe-{uuid.uuid4().hex[:8]}"
        self.tmux = ["tmux", "-L", self.name]
        args = [*self.tmux, "new-session", "-d", "-s", self.name, "-x", str(size[0]), "-y", str(size[1])]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        subprocess.run(args + [command], check=True, cwd=ROOT)

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, *keys], check=True)

    def type(self, text: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, "-l", text], check=True)

    def screen(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-t", self.name], capture_output=True,
                              text=True).stdout

    def wait(self, pattern: str, timeout: float = 60) -> str:
        return wait_for(lambda: re.search(pattern, self.screen()) and self.screen(), timeout, 0.2,
                        what=f"{pattern!r} on screen; last screen:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)


def engines_of(home: Path) -> set[int]:
    """The `floe run` processes of FLOE_HOME `home`, however they were started."""
    found = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if b"appliance.cli\x00run" in (proc / "cmdline").read_bytes() and \
                        f"FLOE_HOME={home}\x00".encode() in (proc / "environ").read_bytes() + b"\x00":
                    found.add(int(proc.name))
    return found


def _stop_engines(engine_pid: int | None) -> None:
    """The engine may have started even if the UI never said so before a timeout (a JVM still starting on a
    loaded machine has no heartbeat yet): every `floe run` of this FLOE_HOME goes."""
    status = engine_status(load_settings())
    pids = {p for p in (engine_pid, status.pid if status.alive else None) if p} | engines_of(load_settings().home)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for pid in pids:
        wait_for(lambda: not os.path.exists(f"/proc/{pid}") or
                 "zombie" in Path(f"/proc/{pid}/status").read_text().lower(), 60, 0.2, what="engine process gone")


@pytest.mark.slow
def test_tui_in_a_real_terminal(broker, floe_home):
    # Named to sort first: the session's broker holds every earlier test's topics, and the list opens at its top.
    topic = f"a_shop_orders_{uuid.uuid4().hex[:6]}"
    broker.produce(topic, pizza_values(400))
    env = {"FLOE_HOME": str(floe_home), "PATH": os.environ["PATH"], "TERM": "xterm-256color"}
    term = Terminal(f"{sys.executable} -m appliance.cli tui", env)
    engine_pid = None
    try:
        term.wait(r"engine stopped", 30)
        term.keys("C-e")  # start `floe run` in the background from the UI
        term.wait(r"engine running", 120)
        engine_pid = engine_status(load_settings()).pid

        # The wizard: source, target, mapping.
        term.keys("n")
        term.wait(r"Bootstrap", 10)
        term.type(broker.bootstrap)
        term.keys("Enter")
        term.wait(r"topics on", 30)
        term.keys("Enter")  # open the topic list: the prompt first, then the topics in order, this one first
        term.wait(topic, 10)
        term.keys("Down", "Enter")  # by the arrow keys (type-to-search forgets a slow terminal's typing)
        wait_for(lambda: "Pick a topic" not in term.screen(), 10, 0.2, what=f"topic picked:\n{term.screen()}")
        term.keys("C-n")
        term.wait(r"Namespace", 10)
        term.keys("C-n")
        term.wait(r"store_name", 60)  # the inferred mapping is on screen
        term.keys("C-s")
        stream = topic  # the wizard names the stream after its table, the topic in snake_case

        # Rows arrive on the Streams pane.
        row = lambda: next((l for l in term.screen().splitlines() if stream in l), "")  # noqa: E731
        # Rows 400, DLQ 0, Lag 0: all of it committed (the Lag column alone shows 400 before the first commit).
        wait_for(lambda: re.search(r"\b400\s+0\s+0\b", row()), 120, 0.5, what=f"400 rows for {stream}: {row()}")

        def pause() -> bool:
            term.keys("1")  # the Streams section, its table focused
            wait_for(lambda: "Streams" in term.screen(), 5, 0.1)
            term.keys("p")  # pause the selected stream (idempotent: pressing again is harmless)
            try:
                return bool(wait_for(lambda: "paused" in row(), 3, 0.2))
            except AssertionError:
                return False
        wait_for(pause, 30, 0, what=f"paused state: {row()}")

        term.keys("3")
        # The editor takes the focus after a refresh; typed digits before that would switch sections.
        term.wait(r"Older query", 10)
        term.type(f"select count(*) as n, sum(order_id) as s from ingest.{stream}")
        term.keys("F5")
        screen = term.wait(r"1 row in", 60)
        assert re.search(r"\b400\b", screen) and re.search(str(sum(range(400))), screen), screen
    except BaseException:  # a failure on the way leaves no engine behind to load the machine
        term.close()
        _stop_engines(engine_pid)
        raise
    term.close()  # the terminal goes away, as when its window is closed

    try:
        assert engine_pid, "the UI started no engine"
        # Ingestion does not depend on the UI: the engine it started keeps going.
        resumed = floe("stream", "resume", stream)
        assert resumed.returncode == 0, resumed.stderr
        broker.produce(topic, pizza_values(100, start=400))
        count = lambda: json.loads(floe("query", f"select count(*) as n from ingest.{stream}", "--format", "json").stdout)["n"]  # noqa: E731
        wait_for(lambda: count() == 500, 120, 1, what="rows ingested after the terminal closed")
        assert engine_status(load_settings()).alive
    finally:
        _stop_engines(engine_pid)


@pytest.mark.slow
def test_demo_opens_the_ui_on_the_demo_stream(floe_home):
    env = {"FLOE_HOME": str(floe_home), "PATH": os.environ["PATH"], "TERM": "xterm-256color"}
    term = Terminal(f"{sys.executable} -m appliance.cli demo --rate 100; echo demo-exited-$?; sleep 600", env)
    try:
        row = lambda: next((l for l in term.screen().splitlines() if "pizza_orders" in l and "running" in l), "")  # noqa: E731
        wait_for(lambda: re.search(r"running.*\d+s ago", row()), 180, 0.5, what="demo commits on the Streams pane")
        assert "Setting default log level" not in term.screen()  # Spark's JVM does not scribble on the UI
        term.keys("q")  # quitting the UI ends the demo cleanly
        term.wait(r"demo-exited-0", 90)
    finally:
        term.close()


def test_help_scrolls_to_its_last_keys_in_a_short_terminal(floe_home):
    """In a real 80x24 terminal the help is taller than the screen: End and the mouse wheel (as the
    terminal reports it, an SGR mouse sequence) bring its last keys, the Alerts', into view."""
    env = {"FLOE_HOME": str(floe_home), "PATH": os.environ["PATH"], "TERM": "xterm-256color"}
    term = Terminal(f"{sys.executable} -m appliance.cli tui", env, size=(80, 24))
    try:
        term.wait(r"engine stopped", 30)
        term.keys("?")
        term.wait(r"Floe keys", 10)
        assert "Send a test" not in term.screen()
        term.keys("End")
        term.wait(r"t +Send a test +Alerts", 10)
        term.keys("Home")
        wait_for(lambda: "Send a test" not in term.screen(), 10, 0.2, what="back at the top")
        for _ in range(15):  # wheel down, over the middle of the table
            term.type("\x1b[<65;40;14M")
        term.wait(r"t +Send a test +Alerts", 10)
    finally:
        term.close()
