#!/usr/bin/env python3
"""Append rows to an Iceberg table with the reference Java implementation, through the table's own
SQL catalog: what a team's Spark job does to a table Floe also writes.

Runs PySpark 3.5 (local[1]) with Apache Iceberg's Spark runtime 1.10.2 and Iceberg's JdbcCatalog on
the catalog's SQLite file (the schema PyIceberg's SqlCatalog and Floe use: `iceberg_tables`, one row per
table, swapped by compare-and-set), named as the writer that created it names it (Floe: `floe`). Run it
with the Python that `scripts/javaiceberg/setup` builds; it needs the sqlite-jdbc jar (Debian
libxerial-sqlite-jdbc-java, which setup installs).

  write.py --catalog-db $FLOE_HOME/catalog.db --warehouse $FLOE_HOME/warehouse ingest.orders ROWS.jsonl

ROWS.jsonl holds one JSON object per row, read with the table's schema (columns left out are null,
timestamps as ISO strings). The rows are appended in one commit (`df.writeTo(table).append()`), as
Parquet files Java Iceberg writes. Prints the table's new metadata location on stdout; exit status 0
on success, 1 on failure (the error on stderr).
"""
import argparse
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read import JARS_DIR, build_spark  # noqa: E402

SQLITE_JARS = ("/usr/share/java/xerial-sqlite-jdbc-*.jar", os.path.join(JARS_DIR, "catalog", "*sqlite-jdbc*.jar"))


def sqlite_jar():
    for pattern in SQLITE_JARS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    sys.exit("write.py: no sqlite-jdbc jar (apt-get install libxerial-sqlite-jdbc-java, or run setup)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", help="NAMESPACE.TABLE")
    ap.add_argument("rows", help="a JSON-lines file of the rows to append")
    ap.add_argument("--catalog-db", required=True, help="the SQL catalog's SQLite file")
    ap.add_argument("--catalog-name", default="floe", help="the catalog's name in it (default: floe)")
    ap.add_argument("--warehouse", required=True, help="the warehouse directory (new tables only)")
    args = ap.parse_args(argv)

    name = args.catalog_name
    pre = f"spark.sql.catalog.{name}"
    conf = {
        pre: "org.apache.iceberg.spark.SparkCatalog",
        pre + ".catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        pre + ".uri": f"jdbc:sqlite:{os.path.abspath(args.catalog_db)}",
        pre + ".jdbc.schema-version": "V0",  # PyIceberg's table, as it is: no column added
        pre + ".warehouse": "file://" + os.path.abspath(args.warehouse),
        pre + ".cache-enabled": "false",
    }
    spark = build_spark([], conf, extra_jars=[sqlite_jar()])
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException
    try:
        table = f"{name}.{args.table}"
        schema = spark.table(table).schema
        spark.read.schema(schema).json("file://" + os.path.abspath(args.rows)).writeTo(table).append()
        location = spark.sql(f"select file from {table}.metadata_log_entries order by timestamp desc limit 1").first()
        print(location[0] if location else "")
        return 0
    except (Py4JJavaError, PySparkException) as e:
        msg = str(e.java_exception) if isinstance(e, Py4JJavaError) else str(e)
        print(f"write.py: error: {msg.strip()}", file=sys.stderr)
        return 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
