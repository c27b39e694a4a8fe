"""Dead-letter replay, list and purge: a too-strict mapping fixed, its dead letters brought home exactly once,
through a running stream, a kill in the middle of a replay, and an upsert table's newer rows."""

from __future__ import annotations

import os

import orjson

from appliance.auditor.check import audit_stream
from appliance.config.settings import load_settings
from appliance.control.dead_letters import preview_replay, purge_dead_letters, replay_dead_letters
from appliance.control.streams import create_stream, update_stream
from appliance.control.tables import alter_table
from appliance.ingest.engine import Engine
from appliance.model.mapping import Mapping
from appliance.query.connection import run_query
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog

from conftest import floe, floe_process, run_until_caught_up, wait_for

STRICT = ('[[columns]]\nname = "id"\ntype = "long"\nsource = "id"\n'
          '[[columns]]\nname = "code"\ntype = "long"\nsource = "code"\n')


def rows(sql: str) -> list[dict]:
    return run_query(load_settings(), sql).to_pylist()


def count(table: str) -> int:
    return rows(f"select count(*) n from {table}")[0]["n"]


def snapshot(table: str) -> int | None:
    found = Catalog(load_settings()).table(table).current_snapshot()
    return found.snapshot_id if found else None


def strict_stream(broker, topic: str, name: str, n: int, extra: list[str] = ()) -> None:
    """`n` messages, every third with a code that is a string where the mapping wants a long."""
    broker.produce(topic, [orjson.dumps({"id": i, "code": f"A{i}" if i % 3 == 0 else i}) for i in range(n)],
                   partition=0)
    mapping = load_settings().home / f"{name}.toml"
    mapping.parent.mkdir(parents=True, exist_ok=True)
    mapping.write_text(STRICT)
    created = floe("stream", "create", name, "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   f"ingest.{name}", "--mapping", str(mapping), "--schema-evolution", "off", *extra)
    assert created.returncode == 0, created.stderr


def fix_mapping(name: str) -> None:
    """The fix a team makes: `code` becomes a string column, still filled from field `code`."""
    for args in (("drop-column", "code"), ("add-column", "code", "string", "--source", "code")):
        done = floe("table", "alter", f"ingest.{name}", *args)
        assert done.returncode == 0, done.stderr


def audited_clean(name: str) -> None:
    report = audit_stream(load_settings(), name)
    assert report.ok, (report.gaps, report.duplicates, report.problems)


def test_a_fixed_mapping_brings_the_dead_letters_home_while_the_stream_runs(broker, topic, running_engine):
    strict_stream(broker, topic, "dl", 300)
    engine = running_engine()
    wait_for(lambda: count("ingest.dl") + count("ingest.dl_dlq") == 300, 90, what="the first 300 messages")
    assert count("ingest.dl_dlq") == 100

    bad = floe("dlq", "replay", "dl", "--where", "_kafka_offset >")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "--where" in bad.stderr, bad.stderr
    missing = floe("dlq", "replay", "nope")
    assert missing.returncode == 1 and "nope" in missing.stderr and missing.stderr.count("\n") == 1
    settings = load_settings()
    before = (snapshot("ingest.dl"), snapshot("ingest.dl_dlq"))
    still = preview_replay(settings, "dl", spark=engine.spark)  # the mapping is as strict as ever
    assert (still.selected, still.moved, still.stayed) == (100, 0, 100)
    assert "schema" in still.reasons[0][0] and still.reasons[0][1] == 100

    fix_mapping("dl")
    wait_for(lambda: Catalog(settings).table("ingest.dl").schema().find_field("code"), 30, what="the new column")
    dry = floe("dlq", "replay", "dl", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would move 100 to the target, 0 would stay" in dry.stdout, dry.stdout
    assert snapshot("ingest.dl_dlq") == before[1] and count("ingest.dl_dlq") == 100  # a dry run changed nothing

    # The stream keeps running and the topic keeps growing while the dead letters move.
    broker.produce(topic, [orjson.dumps({"id": i, "code": f"B{i}"}) for i in range(300, 400)], partition=0)
    first = replay_dead_letters(settings, "dl", "_kafka_offset < 150", spark=engine.spark)
    rest = replay_dead_letters(settings, "dl", spark=engine.spark)
    assert (first.moved, first.stayed, rest.moved + first.moved) == (50, 0, 100)
    wait_for(lambda: count("ingest.dl") == 400, 90, what="every message in the target")
    assert count("ingest.dl_dlq") == 0
    replayed = rows("select id, code, _kafka_partition p, _kafka_offset o, epoch_ms(_kafka_timestamp) t "
                    "from ingest.dl where id < 300 and id % 3 = 0 order by id")
    assert [(r["id"], r["code"], r["p"], r["o"]) for r in replayed] == [(i, f"A{i}", 0, i) for i in range(0, 300, 3)]
    assert all(r["t"] > 0 for r in replayed)  # the message's own timestamp, kept
    audited_clean("dl")
    with StateStore(settings.state_db) as state:
        kinds = [e.kind for e in state.events(stream="dl")]
    assert "dead_letters_replayed" in kinds


def test_a_kill_in_the_middle_of_a_replay_leaves_every_offset_in_one_table_and_a_second_replay_finishes(
        broker, topic, spark):
    strict_stream(broker, topic, "kd", 90)
    run_until_caught_up(spark)
    fix_mapping("kd")
    for point in ("replay_before_commit", "replay_between_commits"):
        killed = floe_process("dlq", "replay", "kd", env={"FLOE_FAILPOINTS": point})
        assert killed.returncode == -9, (point, killed.stderr)
        assert (count("ingest.kd"), count("ingest.kd_dlq")) == (60, 30), point
        audited_clean("kd")
    done = floe("dlq", "replay", "kd")
    assert done.returncode == 0, done.stderr
    assert "moved 30 to the target, 0 stay" in done.stdout, done.stdout
    assert (count("ingest.kd"), count("ingest.kd_dlq")) == (90, 0)
    audited_clean("kd")
    again = floe("dlq", "replay", "kd")
    assert again.returncode == 0 and "0 dead letters selected" in again.stdout, again.stdout


def test_a_stream_without_dead_letters_lists_none_and_exits_0(broker, topic):
    """Before any batch, the dead-letter table has no file: the listing is empty, not a traceback, and a
    `--where` is still checked against the table's columns."""
    broker.produce(topic, [orjson.dumps({"id": 1, "code": 1})])
    mapping = load_settings().home / "none.toml"
    mapping.parent.mkdir(parents=True, exist_ok=True)
    mapping.write_text(STRICT)
    created = floe("stream", "create", "none", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   "ingest.none", "--mapping", str(mapping))
    assert created.returncode == 0, created.stderr
    listed = floe("dlq", "list", "none")
    assert listed.returncode == 0, listed.stderr
    assert "error_message" in listed.stdout and "(0 rows)" in listed.stdout and not listed.stderr, listed
    narrowed = floe("dlq", "list", "none", "--where", "error_stage = 'convert'", "--format", "json")
    assert narrowed.returncode == 0 and narrowed.stdout.strip() == "", narrowed
    wrong = floe("dlq", "list", "none", "--where", "no_such_column = 1")
    assert wrong.returncode == 1 and "no_such_column" in wrong.stderr and wrong.stderr.count("\n") == 1, wrong


def test_list_and_purge_select_by_where_and_the_audit_accounts_for_the_purged(broker, topic, spark):
    strict_stream(broker, topic, "pg", 30)
    run_until_caught_up(spark)
    listed = floe("dlq", "list", "pg", "--where", "_kafka_offset < 10", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    found = [orjson.loads(line) for line in listed.stdout.splitlines()]
    assert [r["_kafka_offset"] for r in found] == [0, 3, 6, 9] and all(r["error_stage"] for r in found)
    assert '"code":"A3"' in found[1]["value"].replace(" ", "")
    refused = floe("dlq", "purge", "pg", "--where", "_kafka_offset < 10")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert count("ingest.pg_dlq") == 10
    purged = purge_dead_letters(load_settings(), "pg", "_kafka_offset < 10")
    assert (purged.deleted, purged.waiting, purged.lines()) == (4, 0, ["pg: purged 4 dead letters"])
    assert [r["o"] for r in rows("select _kafka_offset o from ingest.pg_dlq order by o")] == list(range(12, 30, 3))
    report = audit_stream(load_settings(), "pg")
    assert report.ok and sum(r.count for r in report.retention) == 4, (report.gaps, report.retention)
    with StateStore(load_settings().state_db) as state:
        assert any(r.action == "dlq purge" and r.outcome == "ok" for r in state.audit_trail())


def test_an_upsert_replay_never_overwrites_a_newer_row_of_its_key(broker, topic, spark):
    values = [{"id": 1, "code": "x1"}, {"id": 1, "code": 11}, {"id": 2, "code": "x2"}, {"id": 3, "code": 3},
              {"id": 3, "code": "x3"}]
    broker.produce(topic, [orjson.dumps(v) for v in values], keys=[str(v["id"]).encode() for v in values],
                   partition=0)
    mapping = load_settings().home / "up.toml"
    mapping.parent.mkdir(parents=True, exist_ok=True)
    mapping.write_text(STRICT)
    created = floe("stream", "create", "up", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   "ingest.up", "--mapping", str(mapping), "--schema-evolution", "off", "--mode", "upsert",
                   "--key", "id")
    assert created.returncode == 0, created.stderr
    run_until_caught_up(spark)
    assert count("ingest.up_dlq") == 3
    fix_mapping("up")
    report = replay_dead_letters(load_settings(), "up", spark=spark)
    # key 1: its row from offset 1 came after the dead letter (offset 0), which stays; key 2 had none;
    # key 3: the dead letter (offset 4) is newer than its row (offset 3) and replaces it.
    assert (report.moved, report.superseded) == (2, 1), report.lines()
    assert rows("select id, code, _kafka_offset o from ingest.up order by id") == [
        {"id": 1, "code": None, "o": 1}, {"id": 2, "code": "x2", "o": 2}, {"id": 3, "code": "x3", "o": 4}]
    assert [r["o"] for r in rows("select _kafka_offset o from ingest.up_dlq")] == [0]
    # The stream's key index, as the engine left it, follows the replay's move (no build from the table)
    # and then equals one built from the table.
    from appliance.mergeonread.building import build
    from appliance.mergeonread.index import KeyIndex
    from appliance.mergeonread.lineage import bring_to
    from appliance.mergeonread.store import IndexStore, index_directory

    table = Catalog(load_settings()).table("ingest.up")
    kept = KeyIndex(("id",), IndexStore(index_directory(load_settings().home, table), writable=False))
    assert bring_to(kept, table) == "loaded"
    built = KeyIndex(("id",))
    build(built, table)
    assert kept.contents() == built.contents()


async def test_the_stream_detail_replays_its_dead_letters_after_a_preview(broker, topic, spark):
    from tui.app import FloeApp
    from tui.screens.confirm import ConfirmScreen
    from tui.screens.stream_detail import StreamDetailScreen

    from tui_helpers import showing, until

    strict_stream(broker, topic, "ui", 30)
    run_until_caught_up(spark)
    fix_mapping("ui")
    app = FloeApp(load_settings())
    async with app.run_test(size=(160, 50)) as pilot:
        app.push_screen(StreamDetailScreen("ui"))
        await until(pilot, lambda: showing(app, StreamDetailScreen), 10, "the stream's detail")
        await pilot.press("d")
        question = await until(pilot, lambda: showing(app, ConfirmScreen)
                               and str(app.screen.query_one("#confirm-question").render()), 120, "the preview")
        assert "would move 10 to the target, 0 would stay" in question, question
        assert count("ingest.ui_dlq") == 10  # a preview changes nothing
        await pilot.press("y")
        await until(pilot, lambda: count("ingest.ui_dlq") == 0, 120, "the replay")
    assert count("ingest.ui") == 30


NARROW = ('[[columns]]\nname = "id"\ntype = "long"\nsource = "id"\n'
          '[[columns]]\nname = "n"\ntype = "int"\nsource = "n"\n')


def test_a_dry_run_decodes_against_the_schema_the_replay_would_commit_first_and_counts_what_it_moves(
        broker, topic, spark):
    """Schema evolution turned on after the fact: the dead letters need a wider column, and some of those
    selected with them are malformed. The dry run counts what the replay then does, and changes nothing."""
    settings = load_settings()
    broker.produce(topic, [b"{bad" if i % 8 == 0 else orjson.dumps({"id": i, "n": 2**40 + i if i % 8 == 1 else i})
                           for i in range(400)], partition=0)
    create_stream(settings, "wd", bootstrap=broker.bootstrap, topic=topic, table="ingest.wd",
                  mapping=Mapping.from_toml(NARROW), schema_evolution="off")
    Engine(settings, spark=spark).run(until_caught_up=True)
    assert (count("ingest.wd"), count("ingest.wd_dlq")) == (300, 100)
    update_stream(settings, "wd", schema_evolution="auto")
    before = Catalog(settings).table("ingest.wd").metadata
    with StateStore(settings.state_db) as state:
        shown = state.stream("wd").mapping

    dry = preview_replay(settings, "wd", spark=spark)
    assert (dry.selected, dry.moved, dry.stayed) == (100, 50, 50), dry.lines()
    assert len(dry.reasons) == 1 and dry.reasons[0][0].startswith("decode: invalid JSON"), dry.reasons
    after = Catalog(settings).table("ingest.wd").metadata
    assert (after.current_schema_id, after.properties, after.current_snapshot_id) == \
        (before.current_schema_id, before.properties, before.current_snapshot_id)  # nothing committed
    with StateStore(settings.state_db) as state:
        assert state.stream("wd").mapping == shown

    done = replay_dead_letters(settings, "wd", spark=spark)
    assert (done.selected, done.moved, done.stayed, done.reasons) == (dry.selected, dry.moved, dry.stayed, dry.reasons)
    assert (count("ingest.wd"), count("ingest.wd_dlq")) == (350, 50)
    assert rows("select n from ingest.wd where id = 9") == [{"n": 2**40 + 9}]  # the column was widened to long


async def test_the_stream_detail_offers_a_replay_only_when_some_would_move(broker, topic, running_engine):
    """With an engine running, the UI's replay and its preview are the engine's work; a preview that moves
    nothing says so, and offers nothing."""
    from tui.app import FloeApp
    from tui.screens.confirm import ConfirmScreen
    from tui.screens.stream_detail import StreamDetailScreen

    from tui_helpers import showing, until

    settings = load_settings()
    broker.produce(topic, [orjson.dumps({"id": i, "code": f"A{i}" if i % 3 == 0 else i}) for i in range(30)],
                   partition=0)
    create_stream(settings, "nm", bootstrap=broker.bootstrap, topic=topic, table="ingest.nm",
                  mapping=Mapping.from_toml(STRICT), schema_evolution="off")
    running_engine()
    wait_for(lambda: count("ingest.nm") + count("ingest.nm_dlq") == 30, 90, what="the stream's messages")
    app = FloeApp(settings)
    async with app.run_test(size=(160, 50)) as pilot:
        app.push_screen(StreamDetailScreen("nm"))
        await until(pilot, lambda: showing(app, StreamDetailScreen), 10, "the stream's detail")
        await pilot.press("d")
        said = await until(pilot, lambda: [str(n.message) for n in app._notifications if "selected" in str(n.message)],
                           60, "the preview's notice")
        assert "10 dead letters selected; would move 0 to the target, 10 would stay" in said[0], said
        assert isinstance(app.screen, StreamDetailScreen)  # no "Replay them now?"

        for args in (("drop-column", "code"), ("add-column", "code", "string", "code")):
            alter_table(settings, "ingest.nm", *args)
        await pilot.press("d")
        confirm = await until(pilot, lambda: showing(app, ConfirmScreen) and app.screen, 60, "the offer")
        assert "would move 10 to the target, 0 would stay" in str(confirm.query_one("#confirm-question").render())
        await pilot.press("y")
        await until(pilot, lambda: count("ingest.nm_dlq") == 0, 60, "the replay")

        def replays() -> list:
            with StateStore(settings.state_db) as state:
                return [r for r in state.audit_trail() if r.action == "dlq replay"]
        # The audit row is written when the replay returns, just after its commit emptied the dead letters.
        [entry] = await until(pilot, replays, 30, "the replay's audit row")
    assert count("ingest.nm") == 30
    with StateStore(settings.state_db) as state:
        asked = [r for r in state.db["engine_requests"].rows_where("ask = 'replay'", order_by="id")]
    assert [(bool(orjson.loads(r["args"])["dry_run"]), r["taken_by"]) for r in asked] == \
        [(True, os.getpid()), (True, os.getpid()), (False, os.getpid())]
    assert (entry.via, entry.outcome) == ("ui", "ok")
