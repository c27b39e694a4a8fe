"""The `floe` command. Diagnostics go to stderr; stdout is for results (query output, mappings)."""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from typing import Any

import click

from appliance.errors import FloeError
from appliance.settings import Settings, ensure_home, load_settings


def _settings() -> Settings:
    settings = load_settings()
    ensure_home(settings)
    logging.basicConfig(
        filename=settings.log_dir / "floe.log",
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("py4j", "pyiceberg", "sqlalchemy"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return settings


def _err(message: str) -> None:
    click.echo(message, err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="floe", prog_name="floe")
def cli() -> None:
    """Floe: Kafka topics into Apache Iceberg tables, exactly once.

    State, catalog and warehouse live under FLOE_HOME (default ~/.floe).
    """


# ---- streams ----------------------------------------------------------------


@cli.group()
def stream() -> None:
    """Create and manage streams (topic -> Iceberg table)."""


@stream.command("create")
@click.argument("name")
@click.option("--bootstrap", required=True, help="Kafka bootstrap servers, HOST:PORT[,HOST:PORT].")
@click.option("--topic", required=True, help="Topic to ingest.")
@click.option("--format", "fmt", default="json", show_default=True, help="Message format.")
@click.option("--table", required=True, help="Target table, NAMESPACE.TABLE.")
@click.option("--mapping", default="auto", show_default=True, help="'auto' to infer from a sample, or a TOML file.")
@click.option("--starting-offsets", type=click.Choice(["earliest", "latest"]), default="earliest", show_default=True)
@click.option("--dead-letter-table", default=None, help="Dead-letter table (default: TABLE_dlq).")
@click.option("--kafka-option", "kafka_options", multiple=True, metavar="KEY=VALUE",
              help="librdkafka property, e.g. security.protocol=SASL_SSL (repeatable).")
def stream_create(name: str, bootstrap: str, topic: str, fmt: str, table: str, mapping: str,
                  starting_offsets: str, dead_letter_table: str | None, kafka_options: tuple[str, ...]) -> None:
    """Create stream NAME reading TOPIC into TABLE. Prints the mapping as TOML on stdout."""
    from appliance.streams import create_stream, mapping_header_toml, parse_kafka_options

    settings = _settings()
    created = create_stream(
        settings, name, bootstrap=bootstrap, topic=topic, table=table, format=fmt, mapping=mapping,
        starting_offsets=starting_offsets, dead_letter_table=dead_letter_table,
        kafka_options=parse_kafka_options(kafka_options),
    )
    s = created.stream
    how = f"inferred from {created.sampled} messages" if created.inferred else "from the mapping file"
    click.echo(mapping_header_toml(s), nl=False)
    _err(f"created stream {s.name}: {s.topic} -> {s.table} (dead letters: {s.dead_letter_table}); "
         f"{len(s.mapping.columns)} columns {how}; mapping saved to {created.mapping_file}")


@stream.command("list")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def stream_list(fmt: str) -> None:
    """List streams with their state and totals."""
    from appliance.streams import list_streams

    rows = list_streams(_settings())
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        _err("no streams yet: create one with `floe stream create`")
        return
    import pyarrow as pa

    from appliance.query import format_table

    click.echo(format_table(pa.Table.from_pylist(rows)))


@stream.command("show")
@click.argument("name")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def stream_show(name: str, fmt: str) -> None:
    """Show a stream's definition, committed offsets, status and mapping."""
    from appliance.streams import show_stream

    info = show_stream(_settings(), name)
    if fmt == "json":
        click.echo(json.dumps(info, indent=2, default=str))
        return
    mapping = info.pop("mapping")
    batches = info.pop("recent_batches")
    for key, value in info.items():
        click.echo(f"{key:18} {json.dumps(value) if isinstance(value, (dict, list)) else value}")
    if batches:
        click.echo("recent batches:")
        for b in batches:
            click.echo(f"  {b['committed_at']}  {b['messages']} messages, {b['rows']} rows, "
                       f"{b['dead_letter_rows']} dead letters, {b['duration_ms']} ms, snapshot {b['target_snapshot_id']}")
    click.echo("mapping:")
    click.echo(mapping, nl=False)


@stream.command("pause")
@click.argument("name")
def stream_pause(name: str) -> None:
    """Stop reading a stream; the engine finishes its current batch first."""
    from appliance.streams import set_paused

    set_paused(_settings(), name, True)
    _err(f"paused stream {name}")


@stream.command("resume")
@click.argument("name")
def stream_resume(name: str) -> None:
    """Resume a paused stream from its committed offsets."""
    from appliance.streams import set_paused

    set_paused(_settings(), name, False)
    _err(f"resumed stream {name}")


@stream.command("delete")
@click.argument("name")
@click.option("--drop-tables", is_flag=True, help="Also drop the target and dead-letter tables and their files.")
def stream_delete(name: str, drop_tables: bool) -> None:
    """Delete a stream (its tables stay unless --drop-tables)."""
    from appliance.streams import delete_stream

    s = delete_stream(_settings(), name, drop_tables)
    kept = "dropped" if drop_tables else "kept"
    _err(f"deleted stream {name}; tables {s.table} and {s.dead_letter_table} {kept}")


# ---- engine -----------------------------------------------------------------


def _install_stop(stop: threading.Event) -> None:
    def handler(signum: int, _frame: Any) -> None:
        if stop.is_set():
            raise SystemExit(130)  # a second signal: stop now, the offsets make it safe
        _err("stopping after the current batch (signal again to force)")
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


@cli.command()
@click.option("--until-caught-up", is_flag=True, help="Ingest what the topics hold now, then exit.")
@click.option("--spark-master", default=None, help="Override spark.master (local[*], spark://host:port).")
def run(until_caught_up: bool, spark_master: str | None) -> None:
    """Run every active stream until SIGINT/SIGTERM."""
    from dataclasses import replace

    from appliance.engine import Engine

    from appliance.settings import spark_master_or_error
    from appliance.spark import check_java

    settings = _settings()
    check_java()  # before saying "starting": a machine without Java gets one line
    if spark_master:
        settings = replace(settings, spark_master=spark_master_or_error(spark_master, "--spark-master"))
    engine = Engine(settings)
    stop = threading.Event()
    _install_stop(stop)
    threading.Thread(target=lambda: (stop.wait(), engine.stop()), daemon=True).start()
    _err(f"floe engine starting (spark {settings.spark_master}, home {settings.home})")
    engine.run(until_caught_up=until_caught_up)
    _err("floe engine stopped")


@cli.command()
@click.argument("sql")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def query(sql: str, fmt: str) -> None:
    """Run DuckDB SQL; tables are named namespace.table (e.g. ingest.orders)."""
    from appliance.query import format_csv, format_json, format_table, run_query

    result = run_query(_settings(), sql)
    text = {"table": format_table, "csv": format_csv, "json": format_json}[fmt](result)
    click.echo(text, nl=fmt == "table")


@cli.command()
@click.option("--publish", "topic", default=None, help="Also publish demo pizza orders to this topic.")
@click.option("--rate", default=50.0, show_default=True, help="Messages per second to publish.")
def broker(topic: str | None, rate: float) -> None:
    """Start the embedded Kafka-protocol broker on loopback and print its bootstrap address."""
    from appliance.broker import EmbeddedBroker
    from appliance.demo import publish

    embedded = EmbeddedBroker()
    click.echo(embedded.bootstrap)
    sys.stdout.flush()
    _err(f"embedded broker listening on {embedded.bootstrap} (in memory; Ctrl-C to stop)")
    stop = threading.Event()
    _install_stop(stop)
    if topic:
        threading.Thread(target=publish, args=(embedded.producer(), topic, rate, stop), daemon=True).start()
    stop.wait()
    embedded.close()


# ---- maintenance ------------------------------------------------------------


@cli.command()
@click.argument("tables", nargs=-1)
@click.option("--compact", is_flag=True, help="Rewrite small data files into files near the target size.")
@click.option("--expire", is_flag=True, help="Expire old snapshots and delete the files only they used.")
@click.option("--orphans", is_flag=True, help="Delete files no snapshot references, older than the safety age.")
@click.option("--retention", is_flag=True, help="Delete rows older than the table's retention period.")
@click.option("--dry-run", is_flag=True, help="Show what each task would do; change nothing.")
def maintain(tables: tuple[str, ...], compact: bool, expire: bool, orphans: bool, retention: bool,
             dry_run: bool) -> None:
    """Run maintenance on TABLES now (default: every table). Without task options, every task runs.

    Each run is recorded and shown by `floe table runs` and in the UI's table view.
    Exits 1 if a task failed.
    """
    from appliance.maintenance import TASKS, Maintainer, format_run
    from appliance.spark import spark_session

    settings = _settings()
    chosen = {"compact": compact, "expire": expire, "orphans": orphans, "retention": retention}
    tasks = [t for t in TASKS if chosen[t]] or list(TASKS)
    sessions: list = []

    def start_spark():
        sessions.append(spark_session(settings, "floe-maintain"))
        return sessions[0]

    maintainer = Maintainer(settings, spark=start_spark)
    names = [maintainer.check_table(t) for t in dict.fromkeys(tables)] or maintainer.catalog.list_tables()
    if not names:
        _err("no tables yet: create a stream first")
        return
    failed = 0
    try:
        for name in names:
            for task in tasks:
                run = maintainer.run(name, task, trigger="cli", dry_run=dry_run)
                click.echo(format_run(run))
                failed += run.failed
    finally:
        for session in sessions:
            session.stop()
    if failed:
        _err(f"floe: error: {failed} maintenance task{'s' if failed > 1 else ''} failed")
        sys.exit(1)


@cli.group()
def table() -> None:
    """Table maintenance policies and the record of maintenance runs."""


def _policy_options(command):
    from appliance.policy import PARSERS

    helps = {
        "retention": "Delete rows older than this: forever, 1 week, 1 month, 6 months, 1 year, 30d...",
        "retention_column": "Event-time column retention looks at (default _kafka_timestamp).",
        "target_file_size": "Compaction's target file size, e.g. 128MB.",
        "compact_small_files": "Compact by itself once this many small files pile up.",
        "compact_min_average_size": "... or once files average less than this.",
        "compact_interval": "Compact by itself at most this often, e.g. 10m.",
        "keep_snapshots": "Expire snapshots older than this, e.g. 7d.",
        "min_snapshots": "Always keep at least this many snapshots.",
        "max_snapshots": "Keep at most this many snapshots, young or not.",
        "orphan_age": "Delete unreferenced files older than this (at least 1h).",
    }
    for key in reversed(list(PARSERS)):
        command = click.option(f"--{key.replace('_', '-')}", key, default=None, help=helps[key])(command)
    return command


@table.command("policy")
@click.argument("name")
@_policy_options
@click.option("--unset", multiple=True, metavar="SETTING",
              help="Drop NAME's own value of SETTING (e.g. retention), so it inherits again (repeatable).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def table_policy(name: str, unset: tuple[str, ...], fmt: str, **values: str | None) -> None:
    """Show or change the maintenance policy of a table (NS.TABLE) or a namespace (NS).

    A namespace's values are the defaults of its tables; a table's own values win.
    """
    from appliance.maintenance import Maintainer, describe_policy, set_policy

    maintainer = Maintainer(_settings())
    given = {k: v for k, v in values.items() if v is not None}
    if given or unset:
        set_policy(maintainer, name, given, tuple(k.replace("-", "_") for k in unset))
    rows = describe_policy(maintainer, name)
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        click.echo(f"{row['setting']:26} {row['value']:18} {row['from']}")


@table.command("runs")
@click.argument("name", required=False)
@click.option("--task", type=click.Choice(["compact", "expire", "orphans", "retention"]), default=None)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10000))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def table_runs(name: str | None, task: str | None, limit: int, fmt: str) -> None:
    """The most recent maintenance runs, of one table or of all."""
    from appliance.maintenance import Maintainer, format_run

    maintainer = Maintainer(_settings())
    if name:
        maintainer.check_table(name)
    runs = maintainer.state.runs(name, task, limit)
    if fmt == "json":
        click.echo(json.dumps(runs, indent=2))
        return
    if not runs:
        _err("no maintenance runs yet")
    for run in runs:
        click.echo(f"{run['started_at'][:19]}  {run['trigger']:8} {format_run(run)}")


def _ui():
    """The terminal UI, when one is installed: found by entry point, so the engine never imports it."""
    from importlib.metadata import entry_points

    found = list(entry_points(group="floe.ui"))
    return found[0].load() if found else None


@cli.command()
@click.option("--section", type=click.Choice(["streams", "tables", "query", "events"]), default="streams",
              show_default=True, help="Section to open on.")
def tui(section: str) -> None:
    """Open the terminal UI; it attaches to the running engine (or starts one with Ctrl+E)."""
    ui = _ui()
    if ui is None:
        raise FloeError("the terminal UI is not installed (pip install -e . installs it)")
    ui(_settings(), section)


@cli.command()
@click.option("--rate", default=50.0, show_default=True, help="Pizza orders per second.")
@click.option("--duration", default=0.0, help="Stop after this many seconds (0: until Ctrl-C or quitting the UI).")
@click.option("--no-ui", is_flag=True, help="Print a status line every 2 seconds instead of opening the UI.")
def demo(rate: float, duration: float, no_ui: bool) -> None:
    """Embedded broker, pizza orders, one stream into ingest.pizza_orders, and the UI on it."""
    from appliance.demo import run_demo

    settings = _settings()
    stop = threading.Event()
    _install_stop(stop)
    if duration:
        threading.Timer(duration, stop.set).start()
    ui = None if no_ui else _ui()
    run_demo(settings, rate, stop, out=lambda line: click.echo(line), ui=ui)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        _err("floe: aborted")
        sys.exit(130)
    except click.UsageError as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        _err(f"floe: error: {exc.format_message()}{hint}")
        sys.exit(2)
    except click.ClickException as exc:
        _err(f"floe: error: {exc.format_message()}")
        sys.exit(1)
    except FloeError as exc:
        _err(f"floe: error: {exc}")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
