"""Thread CPU of the engine's steps, by function, with little overhead: what a profiler that samples, or
cProfile on every thread, cannot tell at 200 streams on 2 cores (the first charges a bursty thread's CPU to where it
sleeps, the second saturates the engine).

Usage (any benchmark that starts `floe run` as `python -m appliance.cli run`, with this folder on its PYTHONPATH):
    FLOE_PHASE_DIR=/tmp/steps FLOE_PHASE_AFTER=60 PYTHONPATH=scripts/step_cpu \
        .venv/bin/python scripts/bench_many_streams --streams 200 --rate 200 --window 240 --warmup 15
Every function named in TARGETS (module:qualified name; one looked up by its module's global or its class, so a
name another module imported by `from ... import` before the patch is not seen there) is wrapped: its calls and
`time.thread_time()` inclusive, counted from FLOE_PHASE_AFTER seconds in, written to $FLOE_PHASE_DIR/phases.txt
every 20 s: calls, seconds, share of a core over the time counted, microseconds a call.
"""
import os, sys
_dir = os.environ.get("FLOE_PHASE_DIR")
if _dir and "appliance.cli" in sys.orig_argv and "run" in sys.orig_argv:
    import collections, functools, threading, time
    TARGETS = """
appliance.ingest.runner:StreamRunner.prepare
appliance.ingest.runner:StreamRunner.finish
appliance.ingest.runner:StreamRunner.positions
appliance.ingest.runner:StreamRunner.spec
appliance.ingest.runner:StreamRunner._record
appliance.ingest.runner:commit_batch
appliance.ingest.batch_commit:commit_files
appliance.tables.commits:commit_lock
appliance.tables.commits:commit_with_offsets
appliance.tables.fastpath.appends:append_files
appliance.tables.fastpath.changes:commit_changes
appliance.tables.fastpath.changes:_commit
appliance.tables.fastpath.changes:_summary
appliance.tables.fastpath.manifests:Manifests.write_manifest
appliance.tables.fastpath.manifests:Manifests.write_list
appliance.tables.fastpath.sql_catalog:FloeSqlCatalog.commit_table
appliance.tables.fastpath.sql_catalog:FloeSqlCatalog._sql
appliance.tables.fastpath.sql_catalog:FloeSqlCatalog._write_metadata
appliance.tables.fastpath.metadatafile:MetadataWriter.json
appliance.tables.catalog:Catalog.current
appliance.state.store:StateStore.record_batch
appliance.state.store:StateStore.update_status
appliance.ingest.worker:StreamWorker._succeeded
appliance.ingest.worker:StreamWorker._linger
appliance.ingest.worker:StreamWorker._loop
appliance.ingest.jobs:BatchJobs.run_many
appliance.ingest.jobs:BatchJobs._run
appliance.ingest.turns:Turns.take
appliance.ingest.batch:run_items
appliance.ingest.batch:_write
appliance.decode.rows:decode_batch
appliance.tables.datafiles:write_data_files
appliance.ingest.watermarks:ClusterPoller._poll
appliance.maintenance.maintainer:Maintainer.run
appliance.maintenance.scheduler:MaintenanceScheduler._scheduled
appliance.maintenance.maintainer:Maintainer.assess
appliance.maintenance.maintainer:Maintainer._older_than
appliance.maintenance.maintainer:Maintainer._perform_task
appliance.maintenance.expiry:expire
appliance.maintenance.expiry:plan_expiry
appliance.maintenance.expiry:stage_positions
appliance.maintenance.expiry:unreachable_files
appliance.maintenance.expiry:delete_giving_way
pyiceberg.table.update.snapshot:ExpireSnapshots.commit
appliance.maintenance.compaction:compact
appliance.maintenance.compaction:plan_compaction
appliance.maintenance.compaction:delete_files
appliance.maintenance.compaction:rewrite_groups
appliance.maintenance.compaction:commit_rewrite
appliance.maintenance.orphans:remove_orphans
appliance.maintenance.orphans:referenced_files
appliance.state.store:StateStore.record_run
appliance.tables.reading:_as_written
appliance.tables.fastpath.recent:RecentFiles._drop
pyarrow.parquet:ParquetFile.__init__
""".split()
    acc = collections.defaultdict(lambda: [0, 0.0])
    start_at = time.monotonic() + float(os.environ.get("FLOE_PHASE_AFTER", "60"))
    def wrap(key, fn):
        @functools.wraps(fn)
        def inner(*a, **k):
            t0 = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                if time.monotonic() > start_at:
                    e = acc[key]; e[0] += 1; e[1] += time.thread_time() - t0
        return inner
    def patch():
        pending = list(TARGETS)
        give_up = time.monotonic() + 300
        while pending:
            for t in list(pending):
                mod, qual = t.split(":")
                m = sys.modules.get(mod)
                if m is None:
                    continue
                owner = m
                parts = qual.split(".")
                try:
                    for p in parts[:-1]: owner = getattr(owner, p)
                    fn = getattr(owner, parts[-1])
                except AttributeError:  # its module is still being imported, or the name is wrong: later
                    if time.monotonic() > give_up:
                        pending.remove(t)
                        print("step_cpu: no", t, file=sys.stderr)
                    continue
                setattr(owner, parts[-1], wrap(t.split(":")[1] + "@" + mod.rsplit(".", 1)[1], fn))
                pending.remove(t)
            time.sleep(0.05)
    def dump():
        while True:
            time.sleep(20)
            if time.monotonic() < start_at: continue
            el = time.monotonic() - start_at
            with open(os.path.join(_dir, "phases.txt"), "w") as out:
                out.write(f"elapsed {el:.1f}s process cpu {time.process_time():.1f}\n")
                for k, (n, s) in sorted(acc.items(), key=lambda kv: -kv[1][1]):
                    out.write(f"{k:60s} {n:8d} calls {s:8.2f}s {s/el*100:6.2f}%core {s/max(n,1)*1e6:9.0f}us/call\n")
    threading.Thread(target=patch, daemon=True).start()
    threading.Thread(target=dump, daemon=True).start()
