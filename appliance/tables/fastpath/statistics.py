"""A written Parquet file's column statistics as a DataFile holds them, the same as PyIceberg's
`data_file_statistics_from_parquet_metadata(...).to_serialized_dict()` makes them.

PyIceberg works out again, for every column of every file, what depends only on the table's metrics
plan: a metrics mode compared, an aggregator checked by a schema visit, a truncation transform built.
For a stream's file of a few rows that was a third of its write. Here it is worked out once per
writer (`StatisticsPlan`), and only the values are read from each file. Whatever is not the plain
case (a decimal column, statistics missing or unreadable, a type PyIceberg would refuse) is left to
PyIceberg's own function, which then decides, warns or raises as it always did.

A bound is read as the file stores it (`Statistics.min_raw`: an int, a float, bytes), not as PyArrow's logical
value (a timestamp's `min` makes a datetime, 17 us a column, for PyIceberg to turn back into the same
microseconds), wherever the two serialise alike: the raw value goes to PyIceberg's own `to_bytes` for the type,
looked up once, not dispatched per value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.io.pyarrow import (
    MetricModeTypes,
    StatisticsCollector,
    StatsAggregator,
    data_file_statistics_from_parquet_metadata,
    truncate_upper_bound_binary_string,
    truncate_upper_bound_text_string,
)
from pyiceberg.transforms import TruncateTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

# Types whose raw Parquet bound is what PyIceberg's `to_bytes` takes for them, as it is (times and timestamps: in
# microseconds, the unit the file's logical type is checked for), and strings once decoded.
_RAW = (BooleanType, IntegerType, LongType, FloatType, DoubleType, BinaryType, DateType)
_MICROS = (TimeType, TimestampType, TimestamptzType)


class _Unusual(Exception):
    """Not the plain case: PyIceberg's own function decides."""


@dataclass(frozen=True)
class _Column:
    field_id: int
    counts: bool  # value and null counts kept (the mode is not `none`)
    bounds: bool  # lower and upper bounds too (`truncate` or `full`)
    lower: Callable[[Any], bytes]
    upper: Callable[[Any], bytes | None]
    collector: StatisticsCollector


def _column(c: StatisticsCollector) -> _Column:
    """What `StatsAggregator.min_as_bytes` and `max_as_bytes` do to a column's values, decided once."""
    kind, length, primitive = c.mode.type, c.mode.length, c.iceberg_type
    serialise = to_bytes.dispatch(type(primitive))  # what `to_bytes` would pick for every value
    if length is None:
        def lower(v: Any) -> bytes:
            return serialise(primitive, v)
    else:
        truncate = TruncateTransform(width=length).transform(primitive)

        def lower(v: Any) -> bytes:
            return serialise(primitive, truncate(v))
    if primitive == StringType() or primitive == BinaryType():
        kind_of, bound = (str, truncate_upper_bound_text_string) if primitive == StringType() else \
            (bytes, truncate_upper_bound_binary_string)

        def upper(v: Any) -> bytes | None:
            if not isinstance(v, kind_of):
                raise _Unusual  # PyIceberg raises its own error
            high = bound(v, length)
            return serialise(primitive, high) if high is not None else None
    elif length is not None:
        def upper(v: Any) -> bytes | None:
            raise _Unusual  # a truncation of what cannot be truncated: PyIceberg raises
    else:
        def upper(v: Any) -> bytes | None:
            return serialise(primitive, v)
    return _Column(c.field_id, kind != MetricModeTypes.NONE,
                   kind in (MetricModeTypes.TRUNCATE, MetricModeTypes.FULL), lower, upper, c)


class StatisticsPlan:
    """One table schema's (and metrics properties') statistics plan, for every file written with it."""

    def __init__(self, stats_columns: dict[int, StatisticsCollector], column_ids: dict[str, int]) -> None:
        self._stats, self._ids = stats_columns, column_ids
        self._columns: dict[str, _Column] = {}
        # (field id, physical type) -> how a chunk's bounds are read, once StatsAggregator took the pair
        self._readers: dict[tuple[int, str], Callable[[Any], tuple[Any, Any]]] = {}

    def serialized(self, metadata: pq.FileMetaData) -> dict[str, Any]:
        """`DataFileStatistics.to_serialized_dict()` of the file `metadata` describes."""
        try:
            return self._serialized(metadata)
        except Exception:  # noqa: BLE001 (_Unusual, or what PyArrow raises reading statistics: PyIceberg's call)
            return data_file_statistics_from_parquet_metadata(
                parquet_metadata=metadata, stats_columns=self._stats, parquet_column_mapping=self._ids,
            ).to_serialized_dict()

    def _of(self, path: str) -> _Column:
        found = self._columns.get(path)
        if found is None:
            found = self._columns[path] = _column(self._stats[self._ids[path]])
        return found

    def _reader(self, c: _Column, physical: str) -> Callable[[Any], tuple[Any, Any]]:
        """How a chunk's (min, max) of this column and physical type are read; raises _Unusual where PyIceberg's
        function decides."""
        found = self._readers.get((c.field_id, physical))
        if found is None:
            primitive = c.collector.iceberg_type
            if isinstance(primitive, DecimalType):
                raise _Unusual  # decoded from its unscaled form: PyIceberg's branch
            try:
                StatsAggregator(primitive, physical, c.collector.mode.length)
            except ValueError:
                raise _Unusual from None
            found = self._readers[(c.field_id, physical)] = _reader_of(primitive)
        return found

    def _serialized(self, metadata: pq.FileMetaData) -> dict[str, Any]:
        sizes: dict[int, int] = {}
        values: dict[int, int] = {}
        nulls: dict[int, int] = {}
        low: dict[int, Any] = {}
        high: dict[int, Any] = {}
        splits = []
        for r in range(metadata.num_row_groups):
            group = metadata.row_group(r)
            first = group.column(0)
            data, dictionary = first.data_page_offset, first.dictionary_page_offset
            splits.append(dictionary if first.has_dictionary_page and dictionary < data else data)
            for pos in range(metadata.num_columns):
                column = group.column(pos)
                c = self._of(column.path_in_schema)
                sizes[c.field_id] = sizes.get(c.field_id, 0) + column.total_compressed_size
                if not c.counts:
                    continue
                values[c.field_id] = values.get(c.field_id, 0) + column.num_values
                if not column.is_stats_set:
                    raise _Unusual  # PyIceberg warns and drops the column's bounds and null count
                self._collect(c, column.statistics, nulls, low, high)
        lower = {k: c.lower(v) for k, (c, v) in low.items() if v is not None}
        upper = {}
        for k, (c, v) in high.items():
            if v is not None and (b := c.upper(v)) is not None:
                upper[k] = b
        return {"record_count": metadata.num_rows, "column_sizes": sizes, "value_counts": values,
                "null_value_counts": nulls, "nan_value_counts": {}, "lower_bounds": lower, "upper_bounds": upper,
                "split_offsets": sorted(splits)}

    def _collect(self, c: _Column, statistics: Any, nulls: dict, low: dict, high: dict) -> None:
        """One column chunk's null count and bounds, folded in as `StatsAggregator.update_min/max` do."""
        if statistics.has_null_count:
            nulls[c.field_id] = nulls.get(c.field_id, 0) + statistics.null_count
        if not c.bounds:
            return
        lo, hi = self._reader(c, statistics.physical_type)(statistics)
        was = low.get(c.field_id)
        low[c.field_id] = (c, lo if was is None or was[1] is None else (was[1] if lo is None else min(lo, was[1])))
        was = high.get(c.field_id)
        high[c.field_id] = (c, hi if was is None or was[1] is None else (was[1] if hi is None else max(hi, was[1])))


def _logical(statistics: Any) -> tuple[Any, Any]:
    return statistics.min, statistics.max


def _raw(statistics: Any) -> tuple[Any, Any]:
    return statistics.min_raw, statistics.max_raw


def _text(statistics: Any) -> tuple[Any, Any]:
    if statistics.logical_type.type != "STRING":
        return _logical(statistics)  # bytes, which PyIceberg refuses for a string: its own call says how
    lo, hi = statistics.min_raw, statistics.max_raw
    try:
        return (None if lo is None else lo.decode()), (None if hi is None else hi.decode())
    except UnicodeDecodeError:
        raise _Unusual from None  # what PyArrow's `min` makes of it is PyIceberg's to take


def _micros(statistics: Any) -> tuple[Any, Any]:
    if "timeUnit=microseconds" in str(statistics.logical_type):
        return _raw(statistics)
    return _logical(statistics)  # another unit: the datetime PyIceberg converts


def _reader_of(primitive: Any) -> Callable[[Any], tuple[Any, Any]]:
    """A chunk's bounds as PyIceberg's `to_bytes` takes them for `primitive`, as cheaply as they can be read."""
    if isinstance(primitive, _RAW):
        return _raw
    if isinstance(primitive, StringType):
        return _text
    if isinstance(primitive, _MICROS):
        return _micros
    return _logical  # a UUID, a fixed: what PyIceberg reads
