"""The session's real servers (tests/servers.py) work: PostgreSQL as a PyIceberg SQL catalog with its
warehouse on SeaweedFS's S3, and SeaweedFS's own Iceberg REST catalog and S3."""

from __future__ import annotations

import uuid

import pyarrow as pa

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": pa.array(["a", "b", "c"])})


def _create_append_read(catalog, namespace: str) -> None:
    catalog.create_namespace(namespace)
    table = catalog.create_table(f"{namespace}.t", ROWS.schema)
    table.append(ROWS)
    table.append(ROWS)
    back = catalog.load_table(f"{namespace}.t").scan().to_arrow().sort_by("id")
    assert back.column("id").to_pylist() == [1, 1, 2, 2, 3, 3]
    assert len(table.refresh().snapshots()) == 2


def test_postgres_serves_a_sql_catalog_with_its_warehouse_on_s3(postgres, seaweed):
    from pyiceberg.catalog.sql import SqlCatalog

    postgres.user("floe_catalog", "s3cret'pw")
    name = f"cat_{uuid.uuid4().hex[:8]}"
    postgres.database(name, owner="floe_catalog")
    bucket = seaweed.new_bucket()
    catalog = SqlCatalog("pg", uri=postgres.url(name, "floe_catalog", "s3cret'pw"), warehouse=f"s3://{bucket}/wh",
                         **seaweed.s3_properties())
    _create_append_read(catalog, "ns")
    keys = [o["Key"] for o in seaweed.client().list_objects_v2(Bucket=bucket)["Contents"]]
    assert any(k.startswith("wh/ns/t/data/") and k.endswith(".parquet") for k in keys), keys
    rows = postgres.psql("select count(*) from iceberg_tables where table_name = 't'", database=name)
    assert rows.strip() == "1"


def test_seaweed_serves_s3_and_a_rest_catalog(seaweed):
    from pyiceberg.catalog.rest import RestCatalog

    client = seaweed.client()
    client.put_object(Bucket="floe-data", Key="round/trip", Body=b"\x00floe\xff")
    assert client.get_object(Bucket="floe-data", Key="round/trip")["Body"].read() == b"\x00floe\xff"
    client.delete_object(Bucket="floe-data", Key="round/trip")

    _create_append_read(RestCatalog("rest", **seaweed.rest_properties()), f"ns_{uuid.uuid4().hex[:8]}")
