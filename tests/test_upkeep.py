"""Nothing grows without bound: the logs roll over at `[logs] max_size` keeping `[logs] keep` files (Floe's
log, shared by processes; the console of a command started in the background; Spark's log and console),
each runtime table of the state database is pruned once done with (the history only once the system
tables hold it), and the state database's file gives back what pruning freed."""

from __future__ import annotations

import datetime as dt
import logging
import os
import subprocess
import sys

from appliance.config.settings import ensure_home, load_settings
from appliance.core.logfiles import ConsoleSink, RollingHandler
from appliance.core.vocabulary import EngineAsk, EventKind, MaintenanceTask, RunOutcome, RunTrigger
from appliance.observe.systables import SystemTableWriter, upkeep
from appliance.query.connection import run_query
from appliance.state.records import BatchRecord, RunRecord
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog

from conftest import ROOT

CAP = 2048  # bytes: [logs] max_size = "2KB"


def small_logs(home, extra: str = "") -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "floe.toml").write_text(f'[logs]\nmax_size = "2KB"\nkeep = 2\n{extra}')


def rolled(folder, name: str) -> dict[str, int]:
    """`name` and its rolled-over files in `folder`, with their sizes."""
    return {p.name: p.stat().st_size for p in folder.iterdir() if p.name == name or p.name.startswith(name + ".")}


def test_floe_log_rolls_at_its_cap_even_with_two_processes_writing_it(tmp_path):
    path = tmp_path / "floe.log"
    ours, theirs = RollingHandler(path, CAP, 2), RollingHandler(path, CAP, 2)  # as two processes' handlers are
    for handler in (ours, theirs):
        handler.setFormatter(logging.Formatter("%(message)s"))
    for i in range(300):
        (ours if i % 2 else theirs).emit(logging.makeLogRecord({"msg": f"line {i:04d} " + "x" * 40}))
    ours.close()
    theirs.close()
    sizes = rolled(tmp_path, "floe.log")
    assert set(sizes) == {"floe.log", "floe.log.1", "floe.log.2"}, sizes
    assert all(size <= CAP for size in sizes.values()), sizes
    newest = (tmp_path / "floe.log").read_text().splitlines()
    assert newest[-1].startswith("line 0299") and {os.stat(tmp_path / n).st_mode & 0o777 for n in sizes} == {0o600}
    # Nothing lost but what rolled off the end: the three files hold the newest lines, each once, in order.
    kept = [line for name in ("floe.log.2", "floe.log.1", "floe.log") for line in (tmp_path / name).read_text().split(
        "\n") if line]
    numbers = [int(line.split()[1]) for line in kept]
    assert numbers == list(range(numbers[0], 300)), numbers[:5]


def test_a_console_sink_rolls_what_processes_write_to_it(tmp_path):
    path = tmp_path / "engine.out"
    sink = ConsoleSink(path, CAP, 2)
    child = subprocess.run([sys.executable, "-c", "import sys\nfor i in range(200): print(f'out {i:03d} ' + 'y' * 30)"],
                           stdout=sink.fd, stderr=sink.fd)  # a process it started writes to it, as the JVM does
    assert child.returncode == 0
    sink.finish(timeout=10)
    sizes = rolled(tmp_path, "engine.out")
    assert set(sizes) == {"engine.out", "engine.out.1", "engine.out.2"} and max(sizes.values()) <= CAP, sizes
    assert path.read_text().splitlines()[-1].startswith("out 199")


NOISY = """
import logging
import sys

from appliance.cli.base import settings

settings()
for i in range(300):
    logging.getLogger("appliance.test").info("log line %03d %s", i, "l" * 40)
    print(f"console line {i:03d}", file=sys.stderr)
"""


def test_a_commands_log_and_its_background_console_roll_at_the_configured_cap(floe_home):
    """What every `floe` command does first (`cli/base.settings`), then log lines and console output, as a
    command started in the background (the UI's engine, say) is told to by `control/processes.spawn`."""
    small_logs(floe_home)
    env = {**os.environ, "FLOE_CONSOLE_LOG": str(floe_home / "logs" / "engine.out"), "PYTHONPATH": str(ROOT)}
    noisy = subprocess.run([sys.executable, "-c", NOISY], env=env, cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    assert noisy.returncode == 0 and noisy.stderr == "", noisy.stderr  # all of it went to the file
    logs = floe_home / "logs"
    for name, last in (("floe.log", "log line 299"), ("engine.out", "console line 299")):
        sizes = rolled(logs, name)
        assert set(sizes) == {name, f"{name}.1", f"{name}.2"} and max(sizes.values()) <= CAP, sizes
        assert last in (logs / name).read_text().splitlines()[-1]


SESSION = """
import sys
from appliance.config.settings import load_settings
from appliance.spark.session import spark_session

spark = spark_session(load_settings(), app_name="logs")
log = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger("floe.test")
for i in range(60):
    log.error("spark log line %03d %s" % (i, "z" * 60))  # the session logs errors only, once it has started

def loud(x):
    print("worker line %03d %s" % (x, "w" * 60), file=sys.stderr)
    return x

assert spark.sparkContext.parallelize(range(100), 1).map(loud).count() == 100
spark.stop()
"""


def test_sparks_log_and_console_roll_at_the_configured_cap(floe_home):
    small_logs(floe_home)
    # Its own JVM options (its log folder and cap), not those a session of this process put in the environment.
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
    done = subprocess.run([sys.executable, "-c", SESSION], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=env)
    assert done.returncode == 0, done.stderr
    logs = floe_home / "logs"
    spark_log, console = rolled(logs, "spark.log"), rolled(logs, "spark-console.log")
    assert {"spark.log", "spark.log.1", "spark.log.2"} <= set(spark_log) and len(spark_log) == 3, spark_log
    assert max(spark_log.values()) <= CAP + 200, spark_log  # log4j rolls once a line has crossed the cap
    assert "spark log line 059" in (logs / "spark.log").read_text()
    assert set(console) == {"spark-console.log", "spark-console.log.1", "spark-console.log.2"}, console
    assert max(console.values()) <= CAP, console
    assert "worker line 099" in "".join((logs / name).read_text() for name in console)


def ago(days: float) -> str:
    return (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=days)).isoformat(timespec="milliseconds")


def fill(state: StateStore, n: int, at: str) -> None:
    """`n` rows of every runtime kind, done with at `at`."""
    for i in range(n):
        state.record_batch(BatchRecord(stream="s", started_at=at, committed_at=at, duration_ms=1, messages=1, rows=1,
                                       dead_letter_rows=0, bytes=10, target_snapshot_id=1, dead_letter_snapshot_id=None,
                                       offsets="{}" + "o" * 400, lag=0))
        state.db.conn.execute("insert into events (at, level, kind, message) values (?, 'info', ?, ?)",
                              [at, str(EventKind.POLICY_CHANGED), "e" * 400])
        incident = state.open_incident("lagging", f"stream {i % 3}", "lag > 1", "5", "m" * 200)
        state.resolve_incident(incident.id, "0", silent=True)
        state.db.conn.execute("update incidents set opened_at = ?, resolved_at = ? where id = ?", [at, at, incident.id])
        request = state.request_maintenance("ns.t", MaintenanceTask.COMPACT)
        state.db.conn.execute("update maintenance_requests set requested_at = ?, taken_at = ? where id = ?",
                              [at, at, request])
        state.db.conn.execute("insert into engine_requests (ask, args, who, requested_at, result) values "
                              "(?, '{}', '{}', ?, ?)", [str(EngineAsk.PREVIEW), at, b"r" * 2000])
    state.record_run(RunRecord(MaintenanceTask.COMPACT, "ns.t", RunTrigger.SCHEDULE, RunOutcome.OK, started_at=at))


def counts(state: StateStore) -> dict[str, int]:
    tables = ("batches", "events", "incidents", "maintenance_requests", "engine_requests", "maintenance_runs")
    return {t: state.db.execute(f"select count(*) from {t}").fetchone()[0] for t in tables}


def test_every_runtime_table_is_pruned_and_the_file_gives_the_space_back(floe_home):
    floe_home.mkdir()
    (floe_home / "floe.toml").write_text('[observe]\nkeep_in_state = "1d"\n')
    settings = load_settings()
    ensure_home(settings)
    with StateStore(settings.state_db) as state:
        fill(state, 3000, ago(3))  # done with three days ago
        state.request_maintenance("ns.t", MaintenanceTask.EXPIRE)  # pending: an engine has yet to take it
        owed = state.open_incident("down", "engine", "failed", "1", "owed")  # resolved, its resolution not told yet
        state.mark_notified(owed.id, resolved=False)
        state.resolve_incident(owed.id, "0")
        state.db.conn.execute("update incidents set resolved_at = ? where id = ?", [ago(3), owed.id])
        fill(state, 5, ago(0))  # recent: the live UI shows these
        full = settings.state_db.stat().st_size
        upkeep(settings, state)  # with the system tables on, nothing they have not exported goes
        assert counts(state)["batches"] == 3005 and counts(state)["events"] == 3005
        assert counts(state) | {"batches": 0, "events": 0} == {
            "batches": 0, "events": 0, "incidents": 1 + 5, "maintenance_requests": 1 + 5, "engine_requests": 5,
            "maintenance_runs": 2}

        SystemTableWriter(settings, Catalog(settings), state).export()  # the history, now in the system tables
        upkeep(settings, state)
        assert counts(state)["batches"] == 5 and counts(state)["events"] == 5
        assert state.db.execute("select count(*) from incidents where alert = 'down'").fetchone()[0] == 1
    assert run_query(settings, "select count(*) from floe.batches").column(0)[0].as_py() == 3005
    assert settings.state_db.stat().st_size < full / 4, (full, settings.state_db.stat().st_size)


def test_with_system_tables_off_the_history_is_pruned_by_age_all_but_the_audit_trail(floe_home):
    floe_home.mkdir()
    (floe_home / "floe.toml").write_text('[observe]\nsystem_tables = false\nkeep_in_state = "1h"\n')
    settings = load_settings()
    ensure_home(settings)
    with StateStore(settings.state_db) as state:
        fill(state, 50, ago(1))
        fill(state, 2, ago(0))
        state.record_audit("u", "h", "cli", "stream create", "s", {}, "ok")
        state.db.conn.execute("update audit set at = ?", [ago(30)])
        upkeep(settings, state)
        # Incidents: the two recent ones, and the newest of the subject that has no recent one (its cooldown).
        assert counts(state) == {"batches": 2, "events": 2, "incidents": 3, "maintenance_requests": 2,
                                 "engine_requests": 2, "maintenance_runs": 1}
        assert len(state.audit_trail()) == 1


def test_an_older_state_database_is_rewritten_once_into_incremental_mode(floe_home):
    import sqlite3

    floe_home.mkdir()
    settings = load_settings()
    with sqlite3.connect(settings.state_db) as db:  # as an older Floe made it: no auto-vacuum
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("create table events (id integer primary key, at text, stream text, level text, kind text, "
                   "message text)")
    with StateStore(settings.state_db) as state:
        assert state.db.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
        fill(state, 2000, ago(3))
        state.prune_runtime(ago(1), exported_too=True)
        assert state.reclaim_space(min_pages=100) > 0
        assert state.db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        assert state.db.execute("PRAGMA freelist_count").fetchone()[0] == 0
