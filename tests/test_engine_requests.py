"""Work `floe` commands ask of the running engine (`floe maintain`, `floe dlq replay` and its dry run, `floe dlq
purge`, `floe stage`): done on the engine's session, printed as the command prints it when it does the work
itself, recorded once in the asker's name; a one-off engine is never waited for; an engine that stops with a
request in flight leaves it to the asker, and nothing is done twice.

Real parts only: the broker in its own process, the engine in this one (its answers are taken by this
process's pid) or in a `floe run` process, and the commands as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import orjson

from appliance.config.settings import load_settings
from appliance.control.answers import Answers
from appliance.control.dead_letters import preview_replay
from appliance.control.requests import ask_engine
from appliance.control.stages import create_stage, preview
from appliance.control.streams import create_stream
from appliance.control.tables import alter_table
from appliance.core.vocabulary import EngineAsk, MaintenanceTask, RunOutcome
from appliance.ingest.engine import Engine
from appliance.maintenance.runs import format_run
from appliance.model.mapping import Mapping
from appliance.query.connection import run_query
from appliance.spark.session import console_log
from appliance.state.records import EngineRequestRecord
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.datafiles import live_data_files
from appliance.views.engine import engine_status

from conftest import FLOE, ROOT, floe, wait_for

STRICT = ('[[columns]]\nname = "id"\ntype = "long"\nsource = "id"\n'
          '[[columns]]\nname = "code"\ntype = "long"\nsource = "code"\n')
AS = {"FLOE_VIA": "cron"}  # the asker's own name in the audit trail: the engine records it for the asker


# Runs a command as `floe` does, in a process of its own, then says which modules it loaded.
PROBE = """
import json, sys
sys.argv = ["floe", *sys.argv[1:]]
from appliance.cli import main
try:
    main()
finally:
    sys.stderr.write("MODULES " + json.dumps(sorted(sys.modules)) + "\\n")
"""
# What a command the engine serves has no use for: it only asks and prints.
HEAVY = ("pyspark", "py4j", "duckdb", "appliance.maintenance.maintainer", "appliance.deadletters.replay")


def floe_served(*args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`floe ARGS` in a process of its own, and the heavy modules it loaded."""
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=300)
    *said, modules = done.stderr.splitlines()
    done.stderr = "".join(line + "\n" for line in said)
    loaded = json.loads(modules.removeprefix("MODULES "))
    return done, sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY))


def count(table: str) -> int:
    return run_query(load_settings(), f"select count(*) n from {table}").to_pylist()[0]["n"]


def requests(settings) -> list[EngineRequestRecord]:
    with StateStore(settings.state_db) as state:
        return [EngineRequestRecord.of(r) for r in state.db["engine_requests"].rows_where(order_by="id")]


def last_request(settings, ask: EngineAsk) -> EngineRequestRecord:
    return [r for r in requests(settings) if r.ask is ask][-1]


def audited(settings, action: str) -> list:
    with StateStore(settings.state_db) as state:
        return [r for r in state.audit_trail() if r.action == action]


def produce_round(broker, topic: str, start: int, n: int = 30) -> None:
    """`n` messages, every third with a code that is a string where the strict mapping wants a long."""
    broker.produce(topic, [orjson.dumps({"id": i, "code": f"A{i}" if i % 3 == 0 else i})
                           for i in range(start, start + n)], partition=0)


def test_floe_commands_are_done_by_the_running_engine_as_they_are_done_in_their_own_process(
        broker, topic, running_engine, spark, floe_home):
    floe_home.mkdir(parents=True)
    (floe_home / "floe.toml").write_text("[maintenance]\nenabled = false\n")  # only the command's compaction
    settings = load_settings()
    produce_round(broker, topic, 0)
    create_stream(settings, "c", bootstrap=broker.bootstrap, topic=topic, table="ingest.c",
                  mapping=Mapping.from_toml(STRICT), schema_evolution="off")
    running_engine()
    for i in range(3):  # three batches: three small files to compact
        if i:
            produce_round(broker, topic, 30 * i)
        wait_for(lambda: count("ingest.c") + count("ingest.c_dlq") == 30 * (i + 1), 90, what=f"round {i}")
    assert EngineAsk.MAINTAIN in engine_status(settings).answers

    maintained, heavy = floe_served("maintain", "ingest.c", "--compact", env=AS)
    assert maintained.returncode == 0 and heavy == [], (maintained.stderr, heavy)
    asked = last_request(settings, EngineAsk.MAINTAIN)
    assert asked.taken_by == os.getpid() and asked.answered and not asked.error
    with StateStore(settings.state_db) as state:
        [run] = state.runs("ingest.c", MaintenanceTask.COMPACT)
    # What the command prints for the run the engine recorded: what it prints for a run it does itself.
    assert maintained.stdout == format_run(run) + "\n" and run.outcome is RunOutcome.OK, maintained.stdout
    assert run.trigger == "cli" and "3 small files" in maintained.stdout
    assert len(live_data_files(Catalog(settings).table("ingest.c"))) == 1
    [entry] = audited(settings, "maintenance run")
    assert (entry.via, entry.target, entry.outcome) == ("cron", "ingest.c", "ok")

    dry, heavy = floe_served("dlq", "replay", "c", "--dry-run")
    assert dry.returncode == 0 and heavy == [], (dry.stderr, heavy)
    assert last_request(settings, EngineAsk.REPLAY).taken_by == os.getpid()
    assert dry.stdout.splitlines() == preview_replay(settings, "c", spark=spark).lines()
    assert "30 dead letters selected; would move 0 to the target, 30 would stay" in dry.stdout

    purged = floe("dlq", "purge", "c", "--where", "_kafka_offset < 10", "--yes", env=AS)
    assert purged.returncode == 0 and purged.stdout == "c: purged 4 dead letters\n", purged.stdout + purged.stderr
    assert last_request(settings, EngineAsk.PURGE).taken_by == os.getpid()
    [entry] = audited(settings, "dlq purge")
    assert (entry.via, entry.outcome) == ("cron", "ok")

    for args in (("drop-column", "code"), ("add-column", "code", "string", "code")):
        alter_table(settings, "ingest.c", *args)
    replayed = floe("dlq", "replay", "c", env=AS)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.startswith("c: 26 dead letters selected; moved 26 to the target, 0 stay"), replayed.stdout
    assert last_request(settings, EngineAsk.REPLAY).taken_by == os.getpid()
    assert (count("ingest.c"), count("ingest.c_dlq")) == (86, 0)
    [entry] = audited(settings, "dlq replay")
    assert (entry.via, entry.outcome) == ("cron", "ok")
    with StateStore(settings.state_db) as state:
        assert [e.kind for e in state.events(stream="c")].count("dead_letters_replayed") == 1

    missing = floe("maintain", "ingest.nope")
    assert missing.returncode == 1 and missing.stderr.startswith("floe: error: no table named ingest.nope in the ") \
        and missing.stderr.count("\n") == 1, missing.stderr
    assert last_request(settings, EngineAsk.MAINTAIN).error_kind == "TableNotFound"

    # `floe stage`: the engine previews and checks; the stage is created in the command's process.
    kind, rows = preview(settings, "ingest.c", "select code, count(*) as n from source group by code")
    assert kind == "group" and rows.num_rows > 0 and last_request(settings, EngineAsk.PREVIEW).answered
    created = create_stage(settings, "codes", source="ingest.c", sql="select id, code from source where id > 5",
                           table="prep.codes")
    assert created.columns == [("id", "bigint"), ("code", "string")]
    assert last_request(settings, EngineAsk.CHECK).taken_by == os.getpid()


def test_a_one_off_run_takes_no_requests_and_is_not_waited_for(broker, topic, spark):
    settings = load_settings()
    produce_round(broker, topic, 0, 300)
    create_stream(settings, "o", bootstrap=broker.bootstrap, topic=topic, table="ingest.o")
    seen = []

    def ask(engine: Engine) -> None:
        if not seen:
            started = time.monotonic()
            asked = ask_engine(settings, EngineAsk.REPLAY, {"stream": "o", "where": None, "dry_run": True})
            seen.append((engine_status(settings), asked, time.monotonic() - started))

    Engine(settings, spark=spark, answers=Answers, on_tick=ask).run(until_caught_up=True)
    [(status, asked, seconds)] = seen
    assert status.alive and status.answers == frozenset()
    assert asked.answer is None and "takes no replay requests" in asked.why_not and seconds < 1
    assert requests(settings) == []  # nothing asked of an engine that would never answer


def test_an_engine_stopped_with_a_request_in_flight_leaves_it_to_the_asker_and_nothing_is_done_twice(
        broker, topic, spark, floe_home):
    floe_home.mkdir(parents=True)
    # Only the command's compaction, in Spark: a rewrite this small runs in the engine's process otherwise.
    (floe_home / "floe.toml").write_text("[maintenance]\nenabled = false\nrewrite_in_engine = 0\n")
    settings = load_settings()
    for i in range(3):
        produce_round(broker, topic, 30 * i)
        if not i:
            create_stream(settings, "k", bootstrap=broker.bootstrap, topic=topic, table="ingest.k",
                          mapping=Mapping.from_toml(STRICT), schema_evolution="off")
        Engine(settings, spark=spark).run(until_caught_up=True)
    assert len(live_data_files(Catalog(settings).table("ingest.k"))) == 3

    # The engine's rewrite tasks stall: its compaction is surely in flight when it is told to stop.
    log = floe_home / "engine.err"
    with open(log, "w") as err:
        engine = subprocess.Popen(FLOE + ["run"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
                                  env={**os.environ, "FLOE_FAILPOINTS": "rewrite_group=300"}, start_new_session=True)
    try:
        wait_for(lambda: EngineAsk.MAINTAIN in engine_status(settings).answers, 120, what="the engine answering")
        # The asker: `floe maintain` in this process (on the session's Spark, once the engine has left it the
        # compaction), beside the test's thread that stops the engine.
        asked: list = []
        asker = threading.Thread(target=lambda: asked.append(floe("maintain", "ingest.k", "--compact")))
        asker.start()
        console = console_log(settings)  # a Spark task's stderr goes to the engine's console log
        wait_for(lambda: "failpoint rewrite_group: stalling" in console.read_text(), 120, what="the engine's rewrite")
        engine.send_signal(signal.SIGTERM)
        assert engine.wait(120) == 0, log.read_text()[-3000:]
        asker.join(300)
    finally:
        if engine.poll() is None:
            os.killpg(engine.pid, signal.SIGKILL)
    [done] = asked
    out = done.stdout
    assert done.returncode == 0, done.stderr
    asked = last_request(settings, EngineAsk.MAINTAIN)
    assert asked.taken_by == engine.pid and asked.abandoned_at and not asked.answered
    with StateStore(settings.state_db) as state:
        ours, theirs = state.runs("ingest.k")  # newest first: the command's own, then the engine's
    assert theirs.outcome is RunOutcome.CANCELLED and ours.outcome is RunOutcome.OK
    assert out == format_run(ours) + "\n", out  # the command printed its own run, once
    table = Catalog(settings).table("ingest.k")
    assert len(live_data_files(table)) == 1
    assert [s.summary.operation.value for s in table.metadata.snapshots].count("replace") == 1  # compacted once
    assert count("ingest.k") == 60 and count("ingest.k_dlq") == 30
    [entry] = audited(settings, "maintenance run")
    assert entry.outcome == "ok"


def test_a_taken_change_is_waited_for_through_a_late_heartbeat_and_a_question_is_not(floe_home):
    """A loaded machine can starve the engine's heartbeat thread for seconds. A request that changes tables,
    once taken, is still the engine's while its process lives: the asker must not do it a second time. A
    question (a stage's preview) is given up, as before: asked again elsewhere, it changes nothing."""
    import threading

    from appliance.core.clock import now
    from appliance.core.vocabulary import EngineState

    import datetime as dt

    from appliance.core.errors import EngineUnresponsive

    settings = load_settings()
    asks = [EngineAsk.PURGE, EngineAsk.PREVIEW]

    def play_engine(ask: EngineAsk, silent: float) -> None:
        with StateStore(settings.state_db) as state:
            [taken] = wait_for(lambda: state.take_engine_requests(os.getpid(), [ask], 60, 1), 10,
                               what="a request to take")
            last = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=silent)).isoformat(timespec="milliseconds")
            state.db.execute("update engine set heartbeat_at = ?", [last])  # late: past HEARTBEAT_STALE (5 s)
            time.sleep(2.5)  # busy with a late heartbeat (ALIVE_EVERY is 1 s): what is tested
            state.answer_engine_request(taken.id, answer={"deleted": 3, "waiting": 0})

    for ask, silent in ((EngineAsk.PURGE, 8), (EngineAsk.PREVIEW, 8), (EngineAsk.PURGE, 300)):
        with StateStore(settings.state_db) as state:
            state.engine_heartbeat(os.getpid(), "local[1]", EngineState.RUNNING, now(), asks)
        engine = threading.Thread(target=play_engine, args=(ask, silent))
        engine.start()
        try:
            asked = ask_engine(settings, ask, {"stream": "s", "where": "true"})
        except EngineUnresponsive as exc:  # hung past [alerting] heartbeat_timeout (30 s): said, not redone
            assert silent > settings.alerting.heartbeat_timeout and "\n" not in str(exc), exc
            assert str(exc).startswith(f"the engine (pid {os.getpid()}) took this purge and has not answered"), exc
            continue
        finally:
            engine.join()
        assert silent < settings.alerting.heartbeat_timeout, asked
        if ask.changes:
            assert asked.answer is not None and asked.answer.answer == {"deleted": 3, "waiting": 0}, asked
        else:
            assert asked.answer is None and asked.why_not == "the engine stopped", asked
