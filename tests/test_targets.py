"""A new stream's names that another stream or a stage has taken: by field, as the wizard shows them as
they are typed, and the same rule create refuses them by."""

from appliance.config.settings import load_settings
from appliance.control.fields import Field
from appliance.control.targets import taken_names
from appliance.kafka.settings import KafkaSettings
from appliance.model.mapping import Column, Mapping
from appliance.model.stage import APPEND, StageDef
from appliance.model.stream import StreamDef
from appliance.state.store import StateStore


def test_taken_names_by_field(floe_home):
    settings = load_settings()
    assert taken_names(settings, "orders", "ingest.orders", "ingest.orders_dlq") == {}
    assert not settings.state_db.exists()  # asking creates nothing

    with StateStore(settings.state_db) as state:
        state.add_stream(StreamDef(name="orders", id="id-orders", topic="orders",
                                   kafka=KafkaSettings.create("broker:9092"), format="json", table="ingest.orders",
                                   dead_letter_table="ingest.orders_dlq",
                                   mapping=Mapping((Column("id", "long", ("id",)),)), starting_offsets="earliest",
                                   start_positions={0: 0}, paused=False, created_at="2026-11-21T10:00:00+00:00"))
        state.add_stage(StageDef(name="daily", id="id-daily", source="ingest.orders", sql="select 1 from source",
                                 table="ingest.daily", kind=APPEND, paused=False,
                                 created_at="2026-11-21T10:00:00+00:00"))

    assert taken_names(settings, "orders", "ingest.orders_dlq", "ingest.daily") == {
        Field.STREAM: "stream 'orders' already exists",
        Field.TABLE: "table ingest.orders_dlq is already written by stream 'orders'",
        Field.DEAD_LETTER_TABLE: "table ingest.daily is written by stage 'daily'",
    }
    assert taken_names(settings, "daily", "ingest.other", "ingest.other_dlq") == {
        Field.STREAM: "a stage is named 'daily': streams and stages share their names' events; choose another"}
    assert taken_names(settings, "other", "ingest.other", "ingest.other_dlq") == {}
