"""The checks of where the tables live: the catalog reachable and writable, the warehouse writable.

Both leave things as they were: the catalog's throwaway table (in a namespace of its own, made
for it and dropped with it unless it was there before) is purged, and the warehouse's probe object
deleted, and the folders they needed are removed again when empty (a local disk's, or the markers
PyArrow leaves on an object store). A REST catalog's service places each table itself: its
warehouse is checked by writing in the throwaway table's folder, with the credentials it hands out.
"""

from __future__ import annotations

import uuid
from typing import Any

from appliance.config.catalog import DEFAULT_NAME
from appliance.config.settings import Settings
from appliance.control.doctor.checks import SKIP, Check, failed, one_line, passed, run, skipped
from appliance.core.secrets import mask_uri_password
from appliance.core.words import plural
from appliance.tables.catalog import Catalog
from appliance.tables.storage import describe

PROBE_NAMESPACE = "floe_doctor"
CATALOG_TODO = ("check the catalog settings in floe.toml ([catalog]) and that its database or server answers "
                "from this machine")
WAREHOUSE_TODO = ("make [warehouse] location in floe.toml a directory floe may write, or a bucket it may write "
                  "with the [warehouse.s3] endpoint and keys")
WRITE_TODO = "check that the catalog's credentials may create and drop namespaces and tables"
TABLE_DATA_TODO = ("check that the catalog hands out credentials that may write its tables' data, or give "
                   "[catalog] the s3.* properties that may")


def describe_catalog(iceberg: Any) -> str:
    """`sql catalog at sqlite:///...`, `rest catalog floe at https://...`: its kind and where it is, a
    password in its URI masked; its name when not Floe's default (other engines must use the same)."""
    # PyIceberg's class under Floe's own (FloeSqlCatalog is a SqlCatalog, TimedRestCatalog a RestCatalog)
    base = next((c for c in type(iceberg).__mro__ if c.__module__.startswith("pyiceberg")), type(iceberg))
    kind = base.__name__.lower().replace("catalog", "") or "iceberg"
    uri = mask_uri_password(iceberg.properties.get("uri", ""))
    name = f" {iceberg.name}" if iceberg.name != DEFAULT_NAME or not uri else ""
    return f"{kind} catalog{name} at {uri}" if uri else f"{kind} catalog{name}"


def check_catalog(settings: Settings) -> tuple[Check, Any]:
    """The catalog opens and lists its namespaces; the PyIceberg catalog, for the checks after it."""
    iceberg = Catalog(settings).iceberg
    try:
        namespaces = iceberg.list_namespaces()
    except Exception as exc:
        return failed("catalog", f"{describe_catalog(iceberg)}: {one_line(exc)}", CATALOG_TODO), iceberg
    return passed("catalog", f"{describe_catalog(iceberg)} ({plural(len(namespaces), 'namespace')})"), iceberg


def warehouse_of(settings: Settings, iceberg: Any) -> str:
    """Where the catalog puts new tables: its `warehouse` location, else Floe's. '' for a REST catalog:
    its service places each table itself (its warehouse may be a name, or a bucket Floe may not write
    at the top), and hands out the credentials for it."""
    from pyiceberg.catalog.rest import RestCatalog

    if isinstance(iceberg, RestCatalog):
        return ""
    given = str(iceberg.properties.get("warehouse", ""))
    return given if "://" in given else settings.warehouse


def probe_name(extension: str = "probe") -> str:
    return f"floe_doctor_{uuid.uuid4().hex[:12]}.{extension}"


def probe(io: Any, location: str) -> str:
    """Write a small object at `location`, read it back and delete it: '' or what went wrong.
    OSError when storage refuses (PyArrow's errors name the bucket and endpoint, never the keys)."""
    payload = f"floe doctor {location}".encode()
    written = False
    try:
        with io.new_output(location).create(overwrite=True) as out:
            out.write(payload)
        written = True
        with io.new_input(location).open() as back:
            read = back.read()
    except OSError:
        if written:  # what was written goes
            try:
                io.delete(location)
            except OSError:
                pass
        raise
    io.delete(location)
    return "" if read == payload else "an object read back differs from what was written"


def check_warehouse(settings: Settings, iceberg: Any, timeout: float) -> Check:
    """An object written under the warehouse location with the catalog's FileIO (file://, s3://...),
    read back and deleted."""
    from pyiceberg.io import load_file_io

    location = warehouse_of(settings, iceberg)
    if not location:
        return skipped("warehouse", "the catalog's service places each table itself: an object is written in "
                                    "the throwaway table's folder instead, see catalog-write")
    properties = dict(iceberg.properties)  # secret references resolved: the catalog was opened with them
    properties.setdefault("s3.connect-timeout", f"{timeout:g}")
    properties.setdefault("s3.request-timeout", f"{timeout:g}")
    where = describe(location, properties.get("s3.endpoint", ""))
    try:
        wrong = probe(load_file_io(properties, location), f"{location.rstrip('/')}/{probe_name()}")
    except OSError as exc:
        return failed("warehouse", f"{where}: cannot write, read back and delete an object: {one_line(exc)}",
                      WAREHOUSE_TODO)
    if wrong:
        return failed("warehouse", f"{where}: {wrong}", WAREHOUSE_TODO)
    return passed("warehouse", f"{where}: an object written, read back and deleted")


def check_catalog_write(iceberg: Any, in_table: bool) -> Check:
    """A throwaway table created in namespace `floe_doctor`, then purged, the namespace dropped if this
    made it. `in_table`: also write an object where the table's data goes, with the table's FileIO (for
    a catalog that places tables itself, with the credentials it hands out)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType

    name = f"{PROBE_NAMESPACE}.floe_doctor_{uuid.uuid4().hex[:8]}"
    made_namespace, io, location, wrong, error = False, None, "", "", None
    step = f"create namespace {PROBE_NAMESPACE}"
    try:
        if not iceberg.namespace_exists(PROBE_NAMESPACE):
            iceberg.create_namespace(PROBE_NAMESPACE)
            made_namespace = True
        step = f"create table {name}"
        table = iceberg.create_table(name, Schema(NestedField(1, "probe", StringType(), required=False)))
        io, location = table.io, table.location()
        if in_table:  # where a data file would go, named like one: a table bucket takes nothing else there
            step = f"write an object where the data of table {name} goes ({location})"
            wrong = probe(io, table.location_provider().new_data_location(probe_name("parquet")))
        step = f"drop table {name}"
        iceberg.purge_table(name)
    except Exception as exc:
        error = exc
    left = _clean_up(iceberg, name, made_namespace, io, location)
    if error is not None or wrong:
        what = one_line(error) if error is not None else wrong
        return failed("catalog-write", f"cannot {step}: {what}{left}",
                      TABLE_DATA_TODO if step.startswith("write") else WRITE_TODO)
    if left:
        return failed("catalog-write", f"table {name} created and dropped, but{left}", "drop what is named by hand")
    written = f" at {location}, an object written where its data goes," if in_table else ""
    return passed("catalog-write", f"table {name} created{written} and dropped")


def _clean_up(iceberg: Any, name: str, made_namespace: bool, io: Any, location: str) -> str:
    """What the write check made and did not remove, removed now: '' or '; X is left: why'."""
    left = ""
    try:
        if iceberg.table_exists(name):
            iceberg.purge_table(name)
    except Exception as exc:
        left += f"; table {name} is left: {one_line(exc)}"
    try:
        if made_namespace and not iceberg.list_tables(PROBE_NAMESPACE):
            iceberg.drop_namespace(PROBE_NAMESPACE)
    except Exception as exc:
        left += f"; namespace {PROBE_NAMESPACE} is left: {one_line(exc)}"
    if io is not None and location and not left:
        _remove_folders(io, location, made_namespace)
    return left


def _remove_folders(io: Any, location: str, namespace_too: bool) -> None:
    """The purged table's folder (and its namespace's, if this made it) when no file is left in it:
    a local disk keeps empty folders, and an object store the markers PyArrow writes for them."""
    from pyarrow.fs import FileSelector, FileType

    if not (hasattr(io, "parse_location") and hasattr(io, "fs_by_scheme")):
        return  # not PyArrow's FileIO: its folders are its own business
    scheme, netloc, path = io.parse_location(location)
    fs = io.fs_by_scheme(scheme, netloc)
    for folder in [path.rstrip("/")] + ([path.rstrip("/").rsplit("/", 1)[0]] if namespace_too else []):
        try:
            inside = fs.get_file_info(FileSelector(folder, recursive=True, allow_not_found=True))
            if all(info.type == FileType.Directory for info in inside):
                fs.delete_dir(folder)
        except OSError:
            return  # left as it is: only empty folders were at stake


def storage_checks(settings: Settings, timeout: float) -> list[Check]:
    """catalog, warehouse, catalog-write, each after the one it needs; a check that cannot run is skipped."""
    catalog, iceberg = run("catalog", CATALOG_TODO, lambda: check_catalog(settings), timeout)
    if iceberg is None:
        return [catalog, skipped("warehouse", "needs the catalog's settings: see catalog"),
                skipped("catalog-write", "needs the catalog: see catalog")]
    warehouse, _ = run("warehouse", WAREHOUSE_TODO, lambda: check_warehouse(settings, iceberg, timeout), timeout)
    if not catalog.ok:
        write = skipped("catalog-write", "needs the catalog: see catalog")
    elif not warehouse.ok:
        write = skipped("catalog-write", "a table's metadata needs a writable warehouse: see warehouse")
    else:
        in_table = warehouse.status == SKIP
        write, _ = run("catalog-write", WRITE_TODO, lambda: check_catalog_write(iceberg, in_table), 2 * timeout)
    return [catalog, warehouse, write]
