"""Alert rules, the measures they read and the incidents they open: fast, on a real state database."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from appliance.config.alerts import Measure, make_alert, parse_rule
from appliance.config.settings import load_settings
from appliance.control.alerts import add_alert
from appliance.core.clock import now
from appliance.core.errors import AlertRuleError
from appliance.core.vocabulary import MaintenanceTask, RunOutcome, RunTrigger, StreamPhase
from appliance.ingest.batch import timestamp_sample, weighted_median
from appliance.kafka.settings import KafkaSettings
from appliance.model.mapping import Column, Mapping
from appliance.model.stage import StageDef
from appliance.model.stream import StreamDef
from appliance.observe.alerts import Alerter, AlertThread, unsent
from appliance.observe.measures import Window, stream_reading
from appliance.observe.notify import Message, Notifier
from appliance.state.records import BatchRecord, RunRecord, StreamStatus
from appliance.state.store import StateStore
from appliance.views.alerts import alerts_overview

from conftest import wait_for

NOW_MS = 1_800_000_000_000
HOOK = ("json://h/x",)


@pytest.mark.parametrize("text, measure, op, threshold", [
    ("lag_messages > 100000", Measure.LAG_MESSAGES, ">", 100000),
    ("lag_seconds>=5m", Measure.LAG_SECONDS, ">=", 300),
    ("freshness_seconds < 1.5", Measure.FRESHNESS_SECONDS, "<", 1.5),
    ("dead_letter_ratio > 0.05", Measure.DEAD_LETTER_RATIO, ">", 0.05),
    ("  stalled ", Measure.STALLED, "", None),
    ("engine_down", Measure.ENGINE_DOWN, "", None),
])
def test_rules_parse(text, measure, op, threshold):
    rule = parse_rule(text)
    assert (rule.measure, rule.op, rule.threshold) == (measure, op, threshold)


def test_windows_default_by_rule_and_follow_for():
    hook = ("json://h/x",)
    assert make_alert("a", "dead_letter_ratio > 0.1", notify=hook).window == 300
    assert make_alert("a", "failed", notify=hook).window == 60
    assert make_alert("a", "lag_messages > 1", notify=hook).window == 0
    assert make_alert("a", "stalled", for_="30s", notify=hook).window == 30
    with pytest.raises(AlertRuleError, match="at least one Apprise URL"):
        make_alert("a", "failed", notify=())
    with pytest.raises(AlertRuleError, match="alert name"):
        make_alert("a b", "failed", notify=hook)


def status(**fields) -> StreamStatus:
    return dataclasses.replace(StreamStatus("s", phase=StreamPhase.RUNNING), **fields)


def test_an_alert_added_without_for_shows_the_rules_default_not_0s(store):
    # The window an alert runs with is what it shows: the rule's default when none was given, said as such.
    settings, _ = store
    for name, rule, for_ in [("lag", "lag_messages > 5", None), ("stuck", "stalled", None), ("fail", "failed", None),
                             ("slow", "throttled", ""), ("lag2", "lag_messages > 5", "90s"), ("dl", "dead_letter_ratio > 0.1", "2h")]:
        add_alert(settings, name, rule, ["json://h/x"], for_=for_)
    shown = {a.name: (a.summary()["for"], a.window) for a in alerts_overview(settings)[0]}
    assert shown == {"lag": ("at once (default)", 0), "stuck": ("5m (default)", 300), "fail": ("1m (default)", 60),
                     "slow": ("1m (default)", 60), "lag2": ("90s", 90), "dl": ("2h", 7200)}


def test_lag_seconds_is_bounded_by_the_newest_commit_and_the_last_time_nothing_waited():
    assert status(lag=0).lag_seconds(NOW_MS) == 0
    assert status(lag=None).lag_seconds(NOW_MS) is None
    # An hour idle, then a message arrives: it has waited 2 s, not an hour.
    behind = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(NOW_MS / 1000 - 2)) + ".000+00:00"
    assert status(lag=5, newest_kafka_ts=NOW_MS - 3_600_000, behind_since=behind).lag_seconds(NOW_MS) == 2
    assert status(lag=5, newest_kafka_ts=NOW_MS - 1500).lag_seconds(NOW_MS) == 1.5


def test_freshness_is_the_last_batch_when_caught_up_and_grows_while_messages_wait():
    assert status(lag=0, freshness_ms=800, newest_kafka_ts=NOW_MS - 60_000).freshness_seconds(NOW_MS) == 0.8
    assert status(lag=10, freshness_ms=800, newest_kafka_ts=NOW_MS - 60_000).freshness_seconds(NOW_MS) == 60


def batch(messages: int, dead: int, throttle: int = 0) -> BatchRecord:
    return BatchRecord("s", now(), now(), 10, messages, messages - dead, dead, 0, None, None, "{}", 0,
                       throttle_ms=throttle)


@pytest.mark.parametrize("rule, fields, batches, stalled, breached, value", [
    ("lag_messages > 100", {"lag": 101}, [], None, True, 101.0),
    ("lag_messages > 100", {"lag": 100}, [], None, False, 100.0),
    ("dead_letter_ratio > 0.05", {}, [batch(100, 10), batch(100, 0)], None, False, 0.05),
    ("dead_letter_ratio > 0.05", {}, [batch(100, 11), batch(100, 0)], None, True, 0.055),
    ("dead_letter_ratio > 0.05", {}, [], None, False, None),
    ("failed", {"phase": StreamPhase.FAILED, "last_error": "boom"}, [], None, True, "boom"),
    ("auth_failed", {"phase": StreamPhase.FAILED, "error_kind": "KafkaAccessDenied", "last_error": "denied"}, [],
     None, True, "denied"),
    ("auth_failed", {"phase": StreamPhase.FAILED, "error_kind": "BrokerUnreachable"}, [], None, False, None),
    ("throttled", {}, [batch(10, 0, throttle=250)], None, True, 250.0),
    ("throttled", {}, [batch(10, 0)], None, False, 0.0),
    ("stalled", {}, [], 61.0, True, 61.0),
    ("stalled", {}, [], 59.0, False, 59.0),
])
def test_each_rule_reads_its_measure(rule, fields, batches, stalled, breached, value, store):
    _, state = store
    for b in batches:
        state.record_batch(b)
    state.record_batch(dataclasses.replace(batch(1000, 1000, 9999), committed_at="2020-01-01T00:00:00.000+00:00"))
    [totals] = state.batch_totals(["2026-01-01T00:00:00.000+00:00"])  # the old batch is left out
    window = Window(*totals.get("s", (0, 0, 0)))
    alert = make_alert("a", rule, for_="1m" if rule == "stalled" else None, notify=("json://h/x",))
    reading = stream_reading(alert, status(**fields), window, stalled, paused=False)
    assert (reading.breached, reading.value) == (breached, value)
    assert not stream_reading(alert, status(**fields), window, stalled, paused=True).breached


def test_dead_letter_ratio_and_batch_timestamps():
    assert Window(0, 0).dead_letter_ratio is None
    sample = timestamp_sample([5, None, 3, 1, 0, 4, 2])
    assert sample == [1, 2, 3, 4, 5]
    big = timestamp_sample(list(range(1, 100_001)))
    assert len(big) == 256 and big[0] == 1 and big[-1] == 100_000
    assert weighted_median([(sample, 5)]) == 3
    # Two tasks: one with a thousand messages around 10, one with ten around 1000: the median is ~10.
    assert weighted_median([(timestamp_sample(list(range(1, 1001))), 1000), ([1000] * 10, 10)]) in range(495, 510)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def store(floe_home):
    settings = load_settings()
    with StateStore(settings.state_db) as state:
        state.add_stream(StreamDef(name="s", id="1", topic="t", kafka=KafkaSettings.create("h:9092"),
                                   format="json",
                                   table="ns.t", dead_letter_table="ns.t_dlq",
                                   mapping=Mapping((Column("id", "long", ("id",)),)),
                                   starting_offsets="earliest", start_positions={}, paused=False, created_at=now()))
        yield settings, state


def test_an_incident_opens_after_its_for_and_resolves_after_the_cooldown(store):
    settings, state = store
    settings = dataclasses.replace(settings, alerting=dataclasses.replace(settings.alerting, cooldown=10.0))
    state.add_alert(make_alert("lag", "lag_messages > 100", "s", "30s", ("json://h/x",)))
    clock = Clock()
    alerter = Alerter(settings, state, None, clock)
    state.update_status("s", phase="running", lag=500)
    alerter.evaluate()
    clock.t += 29
    alerter.evaluate()
    assert state.open_incidents() == [], "not before it has held for 30 s"
    clock.t += 1
    alerter.evaluate()
    opened = state.open_incidents()
    assert [(i.alert, i.subject, i.value) for i in opened] == [("lag", "s", "500")]
    state.update_status("s", lag=0)
    alerter.evaluate()
    clock.t += 9
    alerter.evaluate()
    assert state.open_incidents() == opened, "resolved only once clear for the cooldown"
    state.update_status("s", lag=500)  # flapping: back over, the clear spell starts again
    alerter.evaluate()
    state.update_status("s", lag=0)
    alerter.evaluate()
    clock.t += 10
    alerter.evaluate()
    assert state.open_incidents() == [] and len(state.incidents("lag")) == 1
    kinds = [e.kind for e in state.events()]
    assert kinds.count("incident_opened") == 1 and kinds.count("incident_resolved") == 1


def test_maintenance_failed_follows_each_tables_latest_run(store):
    settings, state = store
    state.add_alert(make_alert("maint", "maintenance_failed", None, None, ("json://h/x",)))
    alerter = Alerter(settings, state, None, Clock())
    state.record_run(RunRecord(MaintenanceTask.COMPACT, "ns.t", RunTrigger.SCHEDULE, RunOutcome.FAILED, "disk full"))
    alerter.evaluate()
    assert [(i.subject, i.value) for i in state.open_incidents()] == [("ns.t", "compact failed: disk full")]
    state.record_run(RunRecord(MaintenanceTask.COMPACT, "ns.t", RunTrigger.SCHEDULE, RunOutcome.OK))
    alerter.evaluate()
    alerter.clock.t += 61
    alerter.evaluate()
    assert state.open_incidents() == []


def test_an_incident_of_a_deleted_stream_or_removed_alert_is_closed(store):
    settings, state = store
    state.add_alert(make_alert("f", "failed", "s", "0s", ("json://h/x",)))
    alerter = Alerter(settings, state, None, Clock())
    state.update_status("s", phase="failed", last_error="boom")
    alerter.evaluate()
    [incident] = state.open_incidents()
    state.mark_notified(incident.id, resolved=False)  # its opening got through
    state.remove_stream("s")
    alerter.evaluate()
    assert state.open_incidents() == []
    assert unsent(settings, state) == [], "closed with nothing to tell: no resolution is owed after a restart"


def add_stage(state: StateStore, name: str, paused: bool = False) -> None:
    state.add_stage(StageDef(name=name, id=f"id-{name}", source="ns.t", sql="select * from source",
                             table=f"ns.{name}", kind="append", paused=paused, created_at=now()))


def queued(notifier: Notifier) -> list[Message]:
    """What the alerter handed a notifier that was never started: still in its queue."""
    out = []
    while not notifier.queue.empty():
        out.append(notifier.queue.get_nowait())
    return out


def test_a_failing_stage_opens_an_incident_on_stage_name_and_resolves(store):
    settings, state = store
    settings = dataclasses.replace(settings, alerting=dataclasses.replace(settings.alerting, cooldown=10.0))
    add_stage(state, "daily")
    state.add_alert(make_alert("stage_down", "failed", for_="30s", notify=HOOK, stage="daily"))
    notifier = Notifier(settings, threading.Event())
    clock = Clock()
    alerter = Alerter(settings, state, notifier, clock)
    state.update_stage_status("daily", phase="failed", last_error="bad sql")
    state.update_status("s", phase="failed", last_error="boom")  # the alert names a stage: not this stream
    alerter.evaluate()
    clock.t += 29
    alerter.evaluate()
    assert state.open_incidents() == [], "not before it has failed for 30 s"
    clock.t += 1
    alerter.evaluate()
    assert [(i.alert, i.subject, i.value) for i in state.open_incidents()] == [("stage_down", "stage daily", "bad sql")]
    [note] = queued(notifier)
    assert note.title == "[Floe] OPEN: stage_down (failed) on stage daily" and note.subject == "daily"
    assert note.body == "failed for stage daily: bad sql. Look at the stage's last error: `floe stage show daily`."
    assert [e.stream for e in state.events() if e.kind == "incident_opened"] == ["daily"]

    state.update_stage_status("daily", phase="up_to_date", last_run_at=now())
    alerter.evaluate()
    clock.t += 10
    alerter.evaluate()
    assert state.open_incidents() == [] and len(state.incidents("stage_down")) == 1
    [note] = queued(notifier)
    assert note.title == "[Floe] RESOLVED: stage_down (failed) on stage daily" and note.resolved


def test_a_stage_lagging_with_no_run_for_the_window_stalls_and_a_paused_one_never_alerts(store):
    settings, state = store
    for name, paused in (("lagging", False), ("held", True), ("current", False)):
        add_stage(state, name, paused)
        state.update_stage_status(name, phase="running" if name != "current" else "up_to_date",
                                  lag_snapshots=0 if name == "current" else 3, last_run_at=now())
    state.add_alert(make_alert("stuck", "stalled", for_="1s", notify=HOOK))
    state.add_alert(make_alert("held_down", "failed", for_="0s", notify=HOOK, stage="held"))
    state.update_stage_status("held", phase="failed", last_error="paused while failing")
    alerter = Alerter(settings, state, None, Clock())
    alerter.evaluate()
    assert state.open_incidents() == [], "waiting only began: not before the window"

    def opened():
        alerter.evaluate()
        return state.open_incidents()

    [incident] = wait_for(opened, timeout=20, what="the lagging stage to stall")
    assert (incident.alert, incident.subject) == ("stuck", "stage lagging") and float(incident.value) >= 1
    # A run that catches up is what a stalled stage waits for.
    state.update_stage_status("lagging", phase="up_to_date", lag_snapshots=0, last_run_at=now())
    alerter.evaluate()
    alerter.clock.t += settings.alerting.cooldown
    alerter.evaluate()
    assert state.open_incidents() == []
    assert [i.subject for i in state.incidents()] == ["stage lagging"], "neither the paused nor the current one"


def test_failed_naming_no_subject_watches_every_stream_and_stage_and_the_views_say_so(store):
    settings, state = store
    add_stage(state, "daily")
    state.add_alert(make_alert("any_fail", "failed", for_="0s", notify=HOOK))
    state.add_alert(make_alert("s_fail", "failed", "s", "0s", HOOK))
    state.add_alert(make_alert("any_lag", "lag_messages > 0", notify=HOOK))
    state.add_alert(make_alert("daily_fail", "failed", for_="0s", notify=HOOK, stage="daily"))
    state.update_status("s", phase="failed", last_error="boom", lag=5)
    state.update_stage_status("daily", phase="failed", last_error="bad sql", lag_snapshots=1)
    Alerter(settings, state, None, Clock()).evaluate()
    assert sorted((i.alert, i.subject) for i in state.open_incidents()) == [
        ("any_fail", "s"), ("any_fail", "stage daily"), ("any_lag", "s"), ("daily_fail", "stage daily"),
        ("s_fail", "s")]
    shown = {a.name: a.summary() for a in alerts_overview(settings)[0]}
    assert [(shown[n]["subject"], shown[n]["stream"], shown[n]["stage"]) for n in sorted(shown)] == [
        ("*", "*", "*"), ("*", "*", ""), ("stage daily", "", "daily"), ("stream s", "s", "")]


def test_a_stage_alert_takes_failed_or_stalled_and_no_stream_each_mistake_one_line(store):
    settings, state = store
    add_stage(state, "daily")
    for kwargs, problem in [
        ({"rule": "lag_messages > 5", "stage": "daily"}, "lag_messages is not measured on a stage"),
        ({"rule": "maintenance_failed", "stage": "daily"}, "maintenance_failed is not measured on a stage"),
        ({"rule": "failed", "stream": "s", "stage": "daily"}, "name a stream or a stage, not both"),
        ({"rule": "failed", "stage": "nope"}, "no stage named 'nope' \\(`floe stage list` shows them\\)"),
    ]:
        with pytest.raises(AlertRuleError, match=problem) as raised:
            add_alert(settings, "a", notify=HOOK, **kwargs)
        assert "\n" not in str(raised.value)
    assert state.stored_alerts() == []
    made = add_alert(settings, "a", "stalled", HOOK, stage="daily")
    assert made.stage == "daily" and [(a.name, a.stage, a.stream) for a in state.stored_alerts()] == [
        ("a", "daily", None)]
    assert [e.message for e in state.events() if e.kind == "alert_added"] == ["alert a: stalled on stage daily"]


def test_floe_toml_alerts_may_name_a_stage(floe_home):
    floe_home.mkdir(parents=True, exist_ok=True)
    entry = '[[alerts]]\nname = "st"\nstage = "daily"\nnotify = ["json://h/x"]\nrule = '
    (floe_home / "floe.toml").write_text(entry + '"failed"\n')
    [alert] = load_settings().alerting.alerts
    assert (alert.stage, alert.stream, alert.origin, alert.window) == ("daily", None, "config", 60)
    (floe_home / "floe.toml").write_text(entry + '"lag_seconds > 5"\n')
    with pytest.raises(AlertRuleError, match="alerts entry 1: alert st: lag_seconds is not measured on a stage"):
        load_settings()


def test_notifications_that_never_got_through_are_queued_again_as_first_made(store):
    settings, state = store
    add_stage(state, "daily")
    state.add_alert(make_alert("f", "failed", "s", "0s", HOOK))
    state.add_alert(make_alert("gone", "failed", for_="0s", notify=("json://h/gone",), stage="daily"))
    state.add_alert(make_alert("st", "failed", for_="0s", notify=("json://h/st",), stage="daily"))
    notifier = Notifier(settings, threading.Event())
    alerter = Alerter(settings, state, notifier, Clock())
    state.update_status("s", phase="failed", last_error="boom")
    state.update_stage_status("daily", phase="failed", last_error="bad sql")
    alerter.evaluate()
    first = {n.incident: n for n in queued(notifier)}
    ids = {i.alert: i.id for i in state.open_incidents()}
    assert sorted(first) == sorted(ids.values())
    state.mark_notified(ids["f"], resolved=False)  # the only one delivered before the engine stopped
    state.update_status("s", phase="running", last_error="")
    alerter.evaluate()
    alerter.clock.t += settings.alerting.cooldown
    alerter.evaluate()
    [resolution] = queued(notifier)  # f's, never delivered either
    state.remove_alert("gone")  # from floe.toml, say, while the engine was down: nowhere to send it
    state.add_alert(make_alert("down", "engine_down", notify=HOOK))  # `floe watch` sends those
    state.open_incident("down", "engine", "engine_down", "no heartbeat", "the engine is down")

    again = unsent(settings, state)
    assert [(m.incident, m.resolved, m.failure, m.urls, m.title, m.body) for m in again] == [
        (ids["f"], True, False, HOOK, resolution.title, resolution.body),
        (ids["st"], False, True, ("json://h/st",), first[ids["st"]].title, first[ids["st"]].body)]
    assert again[0].title == "[Floe] RESOLVED: f (failed) on stream s" and again[1].subject == "daily"

    thread = AlertThread(settings, threading.Event())  # not started: its notifier's queue keeps them
    assert thread.requeue(state) == 2 and len(queued(thread.notifier)) == 2
    for message in again:
        state.mark_notified(message.incident, message.resolved)
    assert unsent(settings, state) == [] and thread.requeue(state) == 0
    told = [e.message for e in state.events() if e.kind == "notification_requeued"]
    assert told == ["queued again 2 notifications that had not got through before the engine stopped"], \
        "once, and only when there were some"


def test_the_engines_alert_thread_sends_them_again_when_it_starts(store):
    settings, state = store
    settings = dataclasses.replace(settings, alerting=dataclasses.replace(
        settings.alerting, notify_attempts=1, evaluate_interval=3600.0))  # it only starts, never evaluates
    state.add_alert(make_alert("f", "failed", "s", "0s", ("json://127.0.0.1:9/nobody",)))  # nothing listens
    state.update_status("s", phase="failed", last_error="boom")
    Alerter(settings, state, None, Clock()).evaluate()  # an engine that stopped before it notified
    assert [i.notified_open for i in state.open_incidents()] == [False]
    stopping = threading.Event()
    thread = AlertThread(settings, stopping)
    thread.start()
    try:
        failed = wait_for(lambda: [e for e in state.events() if e.kind == "notification_failed"], timeout=30,
                          what="the queued notification's attempt")
    finally:
        stopping.set()
        thread.join(30)
    assert not thread.is_alive()
    assert "[Floe] OPEN: f (failed) on stream s" in failed[0].message and "failed after 1 attempt" in failed[0].message
    assert [e.kind for e in state.events()].count("notification_requeued") == 1


def test_the_audit_trail_masks_what_the_cli_masks(floe_home):
    from appliance.control.audit import record
    from appliance.control.streams import StreamRequest
    from appliance.kafka.settings import RegistrySettings

    request = StreamRequest(
        name="cloud", topic="orders", table="ns.orders", dead_letter_table="ns.orders_dlq",
        kafka=KafkaSettings.create("broker:9092", {"security.protocol": "SASL_SSL", "sasl.username": "KEY",
                                                   "sasl.password": "kafka-pw-1"}),
        registry=RegistrySettings.create("https://user:reg-pw-2@registry:8081",
                                         {"basic.auth.user.info": "KEY:reg-pw-3"}))
    record(load_settings(), "stream create", "cloud", {"request": request, "s3.secret-access-key": "s3-pw-4"}, "ok")
    row = StateStore(load_settings().state_db).audit_trail()[0]
    for secret in ("kafka-pw-1", "reg-pw-2", "reg-pw-3", "s3-pw-4"):
        assert secret not in row.arguments
    assert '"sasl.username": "KEY"' in row.arguments and '"address": "broker:9092"' in row.arguments
