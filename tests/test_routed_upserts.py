"""Routed upsert streams (`--route-by F --mode upsert --key K`): each route's table holds each key's newest row of
its own kind, exactly once; a key's rows in two route tables are two keys."""

from __future__ import annotations

import datetime as dt
import random

import numpy as np
import orjson
import pytest

from appliance.config.settings import ensure_home, load_settings
from appliance.control.routes import NEEDS_KEY, NO_CDC
from appliance.core.errors import MappingError
from appliance.decode.json_format import JsonFormat
from appliance.decode.keys import Keyed
from appliance.ingest.batch import BatchSpec, TaskResult
from appliance.ingest.route_tables import route_mapping
from appliance.ingest.routed import routed_changes
from appliance.ingest.routing import Router, RouteTarget
from appliance.kafka.records import RawBatch
from appliance.kafka.settings import KafkaSettings
from appliance.mergeonread.plans import Keys
from appliance.model.inference import infer_mapping
from appliance.model.mapping import Mapping
from appliance.model.routes import RouteRule
from appliance.state.store import StateStore

from conftest import floe, java_reads_as_pyiceberg, run_until_caught_up

KINDS = ("click", "view", "buy")
TABLES = {kind: f"an.ev_{kind}" for kind in KINDS}


def test_stream_create_takes_upsert_with_a_key_and_refuses_cdc_or_a_missing_key_in_one_line():
    for args, says in [
        (["--mode", "upsert"], NEEDS_KEY),
        (["--key", "id"], "--key is for upsert streams: add --mode upsert"),
        (["--cdc", "debezium"], NO_CDC),
        (["--mode", "upsert", "--key", "id", "--cdc", "debezium"], NO_CDC),
    ]:
        done = floe("stream", "create", "ev", "--bootstrap", "127.0.0.1:9", "--topic", "t", "--route-by", "type",
                    "--table", "a.t_{value}", *args)
        assert done.returncode != 0 and says in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_routes_mapping_must_hold_the_key_or_the_route_is_refused():
    from appliance.model.stream import StreamDef

    stream = StreamDef(name="ev", id="x", topic="t", kafka=KafkaSettings.create("127.0.0.1:9"), format="json",
                       table="an.ev_{value}", dead_letter_table="an.ev_dlq", mapping=Mapping.of_table(()),
                       starting_offsets="earliest", start_positions={}, paused=False, created_at="now",
                       route_by="type", mode="upsert", key=("id",))
    assert "id" in [c.name for c in route_mapping(stream, [orjson.dumps({"type": "a", "id": 1, "x": 2})]).columns]
    with pytest.raises(MappingError, match="key column 'id' is not a column of the mapping"):
        route_mapping(stream, [orjson.dumps({"type": "a", "x": 2})])
    with pytest.raises(MappingError, match="key column 'id' is double"):
        route_mapping(stream, [orjson.dumps({"type": "a", "id": 1.5})])


def _raw(values: list[bytes | None], partitions: list[int], keys: list[bytes | None], kinds: list[str]) -> RawBatch:
    n = len(values)
    offsets: dict[int, int] = {}
    at = []
    for p in partitions:
        at.append(offsets.get(p, 0))
        offsets[p] = at[-1] + 1
    return RawBatch(partitions=partitions, offsets=at, timestamps=list(range(1000, 1000 + n)), keys=keys,
                    values=values, headers=[[("kind", k.encode())] for k in kinds])


def test_a_task_reduces_each_routes_messages_to_each_keys_newest_and_hands_back_its_keys():
    """Routed by a header (so that a tombstone, which has no value, has a route too): each route's group reduced
    to each key's newest message by `precedence`, the same key in two kinds two rows, a tombstone's key deleted in
    its own route only, a message without the key a dead letter with the reason; and what a table committed in an
    interrupted attempt is not written to it again."""
    from appliance.tables.catalog import Catalog
    from appliance.tables.datafiles import TableTarget
    from appliance.tables.iceberg_schemas import dead_letter_iceberg_schema, target_iceberg_schema

    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    mapping = infer_mapping([{"id": 1, "v": "x"}])
    targets = {t: TableTarget.of(catalog.ensure_table(t, target_iceberg_schema(mapping))[0])
               for t in ("r.t_a", "r.t_b")}
    dead = TableTarget.of(catalog.ensure_table("r.dlq", dead_letter_iceberg_schema())[0])
    rule = RouteRule.parse("@header.kind", "r.t_{value}")
    #            a:1 v0   b:1 v1   a:1 v2   a:2 v3   b:2 gone  a:- v5   b:1 v6   a:3 v7 (p1)
    msgs = [("a", 1, "v0", 0), ("b", 1, "v1", 0), ("a", 1, "v2", 0), ("a", 2, "v3", 0), ("b", 2, None, 0),
            ("a", None, "v5", 0), ("b", 1, "v6", 0), ("a", 3, "v7", 1)]
    values = [None if v is None else orjson.dumps({"v": v} if k is None else {"id": k, "v": v}) for _, k, v, _ in msgs]
    raw = _raw(values, [p for *_, p in msgs], [orjson.dumps({"id": k}) for _, k, _, _ in msgs], [m[0] for m in msgs])
    keyed = Keyed(("id",))
    router = Router(rule, {"r.t_a": RouteTarget(mapping, targets["r.t_a"], {1: 1}),  # took partition 1's offset 0
                           "r.t_b": RouteTarget(mapping, targets["r.t_b"], None)}, {}, keyed)
    spec = BatchSpec(stream="s", stream_id="id", topic="t", kafka=KafkaSettings.create("127.0.0.1:9"), group="g",
                     mapping=Mapping.of_table(()), target=dead, dead_letter=dead, landed={}, max_message_bytes=1 << 20,
                     fetch_timeout=1.0, fmt=JsonFormat(), router=router)
    done = router.write(spec, [], raw, [], dt.datetime.now(dt.UTC), 0.0)
    assert not done.new_routes and not done.evolutions
    a, b = done.routed_keys["r.t_a"], done.routed_keys["r.t_b"]
    assert sorted(a.offsets.tolist()) == [2, 3]  # key 1's newest (v2) and key 2's; key 3's was taken before
    assert b.offsets.tolist() == [6]  # key 1 of kind b: its own row, v6
    assert done.routed_deleted["r.t_b"].offsets.tolist() == [4] and "r.t_a" not in done.routed_deleted
    assert [f.record_count for f in done.routed_files["r.t_a"]] == [2] and done.rows == 3
    assert len(a) == sum(f.record_count for f in done.routed_files["r.t_a"])  # a key per row, in the files' order
    assert done.dead_letter_rows == 1  # the message of kind a without its key
    assert "key column 'id' is null" in str(_dead_letters(done)[0])


def test_a_tombstone_naming_a_table_not_made_yet_makes_no_table_and_is_no_dead_letter():
    """It deletes nothing (its kind has no rows yet), so it makes no table: a table made from tombstones alone would
    have no columns. An upsert of that kind in the same batch makes the table, from its own value."""
    rule = RouteRule.parse("@header.kind", "r.t_{value}")
    raw = _raw([None, orjson.dumps({"id": 2, "v": "x"}), None], [0, 0, 0], [orjson.dumps({"id": k}) for k in (1, 2, 3)],
               ["c", "d", "d"])
    groups, new, bad, _ = Router(rule, {}, {}, Keyed(("id",))).split(raw, JsonFormat(), 1 << 20)
    assert not groups and not bad and new == {"r.t_d": ("d", [raw.values[1]])}
    _, new, _, _ = Router(rule, {}, {}).split(raw, JsonFormat(), 1 << 20)  # an append stream's: every message
    assert sorted(new) == ["r.t_c", "r.t_d"]


def _dead_letters(done: TaskResult) -> list:
    import pyarrow.parquet as pq

    rows = []
    for f in done.dead_letter_files:
        rows += pq.read_table(f.file_path.removeprefix("file://")).column("error_message").to_pylist()
    return rows


def test_a_batch_hands_each_route_table_its_files_with_their_keys_in_the_tasks_order():
    def keys(*offsets: int) -> Keys:
        n = len(offsets)
        return Keys(np.array([[o] for o in offsets], np.uint64), np.zeros(n, np.int32), np.array(offsets, np.int64),
                    np.zeros(n, np.int64))

    one = TaskResult([], routed_files={"t_a": ["f1"], "t_b": ["f2"]}, routed_keys={"t_a": keys(1, 2), "t_b": keys(3)})
    two = TaskResult([], routed_files={"t_a": ["f3"]}, routed_keys={"t_a": keys(7)},
                     routed_deleted={"t_c": keys(9)})
    changes = routed_changes([one, two], keyed=True)
    assert sorted(changes) == ["t_a", "t_b", "t_c"]  # t_c: only a delete, still a commit
    assert changes["t_a"].files == ["f1", "f3"] and changes["t_a"].rows.offsets.tolist() == [1, 2, 7]
    assert changes["t_c"].files == [] and changes["t_c"].deleted.offsets.tolist() == [9]
    assert routed_changes([one, two], keyed=False) == {"t_a": ["f1", "f3"], "t_b": ["f2"]}


PARTITIONS = 4


class KindChanges:
    """Keyed messages of three kinds, routed by the Kafka key's `type` (so that a tombstone, which has no value, has
    a route); the newest state of each kind's keys that they give. Kinds share their key values: a key's rows in
    two route tables are two keys."""

    def __init__(self, broker, topic: str, rng: random.Random, keys: int = 60) -> None:
        self.producer, self.topic, self.rng, self.keys = broker.producer(), topic, rng, keys
        self.state: dict[str, dict[int, dict]] = {kind: {} for kind in KINDS}
        self.sent = 0

    def run(self, n: int, stop=None) -> None:
        for i in range(n):
            if stop is not None and stop.is_set():
                break
            kind, key, roll = self.rng.choice(KINDS), self.rng.randrange(self.keys), self.rng.random()
            value: bytes | None
            if roll < 0.1:
                self.state[kind].pop(key, None)
                value = None  # a tombstone: deletes the key in its kind's table only
            elif roll < 0.13:
                value = orjson.dumps({"name": "no key"})  # a dead letter: its route's key is missing
            else:
                row = {"id": key, "name": f"{kind}{self.sent}", "n": self.sent}
                self.state[kind][key] = row
                value = orjson.dumps(row)
            self.producer.produce(self.topic, key=orjson.dumps({"type": kind, "id": key}), value=value,
                                  partition=key % PARTITIONS)
            self.sent += 1
            self.producer.poll(0)
            if stop is not None and i % 40 == 0:
                stop.wait(0.005)  # a steady trickle
        assert self.producer.flush(30) == 0


def _create(broker, topic: str) -> None:
    created = floe("stream", "create", "ev", "--bootstrap", broker.bootstrap, "--topic", topic, "--route-by",
                   "@key.type", "--table", "an.ev_{value}", "--mode", "upsert", "--key", "id")
    assert created.returncode == 0, created.stderr


def _assert_each_table_holds_its_kinds_newest(changes: KindChanges) -> None:
    """Each route table, read by DuckDB (`floe query`'s `run_query`) and by PyIceberg, equal to its kind's newest
    message per key; `floe audit` proves it against the topic."""
    import json

    from appliance.query.connection import run_query
    from appliance.tables.catalog import Catalog

    settings = load_settings()
    for kind, table in TABLES.items():
        want = {k: (k, v["name"], v["n"]) for k, v in changes.state[kind].items()}
        duck = run_query(settings, f"select id, name, n from {table}").to_pylist()
        ice = Catalog(settings).table(table).scan(selected_fields=("id", "name", "n")).to_arrow().to_pylist()
        for rows in (duck, ice):
            assert len(rows) == len({r["id"] for r in rows}), f"{table}: a key twice"
            assert {r["id"]: (r["id"], r["name"], r["n"]) for r in rows} == want, table
    audited = floe("audit", "ev", "--format", "json")
    assert audited.returncode == 0, audited.stdout + audited.stderr
    report = json.loads(audited.stdout)
    assert report["ok"], report
    # every table's keys, a key of two kinds counted in each: (table, key) pairs
    assert report["keys"]["keys"] == report["keys"]["table_keys"] == sum(map(len, changes.state.values()))
    assert report["keys"]["messages"] == changes.sent and not report["keys"]["undelivered"]


@pytest.mark.slow
def test_a_failed_swap_drops_the_touched_indexes_and_the_batch_read_again_lands_once(broker, topic, floe_home,
                                                                                    spark, monkeypatch, tmp_path):
    """The routed batch's upserts swap in as one catalog transaction; when the swap fails (here a fail point that
    raises just before it), no table moved, and each route table's key index, which had taken the commit already,
    is dropped (the next commit loads or builds it from its table) rather than left ahead of its table."""
    from appliance.core import failpoints
    from appliance.ingest import indexes
    from appliance.tables.catalog import Catalog
    from appliance.tables.snapshots import committed_offsets

    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text('[engine]\nmax_batch_messages = 300\n')
    changes = KindChanges(broker, topic, random.Random(5))
    changes.run(500)
    _create(broker, topic)
    run_until_caught_up(spark)  # the tables made, their indexes built and current
    with StateStore(load_settings().state_db) as state:
        stream = state.stream("ev")
    kept = {table: index for (sid, table), index in indexes._KEPT.items() if sid == stream.id}
    assert sorted(kept) == sorted(TABLES.values()) and all(index.ready for index in kept.values())
    before = {t: committed_offsets(Catalog(load_settings()).table(t), stream.id) for t in TABLES.values()}

    armed = tmp_path / "armed"
    armed.touch()
    monkeypatch.setattr(failpoints, "_ARMED", {"catalog_before_swap": f"raise@{armed}"})
    changes.run(300)
    with pytest.raises(Exception, match="failpoint catalog_before_swap"):
        run_until_caught_up(spark)
    catalog = Catalog(load_settings())
    assert {t: committed_offsets(catalog.table(t), stream.id) for t in TABLES.values()} == before  # none moved
    assert not any(index.ready for index in kept.values())  # dropped, not ahead of their tables

    armed.unlink()
    changes.run(200)
    run_until_caught_up(spark)
    _assert_each_table_holds_its_kinds_newest(changes)

    # Damage behind Floe's back: a click's row copied into the view table (its message was routed to clicks: the
    # view table's audit, over the messages routed to it alone, cannot explain it), and a buy key lost.
    from pyiceberg.expressions import EqualTo

    catalog = Catalog(load_settings())
    stray = next(k for k in changes.state["click"] if k not in changes.state["view"])
    catalog.table(TABLES["view"]).append(catalog.table(TABLES["click"]).scan(row_filter=EqualTo("id", stray))
                                         .to_arrow())
    lost = next(iter(changes.state["buy"]))
    catalog.table(TABLES["buy"]).delete(EqualTo("id", lost))
    audited = floe("audit", "ev")
    assert audited.returncode == 1, audited.stdout
    assert f"1 keys in the table that no retained message gives, e.g. ('an.ev_view', {stray})" in audited.stdout
    assert f"1 keys missing from the table, e.g. ('an.ev_buy', {lost})" in audited.stdout


@pytest.mark.slow
def test_routed_upserts_land_each_kinds_newest_once_through_kill_9(broker, topic, floe_home, spark, java):
    from appliance.tables.catalog import Catalog
    from appliance.tables.snapshots import committed_offsets

    from commands import floe_process
    from conftest import AfterACommit, run_until_killed

    seed = int(__import__("os").environ.get("FLOE_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed {seed}")
    rng = random.Random(seed)
    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text('[engine]\nmax_batch_messages = 400\ncommit_interval = "100ms"\n'
                                         'retry_backoff = "1s"\n')
    changes = KindChanges(broker, topic, rng)
    changes.run(1200)
    _create(broker, topic)
    # Killed between two route tables' upsert commits of the first batch, made in one catalog transaction: none of
    # them moved, and their indexes are brought to their tables by the next process.
    killed = floe_process("run", "--until-caught-up", env={"FLOE_FAILPOINTS": "between_route_commits"})
    assert killed.returncode == -9, killed.stderr
    with StateStore(load_settings().state_db) as state:
        stream, routes = state.stream("ev"), state.routes("ev")
    assert sorted(routes) == sorted(TABLES.values()) and not any(r.refused for r in routes.values())
    catalog = Catalog(load_settings())
    assert not [t for t in [*routes, "an.ev_dlq"] if committed_offsets(catalog.table(t), stream.id)]
    # Then kills at random moments of the engine's work, within 2 s of a commit, while messages keep coming.
    for _ in range(2):
        run_until_killed(120, lambda stop: changes.run(1200, stop), when=AfterACommit("ev", rng.uniform(0, 2)))
        changes.run(rng.randint(50, 300))  # arrives while the engine is down
    run_until_caught_up(spark)
    _assert_each_table_holds_its_kinds_newest(changes)
    for kind, table in TABLES.items():  # the reference Java Iceberg applies each table's position deletes alike
        assert java_reads_as_pyiceberg(java, catalog.table(table)) == len(changes.state[kind]), table


def test_dead_letters_replay_into_their_upsert_route_tables_where_a_newer_row_of_their_key_does_not_win(
        broker, topic, spark):
    """Each dead letter routed again and decoded against its route's table, then placed by `precedence` against its
    key's row in that table alone: a replayed message newer than its key's row replaces it; one older than the row
    that came after it stays a dead letter (superseded); one without the route field stays with its reason. The
    route tables and the dead-letter table move in one catalog transaction, and the audit holds after."""
    import json

    from appliance.auditor import audit_streams
    from appliance.query.connection import run_query

    def send(*messages: dict) -> None:
        broker.produce(topic, [orjson.dumps(m) for m in messages], partition=0)

    send({"type": "a", "id": 1, "n": 1}, {"type": "b", "id": 1, "n": 2}, {"type": "a", "id": 2, "n": 3})
    assert floe("stream", "create", "ev", "--bootstrap", broker.bootstrap, "--topic", topic, "--route-by", "type",
                "--table", "an.ev_{value}", "--mode", "upsert", "--key", "id",
                "--schema-evolution", "off").returncode == 0
    run_until_caught_up(spark)  # the routes' tables made, n a number
    # offsets 3..7: a:1 and a:2 newer than their rows, b:1 older than the row after it, one without a type
    send({"type": "a", "id": 1, "n": "x"}, {"type": "b", "id": 1, "n": "y"}, {"type": "b", "id": 1, "n": 5},
         {"type": "a", "id": 2, "n": "z"}, {"id": 3, "n": "w"})
    run_until_caught_up(spark)
    dead = [json.loads(line) for line in floe("dlq", "list", "ev", "--format", "json").stdout.splitlines()]
    assert [(d["_kafka_offset"], d["error_stage"]) for d in dead] == [(3, "schema"), (4, "schema"), (6, "schema"),
                                                                     (7, "route")]
    for table in ("an.ev_a", "an.ev_b"):  # the fix: each route's column made text
        for args in (("drop-column", "n"), ("add-column", "n", "string", "--source", "n")):
            assert floe("table", "alter", table, *args).returncode == 0
    done = floe("dlq", "replay", "ev")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ev: 4 dead letters selected; moved 2 to their tables, 1 stay in the dead-letter "
                                  "table, 1 left as they were (a newer row of their key is in the table)"), done.stdout
    settings = load_settings()
    assert run_query(settings, "select id, n, _kafka_offset o from an.ev_a order by id").to_pylist() == [
        {"id": 1, "n": "x", "o": 3}, {"id": 2, "n": "z", "o": 6}]
    assert run_query(settings, "select id, _kafka_offset o from an.ev_b").to_pylist() == [{"id": 1, "o": 5}]
    dead = [json.loads(line) for line in floe("dlq", "list", "ev", "--format", "json").stdout.splitlines()]
    assert [d["_kafka_offset"] for d in dead] == [4, 7]
    [report] = audit_streams(settings, "ev")[1]
    assert report.ok and report.keys.keys == report.keys.table_keys == 3, (report.problems, report.keys)


@pytest.mark.slow
def test_without_a_catalog_transaction_an_upsert_batch_cut_between_two_tables_lands_once(broker, topic, floe_home,
                                                                                        spark, monkeypatch, tmp_path):
    """Where the catalog has no transaction over tables (a REST catalog), route tables commit one after the other; a
    batch cut between two leaves the first ahead, and the batch read again (in smaller batches, so that the first
    ends below what that table took) writes each table only what it has not taken: no key's older row over its
    newer one. (In this process: a fail point that raises, as a kill would leave the tables.)"""
    from appliance.core import failpoints
    from appliance.ingest import routed
    from appliance.tables.catalog import Catalog
    from appliance.tables.snapshots import committed_offsets

    monkeypatch.setattr(routed, "TOGETHER", False)
    armed = tmp_path / "armed"
    armed.touch()
    monkeypatch.setattr(failpoints, "_ARMED", {"between_route_commits": f"raise@{armed}"})
    changes = KindChanges(broker, topic, random.Random(11), keys=40)
    changes.run(600)
    _create(broker, topic)
    with pytest.raises(Exception, match="failpoint between_route_commits"):
        run_until_caught_up(spark)
    catalog = Catalog(load_settings())
    with StateStore(load_settings().state_db) as state:
        stream = state.stream("ev")
    assert [t for t in sorted(TABLES.values()) if committed_offsets(catalog.table(t), stream.id)] == ["an.ev_buy"]
    assert committed_offsets(catalog.table("an.ev_dlq"), stream.id) is None  # the anchor: the batch is read again

    armed.unlink()
    changes.run(300)
    (load_settings().home / "floe.toml").write_text('[engine]\nmax_batch_messages = 100\n')
    run_until_caught_up(spark)
    _assert_each_table_holds_its_kinds_newest(changes)
