"""Merge-on-read's parts, in-process on a real SQLite catalog and warehouse (no broker, no Spark): the one
precedence rule, keys as words, the key index built from a table another writer loaded, carried through
compaction and retention without a rebuild, checkpointed and loaded, and built again whenever it cannot
be proven current."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
import re
import shutil
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from appliance.config.policy import Policy
from appliance.config.settings import ensure_home, load_settings
from appliance.config.units import parse_period
from appliance.decode.keys import CODES, OP, newest_per_key
from appliance.decode.parsed import Op
from appliance.ingest.indexes import index_for, preload
from appliance.kafka.settings import KafkaSettings
from appliance.maintenance.compaction import compact
from appliance.maintenance.policies import effective_policy
from appliance.maintenance.retention import apply_retention
from appliance.mergeonread.building import build
from appliance.mergeonread.commit import checkpoint, commit_upsert
from appliance.mergeonread.index import KeyIndex
from appliance.mergeonread.keyforms import KeyForm
from appliance.mergeonread.lineage import bring_to
from appliance.mergeonread.plans import KeyedRows, Keys, plan
from appliance.mergeonread.precedence import UNKNOWN, Position, newer, newest
from appliance.mergeonread.store import CYCLE, IndexStore, index_directory
from appliance.model.mapping import Column, Mapping
from appliance.model.partitioning import Partitioning
from appliance.model.stream import StreamDef
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.datafiles import TableTarget, in_file_order, write_data_files
from appliance.tables.iceberg_schemas import target_iceberg_schema

from conftest import wait_for

MAPPING = Mapping((Column("id", "long", ("id",)), Column("name", "string", ("name",))))
NOW = dt.datetime.now(dt.UTC)


# ---- the rule ------------------------------------------------------------------------------------


def messages(rng: random.Random, n: int, keys: int, partitions: int) -> pa.Table:
    """Keyed messages over partitions, each partition in offset order with timestamps (Kafka's: whole
    milliseconds, here as µs) that never go back."""
    rows = []
    offsets, clocks = [0] * partitions, [rng.randrange(1000) for _ in range(partitions)]
    for _ in range(n):
        p = rng.randrange(partitions)
        clocks[p] += rng.choice((0, 0, 1, 5))  # equal timestamps across partitions happen
        op = CODES[Op.DELETE] if rng.random() < 0.2 else CODES[Op.UPSERT]
        rows.append({"id": rng.randrange(keys), "_kafka_partition": p, "_kafka_offset": offsets[p],
                     "_kafka_timestamp": clocks[p] * 1000, OP: op})
        offsets[p] += 1
    rows.sort(key=lambda r: (r["_kafka_partition"], r["_kafka_offset"]))
    return pa.Table.from_pylist(rows, pa.schema([("id", pa.int64()), ("_kafka_partition", pa.int32()),
                                                 ("_kafka_offset", pa.int64()), ("_kafka_timestamp", pa.int64()),
                                                 (OP, pa.int8())]))


def folded(rows: list[dict]) -> dict[int, tuple[Position, bool]]:
    """Each key's newest, one message at a time with `newer`: as the audit decides it."""
    out: dict[int, tuple[Position, bool]] = {}
    for r in rows:
        mine = Position(r["_kafka_partition"], r["_kafka_offset"], r["_kafka_timestamp"])
        if r["id"] not in out or newer(mine, out[r["id"]][0]):
            out[r["id"]] = (mine, r[OP] == CODES[Op.DELETE])
    return out


@pytest.mark.parametrize("seed", range(8))
def test_the_batch_the_commit_and_the_audit_pick_the_same_newest_message_of_a_key(seed, table):
    rng = random.Random(seed)
    entries = messages(rng, 300, keys=40, partitions=3)
    rows = entries.to_pylist()
    want = {k: (v[0].partition, v[0].offset, v[1]) for k, v in folded(rows).items()}
    # A task's reduction of a batch (decode.keys)
    write, delete = newest_per_key(entries, ["id"])[:2]
    by_batch = {rows[i]["id"]: (rows[i]["_kafka_partition"], rows[i]["_kafka_offset"], i in set(delete.tolist()))
                for i in np.concatenate([write, delete])}
    assert by_batch == want
    # The rule over arrays, as the index's plan reduces a commit holding every partition's messages
    ids = entries.column("id").to_numpy()
    won = newest(ids, entries.column("_kafka_partition").to_numpy(), entries.column("_kafka_offset").to_numpy(),
                 entries.column("_kafka_timestamp").to_numpy())
    assert {rows[i]["id"]: (rows[i]["_kafka_partition"], rows[i]["_kafka_offset"], rows[i][OP] == 1)
            for i in won} == want
    # Batches that each read a stretch of every partition, reduced in their task and committed in turn
    # against the table's rows (a key's row of another partition is compared by its timestamp, read
    # back): the table ends holding exactly that newest state.
    stream = Stream(table, KeyIndex(("id",)))
    form = KeyForm.of(table.schema(), ("id",))
    cuts = {p: sorted(rng.sample(range(101), 3)) for p in range(3)}
    for j in range(4):
        picked = [i for i, r in enumerate(rows) if _stretch(cuts[r["_kafka_partition"]], j, r["_kafka_offset"])]
        part = entries.take(pa.array(picked, pa.int64()))
        write, delete = newest_per_key(part, ["id"])[:2]
        stream.table = stream.commit_entries(form, part.take(pa.array(write)), part.take(pa.array(delete)))
    assert stream.held() == {k: f"{p}:{o}" for k, (p, o, gone) in want.items() if not gone}


def _stretch(cuts: list[int], j: int, offset: int) -> bool:
    bounds = [0] + cuts + [10 ** 9]
    return bounds[j] <= offset < bounds[j + 1]


def test_the_rule_says_offsets_in_a_partition_timestamps_across_and_a_loaded_row_is_oldest():
    assert newer(Position(0, 5, 1), Position(0, 4, 99))  # the offset, whatever the timestamps
    assert newer(Position(1, 0, 10), Position(0, 9, 9)) and not newer(Position(1, 0, 8), Position(0, 9, 9))
    assert newer(Position(1, 0, 9), Position(0, 9, 9))  # equal timestamps: the higher partition
    assert newer(Position(0, 0, None), None) and not newer(None, Position(0, 0, None))
    assert not newer(Position(0, 0, None), Position(1, 0, 5))  # an unknown timestamp is older than any


# ---- keys ----------------------------------------------------------------------------------------


def test_a_key_is_its_own_words_whatever_arrow_type_its_writer_used(table):
    form = KeyForm.of(table.schema(), ("id",))
    assert form.width == 1 and form.exact == "exact"
    assert form.words(pa.table({"id": pa.array([7, -1], pa.int64())})).view(np.int64).tolist() == [[7], [-1]]
    schema = target_iceberg_schema(Mapping((Column("k", "string", ("k",)), Column("a", "string", ("a",)),
                                            Column("b", "long", ("b",)))))
    text = KeyForm.of(schema, ("k",))
    u = str(uuid.uuid4())
    words = text.words(pa.table({"k": [u, u.upper(), "not a uuid"]}))
    assert words[0].astype(">u8").tobytes() == uuid.UUID(u).bytes, "a canonical UUID is its 16 bytes"
    assert not (words[1] == words[0]).all(), "another string is another key"
    large = text.words(pa.table({"k": pa.array([u, u.upper(), "not a uuid"], pa.large_string())}))
    assert (large == words).all(), "PyIceberg's large_string gives the same words"
    pair = KeyForm.of(schema, ("a", "b"))
    a = pair.words(pa.table({"a": ["x1", "x"], "b": [2, 12]}))
    assert not (a[0] == a[1]).all(), "('x1', 2) and ('x', 12) are two keys"
    assert text.has_null(pa.table({"k": ["a", None]})).tolist() == [False, True]


def test_a_partitioned_batch_hands_its_keys_back_in_the_order_of_its_files(floe_home):
    """A batch whose rows interleave two partitions is written partition by partition: the keys must
    follow the files, not the batch (they did not: the index then deleted the wrong rows)."""
    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    schema = target_iceberg_schema(MAPPING)
    table, _ = catalog.ensure_table("n.p", schema, Partitioning.parse("name"))
    batch = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "name": ["a", "b", "a", "b"]})
    batch = _with_positions(batch, 0, 0)
    ordered = in_file_order(TableTarget.of(table), batch)
    files = write_data_files(TableTarget.of(table), ordered)
    read = pa.concat_tables([_read(table, f) for f in files])
    assert read.column("id").to_pylist() == ordered.column("id").to_pylist() == [1, 3, 2, 4]


def _read(table, f) -> pa.Table:
    import pyarrow.parquet as pq

    with table.io.new_input(f.file_path).open() as stream:
        return pq.read_table(stream, columns=["id"])


# ---- the index -----------------------------------------------------------------------------------


@pytest.fixture
def table(floe_home):
    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    return catalog.ensure_table("n.t", target_iceberg_schema(MAPPING), Partitioning.parse("day(_kafka_timestamp)"))[0]


def _with_positions(rows: pa.Table, partition: int, start: int, at: dt.datetime = NOW) -> pa.Table:
    n = rows.num_rows
    micros = int(at.timestamp() * 1_000_000)
    return rows.append_column("_kafka_partition", pa.array([partition] * n, pa.int32())) \
        .append_column("_kafka_offset", pa.array(range(start, start + n), pa.int64())) \
        .append_column("_kafka_timestamp", pa.array(range(micros, micros + n), pa.timestamp("us", tz="UTC"))) \
        .append_column("_ingested_at", pa.array([at] * n, pa.timestamp("us", tz="UTC")))


class Stream:
    """Upsert commits as the engine makes them, and the newest state per key they give."""

    def __init__(self, table, index: KeyIndex) -> None:
        self.table, self.index = table, index
        self.offset = 1000
        self.state: dict[int, str] = {}
        self.how: list[str] = []

    def commit(self, upserts: dict[int, str], deletes: list[int] = (), partition: int = 0,
               at: dt.datetime = NOW) -> None:
        form = KeyForm.of(self.table.schema(), ("id",))
        rows = _with_positions(pa.table({"id": pa.array(list(upserts), pa.int64()), "name": list(upserts.values())}),
                               partition, self.offset, at)
        rows = in_file_order(TableTarget.of(self.table), rows)
        gone = _with_positions(pa.table({"id": pa.array(list(deletes), pa.int64()), "name": [""] * len(deletes)}),
                               partition, self.offset + len(upserts), at)
        self.offset += len(upserts) + len(deletes)
        self.how.append(bring_to(self.index, self.table))
        batch = KeyedRows(write_data_files(TableTarget.of(self.table), rows), Keys.of(form, rows), Keys.of(form, gone))
        self.table, _ = commit_upsert(self.table, self.index, batch, "s", "t", None, {partition: self.offset})
        checkpoint(self.index)  # as the engine does after each commit
        self.state.update(upserts)
        for k in deletes:
            self.state.pop(k, None)

    def commit_entries(self, form: KeyForm, upserts: pa.Table, deletes: pa.Table):
        """A batch of reduced entries (id and Kafka position) committed: each row's name says its position."""
        def positioned(t: pa.Table) -> pa.Table:
            names = [f"{p}:{o}" for p, o in zip(t.column("_kafka_partition").to_pylist(),
                                                t.column("_kafka_offset").to_pylist())]
            return pa.table({"id": t.column("id"), "name": names, "_kafka_partition": t.column("_kafka_partition"),
                             "_kafka_offset": t.column("_kafka_offset"),
                             "_kafka_timestamp": t.column("_kafka_timestamp").cast(pa.timestamp("us", tz="UTC")),
                             "_ingested_at": pa.array([NOW] * t.num_rows, pa.timestamp("us", tz="UTC"))})

        rows = in_file_order(TableTarget.of(self.table), positioned(upserts))
        batch = KeyedRows(write_data_files(TableTarget.of(self.table), rows), Keys.of(form, rows),
                          Keys.of(form, positioned(deletes)))
        self.offset += 1
        self.table, _ = commit_upsert(self.table, self.index, batch, "s", "t", None, {0: self.offset})
        return self.table

    def held(self) -> dict[int, str]:
        rows = self.table.refresh().scan(selected_fields=("id", "name")).to_arrow().to_pylist()
        assert len(rows) == len({r["id"] for r in rows}), "a key twice"
        return {r["id"]: r["name"] for r in rows}


def fresh(table) -> KeyIndex:
    index = KeyIndex(("id",))
    build(index, table)
    return index


def test_an_index_of_a_table_another_writer_loaded_finds_its_rows_and_replaces_them(table):
    """A team's initial load with PyIceberg (large_string columns, no Kafka position), then the topic."""
    loaded = pa.table({"id": pa.array([1, 2, 3, 3], pa.int64()),
                       "name": pa.array(["l1", "l2", "old3", "l3"], pa.large_string())})
    for f in table.schema().fields[2:]:
        loaded = loaded.append_column(f.name, pa.nulls(4, pa.int32() if f.name == "_kafka_partition" else
                                                      pa.int64() if f.name == "_kafka_offset" else
                                                      pa.timestamp("us", tz="UTC")))
    table.append(loaded.slice(0, 3))
    table.append(loaded.slice(3, 1))  # key 3 loaded twice: the later load wins
    table = table.refresh()
    index = KeyIndex(("id",), IndexStore(index_directory(load_settings().home, table), owner="s"))
    stream = Stream(table, index)
    stream.state = {1: "l1", 2: "l2", 3: "l3"}
    stream.commit({2: "m2", 4: "m4"}, deletes=[1])
    assert stream.how == ["built"]
    assert stream.held() == stream.state == {2: "m2", 3: "l3", 4: "m4"}
    assert index.contents() == fresh(stream.table).contents()


def test_the_index_follows_compaction_and_retention_without_a_rebuild_and_equals_one_built(table):
    settings = load_settings()
    index = KeyIndex(("id",), IndexStore(index_directory(settings.home, table), owner="s"))
    stream = Stream(table, index)
    old = NOW - dt.timedelta(days=400)
    stream.commit({k: f"a{k}" for k in range(40)}, at=old)
    stream.commit({k: f"b{k}" for k in range(0, 40, 3)}, deletes=[1, 2])
    catalog = Catalog(settings)
    with StateStore(settings.state_db) as state:
        policy: Policy = effective_policy(settings, state, "n.t")[0]
    compact(settings, catalog, stream.table.refresh(), policy, None)
    stream.table = stream.table.refresh()
    stream.commit({k: f"c{k}" for k in range(30, 45)}, deletes=[0])
    kept = dataclasses.replace(policy, retention=parse_period("30d"), retention_column="_kafka_timestamp")
    result = apply_retention(settings, catalog, stream.table.refresh(), kept, None, NOW)
    assert result.rows_deleted > 0
    stream.table = stream.table.refresh()
    for k in [k for k in stream.state if stream.state[k].startswith("a")]:  # only old rows left
        del stream.state[k]
    stream.commit({5: "d5", 7: "d7"}, deletes=[3])
    assert stream.how == ["built", "current", "replayed", "replayed"], "compaction and retention followed"
    assert stream.held() == stream.state
    assert index.contents() == fresh(stream.table).contents()


def test_a_restart_loads_the_checkpoint_and_replays_what_came_after_it(table):
    settings = load_settings()
    store = IndexStore(index_directory(settings.home, table), owner="s")
    stream = Stream(table, KeyIndex(("id",), store))
    stream.commit({k: f"a{k}" for k in range(100)})
    checkpoint(stream.index, everything=True)
    stream.commit({k: f"b{k}" for k in range(50, 60)}, deletes=[1, 2, 3])  # not checkpointed: a kill -9
    restarted = KeyIndex(("id",), IndexStore(store.directory, owner="s"))
    assert bring_to(restarted, stream.table) == "loaded"
    assert len(restarted) == 97 and restarted.contents() == fresh(stream.table).contents()
    assert oct(next(store.directory.glob("shards-*")).stat().st_mode & 0o777) == "0o600"


def test_a_built_index_serves_from_its_first_checkpoint_and_keeps_committing_on_copies(table):
    """The first checkpoint after a build saves every shard and maps its keys back (as a restart loads
    them): the heap's copies go; the locations, which every commit writes, stay the process's own (a write
    into a mapped page copies it first: one fault a key at 10^8); the files are never written through."""
    settings = load_settings()
    store = IndexStore(index_directory(settings.home, table), owner="s")
    stream = Stream(table, KeyIndex(("id",), store))
    stream.commit({k: f"a{k}" for k in range(300)})  # built, committed, then checkpointed whole
    shards = [p for p in stream.index.shards.parts if len(p.h)]
    assert shards and all(isinstance(p.h, np.memmap) and Path(p.h.filename).parent == store.directory
                          and not isinstance(p.loc, np.memmap) and p.loc.base is None for p in shards)
    saved = {f: f.read_bytes() for f in store.directory.glob("shards-*")}
    stream.commit({k: f"b{k}" for k in range(0, 300, 7)}, deletes=[1, 2, 3])
    assert {f: f.read_bytes() for f in saved} == saved, "a mapped file is never written through"
    assert stream.held() == stream.state
    assert stream.index.contents() == fresh(stream.table).contents()
    restarted = KeyIndex(("id",), IndexStore(store.directory, owner="s"))
    assert bring_to(restarted, stream.table) == "loaded"
    assert restarted.contents() == fresh(stream.table).contents()


def test_an_engine_loads_the_index_ahead_and_the_stream_takes_it_current(table):
    """`preload` (the engine, while Spark starts) loads the checkpoint; the stream's worker then gets
    that index, already at the table's snapshot, instead of loading it after its first batch."""
    settings = load_settings()
    stream = Stream(table, KeyIndex(("id",), IndexStore(index_directory(settings.home, table), owner="s")))
    stream.commit({k: f"a{k}" for k in range(50)})
    checkpoint(stream.index, everything=True)
    definition = StreamDef(name="s", id="preloaded", topic="t", kafka=KafkaSettings.create("h:9092"), format="json",
                           table="n.t", dead_letter_table="n.t_dlq", mapping=MAPPING, starting_offsets="earliest",
                           start_positions={}, paused=False, created_at="", mode="upsert", key=("id",))
    appended = dataclasses.replace(definition, id="appends", mode="append", key=())
    thread = preload(settings.home, [appended, definition], lambda s: stream.table)
    index = index_for(settings.home, definition, stream.table)  # waits for the preload
    assert not thread.is_alive() and index is not stream.index
    assert bring_to(index, stream.table) == "current"
    assert index.contents() == fresh(stream.table).contents()


def test_a_lost_truncated_foreign_or_mismatched_checkpoint_is_built_again(table):
    settings = load_settings()
    directory = index_directory(settings.home, table)
    stream = Stream(table, KeyIndex(("id",), IndexStore(directory, owner="s")))
    stream.commit({k: f"a{k}" for k in range(20)})
    checkpoint(stream.index, everything=True)

    def restart() -> str:
        index = KeyIndex(("id",), IndexStore(directory, owner="s"))
        how = bring_to(index, stream.table)
        assert index.contents() == fresh(stream.table).contents()
        return how

    assert restart() == "loaded"
    shard = next(directory.glob("shards-*"))
    shard.write_bytes(shard.read_bytes()[:-8])  # a torn file
    assert restart() == "built"
    checkpoint(stream.index, everything=True)
    stream.table.append(stream.table.scan().to_arrow().slice(0, 1))  # another writer: a key twice now
    stream.table = stream.table.refresh()
    assert restart() == "built"
    other = Catalog(settings).ensure_table("n.u", target_iceberg_schema(MAPPING))[0]
    shutil.copytree(directory, index_directory(settings.home, other))  # of another table
    theirs = KeyIndex(("id",), IndexStore(index_directory(settings.home, other)))
    assert bring_to(theirs, other) == "built"
    checkpoint(theirs, everything=True)  # the other table's files, named by no index.json of its own, go
    named = json.loads((index_directory(settings.home, other) / "index.json").read_text())
    kept = {e["file"] for e in named["shards"]} | {named["segments"], "index.json"}
    assert {p.name for p in index_directory(settings.home, other).iterdir() if p.is_file()} == kept
    shutil.rmtree(directory)
    assert restart() == "built"


def test_an_index_built_again_over_its_checkpoint_saves_its_own_shards_not_the_old_copies(table):
    """A checkpoint loaded, then another writer's commit: the index is built again, and the shards a
    later step saves are the built ones, never the old copies relabelled as the current snapshot."""
    settings = load_settings()
    directory = index_directory(settings.home, table)
    stream = Stream(table, KeyIndex(("id",), IndexStore(directory, owner="s")))
    stream.commit({k: f"a{k}" for k in range(20)})
    checkpoint(stream.index, everything=True)
    index = KeyIndex(("id",), IndexStore(directory, owner="s"))
    assert bring_to(index, stream.table) == "loaded"
    stream.table.append(stream.table.scan().to_arrow().slice(0, 1).set_column(
        0, "id", pa.array([99], pa.int64())))  # another writer's new key
    stream.table = stream.table.refresh()
    assert bring_to(index, stream.table) == "built"
    index.store._last -= CYCLE  # a cycle later: the step saves every file in turn
    checkpoint(index)
    restarted = KeyIndex(("id",), IndexStore(directory, owner="s"))
    assert bring_to(restarted, stream.table) == "loaded"
    assert restarted.contents() == fresh(stream.table).contents()
    assert restarted.locate(99) is not None


def test_a_compaction_whose_map_is_missing_makes_the_index_build_again(table):
    settings = load_settings()
    stream = Stream(table, KeyIndex(("id",), IndexStore(index_directory(settings.home, table), owner="s")))
    stream.commit({k: f"a{k}" for k in range(20)})
    stream.commit({k: f"b{k}" for k in range(5)})
    with StateStore(settings.state_db) as state:
        policy = effective_policy(settings, state, "n.t")[0]
    compact(settings, Catalog(settings), stream.table.refresh(), policy, None)
    for path in (stream.index.store.maps).glob("*.npz"):
        path.unlink()
    stream.table = stream.table.refresh()
    stream.commit({1: "c1"})
    assert stream.how[-1] == "built" and stream.held() == stream.state


def test_a_key_that_moved_partitions_keeps_the_row_of_the_later_timestamp(table):
    stream = Stream(table, KeyIndex(("id",)))
    stream.commit({1: "p0"}, partition=0, at=NOW)
    stream.commit({1: "p1-older"}, partition=1, at=NOW - dt.timedelta(hours=1))  # loses: deleted at once
    assert stream.held() == {1: "p0"}
    stream.commit({1: "p1-newer"}, partition=1, at=NOW + dt.timedelta(hours=1))
    assert stream.held() == {1: "p1-newer"}


def test_a_replay_compares_rows_of_its_own_partition_by_offset(table):
    """Old dead letters meet newer rows: the plan reads the current row's offset instead of assuming."""
    stream = Stream(table, KeyIndex(("id",)))
    stream.commit({1: "new", 2: "new"})
    form = KeyForm.of(stream.table.schema(), ("id",))
    old = _with_positions(pa.table({"id": pa.array([1, 3], pa.int64()), "name": ["old", "old"]}), 0, 5)
    batch = KeyedRows(write_data_files(TableTarget.of(stream.table), old), Keys.of(form, old),
                      Keys(form.words(pa.table({"id": pa.array([2], pa.int64())})), np.array([0], np.int32),
                           np.array([7]), np.array([UNKNOWN])))
    bring_to(stream.index, stream.table)
    done = plan(stream.index, stream.table, batch, after_table=False)
    assert done.lost.tolist() == [True, False, True], "key 1 and the delete of 2 are older than the table's rows"


# ---- kill -9 -------------------------------------------------------------------------------------

# In the order the steps pass them: a batch's commit, the checkpoint, the compaction, then the retention run
# (a point named alone kills at its first pass, a compaction's; `name:retention` at the retention run's).
FAILPOINTS = ("upsert_deletes_written", "upsert_committed", "upsert_landed", "checkpoint_shard_saved",
              "checkpoint_saved", "rewrite_group", "rewrite_map_saved", "rewrite_committed",
              "rewrite_map_saved:retention", "rewrite_committed:retention")


@pytest.mark.slow
def test_kill_9_at_every_step_of_a_commit_and_of_a_rewrite_leaves_each_keys_newest_row(floe_home):
    """`mergeonread_steps.py` in a process killed at each point in turn, each run taking up where the
    last died; after each kill the table holds the newest state per key of what it committed, and at the
    end the checkpoint loads and equals an index built from the table."""
    import os
    import subprocess
    import sys

    import mergeonread_steps as steps

    from appliance.tables.snapshots import committed_offsets, summary_properties

    def check() -> None:
        table = Catalog(load_settings()).table(steps.TABLE)
        held = committed_offsets(table, "s")
        batches = held[0] // steps.PER_BATCH if held else 0
        retained = any(summary_properties(s).get("floe.maintenance") == "retention" for s in table.snapshots())
        rows = table.scan(selected_fields=("id", "name")).to_arrow().to_pylist()
        assert len(rows) == len({r["id"] for r in rows}), "a key twice"
        assert {r["id"]: r["name"] for r in rows} == steps.expected(batches, retained)

    script = str(Path(steps.__file__))
    for point in FAILPOINTS:
        ran = subprocess.run([sys.executable, script], check=False, env={**os.environ, "FLOE_FAILPOINTS": point},
                             capture_output=True, text=True, timeout=300)
        assert ran.returncode == -9, f"{point}: not killed ({ran.returncode}): {ran.stderr[-3000:]}"
        check()
    ran = subprocess.run([sys.executable, script], check=False, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    check()
    table = Catalog(load_settings()).table(steps.TABLE)
    assert committed_offsets(table, "s") == steps.end_offsets(steps.BATCHES)
    index = KeyIndex(("id",), IndexStore(index_directory(load_settings().home, table)))
    assert bring_to(index, table) == "loaded"
    assert index.contents() == fresh(table).contents()


def checkpointed_in_32_files(table, monkeypatch) -> tuple[Stream, Path]:
    """A stream of 200 keys, committed and checkpointed whole in 32 files of about 6 keys."""
    from appliance.mergeonread import store

    monkeypatch.setattr(store, "KEYS_PER_FILE", 8)  # 200 keys: 32 files of about 6 keys
    settings = load_settings()
    directory = index_directory(settings.home, table)
    stream = Stream(table, KeyIndex(("id",), IndexStore(directory, owner="s")))
    stream.commit({k: f"a{k}" for k in range(200)})
    checkpoint(stream.index, everything=True)
    return stream, directory


def test_a_checkpoint_step_after_a_long_gap_saves_a_bounded_number_of_keys(table, monkeypatch):
    """A step runs in the commit's path: after a long rewrite of a big table (no commit for minutes), it
    catches up a few files at a time, bounded by keys, not by MAX_PER_STEP files of any size."""
    from appliance.mergeonread import store

    stream, directory = checkpointed_in_32_files(table, monkeypatch)
    assert stream.index.store.meta["files"] == 32
    stream.commit({k: f"b{k}" for k in range(200)})  # every shard changed
    saved = lambda: {p.name for p in directory.glob("shards-*.bin")}  # noqa: E731
    before = saved()
    monkeypatch.setattr(store, "MAX_KEYS_PER_STEP", 20)  # at most 20 * 32 // 200 = 3 files a step
    stream.index.store._last -= 10 * CYCLE  # minutes without a commit: every file is due
    checkpoint(stream.index)
    assert len(saved() - before) == 3
    monkeypatch.setattr(store, "MAX_KEYS_PER_STEP", 10**9)  # bounded by MAX_PER_STEP files alone, as before
    before = saved()
    checkpoint(stream.index)
    assert len(saved() - before) == store.MAX_PER_STEP


def test_an_engine_stop_saves_the_files_of_the_shards_that_changed_and_the_checkpoint_holds_whole(table, monkeypatch):
    """Saving whole (the engine stops) writes the files whose shards changed since their last save; the
    others' copies hold for the index's snapshot, and a restart loads all of it."""
    from appliance.mergeonread import store

    stream, directory = checkpointed_in_32_files(table, monkeypatch)
    files = lambda: {p.name for p in directory.glob("shards-*.bin")}
    before = files()
    assert len(before) == 32
    checkpoint(stream.index, everything=True)  # nothing changed: nothing written
    assert files() == before
    stream.commit({3: "b3"}, deletes=[4])  # two keys: one or two shards, each in one file
    changed = {stream.index.shards.parts[s] for s in range(store.SHARDS) if stream.index.shards.parts[s].dirty}
    checkpoint(stream.index, everything=True)
    assert 1 <= len(files() - before) <= len(changed) <= 2 and len(files()) == 32
    assert {e["snapshot_id"] for e in stream.index.store.meta["shards"]} == {stream.index.snapshot_id}
    restarted = KeyIndex(("id",), IndexStore(directory, owner="s"))
    assert bring_to(restarted, stream.table) == "loaded"
    assert restarted.contents() == fresh(stream.table).contents()


def resident_mappings(directory: Path) -> list[int]:
    """The resident size (kB) of each of this process's mappings of `directory`'s shard files."""
    out, mine = [], False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):  # a mapping's first line: addresses, ..., its file
            mine = line.rstrip().endswith(".bin") and str(directory) in line
        elif mine and line.startswith("Rss:"):
            out.append(int(line.split()[1]))
    return out


def test_a_loaded_checkpoint_is_read_in_ahead_of_the_lookups_that_need_it(table):
    """Mapped afresh (a restart's load), every page of the index's files is read in by a thread of its
    own, not faulted in by a batch's lookups in the commit's path."""
    settings = load_settings()
    directory = index_directory(settings.home, table)
    stream = Stream(table, KeyIndex(("id",), IndexStore(directory, owner="s")))
    stream.commit({k: f"a{k}" for k in range(300)})
    checkpoint(stream.index, everything=True)
    del stream
    restarted = KeyIndex(("id",), IndexStore(directory, owner="s"))
    assert bring_to(restarted, table.refresh()) == "loaded"
    arrays = sum(1 for p in restarted.shards.parts if len(p.h))  # each shard's keys (one word); locations in memory
    wait_for(lambda: len(resident_mappings(directory)) >= arrays and all(resident_mappings(directory)),
             timeout=30, what="every mapping of the checkpoint read in")
