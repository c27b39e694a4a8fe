"""A second `floe demo` on the same FLOE_HOME resumes the first: its stream, its tables and whatever the
user built on them (stages, alerts, policies) are kept, and orders flow again.

The embedded broker keeps its messages in memory, so the last demo's topic went with its process. The
stream's tables say where it stands in each partition (the offsets of its newest commit); the new
broker's topic is brought to those offsets with empty messages, the history the last broker held and
the tables already have, which the stream never reads again. The stream then reads from that new
broker at the offsets it committed, new orders land after them, and `floe audit` finds every offset
once, as it would had the broker stayed up.
"""

from __future__ import annotations

from confluent_kafka import Producer

from appliance.config.settings import Settings
from appliance.control.audit import audited
from appliance.core.errors import DemoNotResumed
from appliance.core.vocabulary import EventKind
from appliance.kafka.client import KafkaClient
from appliance.kafka.settings import KafkaSettings
from appliance.model.stream import StreamDef
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, warehouse_io
from appliance.tables.snapshots import committed_offsets


def positions(settings: Settings, stream: StreamDef) -> dict[int, int]:
    """Where the stream's tables stand in each partition: the next offset of its newest commit (the
    dead-letter table's, when a batch was cut between its two commits, is ahead of the target's)."""
    catalog = Catalog(settings)
    with warehouse_io(settings, f"read stream {stream.name}'s tables"):
        target = committed_offsets(catalog.table(stream.table), stream.id) or {}
        dead = committed_offsets(catalog.table(stream.dead_letter_table), stream.id) or {}
    return {p: max(target.get(p, 0), dead.get(p, 0)) for p in set(target) | set(dead)}


def restore_topic(producer: Producer, bootstrap: str, topic: str, upto: dict[int, int]) -> None:
    """`topic` filled with empty messages up to `upto`'s offset in each partition (a fresh topic: empty).
    Produced in batches, as any producer does: the broker serves many tiny record batches slowly."""
    for partition, end in sorted(upto.items()):
        for _ in range(end):
            while True:
                try:
                    producer.produce(topic, value=None, partition=partition)
                    break
                except BufferError:  # the local queue is full: let it drain
                    producer.poll(0.05)
    left = producer.flush(60)
    if not any(upto.values()):
        return
    with KafkaClient(KafkaSettings.create(bootstrap)) as client:
        marks = client.watermarks(topic, sorted(upto))
    short = {p: (w.high, upto[p]) for p, w in marks.items() if w.high != upto[p]}
    if left or short:
        raise DemoNotResumed(f"the demo's topic could not be brought to its stream's offsets ({left} messages "
                             f"unsent; partition: (offset, wanted) {short}): delete the stream to start afresh")


@audited("demo resume")
def move_to(settings: Settings, name: str, bootstrap: str) -> StreamDef:
    """The demo's stream reads the demo's new broker from now on, at the offsets it committed."""
    with StateStore(settings.state_db) as state:
        state.update_stream(name, bootstrap=bootstrap)
        state.add_event(EventKind.STREAM_UPDATED, f"the demo resumed on a new embedded broker, {bootstrap}", name)
        return state.stream(name)
