"""Spark's console log keeps what a user needs and not what every stop prints.

A session sends the JVM's stderr, and its Python workers', to
FLOE_HOME/logs/spark-console.log. A `take` stops reading a worker's output early, as a preview's
limit and a session's stop do: PySpark then printed a BrokenPipeError traceback per worker. A
worker's own unexpected output must still get there.
"""

import subprocess
import sys

from conftest import ROOT

SESSION = """
import sys
from appliance.config.settings import load_settings
from appliance.spark.session import spark_session

spark = spark_session(load_settings(), app_name="console")

def rows(batches):
    for batch in batches:
        yield batch

def loud(x):
    if x == 7:
        print("UNEXPECTED from a worker", file=sys.stderr)
    return x

# Two partitions (no shuffle to make them) of many batches each, of which `take` reads a handful: the JVM
# closes the workers' sockets.
assert len(spark.range(0, 2_000_000, 1, 2).mapInArrow(rows, "id long").take(5)) == 5
assert spark.sparkContext.parallelize(range(1_000_000), 2).map(lambda x: x).take(3) == [0, 1, 2]
assert spark.sparkContext.parallelize(range(10), 1).map(loud).count() == 10
spark.stop()
"""


def test_a_stopped_read_leaves_no_broken_pipe_traceback_and_the_rest_stays(floe_home):
    done = subprocess.run([sys.executable, "-c", SESSION], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    log = (floe_home / "logs" / "spark-console.log").read_text()
    assert "UNEXPECTED from a worker" in log  # what a worker says is kept
    assert "BrokenPipeError" not in log and "Traceback" not in log, log


CHATTER = ("Using incubator modules", "Setting default log level", "To adjust logging level")


def test_a_command_that_starts_spark_says_only_its_own_lines_and_the_log_keeps_spark_s(floe_home):
    """`floe run`, `floe maintain`, `floe stage`, `floe dlq replay` start Spark: what its JVM prints as it
    starts goes to FLOE_HOME/logs/spark-console.log, and the command's stderr holds only Floe's lines."""
    from conftest import floe_process  # the JVM's start is the point: a process of its own

    done = floe_process("run", "--until-caught-up", timeout=300)
    assert done.returncode == 0, done.stderr
    assert [line.split(" (")[0] for line in done.stderr.splitlines()] == ["floe engine starting",
                                                                          "floe engine stopped"], done.stderr
    log = (floe_home / "logs" / "spark-console.log").read_text()
    assert all(chatter in log for chatter in CHATTER), log
