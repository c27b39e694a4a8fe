"""Every command and query Floe proposes to a user, run as printed against real streams, as a user runs them:
`floe` in a process of its own, its exit code (and what it printed) checked. The hints come from where they
are shown (an alert's message, an error, an event, the doctor's advice), or, where a failure would take long
to stage, from appliance/core/hints.py, which every module takes them from (checked here too); the README's
runnable commands and queries are read out of README.md itself. `floe run`, the one that never ends by itself,
is started as printed by conftest.run_until_killed (test_exactly_once, test_stages, test_catalogs).
"""

from __future__ import annotations

import ast
import random
import re
import shlex
import subprocess

import orjson
from test_observe import Webhook

from appliance.config.alerts import THRESHOLDS, Measure, make_alert
from appliance.config.settings import load_settings
from appliance.control.alerts import add_alert
from appliance.control.doctor.servers import broker_todo, registry_todo
from appliance.control.stages import create_stage
from appliance.control.streams import create_stream
from appliance.core import hints
from appliance.demo.pizza import pizza_order
from appliance.ingest.engine import Engine
from appliance.observe.alerts import ENGINE, HINTS, STAGE_HINTS, message, stage_subject
from appliance.observe.systables import SystemTableWriter
from appliance.query.connection import run_query
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog

from conftest import ROOT, floe

COMMAND = re.compile(r"`(floe [^`]+)`")
# Words a user fills in, and what this test fills them with.
PLACEHOLDERS = {"NAMESPACE.TABLE": "ingest.orders", "TABLE": "ingest.orders", "NAME": "hinted", "RULE": "stalled",
                "QUERY": "select * from source where total > 100"}
# Strings that name a command without proposing it: a process's own name in a log line or a Spark job
# group, what the UI reports having started, the origin of an alert.
DESCRIBED = {
    "appliance/control/backup.py": "an engine runs on {}: stop it (floe run, the service, the UI's) before {}",
    "appliance/control/dead_letters.py": "floe dlq replay exited with {}",
    "appliance/control/doctor/storage.py": "floe doctor {}",
    "appliance/control/watch.py": "floe watch: %s",
    "appliance/demo/run.py": "another `floe run` holds this FLOE_HOME: it ingests the demo stream",
    "appliance/maintenance/rewrite.py": "floe table maintenance",
    "appliance/stages/requests.py": "floe stage {} (request {})",
    "appliance/stages/runner.py": "floe stage {}",
    "appliance/views/alerts.py": "floe alert",
    "tui/panes/maintenance.py": ("No engine running: started `floe maintain {} --{}` in the background (log: {})",
                                 "`floe maintain {} --{}` exited with status {} (log: {})",
                                 "floe maintain {} --{} (pid {})"),
}
NAMES_A_COMMAND = re.compile(r"\bfloe (run|query|stream|stage|table|dlq|alert|audit|maintain|status|watch|doctor|tui|"
                             r"demo|broker|registry)\b")


def _strings(tree: ast.AST):
    """The string literals of a module (f-strings with `{}` for what they fill in), docstrings left out."""
    skip = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            skip.add(id(body[0].value))
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
            yield "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.value


def test_commands_are_proposed_from_one_place():
    """A module that spelled a command of its own would escape the test below."""
    found = []
    for package in ("appliance", "tui"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if name == "appliance/core/hints.py":
                continue
            allowed = DESCRIBED.get(name, ())
            allowed = (allowed,) if isinstance(allowed, str) else allowed
            found += [f"{name}: {text!r}" for text in _strings(ast.parse(path.read_text()))
                      if NAMES_A_COMMAND.search(text) and text not in allowed]
    assert not found, "commands proposed outside appliance/core/hints.py:\n" + "\n".join(found)


def filled(command: str, url: str = "json://127.0.0.1:9/nobody") -> str:
    for word, value in {**PLACEHOLDERS, "URL": url}.items():
        command = re.sub(rf"\b{re.escape(word)}\b", value, command)
    return command


def run(printed: str, expect: int = 0, timeout: float = 300) -> subprocess.CompletedProcess:
    args = shlex.split(printed)
    assert args[0] == "floe", printed
    done = floe(*args[1:], timeout=timeout)
    assert done.returncode == expect, f"{printed}\n-> {done.returncode}\n{done.stdout[-1500:]}{done.stderr[-1500:]}"
    return done


def proposed(text: str) -> list[str]:
    found = COMMAND.findall(text)
    assert found, f"no command in {text!r}"
    return found


def readme() -> tuple[list[str], list[str], list[str]]:
    """The README's queries (`floe query "..."`, anywhere), its dead-letter and audit commands, and its
    stages' SQL."""
    text = (ROOT / "README.md").read_text()
    queries = [f"floe query {q}" for q in re.findall(r'floe\s+query\s+("[^"]+")', text)]
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in text.splitlines()]
    commands = [line for line in lines if line.startswith(("floe dlq ", "floe audit "))]
    stages = [shlex.split(sql)[0] for sql in re.findall(r'floe stage create \w+ .*?--sql ("[^"]+")', text, flags=re.S)]
    return queries, commands, stages


ORDERS = "".join(f'[[columns]]\nname = "{n}"\ntype = "{t}"\nsource = "{n}"\n' for n, t in
                 (("id", "long"), ("code", "long"), ("total", "double"), ("ordered_at", "timestamptz")))


def _setup(broker, topic: str, spark, settings, webhook) -> None:
    """README's names: stream orders (a strict mapping, schema evolution off: messages with a string code
    dead-lettered, one that is not JSON, a new field left out: both changes told as events), the demo's
    pizza_orders, README's two stages and the stage editor's example, an alert."""
    good = [{"id": i, "code": i, "total": 50.0 * i, "ordered_at": "2026-11-21T10:00:00Z", "note": "new"}
            for i in range(8)]
    bad = [{"id": 100 + i, "code": f"A{i}", "total": 1.0, "ordered_at": "2026-11-21T11:00:00Z"} for i in range(3)]
    broker.produce(topic, [orjson.dumps(r) for r in good + bad] + [b"{bad"], partition=0)
    mapping = settings.home / "orders.toml"
    mapping.parent.mkdir(parents=True, exist_ok=True)
    mapping.write_text(ORDERS)
    create_stream(settings, "orders", bootstrap=broker.bootstrap, topic=topic, table="ingest.orders",
                  mapping=str(mapping), schema_evolution="off")
    rng = random.Random(3)
    broker.produce(f"{topic}-pizza", [orjson.dumps(pizza_order(rng, i)) for i in range(20)])
    create_stream(settings, "pizza_orders", bootstrap=broker.bootstrap, topic=f"{topic}-pizza",
                  table="ingest.pizza_orders")
    big, hourly = readme()[2]
    create_stage(settings, "big", source="ingest.orders", table="prep.big_orders", sql=big, spark=spark)
    create_stage(settings, "hourly", source="prep.big_orders", table="prep.hourly", sql=hourly, spark=spark)
    create_stage(settings, "example", source="ingest.orders", table="prep.example", sql=hints.STAGE_EXAMPLE,
                 spark=spark)
    add_alert(settings, "ratio", "dead_letter_ratio > 0.5", [webhook.url], stream="orders")
    Engine(settings, spark=spark).run(until_caught_up=True)
    with StateStore(settings.state_db) as state:  # what `floe run` exports as it stops (floe.batches...)
        SystemTableWriter(settings, Catalog(settings), state).export()


ERRORS = ("floe stream show nope", "floe stage show nope", "floe alert show nope", "floe table show ingest.nope",
          "floe alert add x --rule stalled --stream nope --notify json://x",
          "floe alert add x --rule stalled --stage nope --notify json://x", "floe stream create")
RULES = {m: f"{m.value} > 0.1" if m in THRESHOLDS else m.value for m in Measure}


def _read_only(settings) -> None:
    """The hints that change nothing."""
    queries, commands, _ = readme()
    printed = set(queries) | {c for c in commands if c.startswith("floe dlq list")}
    for measure, hint in HINTS.items():  # alerts' hints, from the messages they send
        subject = {Measure.ENGINE_DOWN: ENGINE, Measure.MAINTENANCE_FAILED: "ingest.orders"}.get(measure, "orders")
        alert = make_alert("a", RULES[measure], notify=("json://x",))
        body = message(alert, subject, None, resolved=False, dlq="ingest.orders_dlq").body
        printed |= set(COMMAND.findall(body) if measure is Measure.THROTTLED else proposed(body))
    for measure in STAGE_HINTS:
        alert = make_alert("a", RULES[measure], notify=("json://x",), stage="big")
        printed |= set(proposed(message(alert, stage_subject("big"), None, resolved=False).body))
    printed |= set(proposed(broker_todo("orders")) + proposed(registry_todo("orders")))  # the doctor's advice
    # The CLI's, the demo's and the UI's (the Query section runs what `floe query` runs).
    printed |= {hints.LIST_STREAMS, hints.LIST_STAGES, hints.LIST_ALERTS, hints.LIST_TABLES, hints.CREATE_STREAM_HELP,
                hints.CREATE_STAGE_HELP, hints.DEMO_QUERY, hints.SHOW_STAGE.format(stage="big"),
                filled(hints.TABLE_POLICY), f'floe query "{hints.TABLE_SAMPLE.format(table="ingest.pizza_orders")}"',
                f'floe query "{filled(hints.TABLE_SAMPLE_SYNTAX)}"'}
    # `floe run` (the engine's alert, `floe status`, the UI) is what conftest.run_until_killed starts, as printed.
    printed.discard(hints.START_ENGINE)
    order = sorted(printed)
    # `floe status` is a health check: with no engine here it says so and exits 2, as it must.
    said = {printed: run(printed, expect=2 if printed == hints.STATUS else 0).stdout for printed in order}
    # Errors name the command that shows what exists, or the command's help.
    failed = [run(args, expect=2 if args == "floe stream create" else 1) for args in ERRORS]
    named = {c for f in failed for c in proposed(f.stderr)}
    assert named >= {hints.LIST_STREAMS, hints.LIST_STAGES, hints.LIST_ALERTS, hints.LIST_TABLES}, named
    for command in sorted(named - printed):
        run(command)
    reasons = said[hints.DEAD_LETTER_REASONS.format(dead_letters="ingest.orders_dlq")]
    assert "schema" in reasons and "decode" in reasons, reasons  # the dead-letter alert's query groups them
    assert "(3 rows)" in said["floe dlq list orders --where \"error_stage = 'schema'\""]


def _changing(settings, webhook) -> None:
    """The hints that change something, in the order a user would follow them."""
    _, commands, _ = readme()
    added = run(filled(hints.ADD_ALERT, webhook.url))
    for command in proposed(added.stderr):  # `floe alert test hinted`
        run(command)
    assert any("hinted" in title for title in webhook.titles()), webhook.titles()
    run(filled(hints.UPDATE_STAGE.format(stage="big")))
    with StateStore(settings.state_db) as state:
        told = [e.message for e in state.events("orders") if e.kind == "schema_changed"]
    ignored, incompatible = sorted(told, key=lambda m: "new field" not in m)
    assert "note" in ignored and "code" in incompatible, told
    [evolve] = proposed(ignored)
    run(evolve)
    run(next(c for c in commands if c.startswith("floe dlq purge")))  # the undecodable one first
    drop, add, replay = proposed(incompatible)
    run(drop)
    run(add)
    assert "moved 3 to the target" in run(replay).stdout
    assert run_query(settings, "select code from ingest.orders where id >= 100 order by 1").column("code").to_pylist() \
        == ["A0", "A1", "A2"]
    for command in commands:
        if command.startswith(("floe dlq replay", "floe audit")):  # nothing left to replay; the audit holds
            run(command)


def test_every_hint_runs_as_printed(broker, topic, spark, floe_home):
    settings = load_settings()
    webhook = Webhook()
    try:
        _setup(broker, topic, spark, settings, webhook)
        _read_only(settings)
        _changing(settings, webhook)
    finally:
        webhook.close()
