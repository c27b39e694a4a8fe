"""A maintenance run in one line, as `floe maintain` and `floe table runs` print it (without importing
what runs maintenance: a command the running engine serves only prints)."""

from __future__ import annotations

from appliance.state.records import RunRecord

# The header of `format_run`'s columns, aligned with them.
RUN_HEADER = f"{'table':28} {'task':10} {'outcome':14} {'took':>7}  detail"


def format_run(run: RunRecord) -> str:
    """One run as `floe maintain` and `floe table runs` print it."""
    return (f"{run.table_name:28} {run.task:10} {run.outcome:14} {run.duration_ms / 1000:6.1f}s  "
            f"{run.detail}")
