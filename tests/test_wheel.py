"""Floe installed as a wheel (`pip install .`, not `-e`), as a cluster's worker machine or a packaged
deployment has it: no source tree beside the package, run from a directory of its own. Every file Floe
reads at run time comes from the package: the defaults, Spark's log configuration, the UI's stylesheet,
DuckDB's extensions, the stand-in broker and registry, the demo's orders.

The wheel is built as pip builds it (`pip wheel --no-deps`, in an isolated build environment) from a
copy of the checkout's files, and installed with `pip --no-deps` into a fresh virtualenv. Its
dependencies are this environment's: a `.pth` names this environment's site-packages, added only after
the install (pip would otherwise see this checkout's editable install as Floe). Python does not run the
`.pth` files of a directory a `.pth` names, so the editable install's finder stays out: `appliance` can
only come from the wheel, which the test checks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT

CHECK_FILES = r"""
import asyncio, sys
from pathlib import Path

import appliance, duckdb, tui
from appliance.config.settings import DEFAULTS_FILE, load_settings
from appliance.core.extensions import extension_path
from appliance.spark.archive import archive_path, java_options
from appliance.spark.session import LOG4J
from tui.app import CSS_PATH, FloeApp

here = Path(sys.prefix)
for module in (appliance, tui):
    assert Path(module.__file__).is_relative_to(here), module.__file__
for path in (DEFAULTS_FILE, LOG4J, CSS_PATH):
    assert path.is_file() and path.is_relative_to(here), path
con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
for name in ("avro", "iceberg", "httpfs"):
    con.execute(f"LOAD '{extension_path(name)}'")
archive = archive_path()
assert not archive.exists() or str(archive) in java_options(), java_options()


async def ui() -> None:
    app = FloeApp(load_settings(), clock=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app.stylesheet.rules, "no rules from the stylesheet"
        assert Path(app.css_path[0]) == CSS_PATH


asyncio.run(ui())
print("files ok")
"""


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    """A fresh virtualenv with Floe's wheel installed, this environment's packages for its dependencies."""
    base = tmp_path_factory.mktemp("wheel")
    tracked = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode().split("\0")
    source = base / "src"
    for name in filter(None, tracked):
        if (ROOT / name).is_file() or (ROOT / name).is_symlink():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name, follow_symlinks=False)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(pip + ["wheel", "--no-deps", "-w", str(base / "dist"), str(source)], check=True, cwd=base,
                   env=_clean_env(), timeout=300)
    wheel = next((base / "dist").glob("floe-*.whl"))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    subprocess.run(pip + ["--python", str(venv / "bin" / "python"), "install", "--no-deps", "--no-index",
                          str(wheel)], check=True, env=_clean_env(), timeout=300)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    (site / "shared-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything that points Python at the checkout."""
    return {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_SUBMIT_ARGS")}, **extra}


def test_a_wheel_installed_outside_the_checkout_ingests_queries_and_finds_its_files(wheel_venv, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _clean_env(FLOE_HOME=str(tmp_path / "home"))
    floe = str(wheel_venv / "bin" / "floe")

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        done = subprocess.run([floe, *args], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"floe {' '.join(args)}: {done.stderr}"
        return done

    checked = subprocess.run([str(wheel_venv / "bin" / "python"), "-c", CHECK_FILES], cwd=elsewhere, env=env,
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0 and "files ok" in checked.stdout, checked.stderr[-3000:]

    # The stand-in broker, publishing the demo's pizza orders, and the stand-in registry, from the wheel.
    broker = subprocess.Popen([floe, "broker", "--publish", "orders", "--rate", "1000"], cwd=elsewhere, env=env,
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    registry = subprocess.Popen([floe, "registry"], cwd=elsewhere, env=env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
    try:
        bootstrap, url = broker.stdout.readline().strip(), registry.stdout.readline().strip()
        with urllib.request.urlopen(f"{url}/subjects", timeout=10) as answer:
            assert json.loads(answer.read()) == []
        run("stream", "create", "orders", "--bootstrap", bootstrap, "--topic", "orders", "--table", "ingest.orders")
        ran = run("run", "--until-caught-up", timeout=600)
        assert "Using incubator modules" not in ran.stderr and "log level" not in ran.stderr, ran.stderr
        rows = json.loads(run("query", "select count(*) as n, count(distinct store_order_id) as orders "
                                       "from ingest.orders", "--format", "json").stdout)
        assert rows["n"] > 0 and rows["orders"] == rows["n"], rows
    finally:
        for process in (broker, registry):
            process.terminate()
            process.wait(30)
            process.stdout.close()
    # Spark's JVM logged where the packaged log4j2.properties says: FLOE_HOME's logs, not the terminal.
    assert (tmp_path / "home" / "logs" / "spark.log").exists()
