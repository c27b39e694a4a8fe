"""Every private name of PyIceberg that Floe uses, in one place: check this module on an upgrade.

PyIceberg is pinned (pyproject.toml) because the fast path reaches under its public API: the
functions imported below, and the hooks its subclasses override or the attributes they read
(`HOOKS`). `tests/test_fastpath.py` checks that every one of them still exists, and
`tests/test_boundaries.py` that no other module imports a private PyIceberg name.
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.avro.file import _SCHEMA_KEY as AVRO_SCHEMA_KEY  # noqa: F401  (re-exported)
from pyiceberg.avro.file import AvroFile
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import (  # noqa: F401  (re-exported)
    _get_parquet_writer_kwargs as parquet_writer_kwargs,
)
from pyiceberg.io.pyarrow import (
    _to_requested_schema as to_requested_schema,  # noqa: F401
)
from pyiceberg.schema import Schema
from pyiceberg.table import Transaction
from pyiceberg.table.update import (  # noqa: F401
    _apply_table_update as apply_table_update,
)
from pyiceberg.table.update import (
    _TableMetadataUpdateContext as TableMetadataUpdateContext,  # noqa: F401
)
from pyiceberg.table.update import (
    _update_table_metadata_log as update_table_metadata_log,  # noqa: F401
)

# The private methods Floe's subclasses override or call, by class: a rename upstream would break
# the fast path silently (an override no longer called), so each is checked by name.
HOOKS: dict[type, tuple[str, ...]] = {
    SqlCatalog: ("_convert_orm_to_iceberg", "_update_and_stage_table", "_write_metadata",
                 "_parse_metadata_version", "_load_file_io"),
    Transaction: ("_apply",),
    RestCatalog: ("_create_session", "_create_legacy_oauth2_auth_manager"),  # fastpath/rest_catalog: deadlines
    AvroFile: ("_read_header",),  # fastpath/avro_readers: its `__enter__` replaced
}
# The private attributes they read on instances (checked on live ones).
ATTRIBUTES: dict[type, tuple[str, ...]] = {
    Transaction: ("_updates", "_table"),
}


def arrow_to_iceberg_schema(arrow: pa.Schema) -> Schema:
    """An Iceberg schema with fresh field ids for an Arrow schema, as `create_table` makes one."""
    return Catalog._convert_schema_if_needed(arrow)
