"""Routed upsert streams (`--route-by F --mode upsert --key K`): each route's table holds each key's newest row of
its own kind, exactly once; a key's rows in two route tables are two keys."""

from __future__ import annotations

import datetime as dt
import random

import numpy as np
import orjson
import pytest

from appliance.config.settings import ensure_home, load_settings
from appliance.control.routes import NEEDS_KEY, NO_CDC
from appliance.core.errors import MappingError
from appliance.decode.json_format import JsonFormat
from appliance.decode.keys import Keyed
from appliance.ingest.batch import BatchResult, BatchSpec, TaskResult
from appliance.ingest.route_tables import route_mapping
from appliance.ingest.routed import routed_changes
from appliance.ingest.routing import Router, RouteTarget
from appliance.kafka.records import RawBatch
from appliance.kafka.settings import KafkaSettings
from appliance.mergeonread.plans import Keys
from appliance.model.inference import infer_mapping
from appliance.model.mapping import Mapping
from appliance.model.routes import RouteRule
from appliance.state.store import StateStore

from conftest import floe

KINDS = ("click", "view", "buy")
TABLES = {kind: f"an.ev_{kind}" for kind in KINDS}


def test_stream_create_takes_upsert_with_a_key_and_refuses_cdc_or_a_missing_key_in_one_line():
    for args, says in [
        (["--mode", "upsert"], NEEDS_KEY),
        (["--key", "id"], "--key is for upsert streams: add --mode upsert"),
        (["--cdc", "debezium"], NO_CDC),
        (["--mode", "upsert", "--key", "id", "--cdc", "debezium"], NO_CDC),
    ]:
        done = floe("stream", "create", "ev", "--bootstrap", "127.0.0.1:9", "--topic", "t", "--route-by", "type",
                    "--table", "a.t_{value}", *args)
        assert done.returncode != 0 and says in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_routes_mapping_must_hold_the_key_or_the_route_is_refused():
    from appliance.model.stream import StreamDef

    stream = StreamDef(name="ev", id="x", topic="t", kafka=KafkaSettings.create("127.0.0.1:9"), format="json",
                       table="an.ev_{value}", dead_letter_table="an.ev_dlq", mapping=Mapping.of_table(()),
                       starting_offsets="earliest", start_positions={}, paused=False, created_at="now",
                       route_by="type", mode="upsert", key=("id",))
    assert "id" in [c.name for c in route_mapping(stream, [orjson.dumps({"type": "a", "id": 1, "x": 2})]).columns]
    with pytest.raises(MappingError, match="key column 'id' is not a column of the mapping"):
        route_mapping(stream, [orjson.dumps({"type": "a", "x": 2})])
    with pytest.raises(MappingError, match="key column 'id' is double"):
        route_mapping(stream, [orjson.dumps({"type": "a", "id": 1.5})])


def _raw(values: list[bytes | None], partitions: list[int], keys: list[bytes | None], kinds: list[str]) -> RawBatch:
    n = len(values)
    offsets: dict[int, int] = {}
    at = []
    for p in partitions:
        at.append(offsets.get(p, 0))
        offsets[p] = at[-1] + 1
    return RawBatch(partitions=partitions, offsets=at, timestamps=list(range(1000, 1000 + n)), keys=keys,
                    values=values, headers=[[("kind", k.encode())] for k in kinds])


def test_a_task_reduces_each_routes_messages_to_each_keys_newest_and_hands_back_its_keys():
    """Routed by a header (so that a tombstone, which has no value, has a route too): each route's group reduced
    to each key's newest message by `precedence`, the same key in two kinds two rows, a tombstone's key deleted in
    its own route only, a message without the key a dead letter with the reason; and what a table committed in an
    interrupted attempt is not written to it again."""
    from appliance.tables.catalog import Catalog
    from appliance.tables.datafiles import TableTarget
    from appliance.tables.iceberg_schemas import dead_letter_iceberg_schema, target_iceberg_schema

    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    mapping = infer_mapping([{"id": 1, "v": "x"}])
    targets = {t: TableTarget.of(catalog.ensure_table(t, target_iceberg_schema(mapping))[0]) for t in ("r.t_a", "r.t_b")}
    dead = TableTarget.of(catalog.ensure_table("r.dlq", dead_letter_iceberg_schema())[0])
    rule = RouteRule.parse("@header.kind", "r.t_{value}")
    #            a:1 v0   b:1 v1   a:1 v2   a:2 v3   b:2 gone  a:- v5   b:1 v6   a:3 v7 (p1)
    msgs = [("a", 1, "v0", 0), ("b", 1, "v1", 0), ("a", 1, "v2", 0), ("a", 2, "v3", 0), ("b", 2, None, 0),
            ("a", None, "v5", 0), ("b", 1, "v6", 0), ("a", 3, "v7", 1)]
    values = [None if v is None else orjson.dumps({"v": v} if k is None else {"id": k, "v": v}) for _, k, v, _ in msgs]
    raw = _raw(values, [p for *_, p in msgs], [orjson.dumps({"id": k}) for _, k, _, _ in msgs], [m[0] for m in msgs])
    keyed = Keyed(("id",))
    router = Router(rule, {"r.t_a": RouteTarget(mapping, targets["r.t_a"], {1: 1}),  # took partition 1's offset 0
                           "r.t_b": RouteTarget(mapping, targets["r.t_b"], None)}, {}, keyed)
    spec = BatchSpec(stream="s", stream_id="id", topic="t", kafka=KafkaSettings.create("127.0.0.1:9"), group="g",
                     mapping=Mapping.of_table(()), target=dead, dead_letter=dead, landed={}, max_message_bytes=1 << 20,
                     fetch_timeout=1.0, fmt=JsonFormat(), router=router)
    done = router.write(spec, [], raw, [], dt.datetime.now(dt.UTC), 0.0)
    assert not done.new_routes and not done.evolutions
    a, b = done.routed_keys["r.t_a"], done.routed_keys["r.t_b"]
    assert sorted(a.offsets.tolist()) == [2, 3]  # key 1's newest (v2) and key 2's; key 3's was taken before
    assert b.offsets.tolist() == [6]  # key 1 of kind b: its own row, v6
    assert done.routed_deleted["r.t_b"].offsets.tolist() == [4] and "r.t_a" not in done.routed_deleted
    assert [f.record_count for f in done.routed_files["r.t_a"]] == [2] and done.rows == 3
    assert len(a) == sum(f.record_count for f in done.routed_files["r.t_a"])  # a key per row, in the files' order
    assert done.dead_letter_rows == 1  # the message of kind a without its key
    assert "key column 'id' is null" in str(_dead_letters(done)[0])


def _dead_letters(done: TaskResult) -> list:
    import pyarrow.parquet as pq

    rows = []
    for f in done.dead_letter_files:
        rows += pq.read_table(f.file_path.removeprefix("file://")).column("error_message").to_pylist()
    return rows


def test_a_batch_hands_each_route_table_its_files_with_their_keys_in_the_tasks_order():
    def keys(*offsets: int) -> Keys:
        n = len(offsets)
        return Keys(np.array([[o] for o in offsets], np.uint64), np.zeros(n, np.int32), np.array(offsets, np.int64),
                    np.zeros(n, np.int64))

    one = TaskResult([], routed_files={"t_a": ["f1"], "t_b": ["f2"]}, routed_keys={"t_a": keys(1, 2), "t_b": keys(3)})
    two = TaskResult([], routed_files={"t_a": ["f3"]}, routed_keys={"t_a": keys(7)},
                     routed_deleted={"t_c": keys(9)})
    changes = routed_changes(BatchResult([one, two]), keyed=True)
    assert sorted(changes) == ["t_a", "t_b", "t_c"]  # t_c: only a delete, still a commit
    assert changes["t_a"].files == ["f1", "f3"] and changes["t_a"].rows.offsets.tolist() == [1, 2, 7]
    assert changes["t_c"].files == [] and changes["t_c"].deleted.offsets.tolist() == [9]
    assert routed_changes(BatchResult([one, two]), keyed=False) == {"t_a": ["f1", "f3"], "t_b": ["f2"]}
