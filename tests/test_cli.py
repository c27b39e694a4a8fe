"""The `floe` command as a user runs it: stream management and one-line errors that change nothing."""

import json

import pytest

from conftest import floe, floe_process, pizza_values


def one_line_error(result, *fragments):
    assert result.returncode != 0, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def streams():
    result = floe("stream", "list", "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def tables():
    result = floe("query", "select table_schema || '.' || table_name as t from information_schema.tables order by 1", "--format", "json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line)["t"] for line in result.stdout.splitlines()]


@pytest.fixture
def fast_timeouts(floe_home):
    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text('[streams]\nsample_timeout = "3s"\n')


def test_stream_lifecycle_from_the_command_line(broker, topic, floe_home):
    broker.produce(topic, pizza_values(50))
    created = floe("stream", "create", "orders", "--bootstrap", broker.bootstrap, "--topic", topic,
                   "--table", "ingest.orders", "--kafka-option", "client.id=floe-test")
    assert created.returncode == 0, created.stderr
    assert 'name = "store_id", type = "long", source = "store.id"' in created.stdout
    assert "created stream orders" in created.stderr and "ingest.orders_dlq" in created.stderr

    assert [s["name"] for s in streams()] == ["orders"]
    assert set(tables()) == {"ingest.orders", "ingest.orders_dlq"}
    shown = floe("stream", "show", "orders")
    assert shown.returncode == 0 and f"topic              {topic}" in shown.stdout
    assert floe("stream", "pause", "orders").returncode == 0
    assert streams()[0]["state"] == "paused"
    assert floe("stream", "resume", "orders").returncode == 0
    assert streams()[0]["state"] != "paused"

    # The printed mapping is a file the user can edit and hand back.
    edited = created.stdout.replace('name = "amount", type = "double"', 'name = "amount_eur", type = "double"')
    mapping_file = floe_home.parent / "edited-mapping.toml"
    mapping_file.write_text(edited)
    again = floe("stream", "create", "orders2", "--bootstrap", broker.bootstrap, "--topic", topic,
                 "--table", "ingest.orders2", "--mapping", str(mapping_file))
    assert again.returncode == 0, again.stderr
    assert "amount_eur" in floe("stream", "show", "orders2").stdout

    from appliance.config.settings import load_settings
    from appliance.state.store import StateStore

    with StateStore(load_settings().state_db) as state:  # each table with a maintenance run behind it
        for name in ("ingest.orders", "ingest.orders2"):
            state.db["maintenance_runs"].insert({"task": "compact", "table_name": name, "trigger": "manual",
                                                 "started_at": "2026-11-25T10:00:00", "outcome": "ok", "dry_run": 0})
    deleted = floe("stream", "delete", "orders2", "--drop-tables")
    assert deleted.returncode == 0, deleted.stderr
    assert "ingest.orders2" not in tables()
    runs = json.loads(floe("table", "runs", "--format", "json").stdout)
    assert [r["table_name"] for r in runs] == ["ingest.orders"]  # a dropped table's runs are not listed
    assert floe("stream", "delete", "orders").returncode == 0
    assert "ingest.orders" in tables()  # kept without --drop-tables
    assert streams() == []


def test_secrets_are_never_printed(broker, topic):
    broker.produce(topic, pizza_values(5))
    created = floe("stream", "create", "secret", "--bootstrap", broker.bootstrap, "--topic", topic,
                   "--table", "ingest.secret", "--kafka-option", "sasl.username=alice",
                   "--kafka-option", "sasl.password=hunter2-very-secret")
    # The broker speaks PLAINTEXT, so SASL settings without security.protocol are simply unused.
    assert created.returncode == 0, created.stderr
    shown = floe("stream", "show", "secret")
    listed = floe("stream", "list")
    for out in (created.stdout, created.stderr, shown.stdout, shown.stderr, listed.stdout):
        assert "hunter2" not in out
    assert '"sasl.password": "***"' in shown.stdout


def test_registry_secrets_are_never_printed(broker, registry, topic):
    from proto_helpers import avro_serializer

    serialize = avro_serializer(registry, {"type": "record", "name": "S", "fields": [{"name": "n", "type": "long"}]},
                                topic)
    broker.produce(topic, [serialize({"n": 1})])
    created = floe("stream", "create", "reg", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                   "ingest.reg", "--format", "avro", "--schema-registry", registry.url,
                   "--schema-registry-option", "bearer.auth.credentials.source=STATIC_TOKEN",
                   "--schema-registry-option", "bearer.auth.token=tok-hunter2", "--schema-registry-option",
                   "bearer.auth.logical.cluster=lsrc-1", "--schema-registry-option", "bearer.auth.identity.pool.id=p")
    assert created.returncode == 0, created.stderr
    shown = floe("stream", "show", "reg")
    for out in (created.stdout, created.stderr, shown.stdout, shown.stderr, floe("stream", "list").stdout):
        assert "hunter2" not in out
    assert '"bearer.auth.token": "***"' in shown.stdout and f"subject            {topic}-value" in shown.stdout
    assert f"schema_registry    {registry.url}" in shown.stdout


def test_stream_update_and_table_alter_from_the_command_line(broker, topic):
    broker.produce(topic, pizza_values(5))
    assert floe("stream", "create", "alt", "--bootstrap", broker.bootstrap, "--topic", topic,
                "--table", "ingest.alt").returncode == 0
    updated = floe("stream", "update", "alt", "--schema-evolution", "off")
    assert updated.returncode == 0 and "schema evolution off" in updated.stderr
    assert "schema_evolution   off" in floe("stream", "show", "alt").stdout
    one_line_error(floe("stream", "update", "alt"), "nothing to update")
    one_line_error(floe("stream", "update", "nope", "--schema-evolution", "auto"), "no stream named 'nope'")

    added = floe("table", "alter", "ingest.alt", "add-column", "tip", "decimal(8,2)", "--source", "payment.tip")
    assert added.returncode == 0 and "added column tip (decimal(8,2)) filled from field payment.tip" in added.stderr
    assert floe("table", "alter", "ingest.alt", "rename-column", "tip", "gratuity").returncode == 0
    assert floe("table", "alter", "ingest.alt", "drop-column", "gratuity").returncode == 0
    for args, fragment in (
        (["ingest.alt", "add-column", "x"], "add-column needs a type"),
        (["ingest.alt", "add-column", "x", "money"], "unknown type 'money'"),
        (["ingest.alt", "add-column", "status", "string"], "already has a column 'status'"),
        (["ingest.alt", "drop-column", "_kafka_offset"], "is Floe's own"),
        (["ingest.alt", "drop-column", "nope"], "has no column 'nope'"),
        (["ingest.alt", "rename-column", "status", "Bad Name"], "lower snake_case"),
        (["ingest.nope", "drop-column", "status"], "no table named ingest.nope"),
        (["ingest.alt", "retype-column", "status"], "retype-column"),
    ):
        one_line_error(floe("table", "alter", *args), fragment)
    schema = floe("query", "select column_name from information_schema.columns where table_name = 'alt'",
                  "--format", "json")
    names = [json.loads(line)["column_name"] for line in schema.stdout.splitlines()]
    assert "gratuity" not in names and "tip" not in names and "status" in names


def test_unknown_stream_is_one_line(broker):
    for command in (["show"], ["pause"], ["resume"], ["delete"]):
        one_line_error(floe("stream", *command, "nope"), "no stream named 'nope'")


def test_unreachable_broker_is_one_line_and_creates_nothing(fast_timeouts):
    result = floe("stream", "create", "s", "--bootstrap", "127.0.0.1:1", "--topic", "x", "--table", "ingest.t")
    one_line_error(result, "unreachable")
    assert streams() == [] and tables() == []


def test_missing_topic_is_one_line(broker, fast_timeouts):
    result = floe("stream", "create", "s", "--bootstrap", broker.bootstrap, "--topic", "no_such_topic_here",
                  "--table", "ingest.t")
    one_line_error(result, "no_such_topic_here", "not found")
    assert streams() == [] and tables() == []


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--table", "Ingest.Orders"], "lower snake_case"),
        (["--table", "orders"], "NAMESPACE.TABLE"),
        (["--table", "ingest.t", "--dead-letter-table", "ingest.t"], "must differ"),
        (["--table", "ingest.t", "--format", "xml"], "format 'xml'"),
        (["--table", "ingest.t", "--kafka-option", "nonsense"], "KEY=VALUE"),
        (["--table", "ingest.t", "--kafka-option", "enable.auto.commit=true"], "set by Floe"),
        (["--table", "ingest.t", "--kafka-option", "no.such.property=1"], "no.such.property"),
        (["--table", "ingest.t", "--starting-offsets", "middle"], "middle"),
        (["--table", "ingest.t", "--mapping", "/nonexistent.toml"], "cannot read"),
        (["--table", "ingest.t", "--format", "avro"], "format avro needs a schema registry (--schema-registry URL)"),
        (["--table", "ingest.t", "--format", "protobuf", "--schema-registry", "registry:8081"],
         "must be http(s)://HOST[:PORT][/PATH]"),
        (["--table", "ingest.t", "--format", "avro", "--schema-registry", "http://127.0.0.1:1",
          "--schema-registry-option", "colour=blue"], "schema registry option 'colour' is not one Floe passes on"),
        (["--table", "ingest.t", "--format", "avro", "--schema-registry", "http://127.0.0.1:1",
          "--schema-registry-option", "timeout=soon"], "timeout must be a number"),
        (["--table", "ingest.t", "--format", "avro", "--schema-registry", "http://127.0.0.1:1",
          "--schema-registry-option", "timeout=1", "--schema-registry-option", "max.retries=0"],
         "schema registry http://127.0.0.1:1 unreachable"),
        (["--table", "ingest.t", "--schema-evolution", "sometimes"], "sometimes"),
    ],
)
def test_bad_arguments_are_one_line_and_change_nothing(broker, topic, args, fragment):
    broker.produce(topic, pizza_values(5))
    result = floe("stream", "create", "s", "--bootstrap", broker.bootstrap, "--topic", topic, *args)
    one_line_error(result, fragment)
    assert streams() == [] and tables() == []


def test_malformed_mapping_file_is_one_line(broker, topic, tmp_path):
    broker.produce(topic, pizza_values(5))
    bad = tmp_path / "bad.toml"
    bad.write_text('columns = [{name = "x", type = "long", source = "x"}, {name = "y", type = "text"}]')
    result = floe("stream", "create", "s", "--bootstrap", broker.bootstrap, "--topic", topic,
                  "--table", "ingest.t", "--mapping", str(bad))
    one_line_error(result, str(bad), "unknown type 'text'")
    assert streams() == [] and tables() == []


def test_duplicate_stream_name_is_one_line(broker, topic):
    broker.produce(topic, pizza_values(5))
    base = ["stream", "create", "dup", "--bootstrap", broker.bootstrap, "--topic", topic]
    assert floe(*base, "--table", "ingest.a").returncode == 0
    one_line_error(floe(*base, "--table", "ingest.b"), "stream 'dup' already exists")
    assert [s["name"] for s in streams()] == ["dup"]
    assert "ingest.b" not in tables()


def test_usage_errors_are_one_line():
    one_line_error(floe("stream", "create", "x"), "--bootstrap")
    one_line_error(floe_process("nonsense"), "nonsense")  # the command's entry point, in a process
    one_line_error(floe("query", "selec 1"), "syntax error")
    one_line_error(floe("query", "select * from ingest.missing"), "missing")


def test_query_formats():
    assert floe("query", "select 1 as a, 'x' as b", "--format", "csv").stdout == "a,b\n1,x\n"
    assert json.loads(floe("query", "select 1 as a", "--format", "json").stdout) == {"a": 1}
    table = floe("query", "select 42 as answer").stdout
    assert "| answer |" in table and "| 42     |" in table and "(1 row)" in table


def test_show_tables_lists_every_table_as_a_query_names_it(broker, topic):
    # Floe's own "no table named ..." error suggests `show tables`: it must list the tables, which are views
    # in their namespaces' schemas, where DuckDB's own SHOW TABLES (the default schema only) finds none.
    from appliance.config.settings import load_settings
    from appliance.query.session import QuerySession

    broker.produce(topic, pizza_values(5))
    assert floe("stream", "create", "st", "--bootstrap", broker.bootstrap, "--topic", topic,
                "--table", "ingest.st").returncode == 0
    listed = floe("query", "show tables", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["name"] for line in listed.stdout.splitlines()] == ["ingest.st", "ingest.st_dlq"]
    with QuerySession(load_settings()) as session:  # the UI's Query section runs statements this way
        assert session.run("  SHOW TABLES;\n").column("name").to_pylist() == ["ingest.st", "ingest.st_dlq"]
    missing = one_line_error(floe("table", "show", "ingest.nope"), "ingest.nope", "show tables")
    suggested = missing.split("`")[1].removeprefix("floe query ").strip('"')
    assert floe("query", suggested, "--format", "csv").stdout == "name\ningest.st\ningest.st_dlq\n"


def test_engine_that_cannot_start_says_why_in_one_line(floe_home):
    one_line_error(floe_process("run", "--spark-master", "yarn"), "--spark-master", "'yarn'")
    one_line_error(floe_process("run", env={"FLOE_SPARK_MASTER": "local[two]"}), "FLOE_SPARK_MASTER",
                   "'local[two]'")
    one_line_error(floe_process("run", env={"JAVA_HOME": "/nonexistent/jdk"}), "JAVA_HOME=/nonexistent/jdk has no bin/java")


def test_status_with_the_engine_down_says_what_streams_were(broker, topic, floe_home):
    # A killed engine leaves its streams "running" in the state database: `floe status` must not say they run.
    import subprocess
    import sys

    from appliance.config.settings import load_settings
    from appliance.core.clock import now
    from appliance.core.vocabulary import EngineState, StreamPhase
    from appliance.state.store import StateStore

    broker.produce(topic, pizza_values(5))
    assert floe("stream", "create", "gone", "--bootstrap", broker.bootstrap, "--topic", topic,
                "--table", "ingest.gone").returncode == 0
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    with StateStore(load_settings().state_db) as state:  # what the engine wrote before its kill -9
        state.engine_heartbeat(int(dead.stdout), "local[2]", EngineState.RUNNING, now())
        state.update_status("gone", phase=StreamPhase.RUNNING)
    shown = floe("status")
    assert shown.returncode == 2, shown.stderr
    assert "engine: DOWN: the engine's process" in shown.stdout
    row = next(line for line in shown.stdout.splitlines() if line.startswith("gone "))
    assert row.split()[1:4] == ["stopped", "(was", "running)"], shown.stdout
    assert "the engine is down" in shown.stdout
    report = json.loads(floe("status", "--format", "json").stdout)
    assert [(s["name"], s["state"], s["was"]) for s in report["streams"]] == [("gone", "stopped", "running")]
    # `floe stream show` and `list` say the same (in-process: the same command line, without a process each)
    from click.testing import CliRunner

    from appliance.cli import cli

    run = CliRunner().invoke
    shown_text = run(cli, ["stream", "show", "gone"])
    assert shown_text.exit_code == 0 and "state              stopped (was running)\n" in shown_text.stdout, shown_text
    shown_json = json.loads(run(cli, ["stream", "show", "gone", "--format", "json"]).stdout)
    assert (shown_json["state"], shown_json["was"]) == ("stopped", "running")
    listed = json.loads(run(cli, ["stream", "list", "--format", "json"]).stdout)
    assert [(s["state"], s["was"]) for s in listed] == [("stopped", "running")]
    assert "stopped (was running)" in run(cli, ["stream", "list"]).stdout
