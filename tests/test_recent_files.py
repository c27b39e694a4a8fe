"""The rows of the small files this process wrote, kept for the compaction that reads them back: read as the files
themselves are read (types, field ids, projections), never opened from storage while kept, forgotten once
rewritten away, and bounded. Real tables, Floe's write path, compactions in this process (no Spark)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from appliance.core.vocabulary import MaintenanceTask
from appliance.maintenance.maintainer import Maintainer
from appliance.tables.commits import commit_files
from appliance.tables.datafiles import TableTarget, live_data_files, write_data_files
from appliance.tables.fastpath.recent import BLOCK_FILES, RECENT, RecentFiles
from appliance.tables.reading import file_tasks, read_table

from test_maintenance_queue import _lab
from test_reading import SCHEMA, rows


@pytest.fixture
def kept():
    """RECENT on, as in the engine's process, and as it was after the test."""
    was = RECENT.enabled
    RECENT.enabled = True
    yield RECENT
    RECENT.enabled = was


def _garbled(paths: list[str]) -> None:
    """Each file overwritten with bytes no Parquet reader takes: whatever opens one from now on fails."""
    for path in paths:
        Path(path.removeprefix("file://")).write_bytes(b"not parquet")


def test_a_kept_files_rows_read_as_the_file_itself_reads_and_the_file_is_not_opened(floe_home, kept):
    settings, catalog = _lab(floe_home)
    table, _ = catalog.ensure_table("lab.t", SCHEMA)
    files = [f for i in range(3) for f in write_data_files(TableTarget.of(table), rows(i * 5, 5))]
    schema = table.schema()
    projected = schema.select("qty", "id", "at")  # some columns, in another order
    from_memory = [read_table(table.metadata, table.io, s, file_tasks(files)) for s in (schema, projected)]
    kept.forget(f.file_path for f in files)
    from_files = [read_table(table.metadata, table.io, s, file_tasks(files)) for s in (schema, projected)]
    assert from_memory[0].num_rows == 15
    for ours, theirs in zip(from_memory, from_files):
        assert ours.equals(theirs) and ours.schema == theirs.schema
    files = write_data_files(TableTarget.of(table), rows(100, 4))
    _garbled([f.file_path for f in files])
    assert read_table(table.metadata, table.io, schema, file_tasks(files)).equals(
        rows(100, 4).cast(from_files[0].schema)), "read from memory: the file was never opened"


def test_a_compaction_takes_the_small_files_rows_from_memory_and_forgets_them(floe_home, kept):
    settings, catalog = _lab(floe_home)
    table, _ = catalog.ensure_table("lab.t", SCHEMA)
    written = []
    for i in range(12):
        files = write_data_files(TableTarget.of(table), rows(i * 3, 3))
        table, _ = commit_files(table, files, "s", "topic", {0: i * 3} if i else None, {0: i * 3 + 3})
        written += [f.file_path for f in files]
    assert all(kept.rows(path) is not None for path in written)
    _garbled(written)  # the compaction can only have read them from memory
    run = Maintainer(settings, catalog=catalog).run("lab.t", MaintenanceTask.COMPACT)
    assert run.outcome == "ok", run.detail
    table = catalog.table("lab.t")
    assert [f.record_count for f in live_data_files(table)] == [36]
    assert table.scan().to_arrow().sort_by("id").equals(rows(0, 36).cast(table.scan().to_arrow().schema))
    assert all(kept.rows(path) is None for path in written), "rewritten away: forgotten"


def test_a_groups_files_kept_are_rewritten_at_once_as_they_would_be_read_one_by_one(floe_home, kept):
    """A compaction's rewrite takes a group's kept files a run at a time (neighbours in a block as one slice), a file
    not kept between them read from storage: the same rows in the same order and the same per-file kept bitmaps as
    reading each file back from storage."""
    from appliance.maintenance.rewrite import RewriteGroup, _runs_held, rewrite_group
    from appliance.tables.reading import held_rows

    settings, catalog = _lab(floe_home)
    table, _ = catalog.ensure_table("lab.t", SCHEMA)
    sizes = [3, 1, 5, 2] * 5  # 20 files: two sealed blocks and four files of a block still filling
    files, start = [], 0
    for n in sizes:
        files += write_data_files(TableTarget.of(table), rows(start, n))
        start += n
    target = TableTarget.of(table)
    # Not in the order written: a block's files out of order, and a file of the filling block between sealed ones
    order = files[:3] + [files[17], files[4], files[3]] + files[5:17] + files[18:]
    group = RewriteGroup(tuple(order), table.metadata.default_spec_id, order[0].partition)
    parts, counts = kept.rows_of([f.file_path for f in order])
    assert counts == [f.record_count for f in order] and len(parts) < len(order) - 8, "neighbours taken as one slice"
    paths = [f.file_path for f in order]
    assert held_rows(order, table.schema()) is not None, "taken from memory"
    # One file among them not kept (the file the table's last compaction wrote, say): read from storage in its place
    kept.forget([order[9].file_path])
    assert [len(run) for run in _runs_held(order)] == [9, 1, 10]
    at_once = rewrite_group(target, group, 128 * 1024 * 1024, None)
    kept.forget(paths)
    assert held_rows(order, table.schema()) is None
    one_by_one = rewrite_group(target, group, 128 * 1024 * 1024, None)
    got = [read_table(table.metadata, table.io, table.schema(), file_tasks(r.files)) for r in (at_once, one_by_one)]
    assert got[0].num_rows == sum(sizes) and got[0].equals(got[1])
    assert got[0].column("id").to_pylist() == [i for f in order for i in range(sum(sizes[:files.index(f)]),
                                                                                sum(sizes[:files.index(f) + 1]))]
    assert [(k.rows, k.bits.tobytes()) for k in at_once.kept] == [(k.rows, k.bits.tobytes()) for k in one_by_one.kept]
    assert at_once.rows_out == one_by_one.rows_out == sum(sizes)
    # The very file the rewrite file by file writes (which Java Iceberg reads in tests/test_interop.py)
    assert [Path(f.file_path.removeprefix("file://")).read_bytes() for f in at_once.files] == \
        [Path(f.file_path.removeprefix("file://")).read_bytes() for f in one_by_one.files]


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "name": [f"r{i}" for i in range(n)]})


def test_a_tables_files_are_joined_in_blocks_and_the_oldest_blocks_go_first_past_the_limit():
    files = RecentFiles(limit=10**9)
    files.enabled = True
    for i in range(BLOCK_FILES * 2 + 1):
        files.keep(f"file:///w/t/data/f{i}.parquet", _rows(3, start=i * 3))
    assert len(files) == BLOCK_FILES * 2 + 1
    for i in range(BLOCK_FILES * 2 + 1):  # sealed blocks and the one filling alike
        assert files.rows(f"file:///w/t/data/f{i}.parquet").equals(_rows(3, start=i * 3))
    sealed = files.nbytes
    files.forget([f"file:///w/t/data/f{i}.parquet" for i in range(BLOCK_FILES)])
    assert files.rows("file:///w/t/data/f0.parquet") is None and files.nbytes < sealed, "a block wholly forgotten goes"
    # Past the limit, the oldest block goes whole (here: the second), the newest stays.
    files.limit = files.nbytes - 1
    files.keep("file:///w/u/data/g.parquet", _rows(2))
    assert files.rows(f"file:///w/t/data/f{BLOCK_FILES}.parquet") is None
    assert files.rows("file:///w/u/data/g.parquet").equals(_rows(2)) and files.nbytes <= files.limit
    off = RecentFiles()
    off.keep("file:///w/t/data/x.parquet", _rows(1))
    assert off.rows("file:///w/t/data/x.parquet") is None, "off until a process turns it on"


def test_a_folders_files_of_each_schema_fill_a_block_of_their_own_and_keep_their_field_ids():
    files = RecentFiles(limit=10**9)
    files.enabled = True

    def with_ids(table: pa.Table, first: int) -> pa.Table:
        return table.cast(pa.schema([f.with_metadata({b"PARQUET:field_id": str(first + i).encode()})
                                     for i, f in enumerate(table.schema)]))

    # The same names and types, other field ids: a column dropped and added again by another client, say
    before = [with_ids(_rows(3, start=i * 3), 1) for i in range(3)]
    after = [with_ids(_rows(2, start=100 + i * 2), 7) for i in range(BLOCK_FILES)]
    for i, rows in enumerate(before + after):
        files.keep(f"file:///w/t/data/f{i}.parquet", rows)
        if i == len(before):  # two schemas fill a block each: the first is not sealed by the second's files
            assert len(files._filling["file:///w/t/data"]) == 2
    assert [len(b.parts) for b in files._filling["file:///w/t/data"]] == [len(before)], "the second one sealed, full"
    for i, rows in enumerate(before + after):
        kept = files.rows(f"file:///w/t/data/f{i}.parquet")
        assert kept.equals(rows) and kept.schema.equals(rows.schema, check_metadata=True), i
    # Every block's bytes counted once, whether sealed early (by the new schema), by its size or still filling
    assert files.nbytes == sum(b.nbytes for b in files._blocks.values())
    files.forget([f"file:///w/t/data/f{i}.parquet" for i in range(len(before) + len(after))])
    assert files.nbytes == 0 and len(files) == 0
