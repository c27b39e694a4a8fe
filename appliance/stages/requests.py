"""The engine's answers to the UI's stage editor: previews and checks of a stage's query, on the
engine's warm SparkSession, where a `floe stage` command would start a JVM of its own.

The UI writes a request row to the state database (`stage_requests`); this thread takes it within
`POLL`, runs the same code as `floe stage preview` (or the check before `create`/`update`) in a
FAIR pool of its own, and writes back the rows, the columns, or one line of error. It runs one
request at a time and nothing waits for it: streams and stages go on beside it. The editor asks it
to warm up when it opens, so that even its first preview finds the path through Spark compiled.
"""

from __future__ import annotations

import logging
import os
import threading

from appliance.config.settings import Settings
from appliance.core.errors import FloeError
from appliance.core.vocabulary import StageAsk
from appliance.stages.checks import check, preview_rows, warm_up
from appliance.stages.runner import describe
from appliance.stages.sql import analyse
from appliance.state.records import StageRequestRecord
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog, warehouse_io

log = logging.getLogger(__name__)

POLL = 0.1  # seconds between looks for a request: a preview is waited for by someone
FRESH = 120.0  # seconds a request waits to be taken; an older one's asker has given up (or is gone)
JOB_GROUP = "floe-stage-requests"
POOL = "stage-requests"


class StageRequests(threading.Thread):
    def __init__(self, settings: Settings, spark, stopping: threading.Event) -> None:
        super().__init__(name="floe-stage-requests", daemon=True)
        self.settings = settings
        self.spark = spark
        self.stopping = stopping
        self.answered = 0  # requests answered since the engine started
        self.warm = False  # a preview's path through Spark has run once

    def run(self) -> None:
        catalog = Catalog(self.settings)
        with StateStore(self.settings.state_db, durable=False) as state:
            while not self.stopping.is_set():
                try:
                    for request in state.take_stage_requests(os.getpid(), within=FRESH):
                        if self.stopping.is_set():
                            return  # taken, never answered: the asker sees the engine stop and does it itself
                        self._answer(state, catalog, request)
                except Exception:  # the state database busy past its timeout: the next look tries again
                    log.exception("stage requests: cannot take or answer a request")
                self.stopping.wait(POLL)

    def cancel(self) -> None:
        """Stop a preview in flight (the engine stops)."""
        try:
            self.spark.sparkContext.cancelJobGroup(JOB_GROUP)
        except Exception:  # noqa: BLE001 - no job in flight, or the JVM going away with the engine
            pass

    def _answer(self, state: StateStore, catalog: Catalog, request: StageRequestRecord) -> None:
        context = self.spark.sparkContext
        context.setLocalProperty("spark.scheduler.pool", POOL)
        context.setJobGroup(JOB_GROUP, f"floe stage {request.ask} (request {request.id})", interruptOnCancel=True)
        try:
            answer = self._work(catalog, request)
        except Exception as exc:  # a bad query, a table gone: the asker shows the one line
            if self.stopping.is_set():
                return  # cancelled with the engine: no answer, the asker does it itself
            if not isinstance(exc, FloeError):
                log.exception("stage request %s failed", request.id)
            state.answer_stage_request(request.id, error=" ".join(describe(exc).split())[:600])
        else:
            state.answer_stage_request(request.id, **answer)
            self.warm = self.warm or request.ask is StageAsk.WARM
        finally:
            context.setLocalProperty("spark.scheduler.pool", None)
            context.setLocalProperty("spark.jobGroup.id", None)
        self.answered += 1

    def _work(self, catalog: Catalog, request: StageRequestRecord) -> dict:
        if request.ask is StageAsk.WARM:
            if not self.warm:
                warm_up(self.spark)
            return {}
        query = analyse(request.sql)
        catalog.check_exists(request.source)
        with warehouse_io(self.settings, f"{request.ask} a stage over {request.source}"):
            source = catalog.table(request.source)
            if request.ask is StageAsk.PREVIEW:
                rows = preview_rows(self.spark, catalog, query, source, request.rows)
                self.warm = True
                return {"query_kind": query.kind, "result": StageRequestRecord.encoded(rows)}
            if request.ask is StageAsk.CHECK:
                checked = check(self.spark, catalog, query, source)
                return {"query_kind": checked.kind, "columns": checked.columns_json(),
                        "table_schema": checked.schema_json()}
        raise FloeError(f"this engine does not know the request {request.ask!r}: a newer Floe asked")
