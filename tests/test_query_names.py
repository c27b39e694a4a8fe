"""A statement loads the catalog's tables it reads, the rest never: `floe query` and the UI's Query section alike
(`appliance.query.names`), against a real SQLite catalog of several tables."""

import pyarrow as pa
import pytest

from appliance.config.settings import ensure_home, load_settings
from appliance.core.errors import QueryError, WarehouseError
from appliance.query.connection import run_query
from appliance.query.names import named_tables
from appliance.query.session import QuerySession
from appliance.tables.catalog import open_catalog

TABLES = ["ingest.a", "ingest.b", "ingest.c", "other.a", "floe.batches"]


@pytest.fixture
def catalog_of_tables():
    """Five tables of two rows each, every one but ingest.c with a snapshot; ingest.b's metadata file then
    removed, so that loading ingest.b fails: a statement that does not read it must never load it."""
    settings = load_settings()
    ensure_home(settings)
    catalog = open_catalog(settings)
    for name in TABLES:
        namespace = name.split(".")[0]
        if (namespace,) not in catalog.list_namespaces():
            catalog.create_namespace(namespace)
        rows = pa.table({"id": pa.array([1, 2], pa.int64()), "source": pa.array([name] * 2)})
        table = catalog.create_table(name, rows.schema)
        if name != "ingest.c":
            table.append(rows)
    broken = catalog.load_table("ingest.b").metadata_location.removeprefix("file://")
    import os

    os.remove(broken)
    return settings


def test_a_statement_over_one_table_loads_that_one_alone(catalog_of_tables):
    settings = catalog_of_tables
    with pytest.raises(WarehouseError, match="cannot read table ingest.b"):  # reading every table would fail
        run_query(settings, "select count(*) as n from ingest.b")
    assert run_query(settings, "select source, count(*) as n from ingest.a group by 1").to_pylist() == [
        {"source": "ingest.a", "n": 2}]
    assert run_query(settings, 'SELECT count(*) AS n FROM "OTHER"."A" x join ingest.c using (id)').to_pylist() == [
        {"n": 0}]  # a join USING a column: DuckDB cannot tell the names without the tables, the words can

    with QuerySession(settings) as session:
        assert session.run("select count(*) as n from other.a").to_pylist() == [{"n": 2}]
        assert views(session) == {"other.a"}
        session.run("create view mine as select * from ingest.a")
        assert session.run("select count(*) as n from mine").to_pylist() == [{"n": 2}]
        assert views(session) == {"other.a", "ingest.a", "main.mine"}
        with pytest.raises(QueryError, match=r'^Parser Error: syntax error at or near "ingest"$'):
            session.run("select * fro ingest.a")
        with pytest.raises(QueryError, match="^Catalog Error: Table with name missing does not exist"):
            session.run("select * from ingest.missing")
        assert views(session) == {"other.a", "ingest.a", "main.mine"}
        assert session.run("select count(*) as n from ingest.a").to_pylist() == [{"n": 2}]


def test_a_bad_statement_gets_its_one_line_error_and_loads_nothing(catalog_of_tables):
    settings = catalog_of_tables
    with pytest.raises(QueryError) as bad:
        run_query(settings, "selec count(*) from ingest.a")
    assert str(bad.value) == 'Parser Error: syntax error at or near "selec"'
    with pytest.raises(QueryError) as missing:
        run_query(settings, "select * from ingest.missing")
    assert str(missing.value).startswith("Catalog Error: Table with name missing does not exist")
    assert "\n" not in str(missing.value)


def views(session: QuerySession) -> set[str]:
    rows = session._con.execute("select schema_name || '.' || view_name from duckdb_views() where not internal "
                                "union all select schema_name || '.' || table_name from duckdb_tables()").fetchall()
    return {name for (name,) in rows}


@pytest.mark.parametrize("sql, named", [
    ("select * from ingest.a", ["ingest.a"]),
    ("select * from a", ["ingest.a", "other.a"]),  # no namespace: either
    ('select * from "Ingest"."A" as x, other.a y', ["ingest.a", "other.a"]),
    ("select * from floe_cat.ingest.b", ["ingest.b"]),
    ("with b as (select 1) select * from b", []),  # a CTE is no table
    ("select * from ingest.a join ingest.b using (id)", ["ingest.a", "ingest.b"]),  # DuckDB cannot tell: the words
    ("select * from (select id from ingest.c) where id in (select id from floe.batches)",
     ["ingest.c", "floe.batches"]),
    ("show tables", TABLES), ("describe", TABLES),
    ("select * from information_schema.columns where table_name = 'a'", TABLES),
    ("select * fro ingest.a", []),  # it does not parse: DuckDB says so, with no table loaded
    ("select 42", []),
])
def test_which_tables_a_statement_names(sql, named):
    assert named_tables(sql, TABLES) == [t for t in TABLES if t in named]


def test_a_view_of_the_users_names_the_tables_it_reads():
    views = {"main.v": "CREATE VIEW v AS SELECT * FROM ingest.c;", "main.w": "CREATE VIEW w AS SELECT * FROM v;"}
    assert named_tables("select * from w", TABLES, views) == ["ingest.c"]


def test_connections_share_the_process_database_and_see_nothing_of_each_other(catalog_of_tables):
    """One DuckDB database a process (its extensions loaded once: DuckDB checks a signature at each load), each
    connection in a database of its own: neither sees the other's views or tables, `show tables` lists its
    own, and a closed connection's database is gone."""
    from appliance.query.connection import open_connection

    settings = catalog_of_tables
    with QuerySession(settings) as first, QuerySession(settings) as second:
        first.run("create table mine as select 1 as x")
        assert first.run("select * from other.a").num_rows == 2
        second.run("create view other_view as select 2 as y")
        with pytest.raises(QueryError, match="mine does not exist"):
            second.run("select * from mine")
        assert first._con.execute("select count(*) from duckdb_views() where view_name = 'other_view'"
                                  " and database_name = current_database()").fetchone() == (0,)
        assert first._con._cursor is not second._con._cursor
        assert run_query(settings, "show tables", tables=["ingest.a", "other.a"]).column("name").to_pylist() == [
            "ingest.a", "other.a"]  # not the sessions' main.mine, main.other_view
        loaded = run_query(settings, "select extension_name from duckdb_extensions() where loaded"
                                     " and extension_name in ('iceberg', 'avro')")
        assert sorted(loaded.column("extension_name").to_pylist()) == ["avro", "iceberg"]
        own = first.run("select current_database() as d").column("d")[0].as_py()
    con = open_connection(settings)
    try:
        databases = {name for (name,) in con.execute("select database_name from duckdb_databases()").fetchall()}
        assert own not in databases  # detached with its session
        assert con.execute("select current_database()").fetchone()[0] in databases
    finally:
        con.close()
