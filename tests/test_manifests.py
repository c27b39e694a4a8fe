"""A stream's appends written by Floe's own manifest writer read back the same as PyIceberg's own
merge-append would have written them: by PyIceberg, by DuckDB, entry by entry and in totals."""

from __future__ import annotations

import glob
import os
import sqlite3

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from appliance.config.settings import ensure_home, load_settings
from appliance.query.connection import run_query
from appliance.tables.catalog import Catalog, table_properties
from appliance.tables.commits import commit_files
from appliance.tables.datafiles import TableTarget, write_data_files
from appliance.tables.fastpath.appends import append_files
from appliance.tables.fastpath.changes import MANIFESTS
from appliance.tables.fastpath.entries import KeptFile
from appliance.tables.fastpath.manifests import Manifests
from appliance.tables.fastpath.sql_catalog import FloeSqlCatalog
from appliance.tables.fastpath.transactions import transaction

from conftest import pyiceberg_files

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "name": pa.array([f"n{i}" for i in range(start, start + n)])})


def pyiceberg_append(table, files, properties):
    tx = transaction(table)
    with tx.update_snapshot(snapshot_properties=properties).merge_append() as append:
        for f in files:
            append.append_data_file(f)
    return tx.commit_transaction()


@pytest.fixture
def twins(floe_home):
    """Two tables with the same properties: one appended by Floe's writer, one by PyIceberg's."""
    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    catalog.iceberg.create_namespace("n")
    props = {"format-version": "2", **table_properties(settings), "commit.manifest.min-count-to-merge": "4"}
    return settings, catalog, [catalog.iceberg.create_table(f"n.{name}", SCHEMA, properties=props)
                               for name in ("ours", "theirs")]


def entry_view(table):
    """Every entry of the current snapshot, as what a reader can tell of it."""
    out = []
    for manifest in table.current_snapshot().manifests(table.io):
        for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            f = e.data_file
            out.append((e.status, e.sequence_number, e.file_sequence_number, f.record_count, f.file_format,
                        f.value_counts, f.null_value_counts, f.lower_bounds, f.upper_bounds,
                        e.snapshot_id is not None))
    return sorted(out, key=repr)


def test_appends_and_merges_read_back_as_pyiceberg_writes_them(twins):
    settings, catalog, (ours, theirs) = twins
    for i in range(11):  # merges at 4 manifests: several times over
        data = rows(i * 10, 10)
        ours = append_files(ours, write_data_files(TableTarget.of(ours), data), {"floe.i": str(i)})
        theirs = pyiceberg_append(theirs, write_data_files(TableTarget.of(theirs), data), {"floe.i": str(i)})
    assert entry_view(ours) == entry_view(theirs)
    manifests = ours.current_snapshot().manifests(ours.io)
    assert len(manifests) < 4  # merged, not one per append
    assert len(manifests) == len(theirs.current_snapshot().manifests(theirs.io))
    statuses = {e.status for m in manifests for e in m.fetch_manifest_entry(ours.io)}
    assert statuses == {ManifestEntryStatus.ADDED, ManifestEntryStatus.EXISTING}
    # What the process keeps of them holds no statistics (the merges above wrote these back from it).
    kept = [e.data_file for m in manifests for e in MANIFESTS.entries(ours.io, m)]
    assert len(kept) == 110 // 10 and all(isinstance(f, KeptFile) for f in kept)
    # Nor anything of the manifests the merges took in: no snapshot to come lists them.
    folder = ours.metadata_location.removeprefix("file://").rsplit("/", 1)[0]
    written = {f"file://{p}" for p in glob.glob(f"{folder}/*-m*.avro")}
    live = {m.manifest_path for m in manifests}
    assert len(written - live) > 3 and not (written - live) & set(MANIFESTS._entries)
    assert not (written - live) & set(MANIFESTS._listed) and live <= set(MANIFESTS._entries)
    ignore = {"added-files-size", "total-files-size"}  # the files' own sizes differ by their paths
    for a, b in zip(ours.snapshots(), theirs.snapshots()):
        assert {k: v for k, v in a.summary.additional_properties.items() if k not in ignore} == \
               {k: v for k, v in b.summary.additional_properties.items() if k not in ignore}
        assert a.summary.operation == b.summary.operation and a.sequence_number == b.sequence_number
    # Read from storage by a catalog that wrote nothing, by PyIceberg and by DuckDB.
    fresh = FloeSqlCatalog("floe", **settings.catalog_properties()).load_table("n.ours")
    assert sorted(fresh.scan().to_arrow().column("id").to_pylist()) == list(range(110))
    assert run_query(settings, "select count(*) as n, count(distinct id) as d, sum(id) as s from n.ours"
                     ).to_pylist() == [{"n": 110, "d": 110, "s": sum(range(110))}]


def test_a_manifest_list_of_kept_records_reads_back_as_one_encoded_afresh(twins, tmp_path):
    from pyiceberg.manifest import read_manifest_list

    settings, catalog, (table, _) = twins
    kept = Manifests()
    for i in range(6):  # each commit lists its parent's manifests again: their records kept
        table = append_files(table, write_data_files(TableTarget.of(table), rows(i * 3, 3)), {}, manifests=kept)
    snapshot = table.current_snapshot()
    listed = kept.manifests(table.io, snapshot.manifest_list)
    afresh = tmp_path / "afresh.avro"
    Manifests().write_list(table.io, str(afresh), list(listed), snapshot.snapshot_id, snapshot.parent_snapshot_id,
                           snapshot.sequence_number)
    ours = list(read_manifest_list(table.io.new_input(snapshot.manifest_list)))
    assert [repr(m) for m in ours] == [repr(m) for m in read_manifest_list(table.io.new_input(str(afresh)))]
    assert len(ours) > 2


def test_a_manifest_list_this_process_did_not_write_is_read_from_storage(twins):
    settings, catalog, (table, _) = twins
    table = pyiceberg_append(table, write_data_files(TableTarget.of(table), rows(0, 5)), {})
    table = append_files(table, write_data_files(TableTarget.of(table), rows(5, 5)), {}, manifests=Manifests())
    table = append_files(table, write_data_files(TableTarget.of(table), rows(10, 5)), {}, manifests=Manifests())
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(15))


def test_a_stale_table_loses_the_race_and_commit_files_retries_on_fresh_metadata(twins):
    settings, catalog, (table, _) = twins
    table, _ = commit_files(table, write_data_files(TableTarget.of(table), rows(0, 3)), "s", "t", None, {0: 3})
    stale = table
    other = catalog.table("n.ours")
    append_files(other, write_data_files(TableTarget.of(other), rows(100, 2)), {"by": "maintenance"})
    with pytest.raises(CommitFailedException):
        append_files(stale, write_data_files(TableTarget.of(stale), rows(3, 3)), {})
    table, _ = commit_files(stale, write_data_files(TableTarget.of(stale), rows(3, 3)), "s", "t", {0: 3}, {0: 6})
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [0, 1, 2, 3, 4, 5, 100, 101]


def test_data_files_carry_the_statistics_pyiceberg_would_write(twins):
    settings, catalog, (table, _) = twins
    data = pa.table({"id": pa.array([None, *range(1, 50)], pa.int64()),
                     "name": pa.array([None if i % 7 == 0 else f"n{i}" for i in range(50)])})
    [ours] = write_data_files(TableTarget.of(table), data)
    [theirs] = pyiceberg_files(table, data)
    for field in ("record_count", "column_sizes", "value_counts", "null_value_counts", "nan_value_counts",
                  "lower_bounds", "upper_bounds", "split_offsets", "file_format", "content"):
        assert getattr(ours, field) == getattr(theirs, field), field


def test_data_files_are_as_long_as_they_say_one_or_split_at_the_target_size(twins):
    settings, catalog, (table, _) = twins
    small = rows(0, 3)
    [one] = write_data_files(TableTarget.of(table), small)
    assert one.file_size_in_bytes == os.path.getsize(one.file_path.removeprefix("file://"))
    big = rows(0, 6000)
    with transaction(table) as tx:
        tx.set_properties({"write.target-file-size-bytes": str(big.nbytes // 3)})
    table = catalog.iceberg.load_table("n.ours")
    files = write_data_files(TableTarget.of(table), big)
    assert len(files) == 3
    assert [f.file_size_in_bytes for f in files] == [os.path.getsize(f.file_path.removeprefix("file://")) for f in files]
    assert sum(f.record_count for f in files) == 6000


def test_a_partitioned_table_is_appended_by_pyiceberg_itself(twins):
    settings, catalog, _ = twins
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="name"))
    table = catalog.iceberg.create_table("n.parts", SCHEMA, partition_spec=spec, properties={"format-version": "2"})
    for i in range(3):
        table = append_files(table, write_data_files(TableTarget.of(table), rows(i * 4, 4)), {"i": str(i)})
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(12))
    assert len(table.inspect.files()) == 12  # one file per name


def test_a_partitioned_tables_manifests_summarise_their_partitions_as_pyiceberg_does(twins):
    settings, catalog, _ = twins
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="name"))
    ours, theirs = (catalog.iceberg.create_table(f"n.summed_{who}", SCHEMA, partition_spec=spec,
                                                 properties={"format-version": "2"}) for who in ("ours", "theirs"))
    for i in range(3):
        data = pa.table({"id": pa.array(range(i * 4, i * 4 + 4), pa.int64()),
                         "name": pa.array([None, f"b{i}", f"a{i}", "z"])})  # a null partition too
        ours = append_files(ours, write_data_files(TableTarget.of(ours), data), {})
        theirs = pyiceberg_append(theirs, write_data_files(TableTarget.of(theirs), data), {})

    def summaries(table):
        return sorted((m.added_files_count, m.existing_files_count, repr(m.partitions))
                      for m in table.current_snapshot().manifests(table.io))

    assert summaries(ours) == summaries(theirs)
    assert any(p.contains_null and p.lower_bound for m in ours.current_snapshot().manifests(ours.io)
               for p in m.partitions)


def test_a_trickles_manifest_and_list_are_written_plain_a_merged_manifest_deflated_and_all_read_back(twins):
    """A block under `SMALL_BLOCK_BYTES` is written with Avro's null codec (its deflate cost more than its bytes),
    a bigger one deflated: PyIceberg, DuckDB and fastavro read both alike, and read what PyIceberg wrote."""
    import fastavro

    settings, catalog, (ours, theirs) = twins

    def codecs(table) -> dict[str, str]:
        snapshot = table.current_snapshot()
        paths = {"list": snapshot.manifest_list}
        paths.update((m.manifest_path, m.manifest_path) for m in snapshot.manifests(table.io))
        out = {}
        for key, path in paths.items():
            with open(path.removeprefix("file://"), "rb") as f:
                reader = fastavro.reader(f)
                out[key] = reader.metadata["avro.codec"]
                assert sum(1 for _ in reader) >= 1  # every record read back by fastavro
        return out

    many = [f for i in range(100) for f in write_data_files(TableTarget.of(ours), rows(i, 1))]
    ours = append_files(ours, many, {})  # one manifest of 100 entries: over 16 KiB of records
    big = codecs(ours)
    assert big.pop("list") == "null" and list(big.values()) == ["deflate"]
    ours = append_files(ours, write_data_files(TableTarget.of(ours), rows(100, 3)), {})  # a trickle's commit
    after = codecs(ours)
    assert after.pop("list") == "null" and sorted(after.values()) == ["deflate", "null"]
    theirs = pyiceberg_append(theirs, write_data_files(TableTarget.of(theirs), rows(0, 103)), {})
    assert set(codecs(theirs).values()) == {"deflate"}  # PyIceberg's, for the readers below to read too
    fresh = FloeSqlCatalog("floe", **settings.catalog_properties())
    for name in ("ours", "theirs"):
        table = fresh.load_table(f"n.{name}")  # read from storage, not from what this process keeps
        assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(103)), name
        assert run_query(settings, f"select count(*) as n, sum(id) as s from n.{name}").to_pylist() == \
            [{"n": 103, "s": sum(range(103))}], name


def test_a_commits_files_are_written_whole_and_never_over_another(twins, tmp_path):
    from pyiceberg.io.pyarrow import PyArrowFileIO

    from appliance.tables.fastpath.files import write_new

    _, _, (table, _) = twins
    io = PyArrowFileIO()
    data = bytes(range(256)) * 4000  # larger than one write may take
    ours, theirs = tmp_path / "new" / "ours.avro", tmp_path / "theirs.avro"  # its folder missing: made
    write_new(io, f"file://{ours}", data)
    with io.new_output(str(theirs)).create(overwrite=False) as out:  # PyIceberg's way
        out.write(data)
    assert ours.read_bytes() == theirs.read_bytes() == data
    assert oct(ours.stat().st_mode & 0o777) == oct(theirs.stat().st_mode & 0o777)
    with pytest.raises(FileExistsError):
        write_new(io, str(ours), b"other")
    assert ours.read_bytes() == data


def test_every_private_pyiceberg_hook_the_fast_path_uses_still_exists(twins):
    """A PyIceberg upgrade that renames what the fast path overrides or reads fails here, by name."""
    from pyiceberg.table import Transaction

    from appliance.tables.fastpath import internals

    missing = [f"{cls.__name__}.{name}" for cls, names in internals.HOOKS.items() for name in names
               if not callable(getattr(cls, name, None))]
    _, _, (table, _) = twins
    tx = transaction(table)
    live = {Transaction: tx}
    for cls, names in internals.ATTRIBUTES.items():
        missing += [f"{cls.__name__}.{name} (attribute)" for name in names if not hasattr(live[cls], name)]
    assert missing == []


def test_a_hundred_tables_committing_in_turn_read_no_manifest_list_back(floe_home, monkeypatch):
    """Hundreds of streams commit in turn (issue 32): the lists and manifests this process wrote stay
    kept for each of them, so a commit does not read its parent's manifest list back from storage."""
    import appliance.tables.fastpath.manifests as module
    import appliance.tables.fastpath.sql_catalog as sql_catalog

    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    catalog.iceberg.create_namespace("n")
    props = {"format-version": "2", **table_properties(settings)}
    tables = [catalog.iceberg.create_table(f"n.t{i}", SCHEMA, properties=props) for i in range(100)]
    kept = Manifests()
    tables = [append_files(t, write_data_files(TableTarget.of(t), rows(0, 2)), {}, manifests=kept) for t in tables]
    read, parsed = [], []
    real = module.read_manifest_list
    monkeypatch.setattr(module, "read_manifest_list", lambda file: read.append(file) or real(file))
    parse = sql_catalog.FromInputFile.table_metadata
    monkeypatch.setattr(sql_catalog.FromInputFile, "table_metadata",
                        staticmethod(lambda file, *a, **k: parsed.append(file) or parse(file, *a, **k)))
    for _ in range(2):
        tables = [append_files(t, write_data_files(TableTarget.of(t), rows(2, 2)), {}, manifests=kept)
                  for t in tables]
        tables = [catalog.table(t.name()) for t in tables]  # as the engine's next batch does
    assert read == [] and parsed == []
    with sqlite3.connect(settings.catalog_db) as db:  # one fsync a commit, readers never blocked
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert sorted(tables[99].scan().to_arrow().column("id").to_pylist()) == [0, 1, 2, 2, 3, 3]


def test_a_busy_tables_commits_keep_one_version_of_its_metadata_not_one_a_commit(twins):
    """Each commit's metadata was kept by its location, up to 2048 versions of one busy table: the engine's
    memory grew by its snapshot lists at every commit (`scripts/soak`, about 150 KB a commit at 2,000
    snapshots). One version a table now, the newest; reading the table still parses nothing."""
    settings, catalog, (ours, theirs) = twins
    iceberg = catalog.iceberg
    assert isinstance(iceberg, FloeSqlCatalog)
    for i in range(30):
        ours = commit_files(ours, write_data_files(TableTarget.of(ours), rows(i, 1)), "s", "t", None, {0: i + 1})[0]
        theirs = commit_files(theirs, write_data_files(TableTarget.of(theirs), rows(i, 1)), "s", "t", None,
                              {0: i + 1})[0]
    kept = dict(iceberg._metadata)
    assert sorted(kept) == sorted([ours.metadata_location, theirs.metadata_location])
    assert iceberg.load_table("n.ours").metadata is kept[ours.metadata_location]  # the newest, not parsed again


def test_an_entry_composed_of_its_kept_data_file_record_is_what_fastavro_encodes_whole(floe_home):
    """A merge writes live files' entries again and a rewrite removed ones: the data file's part is encoded once
    and kept with the entry (`KeptFile`); each status, snapshot and sequence numbers (none, small, large) around
    it, from the DataFile, from a kept file, and from a kept file of another format of the same layout."""
    from pyiceberg.transforms import DayTransform
    from pyiceberg.types import TimestamptzType

    from appliance.tables.fastpath.entries import KeptFile, data_file_record, entry_bytes, file_body

    settings = load_settings()
    ensure_home(settings)
    schema = Schema(*SCHEMA.fields, NestedField(3, "at", TimestamptzType(), required=False))
    spec = PartitionSpec(PartitionField(3, 1000, DayTransform(), "at_day"),
                         PartitionField(2, 1001, IdentityTransform(), "name"))
    catalog = Catalog(settings)
    catalog.iceberg.create_namespace("n")
    table = catalog.iceberg.create_table("n.t", schema, partition_spec=spec)
    files = write_data_files(TableTarget.of(table), pa.table({
        "id": [1, 2, 3], "name": ["a", None, "a"], "at": pa.array([0, 86_400_000_000, None], pa.timestamp("us", "UTC"))}))
    manifests = Manifests()
    fmt = manifests._entry_format(table.metadata, table.metadata.spec())
    with table.update_schema() as update:  # a column more: another format, the same data file layout
        update.add_column("extra", StringType())
    table = catalog.iceberg.load_table("n.t")
    other = manifests._entry_format(table.metadata, table.metadata.spec())
    assert fmt.entry_head is not None and len(files) == 3 and other is not fmt
    for f in files:
        kept = KeptFile(f, 0, file_body(fmt, f), fmt)
        assert file_body(fmt, kept) is kept.body
        for status, snapshot_id, seq, file_seq in [(1, 123, None, None), (0, 5, 7, 7), (2, 99, 3, 1),
                                                   (1, None, None, None), (0, -5, 2 ** 40, 0)]:
            whole = fmt.avro.record({"status": status, "snapshot_id": snapshot_id, "sequence_number": seq,
                                     "file_sequence_number": file_seq,
                                     "data_file": data_file_record(f, fmt.partition_names)})
            for source, layout in [(f, fmt), (kept, fmt), (kept, other)]:
                assert entry_bytes(layout, file_body(layout, source), status, snapshot_id, seq, file_seq) == whole


def test_a_kept_file_written_in_another_layout_is_encoded_again(floe_home):
    """A partition source promoted from float to double changes the data file's record (4 bytes to 8): a file
    kept in the old layout is decoded and encoded in the new one."""
    from pyiceberg.types import DoubleType, FloatType

    from appliance.tables.fastpath.entries import KeptFile, file_body

    settings = load_settings()
    ensure_home(settings)
    catalog = Catalog(settings)
    catalog.iceberg.create_namespace("n")
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "rate", FloatType(), required=False))
    table = catalog.iceberg.create_table("n.t", schema, partition_spec=PartitionSpec(
        PartitionField(2, 1000, IdentityTransform(), "rate")))
    files = write_data_files(TableTarget.of(table), pa.table({"id": [1, 2], "rate": pa.array([0.5, 2.0], pa.float32())}))
    manifests = Manifests()
    before = manifests._entry_format(table.metadata, table.metadata.spec())
    with table.update_schema() as update:
        update.update_column("rate", DoubleType())
    table = catalog.iceberg.load_table("n.t")
    after = manifests._entry_format(table.metadata, table.metadata.spec())
    assert before.data_file_json != after.data_file_json
    for f in files:
        kept = KeptFile(f, 0, file_body(before, f), before)
        assert file_body(after, kept) == file_body(after, f) != kept.body
