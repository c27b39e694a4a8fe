"""Dead letters of streams of many tables: a pattern stream's listed, purged and replayed topic by topic (each
topic's exactly as a single stream's, exactly once through a kill between two topics' moves), a routed stream's
one dead-letter table listed and purged."""

from __future__ import annotations

import json
import uuid

import orjson

from appliance.auditor import audit_streams
from appliance.config.settings import load_settings
from appliance.model.mapping import Mapping
from appliance.query.connection import run_query
from appliance.state.store import StateStore

from conftest import floe, floe_process, run_until_caught_up

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


def test_a_pattern_stream_s_dead_letters_are_listed_purged_and_replayed_topic_by_topic_once_through_a_kill(
        broker, spark):
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
    broker.produce(f"{prefix}.c", [orjson.dumps({"id": 1, "code": 1})])  # a topic created later: the given mapping
    run_until_caught_up(spark)
    with StateStore(load_settings().state_db) as state:
        assert state.members("pd")[f"{prefix}.c"].mapping == Mapping.from_toml(STRICT)
    assert count("ingest.pd_c") == 1


def test_a_routed_stream_s_one_dead_letter_table_is_listed_and_purged_and_its_replay_says_what_works(
        broker, topic, spark):
    import re
    import shlex

    broker.produce(topic, [orjson.dumps({"type": "a", "n": 1}), orjson.dumps({"n": 2}), orjson.dumps({"type": "b"})],
                   partition=0)
    assert floe("stream", "create", "ev", "--bootstrap", broker.bootstrap, "--topic", topic, "--route-by", "type",
                "--table", "an.ev_{value}").returncode == 0
    run_until_caught_up(spark)
    rows = listed("ev")
    assert [(r["_kafka_offset"], r["error_stage"]) for r in rows] == [(1, "route")], rows
    assert "topic" not in rows[0]

    refused = floe("dlq", "replay", "ev")
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert "routes its messages by field type" in refused.stderr
    listing, purge = re.findall(r"`(floe [^`]+)`", refused.stderr)
    assert floe(*shlex.split(listing)[1:]).returncode == 0  # each as printed
    purged = floe(*shlex.split(purge)[1:])
    assert purged.returncode == 0 and purged.stdout.splitlines() == ["ev: purged 1 dead letters"], purged
    assert count("an.ev_dlq") == 0 and listed("ev") == []
    audited = floe("audit", "ev", "--format", "json")
    assert audited.returncode == 0, audited.stdout
    with StateStore(load_settings().state_db) as state:
        assert [e.message for e in state.events("ev") if e.kind == "dead_letters_purged"] == [
            "purged 1 dead letters of an.ev_dlq where error_stage = 'route'"]
    json.loads(audited.stdout)
