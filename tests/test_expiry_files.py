"""Which files an expiry deletes: `unreachable_files` reads only what can tell, and must name exactly the files
the expired snapshots reference and the kept ones do not (`reachable_files`, which reads everything)."""

import dataclasses
import random
import time

import fastavro
import pyarrow as pa
from pyiceberg.expressions import EqualTo
from pyiceberg.io.pyarrow import PyArrowFileIO

from appliance.config.policy import build_policy
from appliance.config.settings import load_settings
from appliance.core.vocabulary import MaintenanceTask
from appliance.maintenance.expiry import capped, expire, may_expire, plan_expiry
from appliance.maintenance.maintainer import Maintainer
from appliance.maintenance.policies import set_policy
from appliance.maintenance.queue import spread
from appliance.tables.catalog import Catalog
from appliance.tables.commits import commit_files
from appliance.tables.datafiles import TableTarget, reachable_files, unreachable_files, write_data_files
from appliance.tables.fastpath.changes import MANIFESTS
from appliance.tables.fastpath.manifests import Manifests
from appliance.tables.snapshots import committed_offsets

from conftest import committed_again, uri_exists


def test_the_files_only_expired_snapshots_reference_are_what_reading_everything_finds(floe_home):
    floe_home.mkdir(parents=True)
    catalog = Catalog(load_settings())
    data = pa.table({"a": pa.array([1, 2], pa.int64())})
    table, _ = catalog.ensure_table("n.t", data.schema)
    offsets = None
    for i in range(1, 45):  # a stream's appends: manifests merged every few commits
        table, _ = commit_files(table, write_data_files(TableTarget.of(table), data), "s", "topic", offsets, {0: i})
        offsets = {0: i}
        if i in (5, 12):  # another writer's commits: files removed (DELETED entries), rewritten, appended
            table.delete(EqualTo("a", 1))
            table.append(pa.table({"a": pa.array([3], pa.int64())}))
    snapshots = table.metadata.snapshots
    ids = [s.snapshot_id for s in snapshots]
    choices = [ids[:10], ids[:-1], ids[5:25], ids[::3], [ids[13]], []]
    choices += [random.Random(seed).sample(ids, 12) for seed in range(4)]
    for gone_ids in choices:
        gone = [s for s in snapshots if s.snapshot_id in gone_ids]
        kept = [s for s in snapshots if s.snapshot_id not in gone_ids]
        expected = reachable_files(table, gone).all() - reachable_files(table, kept).all()
        assert unreachable_files(table, gone, kept) == expected
        if gone_ids == ids[:-1]:  # the deleted rows' files, the old manifests and lists: some of each
            assert {p.rsplit(".", 1)[-1] for p in expected} == {"avro", "parquet"}


def test_a_table_a_fifth_over_its_snapshot_cap_is_expired_back_to_it_whatever_the_interval(floe_home):
    catalog, table = committed_again(floe_home, 80)  # 81 snapshots
    settings = load_settings()
    maintainer = Maintainer(settings, catalog=catalog)
    set_policy(settings, maintainer.state, catalog, "n.t",
               {"max_snapshots": 60, "min_snapshots": 2, "min_snapshot_age": "0s"})
    files = [task.file for task in table.scan().plan_files()][:1]

    def commit(n: int) -> None:
        nonlocal table
        for _ in range(n):
            offset = committed_offsets(table, "s")[0]
            table, _ = commit_files(table, files, "s", "topic", {0: offset}, {0: offset + 1})

    assert MaintenanceTask.EXPIRE in maintainer.due("n.t")  # never expired yet
    run = maintainer.run("n.t", MaintenanceTask.EXPIRE)
    assert run.snapshots_expired == 21 and len(catalog.table("n.t").metadata.snapshots) == 60
    table = catalog.table("n.t")
    # A fifth over (12) and the table's own share of a tenth more (`over_cap`: tables apart), an hour not past.
    over = int(12 * (1 + spread("n.t") / 2))
    assert 12 <= over <= 18
    commit(over)
    assert MaintenanceTask.EXPIRE not in maintainer.due("n.t")
    commit(1)
    assert MaintenanceTask.EXPIRE in maintainer.due("n.t")
    newest = table.current_snapshot().snapshot_id
    assert maintainer.run("n.t", MaintenanceTask.EXPIRE).snapshots_expired == over + 1
    table = catalog.table("n.t")
    assert len(table.metadata.snapshots) == 60 and table.current_snapshot().snapshot_id == newest
    assert committed_offsets(table, "s") == {0: 80 + over + 1}
    assert table.scan().to_arrow().num_rows == 2 * (80 + over + 2)  # the same file committed again each time, all live


def test_an_expiry_past_the_cap_deletes_exactly_what_only_the_expired_snapshots_used(floe_home):
    """The cap's expiry, on the line from the current snapshot (its oldest kept one's parent dropped by the
    expiry itself): what it deletes is what reading every snapshot finds, and nothing a kept one needs."""
    floe_home.mkdir(parents=True)
    settings = load_settings()
    catalog = Catalog(settings)
    data = pa.table({"a": pa.array([1, 2], pa.int64())})
    table, _ = catalog.ensure_table("n.t", data.schema)
    for i in range(1, 80):  # merged every few dozen commits; another writer's delete in between
        table, _ = commit_files(table, write_data_files(TableTarget.of(table), data), "s", "topic",
                                {0: i - 1} if i > 1 else None, {0: i})
        if i == 20:
            table.delete(EqualTo("a", 1))
    snapshots = table.metadata.snapshots
    expected = (reachable_files(table, snapshots[:-30]).all() - reachable_files(table, snapshots[-30:]).all())
    policy = build_policy([("default", {**settings.maintenance.policy, "max_snapshots": 30, "min_snapshots": 5,
                                        "min_snapshot_age": "0s"})])[0]
    result = expire(settings, table, policy)
    assert len(result.plan.expire) == len(snapshots) - 30 and result.plan.files_to_delete == expected
    assert result.files_deleted == len(expected) and not any(uri_exists(p) for p in expected)
    table = catalog.table("n.t")
    assert table.metadata.snapshots[0].parent_snapshot_id is None  # what the line is found through instead
    assert all(uri_exists(p) for p in reachable_files(table, table.metadata.snapshots).all())
    assert table.scan().to_arrow().num_rows == 79 * 2 - 20


def test_a_table_within_its_cap_and_younger_than_kept_snapshots_is_not_planned_for_expiry(floe_home):
    """`may_expire` spares the check its plan (hundreds of tables each minute); it never says no where the plan
    would expire something."""
    catalog, table = committed_again(floe_home, 20)  # 21 snapshots, all seconds old
    settings = load_settings()
    maintainer = Maintainer(settings, catalog=catalog)
    policy = maintainer.policy("n.t")
    cases = {  # (max_snapshots, keep_snapshots in s) -> whether anything can be expired
        (500, 7 * 86400): False, (21, 7 * 86400): False, (20, 7 * 86400): True, (500, 0): True,
    }
    future = int(time.time() * 1000) + 1000
    for (cap, keep), expected in cases.items():
        p = dataclasses.replace(policy, max_snapshots=cap, keep_snapshots=keep, min_snapshots=2, min_snapshot_age=0)
        assert may_expire(table, p, future) is expected, (cap, keep)
        assert bool(plan_expiry(table, p, future).expire) is expected, (cap, keep)
    assert MaintenanceTask.EXPIRE not in maintainer.due("n.t")  # never expired, nothing to expire: not due


def test_the_cap_never_expires_a_snapshot_younger_than_min_snapshot_age(floe_home):
    """Past `max_snapshots` the oldest go, but not one younger than `min_snapshot_age`: a query or an incremental
    reader that started on it still finds its files (a busy stream's table keeps that long a history)."""
    catalog, table = committed_again(floe_home, 40)  # 41 snapshots, all seconds old
    settings = load_settings()
    maintainer = Maintainer(settings, catalog=catalog)
    policy = dataclasses.replace(maintainer.policy("n.t"), max_snapshots=10, min_snapshots=2)
    assert policy.min_snapshot_age == 300  # the default: 5 minutes
    stamps = sorted(s.timestamp_ms for s in table.metadata.snapshots)
    boundary = stamps[15]  # the snapshots before it are older than the floor, the others younger
    now_ms = boundary + 300_000
    older = {s.snapshot_id for s in table.metadata.snapshots if s.timestamp_ms < boundary}
    assert 0 < len(older) <= 15
    assert set(plan_expiry(table, policy, now_ms).expire) == older
    unbounded = dataclasses.replace(policy, min_snapshot_age=0)
    expired = plan_expiry(table, unbounded, now_ms).expire
    assert len(expired) == 41 - 10 and not {s.snapshot_id for s in table.metadata.snapshots[-5:]} & set(expired)
    # Counted as the cap counts them, the young ones only up to the cap: no plan at each check, none due.
    now = int(time.time() * 1000)
    assert capped(table, policy, now) == 10 and not may_expire(table, policy, now)
    assert capped(table, policy, now_ms) == 10 + len(older) and may_expire(table, policy, now_ms)
    set_policy(settings, maintainer.state, catalog, "n.t", {"max_snapshots": 10, "min_snapshots": 2})
    assert MaintenanceTask.EXPIRE not in maintainer.due("n.t")
    run = maintainer.run("n.t", MaintenanceTask.EXPIRE)  # asked for anyway: says why it expired nothing
    assert run.outcome == "nothing to do" and run.detail == (
        "41 snapshots, none to expire (those past max_snapshots are younger than min_snapshot_age, 300s)")
    set_policy(settings, maintainer.state, catalog, "n.t",
               {"max_snapshots": 10, "min_snapshots": 2, "min_snapshot_age": "0s"})
    assert MaintenanceTask.EXPIRE in maintainer.due("n.t")


def _read_by_pyiceberg(table, snapshots) -> set[str]:
    """Every list, manifest and live file the snapshots name, as PyIceberg reads them from storage."""
    out = set()
    for snapshot in snapshots:
        out.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            out.add(manifest.manifest_path)
            out.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True))
    return out


def test_an_expiry_reading_what_it_forgot_deletes_what_pyiceberg_finds_only_the_expired_snapshots_reference(
        floe_home):
    """An expiry long after the commits (every kept manifest forgotten) decodes only the paths and statuses of the
    lists and manifests it reads back: what it deletes is what PyIceberg, reading every file whole, finds only
    the expired snapshots reference, merged manifests and another writer's files among them."""
    floe_home.mkdir(parents=True)
    settings = load_settings()
    catalog = Catalog(settings)
    data = pa.table({"a": pa.array([1, 2], pa.int64())})
    table, _ = catalog.ensure_table("n.t", data.schema)
    for i in range(1, 90):  # merged every 32 commits; another writer's delete and append in between
        table, _ = commit_files(table, write_data_files(TableTarget.of(table), data), "s", "topic",
                                {0: i - 1} if i > 1 else None, {0: i})
        if i in (20, 50):
            table.delete(EqualTo("a", 1))
            table.append(pa.table({"a": pa.array([3], pa.int64())}))
    MANIFESTS.forget()  # as in an engine committing to hundreds of tables
    snapshots = table.metadata.snapshots
    expected = _read_by_pyiceberg(table, snapshots[:-30]) - _read_by_pyiceberg(table, snapshots[-30:])
    merged = [m for s in snapshots[:-30] for m in s.manifests(table.io) if m.existing_files_count > 10]
    assert merged and {p.rsplit(".", 1)[-1] for p in expected} == {"avro", "parquet"}
    policy = build_policy([("default", {**settings.maintenance.policy, "max_snapshots": 30, "min_snapshots": 5,
                                        "min_snapshot_age": "0s"})])[0]
    result = expire(settings, table, policy)
    assert result.plan.files_to_delete == expected and result.files_deleted == len(expected)
    assert not any(uri_exists(p) for p in expected)
    table = catalog.table("n.t")
    assert all(uri_exists(p) for p in _read_by_pyiceberg(table, table.metadata.snapshots))
    assert table.scan().to_arrow().num_rows == 89 * 2 - 20 - 30 + 2  # a=1 deleted twice; two 3s


def test_an_expiry_on_the_line_reads_the_lists_and_only_the_manifests_that_remove_files(floe_home, monkeypatch):
    """A cap's expiry (the gone snapshots the oldest part of the line from the current one) finds what to delete
    from the manifest lists and the manifests holding DELETED entries, never the merged manifests of every live
    file, and deletes exactly what PyIceberg, reading every file whole, finds only the expired snapshots
    reference: the files the oldest kept snapshot removed too, not those the oldest expired one did (an earlier
    expiry, whose oldest kept snapshot it was, deleted them)."""
    from appliance.tables.commits import commit_rewrite
    from appliance.tables.datafiles import live_data_files
    from appliance.tables.fastpath import manifests as manifests_module
    from pyiceberg.table.snapshots import Operation

    floe_home.mkdir(parents=True)
    settings = load_settings()
    catalog = Catalog(settings)
    data = pa.table({"a": pa.array([1, 2], pa.int64())})
    table, _ = catalog.ensure_table("n.t", data.schema)
    rewrites = []

    def commit(first: int, last: int) -> None:
        nonlocal table
        for i in range(first, last + 1):
            table, _ = commit_files(table, write_data_files(TableTarget.of(table), data), "s", "topic",
                                    {0: i - 1} if i > 1 else None, {0: i})
            if i % 40 == 0:  # Floe's rewrite (compaction's commit): every live file replaced by one
                table = commit_rewrite(settings, table, live_data_files(table),
                                       write_data_files(TableTarget.of(table), table.scan().to_arrow()),
                                       Operation.REPLACE, {})
                rewrites.append(table.current_snapshot().snapshot_id)
            if i == 45:  # another writer's removal: PyIceberg's DELETED entries
                table.delete(EqualTo("a", 1))

    def expire_from(rewrite: int, restarted: bool) -> tuple[set[str], set[str], set[str]]:
        """Expire every snapshot before the `rewrite`: what it deleted, what PyIceberg finds it should, and the
        lists it read from storage. Of the manifests it reads none of the expired snapshots' merged ones."""
        MANIFESTS.forget(everything=restarted)  # as in an engine committing to hundreds of tables, or restarted
        snapshots = table.metadata.snapshots
        at = [s.snapshot_id for s in snapshots].index(rewrite)
        expected = _read_by_pyiceberg(table, snapshots[:at]) - _read_by_pyiceberg(table, snapshots[at:])
        merged = {m.manifest_path for s in snapshots[:at] for m in s.manifests(table.io) if m.existing_files_count > 10}
        removing = {m.manifest_path for s in snapshots for m in s.manifests(table.io) if m.deleted_files_count}
        lists = {s.manifest_list for s in snapshots}
        read, real = [], manifests_module._records
        monkeypatch.setattr(manifests_module, "_records", lambda io, path, fields: read.append(path) or real(io, path, fields))
        policy = build_policy([("default", {**settings.maintenance.policy, "max_snapshots": len(snapshots) - at,
                                            "min_snapshots": 5, "min_snapshot_age": "0s"})])[0]
        result = expire(settings, table, policy)
        monkeypatch.setattr(manifests_module, "_records", real)
        assert len(result.plan.expire) == at and result.files_deleted == len(result.plan.files_to_delete)
        manifests = {p for p in read if p not in lists}
        assert merged and manifests and manifests <= removing
        assert not any(uri_exists(p) for p in result.plan.files_to_delete)
        return result.plan.files_to_delete, expected, {p for p in read if p in lists}

    commit(1, 90)
    deleted, expected, lists = expire_from(rewrites[0], restarted=False)  # the oldest kept removed every file before it
    assert deleted == expected and {p.rsplit(".", 1)[-1] for p in expected} == {"avro", "parquet"}
    assert len(lists) <= 3  # the oldest expired, the oldest kept and the current snapshot's: what the others added is known
    commit(91, 130)
    table = catalog.table("n.t")
    deleted, expected, lists = expire_from(rewrites[1], restarted=True)  # the oldest expired, the first rewrite, removed files too
    assert deleted == expected and any(p.endswith(".parquet") for p in expected)
    assert len(lists) > 30  # another process's lists: each read
    table = catalog.table("n.t")
    assert all(uri_exists(p) for p in _read_by_pyiceberg(table, table.metadata.snapshots))
    assert table.scan().to_arrow().num_rows == 130 * 2 - 45


def test_a_list_whose_writer_named_its_records_otherwise_is_read_whole(tmp_path):
    """The projection names the spec's records; a writer that named them otherwise is read as it wrote."""
    schema = {"type": "record", "name": "not_the_spec_name", "fields": [
        {"name": "manifest_path", "type": "string"}, {"name": "added_files_count", "type": "int"}]}
    path = tmp_path / "snap-1.avro"
    with open(path, "wb") as f:
        fastavro.writer(f, schema, [{"manifest_path": f"m-{i}.avro", "added_files_count": i} for i in range(3)])
    assert Manifests().listed_paths(PyArrowFileIO(), f"file://{path}") == ("m-0.avro", "m-1.avro", "m-2.avro")
