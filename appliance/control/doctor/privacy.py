"""The privacy check of `floe doctor`: FLOE_HOME (the catalog, the state database with Kafka
credentials, logs, a local warehouse's data) and a local warehouse elsewhere, for their owner alone.

Floe makes them so (`core/private.py`); one made by an older Floe, or opened up since, is only warned
about: its owner may mean it.
"""

from __future__ import annotations

from pathlib import Path

from appliance.config.settings import Settings
from appliance.control.doctor.checks import WARN, Check, passed
from appliance.core.private import open_to_others

PRIVACY_TODO = "chmod -R go-rwx it, so that only the user floe runs as may read it"


def check_privacy(settings: Settings) -> Check:
    places = [("FLOE_HOME", settings.home)]
    if settings.warehouse.startswith("file://"):
        warehouse = Path(settings.warehouse[len("file://"):])
        if not warehouse.is_relative_to(settings.home):  # inside a private FLOE_HOME it is out of reach
            places.append(("the warehouse", warehouse))
    open_ = [f"{what} {path} is open to other users (mode {path.stat().st_mode & 0o777:o})"
             for what, path in places if path.exists() and open_to_others(path)]
    if open_:
        return Check("privacy", WARN, "; ".join(open_), PRIVACY_TODO)
    return passed("privacy", " and ".join(f"{what} {path}" for what, path in places) + ": for its owner alone")
