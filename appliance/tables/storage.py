"""Storage failures as one line naming the warehouse, not a PyArrow traceback.

PyArrow's messages name the bucket, key and endpoint, never the credentials.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from requests import RequestException

from appliance.core.errors import WarehouseError


def describe(location: str, endpoint: str = "") -> str:
    """A warehouse location as an error names it: with its S3 endpoint, if any."""
    if location.startswith(("s3://", "s3a://")) and endpoint:
        return f"{location} (endpoint {endpoint})"
    return location


@contextmanager
def storage_errors(where: str, what: str) -> Iterator[None]:
    try:
        yield
    except RequestException:
        raise  # a REST catalog's HTTP client failed: the catalog's trouble, not the storage's (`catalog_error`)
    except OSError as exc:
        detail = " ".join(str(exc).split())
        raise WarehouseError(f"warehouse {where}: cannot {what}: {detail}") from None
