"""Which format parses a stream's messages."""

from __future__ import annotations

from appliance.decode.parsed import MessageFormat
from appliance.model.stream import StreamDef


def format_of(stream: StreamDef) -> MessageFormat:
    if stream.format == "json":
        from appliance.decode.json_format import JsonFormat

        inner: MessageFormat = JsonFormat()
    else:
        from appliance.decode.registered import AvroFormat, ProtobufFormat

        inner = (AvroFormat if stream.format == "avro" else ProtobufFormat)(stream.registry)
    if stream.cdc == "debezium":
        from appliance.decode.debezium import DebeziumFormat

        return DebeziumFormat(inner, stream.key, stream.cdc_columns)
    return inner
