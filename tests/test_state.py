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
