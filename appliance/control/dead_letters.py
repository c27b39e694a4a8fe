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


def replay_in_process(settings: Settings, name: str, dry_run: bool = False, timeout: float = 900.0) -> list[str]:
    """`floe dlq replay` as a process of its own (the UI never hosts a JVM): the lines it printed, or
    the one-line error it ended with, raised as a FloeError."""
    from appliance.control.processes import run_floe, said_last
    from appliance.core.errors import FloeError

    done = run_floe(settings, ["dlq", "replay", name, *(["--dry-run"] if dry_run else [])], timeout=timeout)
    if done.returncode != 0:
        raise FloeError(said_last(done) or f"floe dlq replay exited with {done.returncode}")
    return done.stdout.splitlines()
