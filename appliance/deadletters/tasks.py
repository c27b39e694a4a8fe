"""A replay's Spark tasks: dead letters read back from their files, decoded again, written.

Each task reads the rows it was given from the dead-letter table's data files (the raw key,
value, headers and Kafka position kept there), makes them a `RawBatch` as the Kafka reader would,
and decodes it with the stream's current mapping, format and schema-evolution setting
(`decode_batch`, as ingestion does). Those that now decode are written as target data files,
those that still fail as dead-letter files with their new reason. Only file descriptions, counts
and reasons come back to the driver; a dry run writes nothing.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from appliance.core.errors import FloeError, UnforeseenError
from appliance.decode.keys import Keyed
from appliance.decode.parsed import MessageFormat
from appliance.decode.rows import decode_batch
from appliance.kafka.records import RawBatch
from appliance.mergeonread.keyforms import KeyForm
from appliance.mergeonread.plans import Keys
from appliance.model.changes import Evolution
from appliance.model.columns import (
    ERROR_MESSAGE,
    ERROR_STAGE,
    HEADERS,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TIMESTAMP,
    RAW_KEY,
    RAW_VALUE,
)
from appliance.model.mapping import Mapping
from appliance.spark.tasks import run_in_tasks
from appliance.tables.datafiles import TableTarget, in_file_order, table_metadata, write_data_files
from appliance.tables.storage import storage_errors

T = TypeVar("T")

READ = [KAFKA_PARTITION.name, KAFKA_OFFSET.name, KAFKA_TIMESTAMP.name, RAW_KEY.name, RAW_VALUE.name, HEADERS]
REASON_WIDTH = 160
_QUOTED = re.compile(r"\([^()]*\)")


@dataclass(frozen=True)
class ReplaySpec:
    stream: str
    mapping: Mapping
    target: TableTarget
    dead_letter: TableTarget
    max_message_bytes: int
    fmt: MessageFormat | None
    evolve: bool
    keyed: Keyed | None
    write: bool = True  # False: a dry run, nothing written


@dataclass
class PartResult:
    """What one task did with its dead letters."""

    parts: dict[str, np.ndarray]  # the dead letters it was given: data file -> positions
    moved: int = 0  # decoded now: rows for the target (an upsert's older messages of a key included)
    stayed: int = 0  # failing still
    reasons: Counter = field(default_factory=Counter)  # "stage: message" of those that stay
    evolution: Evolution = field(default_factory=Evolution)  # set: nothing written, the table must change first
    target_files: list = field(default_factory=list)
    dead_letter_files: list = field(default_factory=list)
    rows: Keys | None = None  # upsert: the target files' rows' keys and positions, in file order
    deleted: Keys | None = None  # upsert: the keys whose newest replayed message deletes them
    truncates: bool = False


def reason(stage: str | None, message: str | None) -> str:
    """A dead letter's reason as the top reasons count it: the value it quotes, in brackets, left out."""
    return _QUOTED.sub("(…)", f"{stage}: {message}")[:REASON_WIDTH]


def read_dead_letters(io_properties: dict[str, str], parts: dict[str, np.ndarray]) -> RawBatch:
    """The dead letters at `parts` (data file -> positions) as the Kafka reader would hand them on."""
    from pyiceberg.io import load_file_io

    raw = RawBatch()
    for path, positions in parts.items():
        io = load_file_io(io_properties, path)
        with storage_errors(path, "read dead letters"), io.new_input(path).open() as f:
            rows = pq.read_table(f, columns=READ).take(pa.array(positions))
        raw.partitions += rows.column(KAFKA_PARTITION.name).to_pylist()
        raw.offsets += rows.column(KAFKA_OFFSET.name).to_pylist()
        raw.timestamps += [None if t is None else int(t.timestamp() * 1000)
                           for t in rows.column(KAFKA_TIMESTAMP.name).to_pylist()]
        raw.keys += rows.column(RAW_KEY.name).to_pylist()
        raw.values += rows.column(RAW_VALUE.name).to_pylist()
        raw.headers += [None if h is None else [(x["key"], x["value"]) for x in h]
                        for h in rows.column(HEADERS).to_pylist()]
    return raw


def replay_part(spec: ReplaySpec, parts: dict[str, np.ndarray], at: dt.datetime) -> PartResult:
    raw = read_dead_letters(spec.target.io_properties, parts)
    decoded = decode_batch(raw, spec.mapping, spec.max_message_bytes, at, spec.fmt, spec.evolve, spec.keyed)
    out = PartResult(parts)
    if decoded.evolution:
        out.evolution = decoded.evolution
        return out
    dead = decoded.dead_letter
    out.stayed = dead.num_rows
    out.moved = len(raw) - dead.num_rows
    out.reasons = Counter(reason(s, m) for s, m in zip(
        dead.column(ERROR_STAGE.name).to_pylist(), dead.column(ERROR_MESSAGE.name).to_pylist()))
    out.truncates = decoded.truncated is not None
    form = KeyForm.of(table_metadata(spec.target).schema(), spec.keyed.columns) if spec.keyed is not None else None
    if form is not None and decoded.deleted is not None:
        out.deleted = Keys.of(form, decoded.deleted)
    if not spec.write:
        return out
    target = in_file_order(spec.target, decoded.target) if form is not None else decoded.target
    out.target_files = write_data_files(spec.target, target)
    out.dead_letter_files = write_data_files(spec.dead_letter, dead)
    if form is not None:  # in the files' order
        out.rows = Keys.of(form, target)
    return out


def run_replay(spark, spec: ReplaySpec, tasks: list[dict[str, np.ndarray]]) -> list[PartResult | FloeError]:
    """One Spark task per entry of `tasks`: what each did, or the error that stopped it."""
    return run_parts(spark, replay_part, spec, tasks)


def run_parts(spark, part: Callable[[Any, dict[str, np.ndarray], dt.datetime], T], spec: Any,
              tasks: list[dict[str, np.ndarray]]) -> list[T | FloeError]:
    """`part(spec, task, at)` in one Spark task per entry of `tasks` (a replay's, single or routed): what each
    made, or the error that stopped it; all of them told the same ingestion time."""
    at = dt.datetime.now(dt.UTC)

    def work(i: int) -> T | FloeError:
        try:
            return part(spec, tasks[i], at)
        except FloeError as exc:
            return exc
        except Exception as exc:  # a bug: this replay fails, whole, and changes nothing
            return UnforeseenError.of(exc, f"replaying dead letters of {spec.stream}")

    return run_in_tasks(spark, work, len(tasks)) if tasks else []


def split(parts: dict[str, np.ndarray], n: int) -> list[dict[str, np.ndarray]]:
    """`parts` cut into at most `n` tasks of about as many dead letters each."""
    total = sum(len(p) for p in parts.values())
    if not total:
        return []
    size = max(1, -(-total // max(1, n)))
    tasks: list[dict[str, np.ndarray]] = [{}]
    room = size
    for path, positions in parts.items():
        while len(positions):
            if room == 0:
                tasks.append({})
                room = size
            take, positions = positions[:room], positions[room:]
            tasks[-1][path] = np.concatenate([tasks[-1].get(path, np.array([], np.int64)), take])
            room -= len(take)
    return tasks
