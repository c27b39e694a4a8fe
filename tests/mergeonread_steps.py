"""A fixed run of an upsert table's life, for tests that kill it: batches committed as the engine commits
them (its key index checkpointed beside the state), a compaction, a retention run, checkpoints.

`python tests/mergeonread_steps.py` (FLOE_HOME set) runs every step the table has not seen yet: a
batch whose offsets the table holds is skipped, so a run killed anywhere is taken up by the next.
`expected(batches, retained)` is the newest state per key after that many batches.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appliance.config.settings import ensure_home, load_settings  # noqa: E402
from appliance.config.units import parse_period  # noqa: E402
from appliance.decode.keys import CODES, OP, newest_per_key  # noqa: E402
from appliance.decode.parsed import Op  # noqa: E402
from appliance.maintenance.compaction import compact  # noqa: E402
from appliance.maintenance.policies import effective_policy  # noqa: E402
from appliance.maintenance.retention import apply_retention  # noqa: E402
from appliance.mergeonread.commit import checkpoint, commit_upsert  # noqa: E402
from appliance.mergeonread.index import KeyIndex  # noqa: E402
from appliance.mergeonread.keyforms import KeyForm  # noqa: E402
from appliance.mergeonread.plans import KeyedRows, Keys  # noqa: E402
from appliance.mergeonread.store import IndexStore, index_directory  # noqa: E402
from appliance.model.mapping import Column, Mapping  # noqa: E402
from appliance.model.partitioning import Partitioning  # noqa: E402
from appliance.state.store import StateStore  # noqa: E402
from appliance.tables.catalog import Catalog  # noqa: E402
from appliance.tables.datafiles import TableTarget, in_file_order, write_data_files  # noqa: E402
from appliance.tables.iceberg_schemas import target_iceberg_schema  # noqa: E402
from appliance.tables.snapshots import committed_offsets  # noqa: E402

MAPPING = Mapping((Column("id", "long", ("id",)), Column("name", "string", ("name",))))
BATCHES = 6
PER_BATCH = 60
NOW = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)
OLD = NOW - dt.timedelta(days=400)
TABLE = "n.t"


def messages(batch: int) -> list[dict]:
    """Batch 1: keys 0..29, long ago; then updates and deletes of keys 10..49, now. Key k is in
    partition k % 2, offsets run on across batches."""
    rng = random.Random(batch)
    out = []
    for i in range(PER_BATCH):
        key = i % 30 if batch == 1 else rng.randrange(10, 50)
        delete = batch > 1 and rng.random() < 0.2
        at = (OLD if batch == 1 else NOW) + dt.timedelta(seconds=batch * 1000 + i)
        out.append({"id": key, "name": None if delete else f"b{batch}-{i}", "_kafka_partition": key % 2,
                    "_kafka_offset": (batch - 1) * PER_BATCH + i, "_kafka_timestamp": at, "delete": delete})
    return out


def end_offsets(batch: int) -> dict[int, int]:
    return {p: batch * PER_BATCH for p in (0, 1)}


def expected(batches: int, retained: bool) -> dict[int, str]:
    state: dict[int, str | None] = {}
    for b in range(1, batches + 1):
        for m in sorted(messages(b), key=lambda m: (m["_kafka_partition"], m["_kafka_offset"])):
            state[m["id"]] = m["name"]
    if retained:  # keys 0..9 were written long ago only: retention deleted them
        state = {k: v for k, v in state.items() if k >= 10}
    return {k: v for k, v in state.items() if v is not None}


def _batch(table, batch: int) -> KeyedRows:
    rows = pa.Table.from_pylist([{k: v for k, v in m.items() if k != "delete"} for m in messages(batch)],
                                schema=pa.schema([("id", pa.int64()), ("name", pa.string()),
                                                  ("_kafka_partition", pa.int32()), ("_kafka_offset", pa.int64()),
                                                  ("_kafka_timestamp", pa.timestamp("us", tz="UTC"))]))
    ops = [CODES[Op.DELETE] if m["delete"] else CODES[Op.UPSERT] for m in messages(batch)]
    entries = rows.append_column(OP, pa.array(ops, pa.int8()))
    order = np.lexsort((rows.column("_kafka_offset").to_numpy(), rows.column("_kafka_partition").to_numpy()))
    entries = entries.take(pa.array(order))
    write, delete = newest_per_key(entries, ["id"])[:2]
    form = KeyForm.of(table.schema(), ("id",))
    target = entries.drop_columns([OP]).take(pa.array(write))
    target = target.append_column("_ingested_at", target.column("_kafka_timestamp"))
    target = in_file_order(TableTarget.of(table), target)
    return KeyedRows(write_data_files(TableTarget.of(table), target), Keys.of(form, target),
                     Keys.of(form, entries.take(pa.array(delete))))


def run() -> None:
    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    table = catalog.ensure_table(TABLE, target_iceberg_schema(MAPPING), Partitioning.parse("day(_kafka_timestamp)"))[0]
    index = KeyIndex(("id",), IndexStore(index_directory(settings.home, table), owner="s"))
    with StateStore(settings.state_db) as state:
        policy = effective_policy(settings, state, TABLE)[0]
    for batch in range(1, BATCHES + 1):
        held = committed_offsets(table, "s")
        if held is None or held[0] < end_offsets(batch)[0]:
            table, _ = commit_upsert(table, index, _batch(table, batch), "s", "t", held, end_offsets(batch))
            checkpoint(index)  # as the engine does after each commit, out of the commit lock
        if batch == 3:
            compact(settings, catalog, table.refresh(), policy, None)
            table = table.refresh()
        if batch in (2, 4):
            checkpoint(index, everything=True)
        if batch == 5:
            kept = dataclasses.replace(policy, retention=parse_period("30d"), retention_column="_kafka_timestamp")
            apply_retention(settings, catalog, table.refresh(), kept, None, NOW)
            table = table.refresh()
    checkpoint(index, everything=True)


if __name__ == "__main__":
    run()
