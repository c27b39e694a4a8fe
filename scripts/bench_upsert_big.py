"""Upsert tables of 10^7 and 10^8 keys (`scripts/bench_upsert --big ...`): what the key index costs, and
what upserts, a compaction and a restart cost with it. Run from scripts/bench_upsert.

Each case lives in `--big-dir/<type>-<keys>/` (FLOE_HOME: catalog, warehouse, the index's checkpoint):
the table of one row per key is loaded once, directly, and kept for later runs; each run makes its
streams again on a new topic of the embedded broker.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PARTITIONS = 4
CHUNK = 1_000_000  # rows a loaded data file holds
FLUSH_SECONDS = 600  # a round's messages delivered to the broker (a loaded machine is slow to produce)
HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def uuids(numbers: np.ndarray) -> pa.Array:
    """Key number -> a UUID string, the same every time (two spread words as 32 hex digits)."""
    from appliance.mergeonread.keyforms import fmix

    n = numbers.astype(np.uint64)
    with np.errstate(over="ignore"):
        words = np.stack([fmix(n), fmix(n ^ np.uint64(0x9E3779B97F4A7C15))], axis=1)
    raw = words.astype(">u8").view(np.uint8).reshape(-1, 16)
    digits = np.empty((len(n), 32), dtype=np.uint8)
    digits[:, 0::2], digits[:, 1::2] = HEX[raw >> 4], HEX[raw & 15]
    chars = np.full((len(n), 36), ord("-"), dtype=np.uint8)
    chars[:, np.r_[0:8, 9:13, 14:18, 19:23, 24:36]] = digits
    offsets = np.arange(0, 36 * len(n) + 1, 36, dtype=np.int32)
    return pa.StringArray.from_buffers(len(n), pa.py_buffer(offsets), pa.py_buffer(chars.tobytes()))


def keys_of(kind: str, numbers: np.ndarray) -> list:
    return numbers.tolist() if kind == "long" else uuids(numbers).to_pylist()


def mapping(kind: str):
    from appliance.model.mapping import Column, Mapping

    return Mapping((Column("id", "long" if kind == "long" else "string", ("id",)),
                    Column("status", "string", ("status",)), Column("amount", "double", ("amount",)),
                    Column("updated_at", "timestamptz", ("updated_at",)), Column("version", "long", ("version",))))


def produce(bootstrap: str, topic: str, kind: str, numbers: np.ndarray, start: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 2_000_000, "log_level": 0})
    for n, (number, key) in enumerate(zip(numbers.tolist(), keys_of(kind, numbers))):
        p.produce(topic, key=str(key).encode(), partition=number % PARTITIONS, value=orjson.dumps(
            {"id": key, "status": "paid" if n % 3 else "new", "amount": round((start + n) * 0.37 % 500, 2),
             "updated_at": "2026-11-24T10:00:00.000Z", "version": start + n}))
        if n % 20000 == 0:
            p.poll(0)
    left = p.flush(FLUSH_SECONDS)
    if left:
        raise RuntimeError(f"{left} messages not delivered to {topic} within {FLUSH_SECONDS} s")


class Case:
    """One table of `keys` keys of `kind`, its streams on this run's topic, and what was measured."""

    def __init__(self, args, bootstrap: str, spark, kind: str, keys: int) -> None:
        from appliance.config.settings import ensure_home, load_settings

        self.args, self.bootstrap, self.spark, self.kind, self.keys = args, bootstrap, spark, kind, keys
        self.home = Path(args.big_dir) / f"{kind}-{keys}"
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "floe.toml").write_text("[maintenance]\nenabled = false\n")  # compactions only on cue
        self.settings = load_settings(self.home)
        ensure_home(self.settings)
        self.run_id = f"r{int(time.time())}"
        self.topic = f"big_{kind}_{keys}_{self.run_id}"
        self.table, self.append_table = "bench.big", f"bench.big_a_{self.run_id}"
        self.sent = 0
        self.rng = np.random.default_rng(keys)
        self.lines: list[str] = []

    def say(self, line: str) -> None:
        print(f"  [{self.kind} {self.keys:,}] {line}", flush=True)
        self.lines.append(line)

    # ---- the table, loaded once -------------------------------------------------------------------

    def load(self) -> None:
        from pyiceberg.table.snapshots import Operation

        from appliance.tables.catalog import Catalog
        from appliance.tables.datafiles import TableTarget, write_data_files
        from appliance.tables.fastpath.changes import FileChanges, commit_changes
        from appliance.tables.iceberg_schemas import target_iceberg_schema
        from appliance.tables.snapshots import totals

        catalog = Catalog(self.settings)
        marker = self.home / "loaded.json"
        if marker.exists() and json.loads(marker.read_text()).get("keys") == self.keys:
            held = totals(catalog.table(self.table))
            self.say(f"table reused: {held.rows:,} rows, {held.data_files} data files, "
                     f"{held.size_bytes / 2**30:.1f} GiB")
            return
        table = catalog.ensure_table(self.table, target_iceberg_schema(mapping(self.kind)))[0]
        t0, files = time.monotonic(), []
        for start in range(0, self.keys, CHUNK):
            numbers = np.arange(start, min(self.keys, start + CHUNK))
            files += write_data_files(TableTarget.of(table), self._rows(table, numbers))
            if len(files) >= 20 or start + CHUNK >= self.keys:
                table = commit_changes(table, FileChanges(data=files), Operation.APPEND, {})
                files = []
        marker.write_text(json.dumps({"keys": self.keys}))
        held = totals(table)
        self.say(f"table loaded in {time.monotonic() - t0:.0f} s (untimed): {held.rows:,} rows, "
                 f"{held.data_files} data files, {held.size_bytes / 2**30:.1f} GiB")

    def _rows(self, table, numbers: np.ndarray) -> pa.Table:
        n = len(numbers)
        ids = pa.array(numbers) if self.kind == "long" else uuids(numbers)
        at = pa.array(np.full(n, 1_795_000_000_000_000), pa.timestamp("us", tz="UTC"))
        rows = pa.table({"id": ids, "status": pa.array(np.where(numbers % 3, "paid", "new")),
                         "amount": pa.array(numbers * 0.37 % 500), "updated_at": at, "version": pa.array(numbers)})
        for f in table.schema().fields[len(rows.column_names):]:  # Floe's columns: another writer has none
            kind = pa.int32() if f.name == "_kafka_partition" else pa.int64() if f.name == "_kafka_offset" \
                else pa.timestamp("us", tz="UTC")
            rows = rows.append_column(f.name, pa.nulls(n, kind) if f.name != "_ingested_at" else at)
        return rows

    # ---- streams, on this run's topic -------------------------------------------------------------

    def streams(self) -> None:
        from appliance.control.streams import create_stream, delete_stream
        from appliance.state.store import StateStore
        from appliance.tables.catalog import Catalog

        with StateStore(self.settings.state_db) as state:
            old = [s.name for s in state.streams()]
        catalog = Catalog(self.settings)
        for name in old:  # an earlier run's: its topic is gone with its broker
            gone = delete_stream(self.settings, name, drop_tables=name.endswith("_a"))
            if catalog.exists(gone.dead_letter_table):  # made by an older Floe, perhaps of other columns
                catalog.drop(gone.dead_letter_table)
                with StateStore(self.settings.state_db) as state:
                    state.forget_table(gone.dead_letter_table)
        self.send(np.arange(PARTITIONS))  # the topic is made by its first messages
        # Dead-letter tables of this run's own (an older run's may be of an older Floe's columns).
        create_stream(self.settings, "big_u", bootstrap=self.bootstrap, topic=self.topic, table=self.table,
                      mode="upsert", key=["id"], mapping=mapping(self.kind),
                      dead_letter_table=f"bench.big_dlq_{self.run_id}")
        create_stream(self.settings, "big_a", bootstrap=self.bootstrap, topic=self.topic, table=self.append_table,
                      mapping=mapping(self.kind))

    def stream(self, name: str):
        from appliance.state.store import StateStore

        with StateStore(self.settings.state_db) as state:
            return state.stream(name)

    def send(self, numbers: np.ndarray) -> None:
        produce(self.bootstrap, self.topic, self.kind, numbers, self.sent)
        self.sent += len(numbers)

    def run(self, mode: str) -> float:
        """Seconds from the engine's start to the return of the commit step of everything sent, for stream
        `big_<mode>`: an upsert batch's index update after its snapshot (`landed`, the checkpoint's step)
        included, as a stream's next batch waits for it."""
        from appliance.control.streams import set_paused
        from appliance.ingest import runner
        from appliance.ingest.engine import Engine

        set_paused(self.settings, "big_u", mode != "u")
        set_paused(self.settings, "big_a", mode != "a")
        steps: list[tuple[float, float]] = []
        original = runner.commit_batch
        runner.commit_batch = _timing(original, steps)
        try:
            t0 = time.time()
            Engine(self.settings, spark=self.spark).run(until_caught_up=True)
        finally:
            runner.commit_batch = original
        return steps[-1][1] - t0

    def committed(self, table_name: str) -> int:
        from appliance.tables.catalog import Catalog
        from appliance.tables.snapshots import offset_commits

        commits = offset_commits(Catalog(self.settings).table(table_name))
        return sum(commits[-1].offsets.values()) if commits else 0

    # ---- the index --------------------------------------------------------------------------------

    def index(self) -> None:
        """Built from the table (time, memory), checkpointed, and loaded back as a restart loads it."""
        from appliance.ingest.indexes import index_for
        from appliance.mergeonread.building import build
        from appliance.mergeonread.commit import checkpoint
        from appliance.mergeonread.index import KeyIndex
        from appliance.mergeonread.lineage import bring_to
        from appliance.mergeonread.store import IndexStore
        from appliance.tables.catalog import Catalog

        table = Catalog(self.settings).table(self.table)
        index = index_for(self.settings.home, self.stream("big_u"), table)
        before_build = before = rss()
        t0 = time.monotonic()
        build(index, table)
        built, grown = time.monotonic() - t0, rss() - before
        n = len(index)
        self.say(f"index built in {built:.1f} s: {n:,} keys, arrays {index.nbytes() / n:.1f} B/key, process "
                 f"+{grown / n:.1f} B/key ({grown / 2**30:.2f} GiB), form {index.form.exact}")
        t0 = time.monotonic()
        checkpoint(index, everything=True)  # the engine's first after a build: then served from it
        size = sum(p.stat().st_size for p in index.store.directory.glob("*") if p.is_file())
        self.say(f"checkpoint written in {time.monotonic() - t0:.1f} s: {size / 2**30:.2f} GiB, "
                 f"{len(list(index.store.directory.glob('shards-*')))} files; the built index served from it: "
                 f"process +{(rss() - before_build) / n:.1f} B/key")
        before, t0 = rss(), time.monotonic()
        again = KeyIndex(index.columns, IndexStore(index.store.directory, writable=False))
        how = bring_to(again, table)
        loaded = time.monotonic() - t0
        probe = self.rng.integers(0, self.keys, 100_000)  # a batch's lookups fault its pages in
        h, low = again.spread(again.form.words(pa.table({"id": pa.array(keys_of(self.kind, probe))})))
        t0 = time.monotonic()
        found = again.find(h, low)
        looked = time.monotonic() - t0
        assert found.present.all(), "every key of the table is in the loaded index"
        self.say(f"checkpoint {how} in {loaded:.2f} s (mapped; +{(rss() - before) / n:.1f} B/key after a "
                 f"first batch's 100,000 lookups, which took {looked:.2f} s)")
        del again

    # ---- rounds of updates ------------------------------------------------------------------------

    def rounds(self) -> dict[str, dict[str, list[float]]]:
        out = {}
        for skewed in (False, True):
            rates: dict[str, list[float]] = {"u": [], "a": []}
            for r in range(self.args.big_rounds):
                self.send(self.draw(self.args.round_messages, skewed))
                for mode in ("u", "a") if r % 2 else ("a", "u"):
                    seconds = self.run(mode)
                    assert self.committed(self.table if mode == "u" else self.append_table) == self.sent
                    rates[mode].append(self.args.round_messages / seconds)
                self.say(f"{'skewed ' if skewed else 'uniform'} round {r + 1}: upsert {rates['u'][-1]:,.0f} msg/s, "
                         f"append {rates['a'][-1]:,.0f} msg/s")
            out["skewed" if skewed else "uniform"] = rates
        return out

    def draw(self, n: int, skewed: bool) -> np.ndarray:
        if not skewed:
            return self.rng.integers(0, self.keys, n)
        hot = self.rng.random(n) < 0.8
        return np.where(hot, self.rng.integers(0, max(1, self.keys // 5), n), self.rng.integers(0, self.keys, n))

    # ---- a compaction under a live stream ---------------------------------------------------------

    def stall(self, rate: int = 30_000) -> None:
        """The engine runs while updates arrive at `rate` a second; the table is compacted. How long the
        compaction's commit holds the table, and how long the stream's batches take around it."""
        from appliance.control.streams import set_paused
        from appliance.ingest import runner
        from appliance.ingest.engine import Engine
        from appliance.maintenance import compaction, rewrite
        from appliance.maintenance.policies import effective_policy
        from appliance.state.store import StateStore
        from appliance.tables import commits as commits_module
        from appliance.tables.catalog import Catalog

        set_paused(self.settings, "big_u", False)
        set_paused(self.settings, "big_a", True)
        engine = Engine(self.settings, spark=self.spark)
        running = threading.Thread(target=engine.run, daemon=True)
        stop = threading.Event()
        feeding = threading.Thread(target=self._feed, args=(rate, stop), daemon=True)
        commits: list[tuple[float, float]] = []  # the compaction's commit: called, returned
        # The stream's commit steps, from before they wait for the table's commit lock to their return.
        upserts: list[tuple[float, float]] = []
        original, upsert = compaction.commit_rewrite, runner.commit_batch
        held: list[tuple[float, float]] = []  # the compaction's commit holding the table's commit lock
        lock = commits_module.commit_lock  # the compaction's alone: the stream's commits take it elsewhere

        @contextlib.contextmanager
        def timed_lock(settings, name):
            with lock(settings, name):
                t0 = time.time()
                try:
                    yield
                finally:
                    held.append((t0, time.time()))

        timed, timed_upsert = _timing(original, commits), _timing(upsert, upserts)
        catalog = Catalog(self.settings)
        with StateStore(self.settings.state_db) as state:
            policy = effective_policy(self.settings, state, self.table)[0]
        runner.commit_batch = timed_upsert
        running.start()
        feeding.start()
        try:  # whatever happens, the engine and the feed stop: the run goes on to the restart
            time.sleep(20)  # batches before the compaction, for comparison
            compaction.commit_rewrite, commits_module.commit_lock = timed, timed_lock
            t0 = time.monotonic()
            # As the engine's maintainer runs it: rewrites in waves that leave the stream a Spark task slot
            # (`floe maintain` in a process of its own takes them all; the engine's never does).
            sharing = rewrite.SHARING.set(True)
            try:
                result = compaction.compact(self.settings, catalog, catalog.table(self.table), policy, self.spark)
            finally:
                rewrite.SHARING.reset(sharing)
                compaction.commit_rewrite, commits_module.commit_lock = original, lock
            took = time.monotonic() - t0
            time.sleep(20)
        finally:
            stop.set()
            feeding.join()
            deadline = time.monotonic() + 600
            while self.committed(self.table) < self.sent and time.monotonic() < deadline:
                time.sleep(0.5)
            engine.stop()
            running.join()
            runner.commit_batch = upsert
        self._report_stall(commits, held, upserts, result, took)

    def _feed(self, rate: int, stop: threading.Event) -> None:
        tick = time.monotonic()
        while not stop.is_set():
            self.send(self.draw(rate // 2, False))
            tick += 0.5
            stop.wait(max(0.0, tick - time.monotonic()))

    def _report_stall(self, commits, held, upserts, result, took: float) -> None:
        """The stream's commits that waited for the compaction's (began before it let go of the table's
        commit lock, returned after it took it), against the others: how long the stream's commit step took."""
        if not commits or not held or not upserts:
            self.say(f"compaction: no commit to compare (compaction commits {len(commits)}, stream commits "
                     f"{len(upserts)}; {result.plan.files_to_rewrite} files planned)")
            return
        begin, end = held[-1]
        hit = [b - a for a, b in upserts if a < end and b > begin]
        rest = [b - a for a, b in upserts if not (a < end and b > begin)]
        self.say(f"compaction: {result.plan.files_to_rewrite} files, {result.rows:,} rows rewritten in {took:.0f} s "
                 f"while the stream ran; its commit took {commits[-1][1] - commits[-1][0]:.2f} s and held the "
                 f"table's lock {end - begin:.2f} s")
        rest = rest or [float("nan")]
        self.say(f"stream commits: median {statistics.median(rest):.2f} s, max {max(rest):.2f} s "
                 f"({len(rest)} commits); meeting the compaction's lock: "
                 f"{', '.join(f'{d:.2f} s' for d in hit) or 'none'}; index: {self._catch_ups()}")

    def _catch_ups(self) -> str:
        """What the engine's log says of its key index's catch-ups (`mergeonread.lineage`)."""
        log = self.home / "logs" / "floe.log"
        found = re.findall(r"key index (\w+) to snapshot \d+ in ([0-9.]+) s", log.read_text() if log.exists() else "")
        return ", ".join(f"{how} {s} s" for how, s in found[-3:]) or "(no log line)"

    # ---- a restart --------------------------------------------------------------------------------

    def restart(self) -> None:
        """`floe run` in a process of its own with a round waiting: seconds from its start to its first
        upsert commit (a JVM's start, the checkpoint loaded, the batch)."""
        from appliance.control.streams import set_paused
        from appliance.tables.catalog import Catalog
        from appliance.tables.snapshots import offset_commits

        set_paused(self.settings, "big_u", False)
        set_paused(self.settings, "big_a", True)
        self.send(self.draw(self.args.round_messages, False))
        log = self.home / "logs" / "restart.log"
        t0 = time.time()
        with log.open("w") as out:
            engine = subprocess.Popen([sys.executable, "-m", "appliance.cli", "run"], cwd=ROOT, stdout=out,
                                      stderr=out, env={**os.environ, "FLOE_HOME": str(self.home)})
        first = None
        while first is None and time.time() - t0 < 600:
            time.sleep(0.2)
            commits = offset_commits(Catalog(self.settings).table(self.table))
            first = next((c for c in commits if c.committed_ms / 1000 > t0), None)
        while self.committed(self.table) < self.sent and time.time() - t0 < 900:
            time.sleep(0.5)
        engine.terminate()  # a stop saves the index whole: give it time, then make sure
        try:
            engine.wait(600)
        except subprocess.TimeoutExpired:
            engine.kill()
            engine.wait()
        self.say(f"restart: `floe run` to its first upsert commit in {first.committed_ms / 1000 - t0:.1f} s; "
                 f"its index: {self._catch_ups()}" if first else "restart: no commit within 600 s")


def forget_other_indexes(case: Case) -> None:
    """The key indexes of earlier cases leave this process, as the engine lets go of a deleted stream's
    (a 10^8 index is 1.5-2.4 GiB: kept, they added up until the machine ran out)."""
    from appliance.ingest.indexes import keep_only
    from appliance.mergeonread.memory import give_back
    from appliance.state.store import StateStore

    with StateStore(case.settings.state_db) as state:
        keep_only(case.home, {s.id for s in state.streams()})
    give_back()


def _timing(call, into: list[tuple[float, float]]):
    """`call`, noting when each call began and returned into `into`."""

    def timed(*a, **k):
        t0 = time.time()
        try:
            return call(*a, **k)
        finally:
            into.append((t0, time.time()))

    return timed


def main_big(args) -> None:
    import logging

    from appliance.config.settings import load_settings
    from appliance.spark.session import spark_session

    steps = set(args.big_steps.split(","))
    print(f"load: {os.getloadavg()}; cores {os.cpu_count()}", flush=True)
    broker = subprocess.Popen([sys.executable, "-m", "appliance.cli", "broker"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    bootstrap = broker.stdout.readline().strip()
    summary: list[str] = []
    try:
        spark = None
        for keys in [int(k) for k in args.big.split(",")]:
            for kind in args.key_types.split(","):
                case = Case(args, bootstrap, spark, kind, keys)
                (case.home / "logs").mkdir(exist_ok=True)
                handler = logging.FileHandler(case.home / "logs" / "floe.log")
                handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
                logging.getLogger().addHandler(handler)
                logging.getLogger().setLevel(logging.INFO)
                if spark is None:
                    case.spark = spark = spark_session(load_settings(case.home))
                case.load()
                case.streams()
                forget_other_indexes(case)
                case.index()  # also the restart's checkpoint, of this run's stream
                rates = case.rounds() if "rounds" in steps else {}
                for kind_of_round, r in rates.items():  # said now: a later step that fails loses nothing
                    u, a = statistics.median(r["u"]), statistics.median(r["a"])
                    case.say(f"{kind_of_round}: upsert {u:,.0f} msg/s, append {a:,.0f} msg/s, "
                             f"upsert/append {u / a:.2f}")
                for step in [getattr(case, name) for name in ("stall", "restart") if name in steps]:
                    try:
                        step()
                    except Exception as exc:  # noqa: BLE001 - said, and the other figures still measured
                        case.say(f"{step.__name__} failed: {type(exc).__name__}: {exc}")
                logging.getLogger().removeHandler(handler)
                summary += [f"{kind} {keys:,}: {line}" for line in case.lines]
                print(f"  peak RSS so far {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.1f} GiB; "
                      f"load {os.getloadavg()}", flush=True)
        spark.stop()
    finally:
        broker.terminate()
        broker.wait()
    print("\nscale: ~110-byte JSON rows, 4 partitions, rounds of", f"{args.round_messages:,}", "updates")
    for line in summary:
        print(f"  {line}")
    print(f"load at the end: {os.getloadavg()}")
