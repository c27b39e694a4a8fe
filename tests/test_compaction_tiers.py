"""Compaction by tiers: a trickle's partition is never rewritten whole at every compaction. A file is left out while
it holds more rows than all the newer files after it, so each row is rewritten a few times in its partition's day,
not a hundred; a partition nothing new comes to is merged whole, once. Real tables, PyIceberg appends, compactions
in this process (no Spark)."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntry, ManifestEntryStatus
from pyiceberg.typedef import Record

from appliance.core.vocabulary import MaintenanceTask
from appliance.maintenance.compaction import newer_worth_merging, plan_compaction
from appliance.maintenance.maintainer import Maintainer
from appliance.maintenance.rewrite import REWRITTEN
from appliance.tables.datafiles import live_data_files

from test_maintenance_queue import _lab

SCHEMA = pa.schema([("id", pa.int64())])


def _entry(n: int, rows: int, rewritten: bool) -> ManifestEntry:
    name = f"{REWRITTEN}{n}-00000.parquet" if rewritten else f"00000-{n}-stream.parquet"
    f = DataFile.from_args(content=DataFileContent.DATA, file_path=f"file:///w/t/data/{name}",
                           file_format=FileFormat.PARQUET, partition=Record(), record_count=rows,
                           file_size_in_bytes=1000 + 40 * rows)
    return ManifestEntry.from_args(status=ManifestEntryStatus.EXISTING, snapshot_id=n, sequence_number=n, data_file=f)


def test_a_day_of_a_trickle_rewrites_each_row_a_few_times_and_keeps_a_few_files():
    """144 compactions (a day at one every ten minutes) of 160 new files of 3 rows: merging the whole partition
    each time rewrites each row 72 times on average; by tiers fewer than 8, with at most 9 files left at a time."""
    files: list[ManifestEntry] = []
    n, rewritten, most = 0, 0, 0
    for _ in range(144):
        for _ in range(160):
            n += 1
            files.append(_entry(n, 3, rewritten=False))
        merged = newer_worth_merging(files, deleted={})
        assert merged == files[len(files) - len(merged):], "always the newest stretch: contiguous in commit order"
        n += 1
        rows = sum(e.data_file.record_count for e in merged)
        rewritten += rows
        files = files[:len(files) - len(merged)] + [_entry(n, rows, rewritten=True)]
        most = max(most, len(files))
    total = 144 * 160 * 3
    assert sum(e.data_file.record_count for e in files) == total
    assert rewritten / total < 8 and most <= 9, (rewritten / total, most)
    # The day over, nothing new comes to the partition: merged whole, into one file.
    assert newer_worth_merging(files, deleted={}) == files


def test_a_file_whose_rows_are_deleted_by_position_is_always_merged():
    files = [_entry(1, 500, rewritten=True), _entry(2, 100, rewritten=True), _entry(3, 3, rewritten=False),
             _entry(4, 3, rewritten=False)]
    assert newer_worth_merging(files, deleted={}) == files[2:]
    assert newer_worth_merging(files, deleted={files[1].data_file.file_path: [0]}) == files[1:]


def test_compactions_of_a_table_merge_the_newer_files_until_they_outnumber_the_older(floe_home):
    settings, catalog = _lab(floe_home)
    table = catalog.iceberg.create_table("lab.trickle", SCHEMA)
    next_id = 0

    def append(files: int, rows: int) -> None:
        nonlocal next_id
        for _ in range(files):
            table.append(pa.table({"id": list(range(next_id, next_id + rows))}, schema=SCHEMA))
            next_id += rows

    def compact() -> list[int]:
        maintainer = Maintainer(settings, catalog=catalog)
        assert maintainer.run("lab.trickle", MaintenanceTask.COMPACT).outcome == "ok"
        now = catalog.table("lab.trickle")
        assert sorted(now.scan().to_arrow().column("id").to_pylist()) == list(range(next_id)), "every row once"
        return sorted(f.record_count for f in live_data_files(now))

    append(20, 10)
    assert compact() == [200]
    append(6, 2)  # 12 new rows: the 200 are left as they are
    policy = Maintainer(settings, catalog=catalog).policy("lab.trickle")
    assert [len(g.files) for g in plan_compaction(catalog.table("lab.trickle"), policy).groups] == [6]
    assert compact() == [12, 200]
    append(100, 2)  # 200 new rows: outnumber the 12, and with them the 200
    assert compact() == [412]
    append(6, 2)
    assert compact() == [12, 412]
    # Nothing new since: every small file a rewrite's, the partition is merged whole.
    assert compact() == [424]


def test_an_older_specs_files_all_move_to_the_current_one_tiers_or_not(floe_home):
    settings, catalog = _lab(floe_home)
    schema = pa.schema([("id", pa.int64()), ("kind", pa.string())])
    table = catalog.iceberg.create_table("lab.moved", schema)
    table.append(pa.table({"id": list(range(200)), "kind": ["a"] * 200}, schema=schema))  # the older, larger
    for i in range(6):
        table.append(pa.table({"id": [1000 + i], "kind": ["a"]}, schema=schema))
    with table.update_spec() as update:
        update.add_identity("kind")
    maintainer = Maintainer(settings, catalog=catalog)
    assert maintainer.run("lab.moved", MaintenanceTask.COMPACT).outcome == "ok"
    files = live_data_files(catalog.table("lab.moved"))
    assert {f.spec_id for f in files} == {1} and sum(f.record_count for f in files) == 206
