"""`floe run`, `floe broker`, `floe demo` and `floe tui`: the long-running commands."""

from __future__ import annotations

import sys
import threading

import click

from appliance.cli.base import cli, err, install_stop, settings
from appliance.core.errors import FloeError


@cli.command()
@click.option("--until-caught-up", is_flag=True, help="Ingest what the topics hold now, then exit.")
@click.option("--spark-master", default=None, help="Override spark.master (local[*], spark://host:port).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics at http://127.0.0.1:PORT/metrics (0: any free port; "
                   "[observe] metrics_port in floe.toml).")
def run(until_caught_up: bool, spark_master: str | None, metrics_port: int | None) -> None:
    """Run every active stream until SIGINT/SIGTERM."""
    from dataclasses import replace

    from appliance.config.settings import spark_master_or_error
    from appliance.control.answers import Answers
    from appliance.control.patterns import discover_members
    from appliance.ingest.engine import Engine
    from appliance.spark.session import check_java

    loaded = settings()
    check_java()  # before saying "starting": a machine without Java gets one line
    if spark_master:
        loaded = replace(loaded, spark_master=spark_master_or_error(spark_master, "--spark-master"))
    engine = Engine(loaded, metrics_port=metrics_port, answers=Answers, discover=discover_members)
    stop = threading.Event()
    install_stop(stop)
    threading.Thread(target=lambda: (stop.wait(), engine.stop()), daemon=True).start()
    err(f"floe engine starting (spark {loaded.spark_master}, home {loaded.home})")
    if engine.metrics_port and not until_caught_up:
        err(f"metrics at http://{loaded.observe.metrics_host}:{engine.metrics_port}/metrics")
    engine.run(until_caught_up=until_caught_up)
    err("floe engine stopped")


@cli.command()
@click.option("--publish", "topic", default=None, help="Also publish demo pizza orders to this topic.")
@click.option("--rate", default=50.0, show_default=True, help="Messages per second to publish.")
def broker(topic: str | None, rate: float) -> None:
    """Start the embedded Kafka-protocol broker on loopback and print its bootstrap address."""
    from appliance.demo.pizza import publish
    from appliance.standins.broker import EmbeddedBroker

    embedded = EmbeddedBroker()
    click.echo(embedded.bootstrap)
    sys.stdout.flush()
    err(f"embedded broker listening on {embedded.bootstrap} (in memory; Ctrl-C to stop)")
    stop = threading.Event()
    install_stop(stop)
    if topic:
        threading.Thread(target=publish, args=(embedded.producer(), topic, rate, stop), daemon=True).start()
    stop.wait()
    embedded.close()


@cli.command()
@click.option("--port", default=0, show_default=True, help="Port on 127.0.0.1 (0: any free one).")
def registry(port: int) -> None:
    """Start an embedded schema registry (Confluent's REST API, in memory) on loopback; print its URL."""
    from appliance.standins.registry import EmbeddedRegistry

    try:
        embedded = EmbeddedRegistry(port=port)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
    click.echo(embedded.url)
    sys.stdout.flush()
    err(f"embedded schema registry at {embedded.url} (in memory; Ctrl-C to stop)")
    stop = threading.Event()
    install_stop(stop)
    stop.wait()
    embedded.close()


def _ui():
    """The terminal UI, when one is installed: found by entry point, so the engine never imports it."""
    from importlib.metadata import entry_points

    found = list(entry_points(group="floe.ui"))
    return found[0].load() if found else None


@cli.command()
@click.option("--section", type=click.Choice(["streams", "tables", "query", "events", "stages", "alerts"]),
              default="streams", show_default=True, help="Section to open on.")
def tui(section: str) -> None:
    """Open the terminal UI; it attaches to the running engine (or starts one with Ctrl+E)."""
    ui = _ui()
    if ui is None:
        raise FloeError("the terminal UI is not installed (pip install -e . installs it)")
    ui(settings(), section)


@cli.command()
@click.option("--rate", default=50.0, show_default=True, help="Pizza orders per second.")
@click.option("--duration", default=0.0, help="Stop after this many seconds (0: until Ctrl-C or quitting the UI).")
@click.option("--no-ui", is_flag=True, help="Print a status line every 2 seconds instead of opening the UI.")
def demo(rate: float, duration: float, no_ui: bool) -> None:
    """Embedded broker, pizza orders, one stream into ingest.pizza_orders, and the UI on it."""
    from appliance.demo.run import run_demo

    loaded = settings()
    stop = threading.Event()
    install_stop(stop)
    if duration:
        threading.Timer(duration, stop.set).start()
    ui = None if no_ui else _ui()
    run_demo(loaded, rate, stop, out=lambda line: click.echo(line), ui=ui)
