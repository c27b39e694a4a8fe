"""`floe maintain` and `floe table policy|runs` as a user runs them, in their own processes."""

import json

from test_maintenance import ingest_rounds

from appliance.config.settings import load_settings
from appliance.state.store import StateStore
from appliance.tables.catalog import Catalog
from appliance.tables.datafiles import live_data_files

from conftest import floe


def one_line_error(result, *words):
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("floe: error:"), result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_maintain_and_policies_from_the_command_line(broker, topic, spark, floe_home):
    settings = load_settings()
    ingest_rounds(broker, topic, spark, settings, rounds=4, create="x")
    state = StateStore(settings.state_db)
    table = Catalog(settings).table("ingest.x")
    snapshot = table.current_snapshot().snapshot_id

    # Mistakes: one line each, nothing changed, nothing run.
    one_line_error(floe("maintain", "ingest.nope"), "no table named ingest.nope")
    one_line_error(floe("maintain", "ingest.x", "--shrink"), "--shrink")
    one_line_error(floe("table", "policy", "ingest.x", "--retention", "3 fortnights"), "retention", "3 fortnights")
    one_line_error(floe("table", "policy", "ingest.x", "--retention", "30d", "--retention-column", "status"),
                   "status", "not a timestamp")
    one_line_error(floe("table", "policy", "nowhere", "--retention", "30d"), "no namespace named nowhere")
    one_line_error(floe("table", "policy", "ingest.x", "--orphan-age", "5m"), "orphan_age", "1h")
    assert state.runs() == [] and state.policy("table", "ingest.x") == {}

    # A namespace default, a table's own value, and where each comes from.
    assert floe("table", "policy", "ingest", "--retention", "1 year").returncode == 0
    shown = floe("table", "policy", "ingest.x", "--target-file-size", "1MB", "--format", "json")
    assert shown.returncode == 0, shown.stderr
    rows = {r["setting"]: r for r in json.loads(shown.stdout)}
    assert rows["target_file_size"] == {"setting": "target_file_size", "value": "1MB", "from": "table ingest.x"}
    assert rows["retention"]["value"] == "1 year" and rows["retention"]["from"] == "namespace ingest"
    assert rows["keep_snapshots"]["from"] == "default"

    dry = floe("maintain", "ingest.x", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.strip().splitlines()
    assert [line.split()[1] for line in lines] == ["retention", "compact", "expire", "orphans"]
    assert "dry run" in lines[1] and "4 small files" in lines[1]
    assert Catalog(settings).table("ingest.x").current_snapshot().snapshot_id == snapshot

    done = floe("maintain", "ingest.x", "--compact")
    assert done.returncode == 0, done.stderr
    assert "ok" in done.stdout and "4 small files" in done.stdout
    assert len(live_data_files(Catalog(settings).table("ingest.x"))) == 1

    runs = floe("table", "runs", "ingest.x")
    assert runs.returncode == 0
    header, first = runs.stdout.splitlines()[:2]
    assert header.split() == ["started", "trigger", "table", "task", "outcome", "took", "detail"]
    assert first.split()[1:4] == ["cli", "ingest.x", "compact"]
    # Each heading stands over its column.
    assert first.index("ingest.x") == header.index("table") and first.index("compact") == header.index("task")
    assert floe("table", "policy", "ingest.x", "--unset", "target-file-size").returncode == 0
    assert state.policy("table", "ingest.x") == {}
