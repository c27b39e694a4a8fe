"""Hundreds of streams written straight into the state database, cheaply: no broker, no catalog, no engine.

What `floe stream list`, `floe status` and the UI's Streams section read with hundreds of streams (issue 32)."""

from __future__ import annotations

from appliance.core.clock import now
from appliance.kafka.settings import KafkaSettings
from appliance.model.mapping import Mapping
from appliance.model.stream import StreamDef
from appliance.state.records import BatchRecord
from appliance.state.store import StateStore

MAPPING = Mapping.from_toml('[[columns]]\nname = "id"\ntype = "long"\nsource = "id"\n')
STREAMS = 500


def name_of(i: int) -> str:
    return f"{'orders' if i % 2 else 'clicks'}_{i:03d}"


def fill(settings, n: int = STREAMS) -> None:
    """`n` streams over two namespaces: every tenth failing, every seventh paused, each with recent batches;
    stream i has lag i, i * 100 rows, i % 50 msg/s and i % 4 dead letters."""
    # Not durable: thousands of small commits without a sync each (WAL, synchronous=NORMAL).
    with StateStore(settings.state_db, durable=False) as state:
        for i in range(n):
            name = name_of(i)
            ns = "sales" if i % 2 else "web"
            state.add_stream(StreamDef(name=name, id=f"id-{i}", topic=name, kafka=KafkaSettings.create("b:9092"),
                                       format="json", table=f"{ns}.{name}", dead_letter_table=f"{ns}.{name}_dlq",
                                       mapping=MAPPING, starting_offsets="earliest", start_positions={0: 0},
                                       paused=i % 7 == 0, created_at=now()))
            failing = i % 10 == 3
            state.update_status(name, phase="failed" if failing else "running", lag=i, rows_total=i * 100,
                                messages_per_s=float(i % 50), dead_letter_total=i % 4,
                                last_error="broker unreachable" if failing else "", last_commit_at=now())
            for _ in range(3):
                state.record_batch(BatchRecord(stream=name, started_at=now(), committed_at=now(), duration_ms=5,
                                               messages=2, rows=2, dead_letter_rows=0, bytes=100,
                                               target_snapshot_id=1, dead_letter_snapshot_id=None, offsets="{}",
                                               lag=0))


def engine_up(settings) -> None:
    """A fresh heartbeat: states are shown as written, not `stopped`."""
    with StateStore(settings.state_db) as state:
        state.engine_heartbeat(4242, "local[2]", "running", now(), ())
