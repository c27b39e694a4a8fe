"""Dead letters as the CLI and the UI change them: replayed into the target, or purged; both recorded
in the audit trail (a dry run changes nothing and is not). The running engine does it on its
SparkSession (`control/requests.py`); with none, the command's own process (the UI: a `floe dlq` process)."""

from __future__ import annotations

import json

from appliance.config.settings import Settings
from appliance.control.audit import audited
from appliance.control.requests import served
from appliance.core.vocabulary import EngineAsk
from appliance.deadletters.report import PurgeReport, ReplayReport


def preview_replay(settings: Settings, name: str, where: str | None = None, spark=None,
                   topic: str | None = None) -> ReplayReport:
    """What a replay would do, in this process: how many would move, and why the others would stay."""
    from appliance.deadletters.replay import replay

    return replay(settings, name, where, dry_run=True, spark=spark, topic=topic)


@audited(lambda a: "dlq replay")
def replay_dead_letters(settings: Settings, name: str, where: str | None = None, spark=None,
                        topic: str | None = None) -> ReplayReport:
    """A replay in this process (on `spark`, or a session of its own); a pattern stream's, `topic`'s alone if given."""
    from appliance.deadletters.replay import replay

    return replay(settings, name, where, spark=spark, topic=topic)


@audited(lambda a: "dlq purge")
def purge_dead_letters(settings: Settings, name: str, where: str, topic: str | None = None) -> PurgeReport:
    """A purge in this process: what it deleted and left for later, table by table."""
    from appliance.deadletters.listing import purge

    return purge(settings, name, where, topic)


def replay_now(settings: Settings, name: str, where: str | None = None, dry_run: bool = False,
               topic: str | None = None) -> ReplayReport:
    """`floe dlq replay`: by the running engine, else in this process."""
    def here() -> ReplayReport:
        if dry_run:
            return preview_replay(settings, name, where, topic=topic)
        return replay_dead_letters(settings, name, where, topic=topic)

    return served(settings, EngineAsk.REPLAY, {"stream": name, "where": where, "dry_run": dry_run, "topic": topic},
                  lambda r: ReplayReport.of(r.answer), here)


def purge_now(settings: Settings, name: str, where: str, topic: str | None = None) -> PurgeReport:
    """`floe dlq purge`: by the running engine, else in this process."""
    return served(settings, EngineAsk.PURGE, {"stream": name, "where": where, "topic": topic},
                  lambda r: PurgeReport.of(r.answer), lambda: purge_dead_letters(settings, name, where, topic))


def replay_for_ui(settings: Settings, name: str, dry_run: bool = False, topic: str | None = None) -> ReplayReport:
    """A replay (or its preview) for the UI, which never hosts a JVM: by the running engine, else by `floe dlq
    replay` in a process of its own; a pattern stream's, `topic`'s dead letters alone if given."""
    return served(settings, EngineAsk.REPLAY, {"stream": name, "where": None, "dry_run": dry_run, "topic": topic},
                  lambda r: ReplayReport.of(r.answer), lambda: replay_in_process(settings, name, dry_run, topic=topic))


def replay_in_process(settings: Settings, name: str, dry_run: bool = False, timeout: float = 900.0,
                      topic: str | None = None) -> ReplayReport:
    """`floe dlq replay` as a process of its own: its report, or the one-line error it ended with, raised
    as a FloeError."""
    from appliance.control.processes import run_floe, said_last
    from appliance.core.errors import FloeError

    args = ["dlq", "replay", name, "--format", "json", *(["--dry-run"] if dry_run else []),
            *(["--topic", topic] if topic else [])]
    done = run_floe(settings, args, timeout=timeout)
    if done.returncode != 0:
        raise FloeError(said_last(done) or f"floe dlq replay exited with {done.returncode}")
    return ReplayReport.of(json.loads(done.stdout))
