"""Where a mapped column's values come from: a field of the message's value, or its Kafka key or headers.

The one rule for reading and writing a source. As a mapping writes it: `customer.id` (a field of the
value), `@key` (the key: its text, or its exact bytes in a binary column), `@key.id` (a field of a JSON
or registry-encoded key), `@header.tenant` (a header's value: its text, or its bytes in a binary column;
the last header of that name, as Kafka's `Headers.lastHeader` reads it), `@headers` (every header, in
the `headers` type, as the dead-letter table keeps them). A value field whose name starts with `@` is
written as a list, `["@type"]`.

In a `Column.source` a Kafka source starts with an empty step (`("", "key", "id")`): no field of a
message has an empty name, so a value path can never be taken for one, whatever its fields are called.
"""

from __future__ import annotations

from enum import StrEnum

from appliance.core.errors import MappingError

KAFKA = ""  # the first step of a Kafka source
ALLOWED = "@key, @key.FIELD, @header.NAME or @headers"
HEADERS_TYPE_NAME = "headers"


class Origin(StrEnum):
    VALUE = "value"
    KEY = "key"  # the whole key
    KEY_FIELD = "key field"
    HEADER = "header"
    HEADERS = "headers"


KEY = (KAFKA, "key")
HEADERS = (KAFKA, "headers")


def origin(source: tuple[str, ...]) -> Origin:
    """Where a source reads from."""
    if not source or source[0] != KAFKA:
        return Origin.VALUE
    if source == KEY:
        return Origin.KEY
    if source == HEADERS:
        return Origin.HEADERS
    return Origin.KEY_FIELD if source[1] == "key" else Origin.HEADER


def from_kafka(source: tuple[str, ...]) -> bool:
    return bool(source) and source[0] == KAFKA


def parse_source(text: str) -> tuple[str, ...]:
    """A source as a mapping writes it, as a path; a one-line error naming what is allowed."""
    if not text.startswith("@"):
        return tuple(text.split(".")) if text else ()
    head, dot, rest = text[1:].partition(".")
    if head == "key" and not dot:
        return KEY
    if head == "key" and all(rest.split(".")):
        return (*KEY, *rest.split("."))
    if head == "header" and rest:
        return (KAFKA, "header", rest)  # a header's name is taken whole: it may hold dots
    if head == "headers" and not dot:
        return HEADERS
    raise MappingError(f"source {text!r}: a source starting with @ must be {ALLOWED} (a value field whose name "
                       f"starts with @ is written as a list: [{text.split('.')[0]!r}])")


def source_text(source: tuple[str, ...]) -> str | list[str]:
    """A source as a mapping writes it (the inverse of `parse_source`, or of a list)."""
    if from_kafka(source):
        return describe(source)
    if any("." in step for step in source) or (source and source[0].startswith("@")):
        return list(source)
    return ".".join(source)


def describe(source: tuple[str, ...]) -> str:
    """A source as messages and screens name it: `customer.id`, `@key.id`, `@header.tenant`."""
    if from_kafka(source):
        return "@" + ".".join(source[1:])
    return ".".join(source)


def source_problem(name: str, type_: str, source: tuple[str, ...]) -> str | None:
    """What is wrong with a column's source and type together (their other rules are `column_problems`')."""
    if not source or not all(isinstance(p, str) for p in source):
        return f"column {name!r}: source must name a field, e.g. \"customer.id\""
    if from_kafka(source):
        if len(source) < 2 or source[1] not in ("key", "header", "headers") or not all(source[2:]) \
                or (source[1] == "header" and len(source) != 3) or (source[1] == "headers" and len(source) != 2):
            return f"column {name!r}: source must be {ALLOWED}"
        if (source == HEADERS) != (type_ == HEADERS_TYPE_NAME):
            return f"column {name!r}: only @headers fills a column of type headers, and it fills no other"
        return None
    if not all(source):
        return f"column {name!r}: source must name a field, e.g. \"customer.id\""
    if type_ == HEADERS_TYPE_NAME:
        return f"column {name!r}: only @headers fills a column of type headers, and it fills no other"
    return None
