"""Which format parses a stream's messages."""

from __future__ import annotations

from appliance.decode.parsed import MessageFormat
from appliance.model.stream import StreamDef


def format_of(stream: StreamDef) -> MessageFormat:
    if stream.format == "json":
        from appliance.decode.json_format import JsonFormat

        return JsonFormat()
    from appliance.decode.registered import AvroFormat, ProtobufFormat

    return (AvroFormat if stream.format == "avro" else ProtobufFormat)(stream.registry)
