"""`floe status`, `floe alert ...` and `floe watch`: what is wrong, and who hears of it."""

from __future__ import annotations

import json
import sys
import threading

import click

from appliance.cli.base import cli, err, install_stop, settings
from appliance.config.alerts import FOR_HELP
from appliance.core import hints


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.1f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


def _state(line) -> str:
    from appliance.views.engine import Shown

    return Shown(line.state, line.was).text


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def status(fmt: str) -> None:
    """The engine, streams and stages, and open incidents.

    Exit code: 0 all is well, 1 degraded (the engine waits for a dependency that is down, an open
    incident, or a stream or stage failing), 2 the engine is down.
    """
    from appliance.views.status import status_report

    report = status_report(settings())
    if fmt == "json":
        click.echo(json.dumps(report.as_dict(), indent=2))
        sys.exit(report.exit_code)
    click.echo(f"status: {report.verdict}")
    click.echo(f"engine: {'up' if report.engine.up else 'DOWN'}: {report.engine.reason}")
    for o in report.waiting_for:
        click.echo(f"waiting for the {o.dependency}: down since {o.since[:19]}: {o.message}")
    lines = [*report.streams, *report.stages]
    width = max([12] + [len(_state(x)) for x in lines])
    if report.streams:
        click.echo(f"\n{'stream':24} {'state':{width}} {'lag':>10} {'lag s':>8} {'fresh':>8}  error")
        for s in report.streams:
            lag = "-" if s.lag_messages is None else f"{s.lag_messages:,}"
            click.echo(f"{s.name:24} {_state(s):{width}} {lag:>10} {_age(s.lag_seconds):>8} "
                       f"{_age(s.freshness_seconds):>8}  {s.error}")
    if report.stages:
        click.echo(f"\n{'stage':24} {'state':{width}} {'lag rows':>10}  error")
        for st in report.stages:
            lag = "-" if st.lag_rows is None else f"{st.lag_rows:,}"
            click.echo(f"{st.name:24} {_state(st):{width}} {lag:>10}  {st.error}")
    if any(x.was for x in lines):
        click.echo(f"\nthe engine is down: nothing runs; \"was\" is what it last reported (start it: "
                   f"`{hints.START_ENGINE}`)")
    if report.incidents:
        click.echo("\nopen incidents:")
        for i in report.incidents:
            click.echo(f"  {i.alert} on {i.subject}: {i.rule} (measured {i.value}) since {i.opened_at[:19]}")
    sys.exit(report.exit_code)


@cli.group()
def alert() -> None:
    """Alerts: a rule over a stream's or a stage's measure, and where to notify (Apprise URLs).

    \b
    Rules: lag_messages > N, lag_seconds > N, freshness_seconds > N,
    dead_letter_ratio > R (over --for), failed, stalled (lag > 0 and no commit for --for),
    throttled, auth_failed, maintenance_failed, dependency_down (the running engine waits for its
    catalog, warehouse, broker or registry), engine_down (sent by `floe watch`).
    A stage has two: failed, and stalled (its source has rows it has not processed and no
    run completed for --for). failed and stalled with no --stream nor --stage watch every
    stream and every stage.
    """


@alert.command("add")
@click.argument("name")
@click.option("--rule", required=True, help="e.g. 'lag_messages > 100000', 'dead_letter_ratio > 0.05', stalled.")
@click.option("--stream", default=None, help="One stream (default: every stream).")
@click.option("--stage", default=None, help="One stage, for failed and stalled (default: every stage too).")
@click.option("--for", "for_", default=None, help=f"Window or hold time, e.g. 5m ({FOR_HELP}).")
@click.option("--notify", multiple=True, required=True, help="An Apprise URL (repeatable): slack://..., "
              "mailto://..., json://host/path, ntfys://topic...")
def alert_add(name: str, rule: str, stream: str | None, stage: str | None, for_: str | None,
              notify: tuple[str, ...]) -> None:
    """Add alert NAME."""
    from appliance.control.alerts import add_alert

    made = add_alert(settings(), name, rule, notify, stream=stream, for_=for_, stage=stage)
    scope = ("the engine" if made.rule.engine_level else f"stream {made.stream}" if made.stream
             else f"stage {made.stage}" if made.stage else "every stream and stage" if made.covers_stages
             else "every stream")
    err(f"alert {made.name} added: {made.rule} on {scope}"
        + f" ({len(made.notify)} target{'s' if len(made.notify) > 1 else ''}); "
        f"`{hints.TEST_ALERT.format(alert=made.name)}` tries them")


@alert.command("list")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def alert_list(fmt: str) -> None:
    """Every alert (floe.toml's and those added here), with its open incidents."""
    from appliance.views.alerts import alerts_overview

    alerts, _ = alerts_overview(settings())
    rows = [a.summary() for a in alerts]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        err(f"no alerts yet: `{hints.ADD_ALERT}`")
        return
    click.echo(f"{'name':20} {'rule':30} {'subject':22} {'for':>6} {'open':>4}  notify")
    for r in rows:
        click.echo(f"{r['name']:20} {r['rule']:30} {r['subject']:22} {r['for']:>6} {r['open']:>4}  {r['notify']}")


@alert.command("show")
@click.argument("name")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def alert_show(name: str, fmt: str) -> None:
    """An alert and its recent incidents."""
    from dataclasses import asdict

    from appliance.core.errors import AlertNotFound
    from appliance.views.alerts import alert_history, alerts_overview

    loaded = settings()
    found = [a for a in alerts_overview(loaded)[0] if a.name == name]
    if not found:
        raise AlertNotFound(f"no alert named {name!r} (`{hints.LIST_ALERTS}` shows them)")
    history = alert_history(loaded, name)
    if fmt == "json":
        click.echo(json.dumps({**found[0].summary(), "notify": found[0].notify,
                               "incidents": [asdict(i) for i in history]}, indent=2))
        return
    for key, value in found[0].summary().items():
        click.echo(f"{key:8} {value}")
    click.echo("incidents:" if history else "incidents: none yet")
    for i in history:
        until = f"resolved {i.resolved_at[:19]}" if i.resolved_at else "OPEN"
        click.echo(f"  {i.opened_at[:19]}  {until:28} {i.subject}: {i.value}")


@alert.command("remove")
@click.argument("name")
def alert_remove(name: str) -> None:
    """Remove alert NAME (its open incidents are closed without a notification)."""
    from appliance.control.alerts import remove_alert

    remove_alert(settings(), name)
    err(f"alert {name} removed")


@alert.command("test")
@click.argument("name")
def alert_test(name: str) -> None:
    """Send a test notification to each of NAME's targets now. Exits 1 if one fails."""
    from appliance.control.alerts import send_test

    results = send_test(settings(), name)
    for r in results:
        click.echo(f"{'ok' if r.ok else 'FAILED':6} {r.target}")
    failed = [r for r in results if not r.ok]
    if failed:
        err(f"floe: error: {len(failed)} of {len(results)} notification target(s) failed")
        sys.exit(1)


@cli.command()
@click.option("--once", is_flag=True, help="Look once and exit: 0 the engine is up, 2 it is down (for cron).")
def watch(once: bool) -> None:
    """Watch the engine's heartbeat from outside it and send the `engine_down` alerts."""
    from appliance.control.watch import watch as watch_loop
    from appliance.control.watch import watch_once

    loaded = settings()
    if once:
        health = watch_once(loaded)
        click.echo(f"engine {'up' if health.up else 'DOWN'}: {health.reason}")
        sys.exit(0 if health.up else 2)
    stop = threading.Event()
    install_stop(stop)
    err(f"watching the engine of {loaded.home} every {loaded.alerting.evaluate_interval:g}s (Ctrl-C to stop)")
    watch_loop(loaded, stop, lambda h: err(f"engine {'up' if h.up else 'DOWN'}: {h.reason}"))


@cli.command()
@click.argument("stream")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def audit(stream: str, fmt: str) -> None:
    """Prove STREAM's exactly-once: every offset from the first ingested to the committed position is in
    the target or the dead-letter table, once. Reads only; safe while the engine runs.

    Exit code: 0 when all holds, 1 otherwise (a gap, a duplicate, or an error).
    """
    from appliance.auditor import audit_streams

    pattern, reports = audit_streams(settings(), stream)  # a pattern stream's: one per topic, a list in JSON
    if fmt == "json":
        found = [r.to_dict() for r in reports]
        click.echo(json.dumps(found if pattern else found[0], indent=2))
    else:
        click.echo("\n".join(r.render() for r in reports) if reports else f"stream {stream} has taken no topic yet")
    sys.exit(0 if all(r.ok for r in reports) else 1)
