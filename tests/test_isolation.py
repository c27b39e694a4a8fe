"""One stream's fault is its own: streams that share the engine's Spark jobs keep committing, exactly
once, while one of them raises inside its tasks what Floe did not foresee; it recovers when the
fault goes."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from appliance.config.settings import load_settings
from appliance.state.store import StateStore

from conftest import FLOE, ROOT, finished, floe, pizza_values, wait_for

STREAMS = ("calm_a", "calm_b", "faulty")


def rows(table: str) -> int:
    result = floe("query", f"select count(*) as n from {table}", "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["n"]  # one row, one JSON line


@pytest.mark.slow
def test_a_stream_that_raises_in_its_tasks_fails_alone_and_recovers(broker, topic, floe_home, tmp_path):
    floe_home.mkdir(parents=True, exist_ok=True)
    (floe_home / "floe.toml").write_text('[engine]\nretry_backoff = "1s"\n')
    fault = tmp_path / "fault"
    fault.touch()
    for name in STREAMS:
        broker.produce(f"{topic}_{name}", pizza_values(400))
        created = floe("stream", "create", name, "--bootstrap", broker.bootstrap, "--topic", f"{topic}_{name}",
                       "--table", f"iso.{name}")
        assert created.returncode == 0, created.stderr
    env = {"FLOE_FAILPOINTS": f"stream_task:faulty=raise@{fault}"}
    engine = subprocess.Popen(FLOE + ["run"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **env}, start_new_session=True)
    state = StateStore(load_settings().state_db)
    try:
        # The calm streams commit everything, batch after batch, while the faulty one fails in the
        # same Spark jobs (they start together and are due together).
        wait_for(lambda: rows("iso.calm_a") == 400 and rows("iso.calm_b") == 400, 180, what="calm streams' rows")
        failed = wait_for(lambda: state.status("faulty").phase == "failed" and state.status("faulty"), 60,
                          what="the faulty stream to fail")
        assert failed.last_error == "stream faulty: RuntimeError: failpoint stream_task:faulty"
        assert failed.error_kind == "UnforeseenError"
        for more in (1, 2):  # the calm ones go on while the faulty one is retried beside them
            for name in STREAMS:
                broker.produce(f"{topic}_{name}", pizza_values(100, start=300 + 100 * more))
            wait_for(lambda n=400 + 100 * more: rows("iso.calm_a") == n and rows("iso.calm_b") == n, 120,
                     what=f"calm streams' round {more}")
        assert state.status("faulty").failures_total >= 2, "retried while failing"
        assert rows("iso.faulty") == 0
        for name in ("calm_a", "calm_b"):
            kinds = {e.kind for e in state.events(name)}
            assert not kinds & {"stream_failed", "broker_unreachable"}, (name, kinds)
            assert state.status(name).failures_total == 0

        fault.unlink()
        wait_for(lambda: rows("iso.faulty") == 600, 120, what="the faulty stream to recover")
        assert "stream_recovered" in {e.kind for e in state.events("faulty")}
    finally:
        state.close()
        engine.send_signal(signal.SIGTERM)
        code, said = finished(engine, 90)
    assert code == 0, said
    log = (floe_home / "logs" / "floe.log").read_text()
    assert "Traceback" in log and "RuntimeError: failpoint stream_task:faulty" in log
    for name in STREAMS:
        audit = floe("audit", name)
        assert audit.returncode == 0, audit.stdout + audit.stderr
