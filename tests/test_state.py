"""The appliance's state database, opened by many parties at once."""

import threading

from appliance.state.store import StateStore


def test_a_fresh_state_database_opened_by_many_at_once_is_created_once(tmp_path):
    # The engine, the UI's workers and a CLI call may all open a new FLOE_HOME together.
    errors: list[BaseException] = []
    for round_ in range(10):
        path = tmp_path / f"home-{round_}" / "state.db"

        def open_it() -> None:
            try:
                StateStore(path).close()
            except BaseException as exc:  # collected: a thread's exception would be lost
                errors.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[:3]
    store = StateStore(tmp_path / "home-0" / "state.db")
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert {"streams", "engine", "maintenance_runs"} <= set(store.db.table_names())


def test_an_older_state_database_gains_the_new_columns_when_opened(tmp_path):
    import sqlite3

    path = tmp_path / "state.db"
    old = sqlite3.connect(path)
    old.execute("create table batches (id integer primary key, stream text, messages integer)")
    old.execute("insert into batches (stream, messages) values ('s', 5)")
    old.commit()
    old.close()
    store = StateStore(path)
    from appliance.state.records import BatchRecord

    store.record_batch(BatchRecord(stream="s", started_at="", committed_at="", duration_ms=1, messages=7, rows=7,
                                   dead_letter_rows=0, bytes=0, target_snapshot_id=None, dead_letter_snapshot_id=None,
                                   offsets="{}", lag=3))
    assert [(r["messages"], r["lag"]) for r in store.db["batches"].rows] == [(5, None), (7, 3)]


def test_opening_an_up_to_date_state_database_waits_for_no_writer(tmp_path):
    """`floe status`, `floe stream list` and the UI's workers open the state database while the engine writes it:
    a database with every table, column and index needs no migration, so opening it takes no write lock and
    never waits for a writer's transaction to end (it waited the whole busy timeout, 30 s)."""
    path = tmp_path / "state.db"
    StateStore(path).close()
    writer = StateStore(path)
    writer.db.conn.execute("BEGIN IMMEDIATE")  # a writer in the middle of its transaction
    writer.update_status("s", phase="running", lag=3)
    opened = threading.Event()
    seen: list[object] = []

    def read_it() -> None:
        with StateStore(path) as reader:
            seen.append(reader.statuses())
        opened.set()

    thread = threading.Thread(target=read_it, daemon=True)
    thread.start()
    try:
        assert opened.wait(5), "opening the state database waited for the writer"
        assert seen == [{}]  # the writer's uncommitted row is not seen
    finally:
        writer.db.conn.execute("COMMIT")
        thread.join(40)
        writer.close()


def test_a_state_database_missing_an_index_gains_it_when_opened(tmp_path):
    path = tmp_path / "state.db"
    StateStore(path).close()
    with StateStore(path) as store:
        store.db.execute("drop index idx_batches_committed_at")
    with StateStore(path) as store:
        names = {r[0] for r in store.db.execute("select name from sqlite_master where type = 'index'")}
    assert "idx_batches_committed_at" in names


def test_totals_added_by_the_status_write_equal_those_read_and_added_before(tmp_path):
    # A batch's status write adds its rows in SQL instead of reading the row first: the same row either way.
    batches = [(5, 0), (0, 2), (7, 1)]
    with StateStore(tmp_path / "added.db") as added, StateStore(tmp_path / "read.db") as read:
        for rows, dead in batches:
            added.update_status("s", {"rows_total": rows, "dead_letter_total": dead}, phase="running", lag=rows)
            before = read.status("s")
            read.update_status("s", phase="running", lag=rows, rows_total=before.rows_total + rows,
                               dead_letter_total=before.dead_letter_total + dead)
            added.update_status("s", phase="running", lag=1)  # a write with nothing added keeps the totals
            read.update_status("s", phase="running", lag=1)
            ours, theirs = added.status("s"), read.status("s")
            assert (ours.rows_total, ours.dead_letter_total) == (theirs.rows_total, theirs.dead_letter_total)
            assert {**vars(ours), "updated_at": None} == {**vars(theirs), "updated_at": None}
        assert (ours.rows_total, ours.dead_letter_total) == (12, 3)


def test_a_batchs_state_writes_and_maintenance_reads_ask_sqlite_nothing_about_views(tmp_path):
    """Every `db[name]` of sqlite-utils asked `sqlite_master` for the views first: a query more for each status
    write of every batch and each table's look by maintenance. The state database holds no views."""
    with StateStore(tmp_path / "state.db") as state:
        statements: list[str] = []
        state.db.conn.set_trace_callback(statements.append)
        state.update_status("s", {"rows_total": 5, "dead_letter_total": 0}, phase="running", lag=0)
        assert state.last_run("ns.t", "compact") is None
        assert state.policy("table", "ns.t") == {}
        state.db.conn.set_trace_callback(None)
        assert statements and not [s for s in statements if "sqlite_master" in s], statements
        assert state.status("s").rows_total == 5
