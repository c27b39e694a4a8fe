"""Protobuf message types built at run time, as a producer's generated code would define them,
and confluent-kafka's real serializers for Avro and Protobuf."""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
_POOL = descriptor_pool.Default()


def proto_file(name: str, package: str, messages: dict[str, list[tuple]], deps: tuple[str, ...] = (),
               enums: dict[str, list[str]] | None = None, maps: dict[str, list[tuple]] | None = None) -> Any:
    """Add a .proto file to the default pool: messages as {name: [(field, number, type, label, type_name,
    oneof)]}, map fields as {message: [(field, number, key type, value type)]}."""
    try:
        return _POOL.FindFileByName(name)
    except KeyError:
        pass
    fdp = descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax="proto3", dependency=list(deps))
    for enum, values in (enums or {}).items():
        e = fdp.enum_type.add(name=enum)
        for i, v in enumerate(values):
            e.value.add(name=v, number=i)
    for message, fields in messages.items():
        m = fdp.message_type.add(name=message)
        oneofs: dict[str, int] = {}
        for spec in fields:
            fname, number, ftype, label, type_name, oneof = (*spec, None, None, None)[:6]
            kwargs = {"name": fname, "number": number, "type": ftype, "label": label or F.LABEL_OPTIONAL}
            if type_name:
                kwargs["type_name"] = type_name
            if oneof:
                if oneof not in oneofs:
                    oneofs[oneof] = len(oneofs)
                    m.oneof_decl.add(name=oneof)
                kwargs["oneof_index"] = oneofs[oneof]
            m.field.add(**kwargs)
        for fname, number, key_type, value_type in (maps or {}).get(message, []):
            entry = "".join(p.capitalize() for p in fname.split("_")) + "Entry"
            nested = m.nested_type.add(name=entry, options=descriptor_pb2.MessageOptions(map_entry=True))
            nested.field.add(name="key", number=1, type=key_type, label=F.LABEL_OPTIONAL)
            nested.field.add(name="value", number=2, type=value_type, label=F.LABEL_OPTIONAL)
            m.field.add(name=fname, number=number, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                        type_name=f".{package}.{message}.{entry}")
    return _POOL.Add(fdp)


def message_class(full_name: str) -> Any:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(full_name))


def avro_serializer(registry, schema: dict[str, Any], topic: str):
    ser = AvroSerializer(registry.client(), json.dumps(schema))
    return lambda record: ser(record, SerializationContext(topic, MessageField.VALUE))


def protobuf_serializer(registry, cls: Any, topic: str):
    ser = ProtobufSerializer(cls, registry.client(), {"use.deprecated.format": False})
    return lambda message: ser(message, SerializationContext(topic, MessageField.VALUE))
