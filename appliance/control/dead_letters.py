"""Dead letters as the CLI and the UI change them: replayed into the target, or purged; both recorded
in the audit trail (a dry run changes nothing and is not)."""

from __future__ import annotations

from appliance.config.settings import Settings
from appliance.control.audit import audited
from appliance.deadletters.listing import purge
from appliance.deadletters.replay import ReplayReport, replay


def preview_replay(settings: Settings, name: str, where: str | None = None, spark=None) -> ReplayReport:
    """What a replay would do: how many would move, and why the others would stay."""
    return replay(settings, name, where, dry_run=True, spark=spark)


@audited(lambda a: "dlq replay")
def replay_dead_letters(settings: Settings, name: str, where: str | None = None, spark=None) -> ReplayReport:
    return replay(settings, name, where, spark=spark)


@audited(lambda a: "dlq purge")
def purge_dead_letters(settings: Settings, name: str, where: str) -> tuple[int, int]:
    return purge(settings, name, where)
