"""Routed streams (`--route-by`): one topic's messages, each into the table a field of it names, exactly once."""

from __future__ import annotations

import orjson
import pytest

from appliance.config.settings import load_settings
from appliance.core.errors import RouteError
from appliance.ingest.routing import ROUTE_STAGE, Router, RouteTarget, merged_new_routes
from appliance.ingest.batch import TaskResult
from appliance.kafka.records import RawBatch
from appliance.model.mapping import Mapping
from appliance.model.routes import RouteRule, read_from, unlanded
from appliance.state.store import StateStore

from conftest import floe


def test_a_value_names_its_table_made_a_valid_name_and_a_nested_field_is_a_path():
    rule = RouteRule.parse("type", "analytics.events_{value}")
    assert rule.route("click") == ("analytics.events_click", "")
    assert rule.route("Page-View") == ("analytics.events_page_view", "")
    assert rule.route(42) == ("analytics.events_42", "")
    assert rule.route(True) == ("analytics.events_true", "")
    assert RouteRule.parse("kind", "{value}.events").route("9lives") == ("_9lives.events", "")
    nested = RouteRule.parse("event.kind", "analytics.e_{value}")
    assert nested.path == ("event", "kind") and nested.field == "event.kind"


@pytest.mark.parametrize("value, says", [
    (None, "route field type is missing or null"),
    ({"a": 1}, "route field type is a record, not a text or a number"),
    ([1], "route field type is a list"),
    ("", "has no letter or digit"),
    ("!!!", "has no letter or digit"),
    ("x" * 200, "makes no table name"),
])
def test_a_missing_field_or_a_value_that_names_nothing_valid_says_why(value, says):
    table, why = RouteRule.parse("type", "analytics.events_{value}").route(value)
    assert table is None and says in why


@pytest.mark.parametrize("field, template, says", [
    ("", "a.t_{value}", "--route-by needs a field"),
    ("  ", "a.t_{value}", "--route-by needs a field"),
    ("a..b", "a.t_{value}", "must name a field of the messages' value"),
    ("@key", "a.t_{value}", "must name a field of the messages' value"),
    ("type", "a.events", "does not name {value}"),
    ("type", "a.t_{topic}", "names {topic}"),
    ("type", "a.t_{value!r}", "names {value}"),
    ("type", "t_{value}", "makes no table name"),
])
def test_a_bad_field_or_template_is_refused(field, template, says):
    with pytest.raises(RouteError, match=".*") as caught:
        RouteRule.parse(field, template)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_table_skips_what_it_committed_and_a_batch_reads_from_the_anchor():
    assert unlanded(None, 0, 5)  # a table that never committed takes everything
    assert unlanded({0: 10}, 1, 3)  # nor anything of a partition it never committed
    assert not unlanded({0: 10}, 0, 9) and unlanded({0: 10}, 0, 10)
    assert read_from({0: 0, 1: 4}, None) == {0: 0, 1: 4}
    assert read_from({0: 0, 1: 4}, {0: 7}) == {0: 7, 1: 4}


def _raw(values: list[bytes | None]) -> RawBatch:
    n = len(values)
    return RawBatch(partitions=[0] * n, offsets=list(range(n)), timestamps=[1] * n, keys=[None] * n,
                    values=values, headers=[None] * n)


def test_a_task_splits_its_messages_by_route_and_hands_back_new_tables_with_samples():
    rule = RouteRule.parse("meta.type", "ev.t_{value}")
    known = RouteTarget(Mapping.of_table(()), None, {0: 2})
    router = Router(rule, {"ev.t_click": known}, {"ev.t_bad": "table ev.t_bad is written by stage 's'"})
    values = [orjson.dumps({"meta": {"type": t}, "n": i}) for i, t in enumerate(["click", "buy", "click", "Buy"])]
    values += [b"{not json", orjson.dumps({"n": 9}), orjson.dumps({"meta": {"type": "bad"}}), None, b"[1]"]
    groups, new, bad = router.split(_raw(values), None, 1 << 20)
    assert groups == {"ev.t_click": [0, 2]}  # the skip by committed offsets is the write's, after the split
    assert list(new) == ["ev.t_buy"] and new["ev.t_buy"][0] == "buy" and new["ev.t_buy"][1] == [values[1], values[3]]
    reasons = {i: (stage, why) for i, stage, why in bad}
    assert reasons[4][0] == "decode" and "invalid JSON" in reasons[4][1]
    assert reasons[5] == (ROUTE_STAGE, "route field meta.type is missing or null: no table to route the message to")
    assert reasons[6] == (ROUTE_STAGE, "table ev.t_bad: table ev.t_bad is written by stage 's'")
    assert reasons[7] == ("validate", "empty message (no value)")
    assert reasons[8][0] == "decode"
    merged = merged_new_routes([TaskResult([], new_routes=new),
                                TaskResult([], new_routes={"ev.t_buy": ("Buy", [b"x"]), "ev.t_z": ("z", [b"y"])})])
    assert merged == {"ev.t_buy": ("buy", [values[1], values[3], b"x"]), "ev.t_z": ("z", [b"y"])}


def test_stream_create_refuses_a_bad_route_in_one_line():
    for args, says in [
        (["--topic-pattern", "x.*", "--route-by", "type", "--table", "a.t_{value}"], "give --topic, not --topic-pattern"),
        (["--topic", "t", "--route-by", "type", "--table", "a.events"], "does not name {value}"),
        (["--topic", "t", "--route-by", "", "--table", "a.t_{value}"], "--route-by needs a field"),
        (["--topic", "t", "--route-by", "type", "--table", "a.t_{value}", "--mode", "upsert"],
         "append streams only"),
    ]:
        done = floe("stream", "create", "ev", "--bootstrap", "127.0.0.1:9", *args)
        assert done.returncode != 0 and says in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    if load_settings().state_db.exists():
        with StateStore(load_settings().state_db) as state:
            assert not state.streams(), "a refused create records nothing"
