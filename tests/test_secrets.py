"""Secrets by reference (`${env:NAME}`, `${file:/path}`) in Kafka options, schema registry settings
and alert URLs: kept as written, resolved only where used, at each use, and never written anywhere."""

from __future__ import annotations

import base64
import http.server
import json
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from appliance.config.alerts import check_urls, masked_url
from appliance.core.errors import AlertRuleError, RegistryAccessDenied, SecretUnreadable, SecretUnresolved
from appliance.kafka.client import KafkaClient
from appliance.kafka.registry import registry
from appliance.kafka.settings import KafkaSettings, RegistrySettings
from appliance.observe.notify import Message, deliver
from appliance.standins.registry import EmbeddedRegistry

from conftest import floe, floe_process
from proto_helpers import avro_serializer


def _secret(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


@pytest.fixture
def secrets(tmp_path, monkeypatch) -> dict[str, str]:
    """Two secrets in the environment and two in files (one a properties file's key), outside FLOE_HOME."""
    values = {"user": _secret("user"), "password": _secret("kpw"), "registry": _secret("rpw"), "hook": _secret("hk")}
    monkeypatch.setenv("FLOE_T_USER", values["user"])
    monkeypatch.setenv("FLOE_T_HOOK", values["hook"])
    monkeypatch.setenv("FLOE_T_PROTOCOL", "PLAINTEXT")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "kafka.properties").write_text(f"# kafka\nusername = x\npassword = {values['password']}\n")
    (tmp_path / "secrets" / "registry").write_text(f"floe:{values['registry']}\n")
    return values


def test_kafka_options_keep_references_and_resolve_them_only_for_the_client(tmp_path, secrets):
    props = tmp_path / "secrets" / "kafka.properties"
    kafka = KafkaSettings.create("127.0.0.1:9092", {
        "sasl.username": "${env:FLOE_T_USER}", "sasl.password": f"${{file:{props}:password}}",
        "ssl.key.password": "clear-one", "client.id": "floe-${env:FLOE_T_USER}"})
    assert kafka.option_dict["sasl.password"] == f"${{file:{props}:password}}"  # stored as written
    assert kafka.masked_options() == {"sasl.username": "${env:FLOE_T_USER}", "sasl.password": f"${{file:{props}:password}}",
                                      "ssl.key.password": "***", "client.id": "floe-${env:FLOE_T_USER}"}
    assert secrets["user"] not in repr(kafka) and "clear-one" not in repr(kafka)
    conf = kafka.consumer_config("g")
    assert (conf["sasl.username"], conf["sasl.password"]) == (secrets["user"], secrets["password"])
    assert conf["client.id"] == f"floe-{secrets['user']}" and conf["ssl.key.password"] == "clear-one"
    text = f"failed for {secrets['user']} with {secrets['password']} and clear-one"
    assert kafka.scrub(text) == "failed for *** with *** and ***"
    # a reference that resolves no more is skipped by scrub (it must not fail), and named by a use
    broken = KafkaSettings.create("127.0.0.1:9092", {"sasl.password": "${env:FLOE_T_MISSING}",
                                                      "sasl.username": "${env:FLOE_T_USER}"})
    assert broken.scrub(f"x {secrets['user']}") == "x ***"
    with pytest.raises(SecretUnresolved, match=r"kafka option sasl.password: .*\$\{env:FLOE_T_MISSING\}") as exc:
        broken.consumer_config("g")
    assert not exc.value.retryable and secrets["user"] not in str(exc.value)
    gone = KafkaSettings.create("127.0.0.1:9092", {"sasl.password": f"${{file:{tmp_path}/none}}"})
    with pytest.raises(SecretUnreadable) as exc:
        gone.consumer_config("g")
    assert exc.value.retryable and f"${{file:{tmp_path}/none}}" in str(exc.value)


def test_registry_settings_resolve_references_in_the_url_and_options(tmp_path, secrets, monkeypatch):
    monkeypatch.setenv("FLOE_T_TIMEOUT", "7")
    path = tmp_path / "secrets" / "registry"
    settings = RegistrySettings.create(f"https://${{env:FLOE_T_USER}}:${{file:{path}}}@reg.example:8081",
                                       {"timeout": "${env:FLOE_T_TIMEOUT}"})
    assert settings.display_url == f"https://${{env:FLOE_T_USER}}:${{file:{path}}}@reg.example:8081"
    conf = settings.client_config()
    # inside the URL's user-info a value is percent-encoded (the file holds `floe:...`): the client decodes it
    assert conf == {"url": f"https://{secrets['user']}:floe%3A{secrets['registry']}@reg.example:8081", "timeout": 7}
    assert unquote(urlparse(conf["url"]).password) == f"floe:{secrets['registry']}"
    assert settings.scrub(f"no {secrets['registry']}") == "no ***"
    clear = RegistrySettings.create("https://me:pw-1@reg:8081", {"basic.auth.user.info": "me:${env:FLOE_T_USER}"})
    assert clear.display_url == "https://me:***@reg:8081"
    assert clear.masked_options() == {"basic.auth.user.info": "***:${env:FLOE_T_USER}"}
    assert clear.scrub(f"pw-1 {secrets['user']}") == "*** ***"
    whole = RegistrySettings.create("${env:FLOE_T_NO_URL}")  # shape unknown until used: the use names it
    with pytest.raises(SecretUnresolved, match=r"schema registry URL: .*\$\{env:FLOE_T_NO_URL\}"):
        whole.client_config()


def test_alert_urls_are_checked_masked_and_resolved_only_at_send_time(secrets, monkeypatch):
    url = "json://floe:${env:FLOE_T_HOOK}@127.0.0.1:1/hook?+X-Token=${env:FLOE_T_USER}"
    check_urls([url, "slack://${env:FLOE_T_NOT_SET}/#data"], "a")  # unresolved here: its scheme is checked
    with pytest.raises(AlertRuleError, match="notify URL 1"):
        check_urls(["nosuch://${env:FLOE_T_NOT_SET}"], "a")
    assert masked_url(url) == "json://floe:${env:FLOE_T_HOOK}@127.0.0.1:1/hook"
    assert masked_url("slack://T1JJ3T3L2/A1BRTD4JD/${env:FLOE_T_HOOK}/#data") == \
        "slack://T1…2/A1…D/${env:FLOE_T_HOOK}/#data"
    assert masked_url("json://floe:clear-pw@host/${file:/run/secrets/t}") == "json://floe:****@host/${file:/run/secrets/t}"
    with _hook() as (port, got):
        sent = Message((f"json://floe:${{env:FLOE_T_HOOK}}@127.0.0.1:{port}/hook?+X-Token=${{env:FLOE_T_USER}}",),
                       "title", "body", failure=False)
        assert deliver(sent, 1) == [(sent.urls[0], True)]
        assert got[0]["X-Token"] == secrets["user"]
        assert got[0]["Authorization"] == "Basic " + base64.b64encode(f"floe:{secrets['hook']}".encode()).decode()
        reports: list[str] = []
        monkeypatch.delenv("FLOE_T_HOOK")
        assert deliver(sent, 2, wait=lambda _: False, report=reports.append) == [(sent.urls[0], False)]
        assert len(got) == 1 and len(reports) == 1 and "${env:FLOE_T_HOOK} cannot be resolved" in reports[0]


def test_a_rotated_or_vanished_secret_file_is_taken_up_at_the_next_use(tmp_path, broker, topic):
    broker.produce(topic, [b"{}"])
    id_file = tmp_path / "client-id"
    id_file.write_text("floe-a\n")
    with KafkaClient(KafkaSettings.create(broker.bootstrap, {"client.id": f"${{file:{id_file}}}"})) as client:
        assert client.partitions(topic)
        id_file.unlink()
        with pytest.raises(SecretUnreadable, match=f"file:{id_file}"):
            client.watermarks(topic)
        id_file.write_text("floe-b\n")
        assert client.watermarks(topic)


def test_the_registry_gets_the_resolved_credentials_and_a_rotated_one_after_a_refusal(tmp_path):
    served = EmbeddedRegistry(credentials="floe:right-pw")
    try:
        creds = tmp_path / "registry-creds"
        creds.write_text("floe:wrong-pw")
        client = registry(RegistrySettings.create(served.url, {"basic.auth.user.info": f"${{file:{creds}}}"}))
        with pytest.raises(RegistryAccessDenied) as refused:
            client.subjects()
        assert "wrong-pw" not in str(refused.value)
        creds.write_text("floe:right-pw\n")
        assert client.subjects() == []  # refused, the file resolved again, asked again
        assert served.client().get_subjects() == []
    finally:
        served.close()


@contextmanager
def _hook() -> Iterator[tuple[int, list[dict[str, str]]]]:
    """A JSON webhook on loopback: its port, and each request's headers as they come."""
    got: list[dict[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            got.append(dict(self.headers))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], got
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def hook():
    with _hook() as found:
        yield found


SCHEMA = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"},
                                                       {"name": "note", "type": "string"}]}


def _every_file(home: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}


def test_secrets_given_by_reference_reach_their_use_and_nothing_under_floe_home(
        tmp_path, broker, topic, floe_home, secrets, hook):
    port, got = hook
    reg_file = tmp_path / "secrets" / "registry"
    served = EmbeddedRegistry(credentials=f"floe:{secrets['registry']}")
    try:
        serialize = avro_serializer(served, SCHEMA, topic)
        broker.produce(topic, [serialize({"id": i, "note": f"n{i}"}) for i in range(20)])
        kafka = ["--kafka-option", "security.protocol=${env:FLOE_T_PROTOCOL}",  # a literal one librdkafka refuses
                 "--kafka-option", "sasl.username=${env:FLOE_T_USER}",
                 "--kafka-option", f"sasl.password=${{file:{tmp_path}/secrets/kafka.properties:password}}"]
        wrong = floe("stream", "create", "refused", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                     "ingest.refused", "--format", "avro", "--schema-registry", served.url, *kafka,
                     "--schema-registry-option", "basic.auth.user.info=floe:${env:FLOE_T_USER}")
        assert wrong.returncode != 0 and "refused access" in wrong.stderr, wrong.stderr
        created = floe("stream", "create", "orders", "--bootstrap", broker.bootstrap, "--topic", topic, "--table",
                       "ingest.orders", "--format", "avro", "--schema-registry", served.url, *kafka,
                       "--schema-registry-option", f"basic.auth.user.info=${{file:{reg_file}}}")
        assert created.returncode == 0, created.stderr
        url = f"json://floe:${{env:FLOE_T_HOOK}}@127.0.0.1:{port}/hook?+X-Token=${{file:{reg_file}}}"
        assert floe("alert", "add", "lagging", "--rule", "lag_messages > 100", "--notify", url).returncode == 0
        tested = floe("alert", "test", "lagging")
        assert tested.returncode == 0, tested.stdout + tested.stderr
        assert got[-1]["X-Token"] == f"floe:{secrets['registry']}"
        ran = floe_process("run", "--until-caught-up")  # its logs and the JVM's in FLOE_HOME, checked below
        assert ran.returncode == 0, ran.stderr
        rows = floe("query", "select count(*) as n from ingest.orders", "--format", "json")
        assert json.loads(rows.stdout) == {"n": 20}, rows.stderr
        shown = floe("stream", "show", "orders", "--format", "json")
        assert "${env:FLOE_T_USER}" in shown.stdout and secrets["user"] not in shown.stdout
    finally:
        served.close()
    files = _every_file(floe_home)
    assert any(p.suffix == ".parquet" for p in files) and any(p.parent.name == "logs" for p in files)
    for name, value in secrets.items():
        leaked = [str(p) for p, data in files.items() if value.encode() in data]
        assert not leaked, f"the {name} secret is written in {leaked}"
    with sqlite3.connect(floe_home / "state.db") as db:
        stored = json.loads(db.execute("select kafka_options from streams where name = 'orders'").fetchone()[0])
    assert stored["sasl.username"] == "${env:FLOE_T_USER}"
    assert stored["sasl.password"] == f"${{file:{tmp_path}/secrets/kafka.properties:password}}"
    state = b"".join(data for p, data in files.items() if p.name.startswith("state.db"))
    assert f"${{file:{reg_file}}}".encode() in state and b"${env:FLOE_T_HOOK}" in state


def test_an_unresolvable_reference_is_one_line_naming_it(broker, topic, monkeypatch):
    monkeypatch.delenv("MISSING_X", raising=False)
    broker.produce(topic, [b'{"a": 1}'])
    result = floe("stream", "create", "s", "--bootstrap", broker.bootstrap, "--topic", topic, "--table", "ingest.s",
                  "--kafka-option", "sasl.password=${env:MISSING_X}")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "${env:MISSING_X}" in lines[0] and "Traceback" not in result.stderr, result.stderr
    assert json.loads(floe("stream", "list", "--format", "json").stdout or "[]") == []
    # set when the stream is created, gone when the engine runs: the stream fails, naming it
    value = _secret("later")
    monkeypatch.setenv("FLOE_T_LATER", value)
    created = floe("stream", "create", "s", "--bootstrap", broker.bootstrap, "--topic", topic, "--table", "ingest.s",
                   "--kafka-option", "sasl.password=${env:FLOE_T_LATER}")
    assert created.returncode == 0, created.stderr
    monkeypatch.delenv("FLOE_T_LATER")
    ran = floe_process("run", "--until-caught-up")  # its stderr, the JVM's included
    assert ran.returncode != 0 and "${env:FLOE_T_LATER}" in ran.stderr and value not in ran.stderr, ran.stderr
    shown = json.loads(floe("stream", "show", "s", "--format", "json").stdout)
    assert "${env:FLOE_T_LATER}" in json.dumps(shown) and value not in json.dumps(shown)


def test_why_a_notification_failed_is_apprise_s_reason_without_the_target_s_secrets(monkeypatch):
    from appliance.observe.notify import deliver, last_reason, send_once

    monkeypatch.setenv("FLOE_T_PW", "pw-7f3e9a1c55")
    monkeypatch.setenv("FLOE_T_TOKEN", "tok-0b8d2e6f4a")
    url = "json://floe:${env:FLOE_T_PW}@127.0.0.1:1/hook/${env:FLOE_T_TOKEN}"
    assert not send_once(url, "t", "b", False)
    reason = last_reason()
    assert "Connection refused" in reason and "pw-7f3e9a1c55" not in reason and "tok-0b8d2e6f4a" not in reason
    reasons: dict[str, str] = {}
    reports: list[str] = []
    assert deliver(Message((url,), "t", "b", failure=False), 1, report=reports.append, reasons=reasons) == [(url, False)]
    assert "Connection refused" in reasons[url] and "Connection refused" in reports[0]
    assert not send_once("nosuch://x", "t", "b", False) and "does not understand" in last_reason()


def test_a_reference_inside_a_uri_s_user_info_is_percent_encoded_and_nowhere_else(tmp_path, monkeypatch):
    from appliance.core.secrets import resolve

    monkeypatch.setenv("FLOE_T_PW", "p@ss/w#rd:1%41")
    (tmp_path / "pw").write_text("f/i@le\n")
    assert resolve("postgresql+psycopg2://floe:${env:FLOE_T_PW}@db:5432/lake") == \
        "postgresql+psycopg2://floe:p%40ss%2Fw%23rd%3A1%2541@db:5432/lake"
    assert resolve(f"https://${{env:FLOE_T_PW}}:${{file:{tmp_path}/pw}}@reg:8081/p?q=${{env:FLOE_T_PW}}") == \
        "https://p%40ss%2Fw%23rd%3A1%2541:f%2Fi%40le@reg:8081/p?q=p@ss/w#rd:1%41"
    assert resolve("${env:FLOE_T_PW}") == "p@ss/w#rd:1%41"  # not in a URI: as it is
    assert resolve("x://h/${env:FLOE_T_PW}@y") == "x://h/p@ss/w#rd:1%41@y"  # in a path, not a user-info


def test_scrub_masks_a_secret_in_every_form_and_every_piece_a_parser_shows(monkeypatch):
    import logging

    from appliance.core.secrets import ScrubbingFormatter, resolve, scrub

    secret = f"Sx@y{uuid.uuid4().hex[:6]}/zz#tail"
    monkeypatch.setenv("FLOE_T_CUT", secret)
    resolve("postgresql://u:${env:FLOE_T_CUT}@h/d")  # resolved once here: remembered for masking
    head, rest = secret.split("@")
    cut = rest.split("/")[0]
    assert scrub(f'could not translate host name "{cut}" to addr') == 'could not translate host name "***" to addr'
    assert scrub(f"as given {secret}; encoded {secret.replace('@', '%40').replace('/', '%2F').replace('#', '%23')}") \
        == "as given ***; encoded ***"
    assert scrub(f"fragment {cut}/zz and {cut}") == "fragment *** and ***"
    # pieces only where they stand alone; what comes before the first cut is taken for the password, never shown
    assert scrub(f"words stay: yzz, tails, tailor, tail_x, {head}") == f"words stay: yzz, tails, tailor, tail_x, {head}"
    assert scrub("clear one: mysql://me:hunter22@db/x") == "clear one: mysql://me:***@db/x"
    assert scrub("given: hunter22 and hun", ["hunter22"]) == "given: *** and hun"
    record = logging.LogRecord("floe", logging.ERROR, __file__, 1, "failed at host %s", (cut,), None)
    try:
        raise RuntimeError(f"connect to {secret} failed")
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    line = ScrubbingFormatter("%(message)s").format(record)
    assert "failed at host ***" in line and "connect to *** failed" in line and cut not in line
