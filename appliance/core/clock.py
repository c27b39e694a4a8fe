"""Instants as Floe records them: ISO 8601 text in UTC, to the millisecond."""

from __future__ import annotations

import datetime as dt

UTC = dt.timezone.utc


def now() -> str:
    return dt.datetime.now(UTC).isoformat(timespec="milliseconds")


def utcnow() -> dt.datetime:
    return dt.datetime.now(UTC)


def age(iso: str | None, at: dt.datetime) -> float | None:
    """Seconds from the instant `iso` to `at`; None when there is no instant."""
    if not iso:
        return None
    return (at - dt.datetime.fromisoformat(iso)).total_seconds()
