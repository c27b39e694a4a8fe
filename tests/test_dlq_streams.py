"""Dead letters of streams of many tables: a pattern stream's listed, purged and replayed topic by topic (each
topic's exactly as a single stream's, exactly once through a kill between two topics' moves); a routed stream's
one dead-letter table listed, purged, and replayed into the route tables its messages name, in one commit."""

from __future__ import annotations

import os
import uuid

import orjson

from appliance.auditor import audit_streams
from appliance.config.settings import load_settings
from appliance.core.vocabulary import EngineAsk
from appliance.model.mapping import Mapping
from appliance.query.connection import run_query
from appliance.state.records import EngineRequestRecord
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.views.engine import engine_status

from conftest import floe, floe_process, run_until_caught_up, wait_for

STRICT = ('[[columns]]\nname = "id"\ntype = "long"\nsource = "id"\n'
          '[[columns]]\nname = "code"\ntype = "long"\nsource = "code"\n')


def count(table: str) -> int:
    return run_query(load_settings(), f"select count(*) n from {table}").to_pylist()[0]["n"]


def audited_clean(name: str) -> None:
    _, reports = audit_streams(load_settings(), name)
    assert reports and all(r.ok for r in reports), [(r.table, r.gaps, r.duplicates, r.problems) for r in reports]


def listed(*args: str) -> list[dict]:
    done = floe("dlq", "list", *args, "--format", "json")
    assert done.returncode == 0, done.stderr
    return [orjson.loads(line) for line in done.stdout.splitlines()]


def _strict_pattern(broker, prefix: str, sizes: dict[str, int]) -> None:
    """A pattern stream `pd` over topics PREFIX.NAME of `sizes[NAME]` messages, every third with a code that is a
    string where the mapping, given to every topic, wants a long (schema evolution off)."""
    producer = broker.producer()
    for name, n in sizes.items():
        for i in range(n):
            producer.produce(f"{prefix}.{name}", value=orjson.dumps({"id": i, "code": f"A{i}" if i % 3 == 0 else i}),
                             partition=0)
    assert producer.flush(30) == 0
    mapping = load_settings().home / "strict.toml"
    mapping.parent.mkdir(parents=True, exist_ok=True)
    mapping.write_text(STRICT)
    created = floe("stream", "create", "pd", "--bootstrap", broker.bootstrap, "--topic-pattern", rf"{prefix}\.(.*)",
                   "--table", "ingest.pd_{1}", "--mapping", str(mapping), "--schema-evolution", "off")
    assert created.returncode == 0, created.stderr


async def test_a_pattern_stream_s_dead_letters_are_listed_purged_and_replayed_topic_by_topic_once_through_a_kill(
        broker, spark, running_engine):
    prefix = f"db{uuid.uuid4().hex[:6]}"
    a, b = f"{prefix}.a", f"{prefix}.b"
    _strict_pattern(broker, prefix, {"a": 30, "b": 15})
    run_until_caught_up(spark)
    assert (count("ingest.pd_a_dlq"), count("ingest.pd_b_dlq")) == (10, 5)

    # Listed topic by topic, oldest offset first, each row saying its topic; --limit across the topics.
    rows = listed("pd")
    assert [(r["topic"], r["_kafka_offset"]) for r in rows] == [(a, o) for o in range(0, 30, 3)] + \
        [(b, o) for o in range(0, 15, 3)]
    assert all(r["error_stage"] == "schema" for r in rows) and '"A3"' in rows[1]["value"].replace(" ", "")
    assert [(r["topic"], r["_kafka_offset"]) for r in listed("pd", "--limit", "12")][-2:] == [(b, 0), (b, 3)]
    assert {r["topic"] for r in listed("pd", "--topic", b)} == {b}
    table = floe("dlq", "list", "pd", "--topic", b, "--where", "_kafka_offset > 100")
    assert table.returncode == 0 and "(0 rows)" in table.stdout and "topic" in table.stdout, table
    unknown = floe("dlq", "list", "pd", "--topic", f"{prefix}.zz")
    assert unknown.returncode == 1 and "holds no topic" in unknown.stderr and unknown.stderr.count("\n") == 1

    # Purged table by table, each its own commit, said per table; --topic narrows to one.
    purged = floe("dlq", "purge", "pd", "--where", "_kafka_offset < 3", "--yes")
    assert purged.returncode == 0, purged.stderr
    assert purged.stdout.splitlines() == ["pd: purged 2 dead letters", "  ingest.pd_a_dlq: purged 1",
                                          "  ingest.pd_b_dlq: purged 1"]
    one = floe("dlq", "purge", "pd", "--topic", b, "--where", "_kafka_offset = 3", "--yes")
    assert one.stdout.splitlines() == ["pd: purged 1 dead letters"], one
    assert (count("ingest.pd_a_dlq"), count("ingest.pd_b_dlq")) == (9, 3)
    audited_clean("pd")

    for member in ("a", "b"):  # the fix: `code` a string column, still filled from field `code`
        for args in (("drop-column", "code"), ("add-column", "code", "string", "--source", "code")):
            done = floe("table", "alter", f"ingest.pd_{member}", *args)
            assert done.returncode == 0, done.stderr
    dry = floe("dlq", "replay", "pd", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[:3] == [
        "pd: 12 dead letters selected; would move 12 to their tables, 0 would stay in the dead-letter table",
        "  ingest.pd_a: 9 dead letters selected; would move 9 to it, 0 would stay in the dead-letter table",
        "  ingest.pd_b: 3 dead letters selected; would move 3 to it, 0 would stay in the dead-letter table"]

    # Killed inside topic b's move (topic a's committed before it): each topic's messages in one table only.
    killed = floe_process("dlq", "replay", "pd", env={"FLOE_FAILPOINTS": "replay_between_commits:ingest.pd_b"})
    assert killed.returncode == -9, killed.stderr
    assert [count(t) for t in ("ingest.pd_a", "ingest.pd_a_dlq", "ingest.pd_b", "ingest.pd_b_dlq")] == [29, 0, 10, 3]
    audited_clean("pd")
    done = floe("dlq", "replay", "pd")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("pd: 3 dead letters selected; moved 3 to their tables, 0 stay") and \
        lines[1].startswith("  ingest.pd_b: 3 dead letters selected; moved 3 to it") and len(lines) == 2, lines
    assert [count(t) for t in ("ingest.pd_a", "ingest.pd_a_dlq", "ingest.pd_b", "ingest.pd_b_dlq")] == [29, 0, 13, 0]
    replayed = run_query(load_settings(), "select id, code from ingest.pd_b where id % 3 = 0 order by id").to_pylist()
    assert replayed == [{"id": i, "code": f"A{i}"} for i in (6, 9, 12)]
    audited_clean("pd")
    again = floe("dlq", "replay", "pd", "--topic", a)
    assert again.returncode == 0 and again.stdout.startswith("pd: 0 dead letters selected"), again

    with StateStore(load_settings().state_db) as state:
        told = [e for e in state.events("pd") if e.kind == "dead_letters_replayed"]
        # A topic's mapping follows its own table; the pattern stream's, which topics created later are
        # given, stays the one the user gave.
        assert state.stream("pd").mapping == Mapping.from_toml(STRICT)
        assert {c.name: c.type for c in state.members("pd")[b].mapping.columns}["code"] == "string"
    assert sorted(e.message.split(":")[0] for e in told) == ["pd (ingest.pd_a)", "pd (ingest.pd_b)"]
    await _a_later_topic_s_dead_letters_by_the_engine_and_the_ui(broker, prefix, running_engine)


async def _a_later_topic_s_dead_letters_by_the_engine_and_the_ui(broker, prefix: str, running_engine) -> None:
    """A topic created later takes the mapping the user gave (not another topic's); the running engine does its
    replay's preview and its purge, as the commands ask; the UI's stream detail replays the topic picked in its
    list of tables alone, after a preview that counts it per table, and with none picked every topic's."""
    from tui.app import FloeApp
    from tui.screens.confirm import ConfirmScreen
    from tui.screens.stream_detail import StreamDetailScreen

    from tui_helpers import showing, text, until

    c, d = f"{prefix}.c", f"{prefix}.d"
    broker.produce(c, [orjson.dumps({"id": i, "code": f"C{i}"}) for i in range(2)], partition=0)
    broker.produce(d, [orjson.dumps({"id": i, "code": f"D{i}"}) for i in range(2)], partition=0)
    running_engine()
    made = {"ingest.pd_c_dlq", "ingest.pd_d_dlq"}
    wait_for(lambda: made <= set(Catalog(load_settings()).list_tables())
             and (count("ingest.pd_c_dlq"), count("ingest.pd_d_dlq")) == (2, 2), 60, what="the dead letters")
    with StateStore(load_settings().state_db) as state:
        assert state.members("pd")[c].mapping == Mapping.from_toml(STRICT)  # the one given
    wait_for(lambda: EngineAsk.PURGE in engine_status(load_settings()).answers, 60, what="the engine's answers")
    dry = floe("dlq", "replay", "pd", "--topic", c, "--dry-run")
    assert dry.stdout.startswith("pd: 2 dead letters selected; would move 0"), dry
    purged = floe("dlq", "purge", "pd", "--topic", c, "--where", "_kafka_offset = 0", "--yes")
    assert purged.stdout.splitlines() == ["pd: purged 1 dead letters"], purged
    with StateStore(load_settings().state_db) as state:
        asked = [EngineRequestRecord.of(r) for r in state.db["engine_requests"].rows_where(order_by="id")][-2:]
    assert [(r.ask, r.taken_by, r.args["topic"]) for r in asked] == [
        (EngineAsk.REPLAY, os.getpid(), c), (EngineAsk.PURGE, os.getpid(), c)]

    for member in ("c", "d"):
        for args in (("drop-column", "code"), ("add-column", "code", "string", "--source", "code")):
            assert floe("table", "alter", f"ingest.pd_{member}", *args).returncode == 0
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 60)) as pilot:
        app.push_screen(StreamDetailScreen("pd"))
        screen = await until(pilot, lambda: showing(app, StreamDetailScreen), 10, "the stream's detail")
        tables = screen.query_one("#topics-table")
        await until(pilot, lambda: d in [k.value for k in tables.rows], 30, "the topics' tables listed")
        # Topic c picked in the list (Enter on its row): the preview and the replay are its dead letters alone.
        tables.focus()
        await pilot.pause()
        for _ in range([k.value for k in tables.rows].index(c)):
            await pilot.press("down")
        await pilot.press("enter")
        await until(pilot, lambda: f"picked {c}" in text(screen.query_one("#topics-title")), 10, "the pick")
        question = await _previewed(app, pilot)
        assert question.startswith("pd: 1 dead letters selected; would move 1 to their tables"), question
        assert "ingest.pd_c: 1 dead letters selected; would move 1 to it" in question, question
        assert "pd_d" not in question and f"Replay topic {c}" in question, question
        await pilot.press("y")
        await until(pilot, lambda: count("ingest.pd_c_dlq") == 0, 60, "the replay")
        assert count("ingest.pd_d_dlq") == 2  # the topic not picked: its dead letters stay
        with StateStore(load_settings().state_db) as state:
            asked = [EngineRequestRecord.of(r) for r in state.db["engine_requests"].rows_where(order_by="id")][-2:]
        assert [(r.ask, r.taken_by, r.args["topic"], r.args["dry_run"]) for r in asked] == [
            (EngineAsk.REPLAY, os.getpid(), c, True), (EngineAsk.REPLAY, os.getpid(), c, False)]  # by the engine

        # Enter on it again: no topic picked, `d` replays every topic's (only d's are left).
        await until(pilot, lambda: not showing(app, ConfirmScreen) and screen.focused is tables, 10, "the detail")
        await pilot.press("enter")
        await until(pilot, lambda: "picked" not in text(screen.query_one("#topics-title")), 10, "no pick")
        question = await _previewed(app, pilot)
        assert question.startswith("pd: 2 dead letters selected; would move 2 to their tables"), question
        assert "ingest.pd_d: 2 dead letters selected; would move 2 to it" in question, question
        await pilot.press("y")
        await until(pilot, lambda: count("ingest.pd_d_dlq") == 0, 60, "the replay of every topic")
    assert run_query(load_settings(), "select id, code from ingest.pd_c").to_pylist() == [{"id": 1, "code": "C1"}]
    assert run_query(load_settings(), "select id, code from ingest.pd_d order by id").to_pylist() == [
        {"id": 0, "code": "D0"}, {"id": 1, "code": "D1"}]
    audited_clean("pd")


async def _previewed(app, pilot) -> str:
    """`d` pressed on the stream detail: the question its preview asks."""
    from tui.screens.confirm import ConfirmScreen

    from tui_helpers import showing, until

    await pilot.press("d")
    return await until(pilot, lambda: showing(app, ConfirmScreen) and str(app.screen.query_one("#confirm-question")
                                                                          .render()), 60, "the preview")


def test_a_routed_stream_s_dead_letters_are_listed_replayed_into_their_route_tables_at_once_and_purged(
        broker, topic, spark, monkeypatch):
    from appliance.core import failpoints

    broker.produce(topic, [orjson.dumps({"type": "a", "n": 1}), orjson.dumps({"n": 2}),
                           orjson.dumps({"type": "b", "m": 3})], partition=0)
    assert floe("stream", "create", "ev", "--bootstrap", broker.bootstrap, "--topic", topic, "--route-by", "type",
                "--table", "an.ev_{value}").returncode == 0
    run_until_caught_up(spark)  # the routes' tables made, their columns numbers
    broker.produce(topic, [orjson.dumps({"type": "a", "n": "x"}), orjson.dumps({"type": "b", "m": "y"})], partition=0)
    run_until_caught_up(spark)
    rows = listed("ev")  # its one dead-letter table, no topic column
    assert [(r["_kafka_offset"], r["error_stage"]) for r in rows] == [(1, "route"), (3, "schema"), (4, "schema")]
    assert "topic" not in rows[0]
    for table, column in (("an.ev_a", "n"), ("an.ev_b", "m")):  # the fix: each route's column made text
        for args in (("drop-column", column), ("add-column", column, "string", "--source", column)):
            assert floe("table", "alter", table, *args).returncode == 0
    dry = floe("dlq", "replay", "ev", "--dry-run")
    assert dry.stdout.splitlines()[0] == "ev: 3 dead letters selected; would move 2 to their tables, 1 would " \
                                         "stay in the dead-letter table", dry
    assert "1 x route: " in dry.stdout and "route field type is missing or null" in dry.stdout, dry.stdout

    # A move that fails between its tables' commits moves nothing: they swap in together or not at all.
    monkeypatch.setattr(failpoints, "_ARMED", {"replay_between_commits:an.ev_b": "raise"})
    failed = floe("dlq", "replay", "ev")
    assert failed.returncode == 1 and "failpoint replay_between_commits" in failed.stderr, failed
    monkeypatch.setattr(failpoints, "_ARMED", {})
    assert [count(t) for t in ("an.ev_a", "an.ev_b", "an.ev_dlq")] == [1, 1, 3]
    audited_clean("ev")

    done = floe("dlq", "replay", "ev")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ev: 3 dead letters selected; moved 2 to their tables, 1 stay"), done.stdout
    assert run_query(load_settings(), "select n, _kafka_offset o from an.ev_a order by o").to_pylist() == [
        {"n": None, "o": 0}, {"n": "x", "o": 3}]  # the first's long n went with the dropped column
    assert run_query(load_settings(), "select m from an.ev_b where _kafka_offset = 4").to_pylist() == [{"m": "y"}]
    assert [(r["_kafka_offset"], r["error_stage"]) for r in listed("ev")] == [(1, "route")]  # no field: it stays
    audited_clean("ev")

    purged = floe("dlq", "purge", "ev", "--where", "error_stage = 'route'", "--yes")
    assert purged.returncode == 0 and purged.stdout.splitlines() == ["ev: purged 1 dead letters"], purged
    assert count("an.ev_dlq") == 0 and listed("ev") == []
    audited_clean("ev")
    with StateStore(load_settings().state_db) as state:
        assert [e.message for e in state.events("ev") if e.kind == "dead_letters_purged"] == [
            "purged 1 dead letters of an.ev_dlq where error_stage = 'route'"]
        assert [e.kind for e in state.events("ev")].count("dead_letters_replayed") == 1


def test_a_routed_replay_widens_a_route_s_table_first_where_schema_evolution_asks(broker, topic, spark):
    """A route's table of a narrow column (as a user made it), schema evolution turned on after the fact: the
    replay widens the column first, as a batch would, and its dry run counts that without committing it."""
    from appliance.control.streams import update_stream
    from appliance.core.clock import now
    from appliance.ingest.route_tables import make_table
    from appliance.model.routes import Route
    from appliance.tables.catalog import Catalog

    narrow = Mapping.from_toml('[[columns]]\nname = "n"\ntype = "int"\nsource = "n"\n')
    broker.produce(topic, [orjson.dumps({"type": "a", "n": 2**40 if i % 2 else i}) for i in range(6)], partition=0)
    assert floe("stream", "create", "wd", "--bootstrap", broker.bootstrap, "--topic", topic, "--route-by", "type",
                "--table", "an.wd_{value}", "--schema-evolution", "off").returncode == 0
    settings = load_settings()
    with StateStore(settings.state_db) as state:
        route = Route("wd", "an.wd_a", "a", narrow, now(), {0: 0})
        state.add_route(route)
        make_table(settings, Catalog(settings), state, state.stream("wd"), route)
    run_until_caught_up(spark)
    assert (count("an.wd_a"), count("an.wd_dlq")) == (3, 3)
    update_stream(settings, "wd", schema_evolution="auto")
    before = Catalog(settings).table("an.wd_a").metadata.current_schema_id

    dry = floe("dlq", "replay", "wd", "--dry-run")
    assert "3 dead letters selected; would move 3 to their tables, 0 would stay" in dry.stdout, dry
    assert Catalog(settings).table("an.wd_a").metadata.current_schema_id == before  # nothing committed
    done = floe("dlq", "replay", "wd")
    assert "moved 3 to their tables, 0 stay" in done.stdout, done
    assert run_query(settings, "select n from an.wd_a order by _kafka_offset").to_pylist() == [
        {"n": 0}, {"n": 2**40}, {"n": 2}, {"n": 2**40}, {"n": 4}, {"n": 2**40}]
    with StateStore(settings.state_db) as state:  # the route's mapping follows its table
        assert {c.name: c.type for c in state.routes("wd")["an.wd_a"].mapping.columns}["n"] == "long"
    audited_clean("wd")
