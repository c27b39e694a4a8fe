"""How a table is laid out in partitions: Iceberg's hidden partitioning, as a user writes it.

`day(ts)`, `hour(ts)`, `month(ts)`, `year(ts)`, `bucket(16, customer_id)`, `truncate(4, code)` or a
bare column (identity), several separated by commas: `"day(ts), bucket(16, customer_id)"`; `none`
for no partitioning. Checked against the table's columns (each transform takes only the types
Iceberg lets it), turned into an Iceberg partition spec, and read back from one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyiceberg.partitioning import PARTITION_FIELD_ID_START, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import IcebergType

from appliance.core.errors import InvalidPartitioning

TIME = {"year": YearTransform, "month": MonthTransform, "day": DayTransform, "hour": HourTransform}
_TIME = re.compile(r"^(year|month|day|hour)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$")
_SIZED = re.compile(r"^(bucket|truncate)\s*\(\s*(\d+)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$")
_BARE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NONE = ("", "none", "unpartitioned")
HELP = "day(ts), hour(ts), month(ts), year(ts), bucket(N, col), truncate(W, col) or a column, comma-separated"


@dataclass(frozen=True)
class Field:
    """One partition field: a transform of one column."""

    transform: str  # identity, year, month, day, hour, bucket or truncate
    column: str
    param: int | None = None  # bucket's count, truncate's width

    def __str__(self) -> str:
        if self.transform == "identity":
            return self.column
        if self.param is not None:
            return f"{self.transform}({self.param}, {self.column})"
        return f"{self.transform}({self.column})"

    def iceberg(self) -> Transform:
        if self.transform == "identity":
            return IdentityTransform()
        if self.transform == "bucket":
            return BucketTransform(num_buckets=self.param)
        if self.transform == "truncate":
            return TruncateTransform(width=self.param)
        return TIME[self.transform]()

    @property
    def name(self) -> str:
        """The partition field's name, as Iceberg's own tools name it."""
        if self.transform == "identity":
            return self.column
        if self.transform == "bucket":
            return f"{self.column}_bucket_{self.param}"
        if self.transform == "truncate":
            return f"{self.column}_trunc_{self.param}"
        return f"{self.column}_{self.transform}"


@dataclass(frozen=True)
class Partitioning:
    fields: tuple[Field, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.fields)

    def __str__(self) -> str:
        return ", ".join(map(str, self.fields)) or "none"

    @classmethod
    def parse(cls, text: str | None) -> Partitioning:
        """`text` as written by a user; InvalidPartitioning names the part that is wrong."""
        if text is None or text.strip().lower() in NONE:
            return cls()
        fields = []
        for part in _split(text):
            item = part.strip()
            if match := _TIME.match(item):
                fields.append(Field(match.group(1), match.group(2)))
            elif match := _SIZED.match(item):
                if int(match.group(2)) < 1:
                    raise InvalidPartitioning(f"partition {item!r}: {match.group(1)}'s number must be at least 1")
                fields.append(Field(match.group(1), match.group(3), int(match.group(2))))
            elif _BARE.match(item):
                fields.append(Field("identity", item))
            else:
                raise InvalidPartitioning(f"partition {item!r} is not one of: {HELP}")
        if len({(f.transform, f.column) for f in fields}) < len(fields):
            raise InvalidPartitioning(f"partitioning {text!r} names a transform of a column twice")
        return cls(tuple(fields))

    def check(self, schema: Schema) -> Partitioning:
        """Itself, if every field's column is a top-level column of a type its transform takes."""
        types: dict[str, IcebergType] = {f.name: f.field_type for f in schema.fields}
        for field in self.fields:
            found = types.get(field.column)
            if found is None:
                raise InvalidPartitioning(f"partition {field}: no column {field.column!r} "
                                          f"(columns: {', '.join(types)})")
            if not field.iceberg().can_transform(found):
                raise InvalidPartitioning(f"partition {field}: column {field.column!r} is {found}, which "
                                          f"{field.transform} cannot take")
        return self

    def spec(self, schema: Schema, spec_id: int = 0) -> PartitionSpec:
        """The Iceberg partition spec of these fields over `schema`'s columns."""
        self.check(schema)
        return PartitionSpec(*(PartitionField(source_id=schema.find_field(f.column).field_id,
                                              field_id=PARTITION_FIELD_ID_START + i, transform=f.iceberg(),
                                              name=f.name) for i, f in enumerate(self.fields)), spec_id=spec_id)

    @classmethod
    def of(cls, spec: PartitionSpec, schema: Schema) -> Partitioning:
        """A table's spec as a user would write it (void fields, which dropped ones become, left out)."""
        out = []
        for f in spec.fields:
            kind = type(f.transform)
            column = schema.find_column_name(f.source_id) or f"field {f.source_id}"
            if kind is IdentityTransform:
                out.append(Field("identity", column))
            elif kind is BucketTransform:
                out.append(Field("bucket", column, f.transform.num_buckets))
            elif kind is TruncateTransform:
                out.append(Field("truncate", column, f.transform.width))
            else:
                name = next((n for n, t in TIME.items() if t is kind), None)
                if name is not None:
                    out.append(Field(name, column))
        return cls(tuple(out))


def _split(text: str) -> list[str]:
    """Comma-separated parts, commas inside parentheses kept (`bucket(16, id)`)."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    return parts + [current]


_EVENT_TIME_HINTS = ("event", "time", "ts", "_at", "date", "created", "occurred")


def proposed(columns: list[tuple[str, str]]) -> str:
    """What to propose for a new stream's table of these (name, type) columns: day of its event-time
    column (the first timestamp whose name says so, else the first timestamp), or of the time Kafka
    stamped each message."""
    times = [name for name, kind in columns if kind in ("timestamptz", "timestamp", "date")]
    named = [name for name in times if any(hint in name for hint in _EVENT_TIME_HINTS)]
    return f"day({(named or times or ['_kafka_timestamp'])[0]})"
