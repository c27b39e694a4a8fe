"""The catalogs teams run: a SQL catalog on a real PostgreSQL with the warehouse on a real S3 server, and
a real Iceberg REST catalog (SeaweedFS), each through kills, maintenance, a stage and the audit, read
back by PyIceberg on its own; the REST catalog rejects a stale commit and Floe retries it on fresh
metadata. Credentials are given by reference and never reach FLOE_HOME."""

from __future__ import annotations

import itertools
import json
import random
import threading
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from conftest import AfterACommit, floe, floe_process, run_until_caught_up, run_until_killed, wait_for

PG_PASSWORD = "pg-pass-8d1c0e47-never-store-me"


class Ids:
    """JSON events with ids 0, 1, 2...: what was sent, to compare with what landed."""

    def __init__(self, broker, topic: str) -> None:
        self.producer, self.topic, self.sent = broker.producer(), topic, 0

    def send(self, n: int, stop: threading.Event | None = None) -> None:
        for _ in range(n):
            if stop is not None and stop.is_set():
                break
            self.producer.produce(self.topic, value=orjson.dumps({"id": self.sent, "v": f"row {self.sent}"}),
                                  partition=self.sent % 4)
            self.sent += 1
            if stop is not None and self.sent % 50 == 0:
                self.producer.poll(0)
                stop.wait(0.01)  # a trickle, not one burst
        assert self.producer.flush(30) == 0


def query(sql: str) -> list[dict]:
    result = floe("query", sql, "--format", "json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def every_byte_under(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file())


def through_kills_maintenance_and_a_stage(broker, topic: str, own_catalog, spark, running_engine) -> None:
    """A stream through kills, `floe maintain`, a stage and the audit; the tables read back alike by
    DuckDB (through Floe) and by PyIceberg through `own_catalog`, a catalog of its own."""
    ids = Ids(broker, topic)
    ids.send(500)
    created = floe("stream", "create", "c", "--bootstrap", broker.bootstrap, "--topic", topic,
                   "--table", "ingest.c")
    assert created.returncode == 0, created.stderr
    rng = random.Random(7)
    for _ in range(2):
        run_until_killed(120, lambda stop: ids.send(800, stop), when=AfterACommit("c", rng.uniform(0, 3)))
        ids.send(100)  # arrives while the engine is down
    run_until_caught_up(spark)
    landed = query("select count(*) n, count(distinct id) d, min(id) lo, max(id) hi from ingest.c")[0]
    assert landed == {"n": ids.sent, "d": ids.sent, "lo": 0, "hi": ids.sent - 1}
    assert own_catalog.load_table("ingest.c").scan().to_arrow().num_rows == ids.sent

    compacted = floe("maintain", "ingest.c", "--compact")
    assert compacted.returncode == 0, compacted.stderr
    staged = floe("stage", "create", "tens", "--from", "ingest.c", "--sql",
                  "select id % 10 as tens, count(*) as n from source group by id % 10", "--table", "prep.tens")
    assert staged.returncode == 0, staged.stderr
    run_until_caught_up(spark)
    rows = own_catalog.load_table("prep.tens").scan().to_arrow().to_pylist()
    assert sum(r["n"] for r in rows) == ids.sent and len(rows) == 10
    assert own_catalog.load_table("ingest.c").scan().to_arrow().num_rows == ids.sent
    audit = floe("audit", "c")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    # What the UI's Tables section shows, and the system tables, come through the same catalog.
    shown = floe("table", "show", "ingest.c", "--format", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["specs"][0]["partitioning"] == "day(_kafka_timestamp)"
    # A running engine exports its state to the system tables in the same catalog.
    running_engine()

    def exported() -> bool:
        if ("floe",) not in own_catalog.list_namespaces():
            return False
        tables = {".".join(t) for t in own_catalog.list_tables("floe")}
        return {"floe.batches", "floe.events"} <= tables and \
            own_catalog.load_table("floe.batches").scan().to_arrow().num_rows > 0
    wait_for(exported, 180, 0.5, what="the system tables in the catalog")


@pytest.mark.slow
def test_postgres_catalog_and_s3_warehouse_through_kills_maintenance_and_a_stage(broker, topic, floe_home,
                                                                                  postgres, seaweed, monkeypatch,
                                                                                  tmp_path, spark, running_engine):
    postgres.user("floe", PG_PASSWORD)
    url = postgres.database(f"lake_{topic}", owner="floe")
    bucket = seaweed.new_bucket(f"b-{topic.replace('_', '-')}")
    monkeypatch.setenv("FLOE_TEST_PG_PASSWORD", PG_PASSWORD)
    secret_file = tmp_path / "s3-secret"
    secret_file.write_text(seaweed.secret_key + "\n")
    floe_home.mkdir(parents=True, exist_ok=True)
    uri = url.replace("postgresql+psycopg2://postgres@", "postgresql+psycopg2://floe:${env:FLOE_TEST_PG_PASSWORD}@")
    (floe_home / "floe.toml").write_text(
        f'[engine]\nmax_batch_messages = 300\ncommit_interval = "200ms"\nretry_backoff = "1s"\n\n'
        '[observe]\nsystem_tables_interval = "1s"\n\n'
        f'[warehouse]\nlocation = "s3://{bucket}/warehouse"\n\n'
        f'[warehouse.s3]\nendpoint = "{seaweed.s3_endpoint}"\nregion = "{seaweed.region}"\n'
        f'access_key_id = "{seaweed.access_key}"\nsecret_access_key = "${{file:{secret_file}}}"\n\n'
        f'[catalog]\ntype = "sql"\nuri = "{uri}"\n')
    own = load_catalog("floe", type="sql", uri=url.replace("postgres@", f"floe:{PG_PASSWORD}@"),
                       warehouse=f"s3://{bucket}/warehouse", **seaweed.s3_properties())
    through_kills_maintenance_and_a_stage(broker, topic, own, spark, running_engine)
    assert not list(floe_home.glob("catalog.db")), "the PostgreSQL catalog, not a SQLite file, holds the tables"
    everything = every_byte_under(floe_home)
    assert PG_PASSWORD.encode() not in everything and seaweed.secret_key.encode() not in everything


@pytest.mark.slow
def test_rest_catalog_through_kills_maintenance_and_a_stage(broker, topic, floe_home, seaweed, monkeypatch, spark,
                                                           running_engine):
    monkeypatch.setenv("FLOE_TEST_REST_CREDENTIAL", f"{seaweed.access_key}:{seaweed.secret_key}")
    monkeypatch.setenv("FLOE_TEST_S3_SECRET", seaweed.secret_key)
    floe_home.mkdir(parents=True, exist_ok=True)
    props = seaweed.rest_properties()
    props.update({"credential": "${env:FLOE_TEST_REST_CREDENTIAL}", "s3.secret-access-key": "${env:FLOE_TEST_S3_SECRET}"})
    # Each test's tables in a namespace of its own: the REST catalog lives as long as the session.
    (floe_home / "floe.toml").write_text(
        '[engine]\nmax_batch_messages = 300\ncommit_interval = "200ms"\nretry_backoff = "1s"\n\n'
        '[observe]\nsystem_tables_interval = "1s"\n\n'
        '[catalog]\ntype = "rest"\n'
        + "".join(f'"{k}" = "{v}"\n' for k, v in props.items()))
    own = load_catalog("own", **seaweed.rest_properties())
    for namespace in own.list_namespaces():  # the session's REST catalog holds earlier tests' tables
        for table in own.list_tables(namespace):
            own.purge_table(table)
    through_kills_maintenance_and_a_stage(broker, topic, own, spark, running_engine)
    assert seaweed.secret_key.encode() not in every_byte_under(floe_home)


def test_the_rest_catalog_rejects_a_stale_commit_and_floe_retries_it_on_fresh_metadata(floe_home, seaweed):
    from appliance.config.settings import load_settings
    from appliance.tables.catalog import Catalog
    from appliance.tables.commits import commit_files
    from appliance.tables.fastpath.appends import append_files
    from appliance.tables.snapshots import committed_offsets

    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text('[catalog]\ntype = "rest"\n' + "".join(
        f'"{k}" = "{v}"\n' for k, v in seaweed.rest_properties().items()))
    settings = load_settings()
    name = f"stale.t{next(_counter)}_{random.randrange(1 << 30)}"
    first = Catalog(settings)
    table, _ = first.ensure_table(name, Schema(NestedField(1, "id", LongType(), required=False)))
    second = Catalog(settings).table(name)  # the same version, through another client

    def files(t, ids):
        return list(_dataframe_to_data_files(t.metadata, pa.table({"id": pa.array(ids, pa.int64())}), t.io))

    table, _ = commit_files(table, files(table, [1, 2]), "s1", "topic", None, {0: 2})
    with pytest.raises(CommitFailedException):  # the catalog checks assert-ref-snapshot-id itself
        append_files(second, files(second, [9]), {})
    stale = second
    after, snapshot = commit_files(stale, files(stale, [3, 4, 5]), "s2", "topic", None, {0: 3})
    fresh = load_catalog("own", **seaweed.rest_properties()).load_table(name)
    assert fresh.metadata_location == after.metadata_location
    assert sorted(fresh.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3, 4, 5]
    assert committed_offsets(fresh, "s1") == {0: 2} and committed_offsets(fresh, "s2") == {0: 3}
    assert fresh.current_snapshot().snapshot_id == snapshot and len(fresh.snapshots()) == 2


_counter = itertools.count()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_commits_made_together_swap_in_one_transaction_or_not_at_all(floe_home, backend, request):
    """What a dead-letter replay stands on: two tables' commits land together, and one that lost its race
    takes the other down with it (the other table is left where it was)."""
    from appliance.config.settings import load_settings
    from appliance.tables.catalog import Catalog
    from appliance.tables.fastpath.appends import append_files

    floe_home.mkdir(parents=True, exist_ok=True)
    if backend == "postgres":
        postgres = request.getfixturevalue("postgres")
        url = postgres.database(f"together_{next(_counter)}_{random.randrange(1 << 20)}")
        (floe_home / "floe.toml").write_text(f'[catalog]\ntype = "sql"\nuri = "{url}"\n')
    settings = load_settings()
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    catalog = Catalog(settings)
    a, _ = catalog.ensure_table("two.a", schema)
    b, _ = catalog.ensure_table("two.b", schema)

    def files(t, ids):
        return list(_dataframe_to_data_files(t.metadata, pa.table({"id": pa.array(ids, pa.int64())}), t.io))

    def ids(name):
        return sorted(Catalog(settings).table(name).scan().to_arrow().column("id").to_pylist())

    with a.catalog.together():
        a2 = append_files(a, files(a, [1]), {})
        b2 = append_files(b, files(b, [2]), {})
        assert (ids("two.a"), ids("two.b")) == ([], [])  # nothing visible before the block ends
    assert (ids("two.a"), ids("two.b")) == ([1], [2])
    with pytest.raises(CommitFailedException):
        with a.catalog.together():
            append_files(a2, files(a2, [4]), {})
            append_files(b2, files(b2, [5]), {})
            other = Catalog(settings)  # another writer moves b before the block ends
            append_files(other.table("two.b"), files(b2, [3]), {})
    assert (ids("two.a"), ids("two.b")) == ([1], [2, 3])  # a's commit rolled back with b's
    with pytest.raises(CommitFailedException):
        with a.catalog.together():
            append_files(a2, files(a2, [6]), {})
            append_files(b2, files(b2, [7]), {})  # stale already: refused as it is made
    assert (ids("two.a"), ids("two.b")) == ([1], [2, 3])


# A password as people pick them: every character a URI treats as a delimiter, and a percent sign
# followed by hex digits (decoded once too often, it would be another password).
AWKWARD = "Pa@ss/w#rd:tw%40-"
WRONG = "wr@ng/pa#ss:%2F-"


def _pieces(secret: str) -> set[str]:
    """What a parser may show of a secret it cut at its punctuation: every part of two characters or more."""
    import re

    return {p for p in re.split(r"%[0-9A-F]{2}|[^A-Za-z0-9-]", secret) + re.split(r"[^A-Za-z0-9-]", secret)
            if len(p) >= 2}


def _leaks(text: str, secret: str) -> list[str]:
    """The secret, its percent-encoded form, or any piece of it standing alone in `text`."""
    import re
    from urllib.parse import quote

    found = [form for form in (secret, quote(secret, safe="")) if form in text]
    return found + [p for p in _pieces(secret) if re.search(rf"(?<![A-Za-z0-9]){re.escape(p)}(?![A-Za-z0-9])", text)]


def test_a_catalog_password_holding_uri_delimiters_works_by_reference_and_never_shows(
        postgres, broker, topic, floe_home, monkeypatch, spark):
    """The user writes the password as it is in `${env:...}` inside the URI: Floe percent-encodes it,
    the engine and `floe doctor` work, and a wrong one fails in a line that shows no part of it."""
    from appliance.config.settings import load_settings
    from appliance.control.doctor import diagnose, format_check
    from appliance.control.streams import create_stream
    from appliance.core.errors import CatalogAccessDenied
    from appliance.ingest.engine import Engine
    from appliance.query.connection import run_query
    from appliance.tables.catalog import Catalog

    user = f"floe_awkward_{topic[2:]}"
    password = AWKWARD + topic[2:8]
    postgres.user(user, password)
    database = f"lake_{topic}"
    postgres.database(database, owner=user)
    monkeypatch.setenv("FLOE_TEST_AWKWARD", password)
    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text(
        '[catalog]\ntype = "sql"\n'
        f'uri = "postgresql+psycopg2://{user}:${{env:FLOE_TEST_AWKWARD}}@{postgres.host}:{postgres.port}/{database}"\n')
    broker.produce(topic, [orjson.dumps({"id": i}) for i in range(50)])

    create_stream(load_settings(), "awkward", bootstrap=broker.bootstrap, topic=topic, table="ingest.awkward")
    Engine(load_settings(), spark=spark).run(until_caught_up=True)
    assert run_query(load_settings(), "select count(*) as n from ingest.awkward").to_pylist() == [{"n": 50}]
    own = load_catalog("floe", type="sql", uri=postgres.url(database, user, password))  # quoted by the test
    assert own.load_table("ingest.awkward").scan().to_arrow().num_rows == 50

    checks = {c.name: c for c in diagnose(timeout=5)}
    shown = "\n".join(format_check(c) for c in checks.values())
    assert all(c.ok for c in checks.values()), shown
    assert checks["catalog"].detail.startswith(f"sql catalog at postgresql+psycopg2://{user}:***@{postgres.host}:"
                                               f"{postgres.port}/{database} ("), shown
    assert not _leaks(shown, password), shown

    wrong = WRONG + topic[2:8]
    monkeypatch.setenv("FLOE_TEST_AWKWARD", wrong)
    with pytest.raises(CatalogAccessDenied) as refused:  # a person must fix it: waiting will not help
        Catalog(load_settings()).iceberg
    said = str(refused.value)
    assert "password authentication failed" in said and not _leaks(said, wrong) and not _leaks(said, password), said
    # The engine stops at once on it, in one line saying what to fix, where it waits out a catalog that is down.
    ran = floe_process("run", env={"FLOE_TEST_AWKWARD": wrong}, timeout=120)
    last = ran.stderr.strip().splitlines()[-1]
    assert ran.returncode == 1 and "refused Floe: " in last and "password authentication failed" in last, ran.stderr
    assert not _leaks(ran.stderr, wrong), ran.stderr
    checks = {c.name: c for c in diagnose(timeout=5)}
    shown = "\n".join(format_check(c) for c in checks.values())
    assert not checks["catalog"].ok and f"{user}:***@{postgres.host}" in checks["catalog"].detail, shown
    assert not _leaks(shown, wrong), shown


def test_a_password_written_unencoded_into_the_uri_is_masked_in_whatever_piece_the_driver_shows(
        postgres, floe_home):
    """Written in clear, the password is the user's to encode; unencoded, the driver cuts it at its `@`
    and names a piece of it as a host: that piece is masked too."""
    from appliance.config.settings import load_settings
    from appliance.core.errors import CatalogUnavailable
    from appliance.tables.catalog import Catalog

    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text(
        f'[catalog]\ntype = "sql"\nuri = "postgresql+psycopg2://floe:{AWKWARD}@{postgres.host}:{postgres.port}/x"\n')
    with pytest.raises(CatalogUnavailable) as refused:
        Catalog(load_settings()).iceberg
    said = str(refused.value)
    assert "could not translate host name" in said and not _leaks(said, AWKWARD), said


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_openers_of_a_catalog_not_made_yet_all_open_it(tmp_path, backend, request):
    """`floe query` while `floe demo` starts on a new home: each opener creates the catalog's tables, and PyIceberg
    looks for each table before creating it, so a table the other made in between raised 'already exists' (the
    demo ended at its start, once in the suite)."""
    from appliance.tables.fastpath.sql_catalog import FloeSqlCatalog

    for n in range(8):
        if backend == "postgres":
            uri = request.getfixturevalue("postgres").database(f"opened_{next(_counter)}_{random.randrange(1 << 20)}")
        else:
            uri = f"sqlite:///{tmp_path}/catalog-{n}.db"
        barrier, failed = threading.Barrier(4), []

        def open_it() -> None:
            barrier.wait()
            try:
                catalog = FloeSqlCatalog("floe", uri=uri, warehouse=f"file://{tmp_path}/warehouse")
                catalog.list_namespaces()
                catalog.engine.dispose()
            except Exception as exc:  # noqa: BLE001 - whatever it is, the test names it
                failed.append(exc)

        openers = [threading.Thread(target=open_it) for _ in range(4)]
        for t in openers:
            t.start()
        for t in openers:
            t.join(60)
        assert not failed, f"round {n}: {failed[0]!r}"
