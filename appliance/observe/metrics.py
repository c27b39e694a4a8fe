"""Prometheus metrics at http://HOST:PORT/metrics, served by `floe run` with prometheus-client.

Every scrape reads the state database the engine writes (statuses, and the batches, events and
maintenance runs recorded since the last scrape), so a metric is the same measure the UI and
the alerts read. Counters count from the engine's start, as Prometheus expects of a process.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from typing import Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from appliance.config.settings import Settings
from appliance.core.errors import ConfigError
from appliance.core.vocabulary import EventKind, StreamPhase
from appliance.state.store import StateStore

BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, float("inf"))
FAILURES = (EventKind.STREAM_FAILED, EventKind.BROKER_UNREACHABLE, EventKind.REGISTRY_UNREACHABLE)
UP = (StreamPhase.RUNNING, StreamPhase.CATCHING_UP)


class _Histogram:
    def __init__(self) -> None:
        self.counts = [0] * len(BUCKETS)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.sum += value
        for i, bound in enumerate(BUCKETS):
            if value <= bound:
                self.counts[i] += 1

    def buckets(self) -> list[tuple[str, int]]:
        return [("+Inf" if b == float("inf") else repr(b), n) for b, n in zip(BUCKETS, self.counts)]


class FloeCollector(Collector):
    """Floe's metrics, read from the state database at each scrape (one scrape at a time)."""

    def __init__(self, settings: Settings) -> None:
        self.state = StateStore(settings.state_db, durable=False)
        self.lock = threading.Lock()
        # Rows up to these ids predate the engine: not counted.
        self.seen = {t: self.state.last_id(t) for t in ("batches", "events", "maintenance_runs")}
        self.totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.durations: dict[str, _Histogram] = defaultdict(_Histogram)
        self.failures: dict[str, float] = defaultdict(float)
        self.runs: dict[tuple[str, str, str], float] = defaultdict(float)
        # (stream, table) -> rows: a pattern stream's topics' tables and a routed stream's route tables each
        # their own series, labelled by their stream
        self.table_rows: dict[tuple[str, str], float] = defaultdict(float)

    def close(self) -> None:
        with self.lock:
            self.state.close()

    def _catch_up(self) -> None:
        for row in self.state.rows_after("batches", self.seen["batches"]):
            self.seen["batches"] = row["id"]
            totals = self.totals[row["stream"]]
            for key, column in (("messages", "messages"), ("rows", "rows"), ("dead_letters", "dead_letter_rows"),
                                ("bytes", "bytes")):
                totals[key] += row[column] or 0
            self.durations[row["stream"]].observe((row["duration_ms"] or 0) / 1000)
            for table, rows in json.loads(row.get("table_rows") or "{}").items():
                self.table_rows[(row["stream"], table)] += rows
        for row in self.state.rows_after("events", self.seen["events"]):
            self.seen["events"] = row["id"]
            if row["kind"] in FAILURES and row["stream"]:
                self.failures[row["stream"]] += 1
        for row in self.state.rows_after("maintenance_runs", self.seen["maintenance_runs"]):
            self.seen["maintenance_runs"] = row["id"]
            if not row["dry_run"]:
                self.runs[(row["table_name"], row["task"], row["outcome"])] += 1

    def collect(self) -> Iterator[Metric]:
        with self.lock:  # one scrape at a time: the totals are read and changed by each
            return iter(self._families())

    def _families(self) -> list[Metric]:
        self._catch_up()
        streams = [s.name for s in self.state.stream_summaries()]  # no mapping parsed per scrape
        statuses = self.state.statuses()
        failures_total = {n: s.failures_total for n, s in statuses.items()}
        out: list[Metric] = [*self._stream_counters(streams, failures_total), *self._stream_gauges(streams, statuses),
                             self._histogram(streams)]
        runs = CounterMetricFamily("floe_maintenance_runs", "Maintenance runs since the engine started",
                                   labels=["table", "task", "outcome"])
        for (table, task, outcome), n in sorted(self.runs.items()):
            runs.add_metric([table, task, outcome], n)
        tables = CounterMetricFamily("floe_table_rows", "Rows committed to each table since the engine started, by "
                                     "the stream that writes it", labels=["stream", "table"])
        for (stream, table), n in sorted(self.table_rows.items()):
            tables.add_metric([stream, table], n)
        out.append(tables)
        incidents = GaugeMetricFamily("floe_incidents_open", "Open alert incidents", labels=["alert"])
        per_alert: dict[str, int] = defaultdict(int)
        for incident in self.state.open_incidents():
            per_alert[incident.alert] += 1
        for alert, n in sorted(per_alert.items()):
            incidents.add_metric([alert], n)
        return out + [runs, incidents]

    def _stream_counters(self, streams: list[str], failures_total: dict[str, int]) -> Iterator[Metric]:
        for key, help_text in (("messages", "Kafka messages read and committed"),
                               ("rows", "Rows committed to the target table"),
                               ("dead_letters", "Rows committed to the dead-letter table"),
                               ("bytes", "Bytes of message values read")):
            family = CounterMetricFamily(f"floe_stream_{key}", f"{help_text}, since the engine started",
                                         labels=["stream"])
            for name in streams:
                family.add_metric([name], self.totals[name][key])
            yield family
        family = CounterMetricFamily("floe_commit_failures", "Batches that failed before they committed "
                                     "(broker, registry, storage or commit trouble), since the stream was created",
                                     labels=["stream"])
        for name in streams:
            family.add_metric([name], failures_total.get(name, 0))
        yield family

    def _stream_gauges(self, streams: list[str], statuses: dict) -> Iterator[Metric]:
        now_ms = time.time() * 1000
        lag = GaugeMetricFamily("floe_stream_lag_messages", "Messages in the topic not yet committed",
                                labels=["stream"])
        lag_s = GaugeMetricFamily("floe_stream_lag_seconds", "At most how long the oldest waiting message has "
                                  "waited (0: none waits)", labels=["stream"])
        fresh = GaugeMetricFamily("floe_stream_freshness_seconds", "How far the table is behind its topic, "
                                  "from Kafka timestamps and commit times", labels=["stream"])
        up = GaugeMetricFamily("floe_stream_up", "1 while the stream runs or catches up; 0 when it fails, "
                               "starts or is paused", labels=["stream"])
        for name in streams:
            status = statuses.get(name)
            if status is None:
                up.add_metric([name], 0)
                continue
            for family, value in ((lag, status.lag), (lag_s, status.lag_seconds(now_ms)),
                                  (fresh, status.freshness_seconds(now_ms))):
                if value is not None:
                    family.add_metric([name], float(value))
            up.add_metric([name], 1 if status.phase in UP else 0)
        yield from (lag, lag_s, fresh, up)

    def _histogram(self, streams: list[str]) -> Metric:
        family = HistogramMetricFamily("floe_stream_batch_duration_seconds", "A batch's time from planning to "
                                       "commit", labels=["stream"])
        for name in streams:
            h = self.durations[name]
            family.add_metric([name], h.buckets(), h.sum)
        return family


class MetricsServer:
    """The /metrics endpoint; `close()` stops it."""

    def __init__(self, settings: Settings, port: int, host: str) -> None:
        self.collector = FloeCollector(settings)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        try:
            self.server, self.thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            self.collector.close()
            raise ConfigError(f"metrics: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self.port = self.server.server_port
        self.url = f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.collector.close()
