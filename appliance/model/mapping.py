"""Column mappings: which field of a message lands in which typed column.

A mapping is inferred from a sample of messages (`model.inference`), printed and saved
as TOML, and can be edited and supplied back. `column_problems` is the one set of rules
a mapping must follow, whoever edits it: a TOML file, the CLI, the UI's editor.
"""

from __future__ import annotations

import tomllib
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterable

import pyarrow as pa
import tomli_w
from pyiceberg.types import IcebergType

from appliance.core.errors import InvalidName, MappingError
from appliance.model.columns import INGESTED_AT, KAFKA_COLUMNS, RESERVED_COLUMNS
from appliance.model.names import check_identifier
from appliance.model.sources import parse_source, source_problem, source_text
from appliance.model.types import TYPE_HELP, ColumnType, UnknownType, parse_type


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    source: tuple[str, ...]

    @property
    def ctype(self) -> ColumnType:
        return parse_type(self.type)

    @property
    def arrow_type(self) -> pa.DataType:
        return self.ctype.arrow

    def iceberg_type(self, next_id: Callable[[], int]) -> IcebergType:
        """The Iceberg type; a list's or a map's own fields take their ids from `next_id`."""
        return self.ctype.iceberg(next_id)


def column_problems(columns: Iterable[tuple[str, str, tuple[str, ...]]]) -> dict[int, str]:
    """What is wrong with each column, by position: (name, type, source) triples in table order."""
    columns = list(columns)
    counts = Counter(name for name, _, _ in columns)
    problems: dict[int, str] = {}
    for i, (name, type_, source) in enumerate(columns):
        try:
            check_identifier(name, "column")
        except InvalidName as exc:
            problems[i] = str(exc)
            continue
        if name in RESERVED_COLUMNS:
            problems[i] = f"column {name!r} is reserved for Kafka metadata; rename it"
        elif counts[name] > 1:
            problems[i] = f"column {name!r} appears more than once"
        elif not _known_type(type_):
            problems[i] = f"column {name!r}: unknown type {type_!r} (use one of {TYPE_HELP})"
        elif why := source_problem(name, type_, source):
            problems[i] = why
    return problems


def _known_type(text: object) -> bool:
    if not isinstance(text, str):
        return False
    try:
        parse_type(text)
    except UnknownType:
        return False
    return True


@dataclass(frozen=True)
class Mapping:
    """Columns in table order, and the source fields the stream leaves alone (`ignored`: a column
    of theirs was dropped from the table, so schema evolution must not bring it back)."""

    columns: tuple[Column, ...]
    ignored: tuple[tuple[str, ...], ...] = ()
    checked: bool = field(default=True, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.checked:  # read off a table: its schema is the truth, whoever named its columns
            return
        if not self.columns:
            raise MappingError("a mapping needs at least one column")
        problems = column_problems((c.name, c.type, c.source) for c in self.columns)
        if problems:
            raise MappingError(problems[min(problems)])

    @classmethod
    def of_table(cls, columns: Iterable[Column], ignored: Iterable[tuple[str, ...]] = ()) -> Mapping:
        """A mapping as a table's schema and bindings make it: column names as the table has them."""
        return cls(tuple(columns), tuple(ignored), checked=False)

    def sources(self) -> set[tuple[str, ...]]:
        """Every source path the mapping reads or leaves alone on purpose."""
        return {c.source for c in self.columns} | set(self.ignored)

    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the target rows: the mapped columns, then Floe's own."""
        return self._arrow_schema

    @cached_property
    def _arrow_schema(self) -> pa.Schema:
        # Made once per mapping (a stream keeps its mapping while its table's schema stays): every batch asks for
        # it. Kept in the instance's __dict__, not a field: equality and hashing ignore it.
        return pa.schema([pa.field(c.name, c.arrow_type) for c in self.columns]
                         + [c.field for c in KAFKA_COLUMNS] + [INGESTED_AT.field])

    def to_toml(self, header: str = "") -> str:
        doc: dict = {
            "columns": [
                {"name": c.name, "type": c.type, "source": source_text(c.source)} for c in self.columns
            ]
        }
        if self.ignored:
            doc["ignore"] = [source_text(p) for p in self.ignored]
        lines = [f"# {line}" for line in header.splitlines()] if header else []
        lines.append(f"# types: {TYPE_HELP}; source is a dotted path into the message's value, or @key, "
                     "@key.FIELD, @header.NAME, @headers")
        return "\n".join(lines) + "\n" + tomli_w.dumps(doc)

    @classmethod
    def from_toml(cls, text: str, origin: str = "mapping", stored: bool = False) -> Mapping:
        """`stored`: a mapping Floe saved itself (the state database's), perhaps before sources starting
        with @ named the Kafka key and headers: one such as "@type" is the value's field it was then."""
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise MappingError(f"{origin}: not valid TOML: {exc}") from None
        raw = doc.get("columns")
        if not isinstance(raw, list) or not raw:
            raise MappingError(f"{origin}: needs one or more [[columns]] tables with name, type and source")
        columns = [_column_entry(entry, i, origin, stored) for i, entry in enumerate(raw, 1)]
        ignore = doc.get("ignore", [])
        if not isinstance(ignore, list) or not all(isinstance(p, (str, list)) and p for p in ignore):
            raise MappingError(f"{origin}: ignore must be a list of source paths")
        try:
            return cls(tuple(columns), tuple(parse_source(p) if isinstance(p, str) else tuple(p) for p in ignore))
        except MappingError as exc:
            raise MappingError(f"{origin}: {exc}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> Mapping:
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as exc:
            raise MappingError(f"mapping file {p}: cannot read: {exc.strerror}") from None
        return cls.from_toml(text, origin=f"mapping file {p}")


def _column_entry(entry: object, i: int, origin: str, stored: bool = False) -> Column:
    if not isinstance(entry, dict):
        raise MappingError(f"{origin}: columns entry {i} must be a table")
    unknown = set(entry) - {"name", "type", "source"}
    if unknown:
        raise MappingError(f"{origin}: columns entry {i}: unknown key {sorted(unknown)[0]!r}")
    name, type_, source = entry.get("name"), entry.get("type"), entry.get("source", entry.get("name"))
    if not isinstance(name, str) or not isinstance(type_, str):
        raise MappingError(f"{origin}: columns entry {i} needs a string name and type")
    if isinstance(source, str):
        try:
            path = parse_source(source)
        except MappingError as exc:
            if not stored:
                raise MappingError(f"{origin}: column {name!r}: {exc}") from None
            path = tuple(source.split("."))
    elif isinstance(source, list) and all(isinstance(p, str) for p in source):
        path = tuple(source)
    else:
        raise MappingError(f"{origin}: column {name!r}: source must be a string or a list of strings")
    return Column(name, parse_type(type_).name if _known_type(type_) else type_, path)

