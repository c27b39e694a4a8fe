"""The engine never exits because something it depends on is down: started while PostgreSQL (the catalog)
or SeaweedFS (the S3 warehouse) is down, with a live producer, it says what it waits for and since when
(`floe status`, one event, one alert per outage), and resumes by itself once it is back, exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import orjson
import pytest
from test_observe import Webhook

from conftest import FLOE, ROOT, floe, wait_for


class Feed:
    """A live producer: JSON events with ids 0, 1, 2... and a malformed message every 20th, at a trickle."""

    def __init__(self, broker, topic: str) -> None:
        self.producer, self.topic = broker.producer(), topic
        self.table = f"o.{topic}"  # of its own: a REST catalog lives as long as the test session
        self.good = self.bad = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def send(self, n: int) -> None:
        for _ in range(n):
            if (self.good + self.bad) % 20 == 19:
                self.producer.produce(self.topic, value=b"{not json", partition=self.bad % 4)
                self.bad += 1
            else:
                self.producer.produce(self.topic, value=orjson.dumps({"id": self.good}), partition=self.good % 4)
                self.good += 1
        assert self.producer.flush(30) == 0

    def _run(self) -> None:
        while not self.stopping.wait(0.05):
            self.send(10)  # about 200 messages a second

    def __enter__(self) -> Feed:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join(30)


def configure(home, extra: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "floe.toml").write_text(
        '[engine]\nmax_batch_messages = 500\ncommit_interval = "200ms"\nretry_backoff = "500ms"\n\n'
        '[alerting]\nevaluate_interval = "500ms"\ncooldown = "2s"\nnotify_attempts = 2\n\n' + extra)


def status_json() -> tuple[int, dict]:
    shown = floe("status", "--format", "json")
    return shown.returncode, orjson.loads(shown.stdout)


def waiting_for(dependency: str) -> dict | None:
    code, report = status_json()
    return code == 1 and [o["dependency"] for o in report["waiting_for"]] == [dependency] and report


def events(kind: str) -> list[str]:
    from appliance.config.settings import load_settings
    from appliance.state.store import StateStore

    with StateStore(load_settings().state_db) as state:
        return [e.message for e in state.events(limit=10_000) if e.kind == kind]


def landed_exactly(feed: Feed) -> bool:
    """Every good id once in the table, every malformed message once in the dead letters."""
    rows = orjson.loads(floe("query", f"select count(*) n, count(distinct id) d, max(id) hi from {feed.table}",
                             "--format", "json").stdout.splitlines()[0])
    dead = orjson.loads(floe("query", f"select count(*) n from {feed.table}_dlq", "--format", "json")
                        .stdout.splitlines()[0])
    return rows == {"n": feed.good, "d": feed.good, "hi": feed.good - 1} and dead["n"] == feed.bad


def resumed_exactly_once(feed: Feed, hook: Webhook, dependency: str) -> None:
    """After the outage: everything sent landed once, the audit passes, the outage was told once."""
    wait_for(lambda: landed_exactly(feed), 180, 1.0, what="every message sent, landed once")
    wait_for(lambda: status_json()[0] == 0, 60, 0.5, what="floe status all well again")
    audit = floe("audit", "c")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert len(events("dependency_down")) == 1 and events("dependency_down")[0].startswith(f"{dependency} is down")
    assert len(events("dependency_back")) == 1
    wait_for(lambda: len(hook.received) == 2, 30, what="the incident resolved")
    assert hook.titles() == ["[Floe] OPEN: deps (dependency_down) on the engine",
                             "[Floe] RESOLVED: deps (dependency_down) on the engine"], "one incident per outage"


def start_feeding(broker, topic: str, hook: Webhook) -> Feed:
    feed = Feed(broker, topic)
    feed.send(200)
    created = floe("stream", "create", "c", "--bootstrap", broker.bootstrap, "--topic", topic, "--table", feed.table)
    assert created.returncode == 0, created.stderr
    assert floe("alert", "add", "deps", "--rule", "dependency_down", "--notify", hook.url).returncode == 0
    return feed


@pytest.fixture
def hook():
    webhook = Webhook()
    yield webhook
    webhook.close()


def test_started_while_postgresql_is_down_the_engine_waits_says_so_and_resumes_exactly_once(
        broker, topic, floe_home, postgres, running_engine, hook):
    url = postgres.database(f"outage_{topic}")
    configure(floe_home, f'[catalog]\ntype = "sql"\nuri = "{url}"\n')
    feed = start_feeding(broker, topic, hook)
    with feed:
        with postgres.down():
            running_engine()
            report = wait_for(lambda: waiting_for("catalog"), 120, 0.5, what="floe status naming the catalog")
            assert "cannot be reached" in report["waiting_for"][0]["message"]
            shown = floe("status")
            assert shown.returncode == 1 and "waiting for the catalog: down since" in shown.stdout
            wait_for(lambda: hook.received, 30, what="the dependency_down notification")
            # Retried meanwhile, told once.
            wait_for(lambda: len(events("broker_unreachable") + events("stream_failed")) >= 1, 60,
                     what="the stream's first failed attempt")
            wait_for(lambda: stream_failures() >= 3, 60, what="attempts again")
            assert len(events("dependency_down")) == 1 and len(hook.received) == 1
        feed.send(100)  # arrives as the catalog comes back
    resumed_exactly_once(feed, hook, "catalog")


def stream_failures() -> int:
    from appliance.config.settings import load_settings
    from appliance.state.store import StateStore

    with StateStore(load_settings().state_db) as state:
        return state.status("c").failures_total


def test_backoff_doubles_up_to_its_bound():
    from appliance.core.polling import backoff

    pauses = backoff(0.5, 4.0)
    assert [next(pauses) for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def rows_total() -> int:
    from appliance.config.settings import load_settings
    from appliance.state.store import StateStore

    with StateStore(load_settings().state_db) as state:
        return state.status("c").rows_total


@pytest.mark.parametrize("catalog, waits_for", [("sqlite", "warehouse"), ("rest", "catalog")])
def test_seaweedfs_killed_under_a_running_engine_then_a_kill_and_a_start_while_it_is_down_lose_nothing(
        broker, topic, floe_home, seaweed, running_engine, hook, catalog, waits_for):
    """SeaweedFS is the S3 warehouse (with Floe's SQLite catalog: the engine waits for the warehouse) or the
    REST catalog and its S3 storage (the engine waits for the catalog)."""
    if catalog == "rest":
        props = {**seaweed.rest_properties(), "credential": f"{seaweed.access_key}:{seaweed.secret_key}"}
        configure(floe_home, '[catalog]\ntype = "rest"\n' + "".join(f'"{k}" = "{v}"\n' for k, v in props.items()))
    else:
        bucket = seaweed.new_bucket(f"o-{topic.replace('_', '-')}")
        configure(floe_home, f'[warehouse]\nlocation = "s3://{bucket}/warehouse"\n\n[warehouse.s3]\n'
                             f'endpoint = "{seaweed.s3_endpoint}"\nregion = "{seaweed.region}"\n'
                             f'access_key_id = "{seaweed.access_key}"\nsecret_access_key = "{seaweed.secret_key}"\n')
    feed = start_feeding(broker, topic, hook)
    engine = subprocess.Popen(FLOE + ["run"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        with feed:
            wait_for(lambda: rows_total() > 0, 180, 0.5, what="the engine's first commit")
            with seaweed.down():
                wait_for(lambda: waiting_for(waits_for), 120, 0.5, what=f"floe status naming the {waits_for}")
                os.killpg(engine.pid, signal.SIGKILL)  # a power cut during the outage
                engine.wait(30)
                running_engine()  # started while S3 is still down
                report = wait_for(lambda: waiting_for(waits_for), 120, 0.5,
                                  what=f"the new engine naming the {waits_for}")
                endpoint = seaweed.s3_endpoint if catalog == "sqlite" else seaweed.rest_uri
                assert endpoint.removeprefix("http://") in report["waiting_for"][0]["message"], report
                assert seaweed.secret_key not in orjson.dumps(report).decode()
            feed.send(100)  # arrives as S3 comes back
        wait_for(lambda: landed_exactly(feed), 180, 1.0, what="every message sent, landed once")
        wait_for(lambda: status_json()[0] == 0, 60, 0.5, what="floe status all well again")
        audit = floe("audit", "c")
        assert audit.returncode == 0, audit.stdout + audit.stderr
        back = events("dependency_back")
        # Another may come and go as SeaweedFS comes up (its S3 a moment after its REST catalog): each is told.
        assert any(m.startswith(f"{waits_for} is back after") for m in back), back
        # The killed engine's outage is closed by the next engine's start: no `down` without its end.
        assert any(m.startswith(f"{waits_for}: the wait since ") and m.endswith("the engine that waited is gone; "
                                                                              "this one looks again") for m in back)
    finally:
        if engine.poll() is None:
            os.killpg(engine.pid, signal.SIGKILL)
            engine.wait(30)


def test_a_rest_catalog_frozen_at_the_engines_start_is_an_outage_waited_out_not_a_hang(
        broker, topic, floe_home, seaweed, running_engine, hook):
    """A REST service that accepts connections and never answers (SIGSTOP): each request's deadline
    (`request-timeout`) makes it an outage the engine waits out, where PyIceberg alone would wait forever."""
    props = {**seaweed.rest_properties(), "credential": f"{seaweed.access_key}:{seaweed.secret_key}",
             "request-timeout": "2"}
    configure(floe_home, '[catalog]\ntype = "rest"\n' + "".join(f'"{k}" = "{v}"\n' for k, v in props.items()))
    feed = start_feeding(broker, topic, hook)
    with feed:
        seaweed.freeze()
        try:
            running_engine()
            wait_for(lambda: waiting_for("catalog"), 120, 0.5, what="floe status naming the catalog")
            wait_for(lambda: hook.received, 30, what="the dependency_down notification")
        finally:
            seaweed.thaw()
        feed.send(100)  # arrives as the catalog answers again
    resumed_exactly_once(feed, hook, "catalog")


def test_an_outage_is_told_once_and_ends_when_the_last_one_waiting_on_it_gets_through(floe_home):
    from appliance.config.settings import ensure_home, load_settings
    from appliance.core.errors import CatalogUnavailable, SchemaError, WarehouseError
    from appliance.ingest.outages import Outages, close_left_over
    from appliance.state.store import StateStore

    settings = load_settings()
    ensure_home(settings)
    with StateStore(settings.state_db) as state:
        outages = Outages()
        assert outages.failed(state, "a", CatalogUnavailable("sql catalog at x cannot be reached"))
        assert outages.failed(state, "b", CatalogUnavailable("sql catalog at x cannot be reached"))
        assert not outages.failed(state, "a", SchemaError("a bad schema is no outage"))
        assert [(o.dependency, o.message) for o in state.outages()] == [
            ("catalog", "sql catalog at x cannot be reached")]
        outages.got_through(state, "a")
        assert outages.down() == ["catalog"], "b still waits on it"
        assert outages.failed(state, "b", WarehouseError("warehouse s3://b: cannot write"))  # past the catalog
        assert [o.dependency for o in state.outages()] == ["warehouse"]
        outages.got_through(state, "b")
        assert state.outages() == [] and outages.down() == []
        kinds = [(e.kind, e.message.split(" ")[0]) for e in reversed(state.events())]
        assert kinds == [("dependency_down", "catalog"), ("dependency_back", "catalog"),
                         ("dependency_down", "warehouse"), ("dependency_back", "warehouse")]

        # An engine gone while it waited (killed) leaves its row; the next one closes it with an event.
        assert outages.failed(state, "c", CatalogUnavailable("sql catalog at x cannot be reached"))
        close_left_over(state, "the engine that waited is gone; this one looks again")
        assert state.outages() == []
        assert state.events()[0].kind == "dependency_back" and state.events()[0].message.startswith(
            "catalog: the wait since ")


def test_a_catalog_drivers_failure_is_an_outage_a_refusal_or_neither(floe_home):
    import sqlite3

    import requests
    import sqlalchemy.exc

    from appliance.config.settings import load_settings
    from appliance.core.errors import CatalogAccessDenied, CatalogUnavailable
    from appliance.tables.catalog import catalog_error

    settings = load_settings()

    def driver(message: str) -> Exception:
        return sqlalchemy.exc.OperationalError("select", {}, Exception(message))

    refused = catalog_error(settings, driver('FATAL: password authentication failed for user "floe"'))
    assert isinstance(refused, CatalogAccessDenied) and not refused.retryable
    def sqlite(message: str) -> Exception:  # as Floe's SQLite commits and SQLAlchemy raise it
        return sqlalchemy.exc.OperationalError("update", None, sqlite3.OperationalError(message))

    for down in (driver("connection to server at 127.0.0.1 port 5 failed: Connection refused"),
                 sqlite("database is locked"), sqlite("database or disk is full"),
                 requests.exceptions.ConnectionError("refused")):
        typed = catalog_error(settings, down)
        assert isinstance(typed, CatalogUnavailable) and typed.retryable and typed.dependency == "catalog", down
    # The state database's own errors are not the catalog's; a damaged catalog file is no outage.
    for other in (ValueError("a bug"), sqlite3.OperationalError("database or disk is full"),
                  sqlite("file is not a database")):
        assert catalog_error(settings, other) is other


def fill(disk, leave: int) -> None:
    """A ballast file taking all of `disk` but `leave` bytes."""
    chunk = b"\0" * (1 << 20)
    with open(disk / "ballast", "wb") as f:
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError:
            pass
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    os.truncate(disk / "ballast", max(0, os.path.getsize(disk / "ballast") - max(0, leave - free)))


def engine_gone() -> bool:
    from appliance.config.settings import load_settings
    from appliance.core.errors import EngineBusy
    from appliance.ingest.engine import EngineLock

    try:
        with EngineLock(load_settings()):
            return True
    except EngineBusy:
        return False


def integrity(path) -> str:
    import sqlite3

    with sqlite3.connect(path) as db:
        return db.execute("pragma integrity_check").fetchone()[0]


def test_a_full_disk_under_floe_home_loses_nothing_corrupts_nothing_and_the_engine_resumes(
        broker, topic, tmp_path, monkeypatch, running_engine, hook):
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(disk)], check=True)
    try:
        home = disk / "floe-home"
        monkeypatch.setenv("FLOE_HOME", str(home))
        configure(home, "")
        feed = start_feeding(broker, topic, hook)
        engine = running_engine()
        with feed:
            wait_for(lambda: rows_total() > 0, 180, 0.5, what="the engine's first commit")
            fill(disk, leave=256 << 10)
            wait_for(lambda: (w := engine.workers.get("c")) and w.failing and w.failing.attempts >= 3, 120, 0.5,
                     what="the stream failing on the full disk, and trying again")
            assert engine.workers["c"].is_alive() and not engine.stopping.is_set()
            (disk / "ballast").unlink()
            feed.send(100)  # arrives as space returns
        wait_for(lambda: landed_exactly(feed), 180, 1.0, what="every message sent, landed once")
        try:
            wait_for(lambda: status_json()[0] == 0, 60, 0.5, what="floe status all well again")
        except AssertionError:
            raise AssertionError(floe("status").stdout) from None
        audit = floe("audit", "c")
        assert audit.returncode == 0, audit.stdout + audit.stderr
        engine.stop()
        wait_for(lambda: not engine.workers or all(w.done for w in engine.workers.values()), 60,
                 what="the engine stopped")
        assert integrity(home / "state.db") == "ok" and integrity(home / "catalog.db") == "ok"

        wait_for(engine_gone, 60, 0.2, what="the engine's run over, its lock released")

        # An engine started on a disk already full: it runs and waits, and lands what came once space returns.
        fill(disk, leave=256 << 10)
        feed.send(100)
        engine = running_engine()
        wait_for(lambda: (w := engine.workers.get("c")) and w.failing and w.failing.attempts >= 2, 120, 0.5,
                 what="the new engine's stream failing on the full disk, and trying again")
        assert not engine.stopping.is_set()
        (disk / "ballast").unlink()
        wait_for(lambda: landed_exactly(feed), 180, 1.0, what="every message sent, landed once, after a full start")
        assert floe("audit", "c").returncode == 0
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
