"""Light commands stay light: `floe stream list`, `floe status`, `floe stream show` and `--help` must not
import Spark, DuckDB, Textual, pandas or PyIceberg's catalogs and tables (each costs a quarter to half a
second of start-up on 2 cores; `floe stream list` takes about 0.3 s without them, 0.9 s with them).

PyIceberg's types (and pyarrow) are allowed where a stream's mapping is read (it is made of them), but not by
`floe status` and `floe stream list`, which read no mapping: with them, each cost a third more CPU. `floe stream show` reads the committed offsets from the table's own snapshots, which takes the
catalog and PyIceberg's file IO (which brings pandas through pyarrow.dataset), so it is held only to
Spark, DuckDB and Textual.
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, floe, pizza_values

# Packages that must never load for a light command, and PyIceberg's modules past its types.
HEAVY = ("pyspark", "py4j", "duckdb", "textual", "pandas", "sqlalchemy")
ICEBERG_TABLES = ("pyiceberg.table", "pyiceberg.catalog", "pyiceberg.io", "pyiceberg.manifest")

# Runs the command as `floe` does, in this interpreter, then reports every module it loaded.
PROBE = """
import json, sys
sys.argv = ["floe", *sys.argv[1:]]
from appliance.cli import main
try:
    main()
except SystemExit:
    pass
sys.stderr.write("MODULES " + json.dumps(sorted(sys.modules)) + "\\n")
"""


def loaded_by(*args: str) -> set[str]:
    result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=ROOT,
                            env=dict(os.environ), timeout=120)
    line = [x for x in result.stderr.splitlines() if x.startswith("MODULES ")]
    assert line, result.stderr
    return set(json.loads(line[0].removeprefix("MODULES ")))


def heavy(modules: set[str], banned: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == b or m.startswith(b + ".") for b in banned))


@pytest.fixture(scope="module")
def a_stream(broker, tmp_path_factory):
    """One real stream (its table created in the catalog), in a FLOE_HOME of this module's own."""
    home = tmp_path_factory.mktemp("startup") / "floe-home"
    topic = f"startup_{os.getpid()}"
    broker.produce(topic, pizza_values(5))
    created = floe("stream", "create", "light", "--bootstrap", broker.bootstrap, "--topic", topic,
                   "--table", "ingest.light", env={"FLOE_HOME": str(home)})
    assert created.returncode == 0, created.stderr
    return home


@pytest.mark.parametrize("args, ran", [
    (["stream", "list"], "appliance.query.formatting"), (["stream", "list", "--format", "json"], "appliance.views.streams"),
    (["status"], "appliance.views.status"), (["--help"], "appliance.cli"), (["stream", "--help"], "appliance.cli"),
])
def test_light_commands_import_nothing_heavy(a_stream, monkeypatch, args, ran):
    monkeypatch.setenv("FLOE_HOME", str(a_stream))
    modules = loaded_by(*args)
    assert ran in modules  # the command did its work: the check below is about a real run
    assert heavy(modules, HEAVY + ICEBERG_TABLES) == []


@pytest.mark.parametrize("args", [["status"], ["stream", "list"], ["stream", "list", "--format", "json"]])
def test_status_and_stream_list_parse_no_mapping_so_import_no_arrow_nor_iceberg_types(a_stream, monkeypatch, args):
    """They read names, states and figures, never a definition's mapping: Arrow's and PyIceberg's types (a
    third of their CPU, 0.9 s -> 0.6 s measured with 500 streams on a loaded machine) stay out. So do numpy, which
    sqlite-utils imports whenever it is installed (0.1 s), and importlib.metadata, with which it looks for plugins
    in every installed package's metadata (0.06 s)."""
    monkeypatch.setenv("FLOE_HOME", str(a_stream))
    modules = loaded_by(*args)
    assert "appliance.state.store" in modules
    assert heavy(modules, ("pyarrow", "pyiceberg", "appliance.model.mapping", "numpy", "importlib.metadata")) == []


def test_stream_show_reads_the_offsets_off_the_metadata_file_and_imports_nothing_heavy(a_stream, monkeypatch,
                                                                                        spark):
    from appliance.config.settings import load_settings
    from appliance.ingest.engine import Engine
    from appliance.tables.catalog import Catalog
    from appliance.tables.snapshots import committed_offsets

    monkeypatch.setenv("FLOE_HOME", str(a_stream))
    modules = loaded_by("stream", "show", "light")
    assert "appliance.tables.metadata_json" in modules
    assert heavy(modules, HEAVY + ICEBERG_TABLES) == []
    before = json.loads(floe("stream", "show", "light", "--format", "json").stdout)["committed_offsets"]
    Engine(load_settings(), spark=spark).run(until_caught_up=True)
    shown = json.loads(floe("stream", "show", "light", "--format", "json").stdout)["committed_offsets"]
    settings = load_settings()
    truth = committed_offsets(Catalog(settings).table("ingest.light"), json.loads(
        floe("stream", "show", "light", "--format", "json").stdout)["id"])
    assert before is None and {int(p): o for p, o in shown.items()} == truth and sum(truth.values()) == 5
