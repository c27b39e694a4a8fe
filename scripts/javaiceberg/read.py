#!/usr/bin/env python3
"""Read an Apache Iceberg table with the reference Java implementation.

Runs PySpark 3.5 (local[1], one session per call) with Apache Iceberg's Spark
runtime 1.10.2 and loads the table straight from a metadata JSON file, with no
catalog. Run it with the Python that `scripts/javaiceberg/setup` builds in
$JAVAICEBERG_HOME (default: .javaiceberg at the repository's root).

Examples:
  read.py /tmp/wh/db/t/metadata/00002-....metadata.json
  read.py file:///tmp/wh/db/t/metadata/00002-....metadata.json --json
  read.py META --sql "select count(*) as n from t"
  read.py META --meta files --json
  read.py META --sql "select content, file_path, record_count from t_files"
  read.py META --snapshot-id 123456789 --json

  read.py s3://bucket/wh/db/t/metadata/00001-....metadata.json \
      --s3-endpoint http://127.0.0.1:9000 --s3-access-key K --s3-secret-key S

  read.py ingest.orders --jdbc-catalog jdbc:sqlite:/home/me/.floe/catalog.db --catalog-name floe

With --jdbc-catalog the argument is a table (NAMESPACE.TABLE) of Iceberg's JdbcCatalog at that
JDBC URI (SQLite or PostgreSQL, as PyIceberg's SQL catalog writes them), opened as the Spark
catalog --catalog-name (default floe): Iceberg scopes a JDBC catalog's tables by that name, as
Trino's iceberg.jdbc-catalog.catalog-name does. The JDBC driver comes from jars/catalog/ or the
Debian packages libxerial-sqlite-jdbc-java and libpostgresql-jdbc-java.

  read.py --serve      # one JVM for many reads: a JSON request per line on stdin,
                       # {"metadata_json": ..., "sql": ..., "meta": ...}; a JSON answer per line
                       # on stdout, {"rows": [...]} or {"error": "..."} (local paths only)

Local paths are loaded by path (Iceberg's HadoopTables, HadoopFileIO).
s3:// (s3a://, s3n://) paths go through a catalog instead: a throw-away
Iceberg JdbcCatalog (temporary SQLite file) with ResolvingFileIO (S3FileIO for
s3, AWS SDK v2 and sqlite-jdbc jars from jars/catalog/), where the metadata
file is registered with the register_table procedure.
--via-catalog forces that route for local paths too.

The table (or, with --meta, the metadata table) is the temporary view `t`.
In --sql, views `t_<name>` for metadata tables (t_files, t_delete_files,
t_entries, t_snapshots, ...) are registered when the query mentions them.

Output: rows on stdout (a text table, or one JSON object per line with
--json); logs and a "N row(s) in S s" line on stderr. Exit status 0 on
success, 1 on failure. In JSON, timestamps (with or without zone) are ISO
strings in UTC without offset, decimals are strings, binary values are
{"$binary_hex": "..."}, NaN/Infinity are strings.
"""
import argparse
import datetime
import decimal
import glob
import json
import os
import re
import sys
import time

HERE = os.environ.get("JAVAICEBERG_HOME") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".javaiceberg")
JARS_DIR = os.path.join(HERE, "jars")

# Metadata tables that Iceberg 1.10 can load by path ("<metadata.json>#<name>").
META_TABLES = [
    "files", "data_files", "delete_files", "entries", "partitions", "snapshots",
    "manifests", "history", "metadata_log_entries", "refs",
    "all_files", "all_data_files", "all_delete_files", "all_entries",
    "all_manifests", "position_deletes",
]

LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
# Same level as the root logger: stops PySpark's "Setting default log level" banner.
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = error
logger.gw.name = org.apache.spark.api.python.PythonGatewayServer
logger.gw.level = error
"""


JDBC_DRIVERS = ("sqlite-jdbc", "postgresql")


def jdbc_jars():
    """JDBC drivers: jars/catalog/ first, else the Debian packages' jars in /usr/share/java."""
    found = []
    for driver in JDBC_DRIVERS:
        here = sorted(glob.glob(os.path.join(JARS_DIR, "catalog", f"*{driver}*.jar")))
        found += here[:1] or sorted(glob.glob(f"/usr/share/java/*{driver}-[0-9]*.jar"))[:1]
    return found


def _jars(with_s3=False):
    jars = sorted(glob.glob(os.path.join(JARS_DIR, "*.jar")))
    if with_s3:
        cjars = sorted(glob.glob(os.path.join(JARS_DIR, "catalog", "*.jar")))
        names = " ".join(os.path.basename(j) for j in cjars)
        if "awssdk" not in names or "sqlite-jdbc" not in names:
            sys.exit(f"read.py: need the AWS SDK v2 and sqlite-jdbc jars in {JARS_DIR}/catalog; run setup.sh")
        jars += cjars
    names = [os.path.basename(j) for j in jars]
    if not any(n.startswith("iceberg-spark-runtime-") for n in names):
        sys.exit(f"read.py: no iceberg-spark-runtime jar in {JARS_DIR}; run setup.sh")
    if not any(n.startswith("iceberg-shaded-jackson") for n in names):
        sys.exit(f"read.py: no relocated Jackson jar in {JARS_DIR}; run setup.sh")
    return [j for j in jars]


def normalize_location(loc):
    """Plain local paths become absolute file:// URIs; URIs are kept."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", loc):
        return loc
    if loc.startswith("file:"):  # file:/x
        return loc
    return "file://" + os.path.abspath(os.path.expanduser(loc))


def jsonable(v):
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return {"$binary_hex": bytes(v).hex()}
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return str(v)
    return v


def row_to_dict(row):
    # Row.asDict(recursive=True) loses duplicate column names; keep order.
    return {k: jsonable(_rowval(v)) for k, v in zip(row.__fields__, row)}


def _rowval(v):
    from pyspark.sql import Row
    if isinstance(v, Row):
        return {k: _rowval(x) for k, x in zip(v.__fields__, v)}
    if isinstance(v, dict):
        return {k: _rowval(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_rowval(x) for x in v]
    return v


def build_spark(extra_conf, catalog_conf, extra_jars=()):
    # Deterministic time zone for both the JVM and Python's datetime conversion.
    os.environ["TZ"] = "UTC"
    time.tzset()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Never let the AWS SDK probe the EC2 instance-metadata address for credentials.
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    log_conf = os.path.join(HERE, "log4j2.properties")
    if not os.path.exists(log_conf) or open(log_conf).read() != LOG4J2:
        try:
            with open(log_conf, "w") as f:
                f.write(LOG4J2)
        except OSError:
            import tempfile
            fd, log_conf = tempfile.mkstemp(suffix="-log4j2.properties")
            with os.fdopen(fd, "w") as f:
                f.write(LOG4J2)
    java_opts = f"-Dlog4j2.configurationFile=file://{log_conf} -Duser.timezone=UTC"
    if os.path.isdir("/usr/lib/x86_64-linux-gnu/jni"):  # Debian's sqlite-jdbc loads its native library from here
        java_opts += " -Djava.library.path=/usr/lib/x86_64-linux-gnu/jni:/usr/lib/jni"

    from pyspark.sql import SparkSession

    b = (SparkSession.builder.master("local[1]").appName("javaiceberg-read")
         .config("spark.jars", ",".join(_jars(with_s3=catalog_conf is not None and not extra_jars)
                                         + list(extra_jars)))
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.extraJavaOptions", java_opts)
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.shuffle.partitions", "1")
         .config("spark.sql.extensions",
                 "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"))
    for k, v in (catalog_conf or {}).items():
        b = b.config(k, v)
    for kv in extra_conf:
        k, _, v = kv.partition("=")
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


CATALOG = "jiread"


def catalog_conf(args, db_path):
    """Spark conf for an Iceberg JdbcCatalog whose FileIO resolves s3:// to S3FileIO."""
    pre = f"spark.sql.catalog.{CATALOG}"
    conf = {
        pre: "org.apache.iceberg.spark.SparkCatalog",
        # A throw-away JdbcCatalog on a temporary SQLite file: unlike InMemoryCatalog
        # (whose FileIO is fixed to InMemoryFileIO) its FileIO is configurable.
        pre + ".catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        pre + ".uri": f"jdbc:sqlite:{db_path}",
        pre + ".jdbc.schema-version": "V1",
        pre + ".io-impl": "org.apache.iceberg.io.ResolvingFileIO",
        pre + ".warehouse": "file:///tmp/javaiceberg-unused-warehouse",
        pre + ".cache-enabled": "false",
    }
    endpoint = args.s3_endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        conf[pre + ".s3.endpoint"] = endpoint
    path_style = args.s3_path_style
    if path_style is None:
        path_style = bool(endpoint)  # MinIO, SeaweedFS, moto: path-style
    conf[pre + ".s3.path-style-access"] = "true" if path_style else "false"
    ak = args.s3_access_key or os.environ.get("AWS_ACCESS_KEY_ID")
    sk = args.s3_secret_key or os.environ.get("AWS_SECRET_ACCESS_KEY")
    if ak and sk:
        conf[pre + ".s3.access-key-id"] = ak
        conf[pre + ".s3.secret-access-key"] = sk
    tok = os.environ.get("AWS_SESSION_TOKEN")
    if tok:
        conf[pre + ".s3.session-token"] = tok
    region = args.s3_region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    conf[pre + ".client.region"] = region
    return conf


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Read an Iceberg table (by metadata JSON path) with Java Iceberg 1.10.2 on Spark 3.5.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("metadata_json", nargs="?", help="path or URI of a vN.metadata.json / NNNNN-uuid.metadata.json")
    ap.add_argument("--serve", action="store_true",
                    help="answer JSON requests read from stdin, one per line, in one session (local paths)")
    ap.add_argument("--sql", help='query over the temp view t, e.g. "select * from t order by id"')
    ap.add_argument("--meta", metavar="NAME",
                    help="read the metadata table NAME instead of the data: " + ", ".join(META_TABLES))
    ap.add_argument("--json", action="store_true", help="print rows as JSON lines")
    ap.add_argument("--snapshot-id", type=int, help="time travel: read this snapshot")
    ap.add_argument("--as-of-timestamp", type=int, help="time travel: millis since epoch")
    ap.add_argument("--limit", type=int, help="print at most N rows")
    ap.add_argument("--schema", action="store_true", help="print the Spark schema to stderr")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="extra Spark config (repeatable)")
    ap.add_argument("--jdbc-catalog", metavar="JDBC_URI",
                    help="read the table named by the argument from Iceberg's JdbcCatalog at this JDBC URI")
    ap.add_argument("--catalog-name", default="floe",
                    help="the JDBC catalog's name (Spark's catalog name; Iceberg files tables under it)")
    ap.add_argument("--via-catalog", action="store_true",
                    help="load through the JdbcCatalog + register_table route even for local paths")
    ap.add_argument("--s3-endpoint", help="S3 endpoint URL, e.g. http://127.0.0.1:9000 "
                    "(default: $AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL, else AWS)")
    ap.add_argument("--s3-access-key", help="default: $AWS_ACCESS_KEY_ID, else the AWS SDK chain")
    ap.add_argument("--s3-secret-key", help="default: $AWS_SECRET_ACCESS_KEY")
    ap.add_argument("--s3-region", help="default: $AWS_REGION / $AWS_DEFAULT_REGION / us-east-1")
    ap.add_argument("--s3-path-style", dest="s3_path_style", action="store_true", default=None,
                    help="path-style S3 addressing (the default when an endpoint is given)")
    ap.add_argument("--s3-virtual-host", dest="s3_path_style", action="store_false",
                    help="virtual-host-style S3 addressing")
    args = ap.parse_args(argv)
    if args.serve:
        return serve(args)
    if not args.metadata_json:
        ap.error("the metadata_json argument is required (or --serve)")
    if args.jdbc_catalog:
        return read_jdbc(args)

    loc = normalize_location(args.metadata_json)
    if loc.startswith("file:") and not os.path.exists(re.sub(r"^file:(//)?", "", loc)):
        print(f"read.py: no such file: {loc}", file=sys.stderr)
        return 1
    is_s3 = re.match(r"^s3[an]?://", loc) is not None
    use_catalog = is_s3 or args.via_catalog

    t0 = time.time()
    cat_dir = None
    if use_catalog:
        import tempfile
        cat_dir = tempfile.mkdtemp(prefix="javaiceberg-cat-")
    spark = build_spark(args.conf, catalog_conf(args, os.path.join(cat_dir, "catalog.db")) if use_catalog else None)
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException
    try:
        if use_catalog:
            spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
            esc = loc.replace("'", "''")
            spark.sql(f"CALL {CATALOG}.system.register_table("
                      f"table => 'db.t', metadata_file => '{esc}')").collect()

        def load(name=None):
            r = spark.read
            if name is None or name in ("entries", "files", "data_files", "delete_files", "manifests", "partitions"):
                if args.snapshot_id is not None:
                    r = r.option("snapshot-id", str(args.snapshot_id))
                if args.as_of_timestamp is not None:
                    r = r.option("as-of-timestamp", str(args.as_of_timestamp))
            if use_catalog:
                return r.table(f"{CATALOG}.db.t" + ("" if name is None else f".{name}"))
            return r.format("iceberg").load(loc if name is None else f"{loc}#{name}")

        df = load(args.meta)
        df.createOrReplaceTempView("t")
        if args.sql:
            for name in META_TABLES:
                if re.search(rf"\bt_{name}\b", args.sql):
                    load(name).createOrReplaceTempView(f"t_{name}")
            df = spark.sql(args.sql)
        if args.schema:
            print(df._jdf.schema().treeString(), file=sys.stderr)
        if args.limit is not None:
            df = df.limit(args.limit)
        rows = df.collect()
        if args.json:
            out = sys.stdout
            for row in rows:
                out.write(json.dumps(row_to_dict(row), ensure_ascii=False) + "\n")
        else:
            print_table(df.columns, rows)
        print(f"read.py: {len(rows)} row(s) in {time.time() - t0:.1f}s", file=sys.stderr)
        return 0
    except (Py4JJavaError, PySparkException) as e:
        msg = str(e)
        if isinstance(e, Py4JJavaError):
            msg = str(e.java_exception)
        print(f"read.py: error: {msg.strip()}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
        if cat_dir:
            import shutil
            shutil.rmtree(cat_dir, ignore_errors=True)


def serve(args):
    """Read tables by their metadata file, one JSON request a line, in one Spark session: a JVM's start
    paid once for a test module's reads, not once a read."""
    spark = build_spark(args.conf, None)
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
                loc = normalize_location(request["metadata_json"])
                rows = _read_by_path(spark, loc, request.get("sql"), request.get("meta"))
                answer = {"rows": [row_to_dict(r) for r in rows]}
            except (Py4JJavaError, PySparkException, KeyError, ValueError) as e:
                msg = str(e.java_exception) if isinstance(e, Py4JJavaError) else str(e)
                answer = {"error": msg.strip()}
            sys.stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
            sys.stdout.flush()
        return 0
    finally:
        spark.stop()


def _read_by_path(spark, loc, sql=None, meta=None):
    """The rows of `sql` over the view t (the table at `loc`, or its metadata table `meta`); all of t
    without `sql`."""
    def load(name=None):
        return spark.read.format("iceberg").load(f"{loc}#{name}" if name else loc)

    load(meta).createOrReplaceTempView("t")
    if not sql:
        return spark.table("t").collect()
    for name in META_TABLES:
        if re.search(rf"\bt_{name}\b", sql):
            load(name).createOrReplaceTempView(f"t_{name}")
    return spark.sql(sql).collect()


def read_jdbc(args):
    """The table `args.metadata_json` (NAMESPACE.TABLE) of JdbcCatalog `args.catalog_name` at `args.jdbc_catalog`."""
    name = args.catalog_name
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        print(f"read.py: --catalog-name {name!r} must be a plain SQL name", file=sys.stderr)
        return 1
    pre = f"spark.sql.catalog.{name}"
    conf = {pre: "org.apache.iceberg.spark.SparkCatalog",
            pre + ".catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
            pre + ".uri": args.jdbc_catalog,
            pre + ".warehouse": "file:///tmp/javaiceberg-unused-warehouse",  # required, unused by reads
            pre + ".cache-enabled": "false"}
    t0 = time.time()
    spark = build_spark(args.conf, conf, extra_jars=jdbc_jars())
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException
    try:
        tables = [".".join(r[:2]) for r in spark.sql(f"SHOW TABLES IN {name}.{args.metadata_json.split('.')[0]}")
                  .collect()] if "." in args.metadata_json else []
        print(f"read.py: tables in that namespace of catalog {name}: {tables}", file=sys.stderr)
        df = spark.table(f"{name}.{args.metadata_json}")
        df.createOrReplaceTempView("t")
        if args.sql:
            df = spark.sql(args.sql)
        rows = df.collect()
        if args.json:
            for row in rows:
                sys.stdout.write(json.dumps(row_to_dict(row), ensure_ascii=False) + "\n")
        else:
            print_table(df.columns, rows)
        print(f"read.py: {len(rows)} row(s) in {time.time() - t0:.1f}s", file=sys.stderr)
        return 0
    except (Py4JJavaError, PySparkException) as e:
        msg = str(e.java_exception) if isinstance(e, Py4JJavaError) else str(e)
        print(f"read.py: error: {msg.strip()}", file=sys.stderr)
        return 1
    finally:
        spark.stop()


def print_table(cols, rows):
    def fmt(v):
        v = _rowval(v)
        if v is None:
            return "NULL"
        if isinstance(v, (dict, list)):
            return json.dumps(jsonable(v), ensure_ascii=False)
        v = jsonable(v)
        return json.dumps(v) if isinstance(v, dict) else str(v)
    cells = [[fmt(v) for v in r] for r in rows]
    widths = [len(c) for c in cols]
    for r in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, r)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    print(line)
    print("| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths)) + " |")
    print(line)
    for r in cells:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
    print(line)


if __name__ == "__main__":
    sys.exit(main())
