"""The checks of what is on this machine: floe.toml, the secret references in it, the state database."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Iterator

from appliance.config.settings import DEFAULTS_FILE, Settings, load_settings
from appliance.control.doctor.checks import SECRET_TODO, Check, failed, one_line, passed
from appliance.core.errors import FloeError, SecretUnresolved
from appliance.core.secrets import URI_PASSWORD, has_reference, reference_values, resolve
from appliance.core.words import plural
from appliance.kafka.settings import is_secret
from appliance.model.stream import StreamDef
from appliance.state.store import StateStore

CONFIG_TODO = f"fix the setting it names in floe.toml ({DEFAULTS_FILE} lists every setting with its default)"
_CATALOG_SECRET = re.compile(r"(credential|key-id|access_key_id)", re.IGNORECASE)
STATE_TODO = "check that FLOE_HOME's state.db is a readable SQLite file and that no process keeps it locked"


def check_config(home: Path | None) -> tuple[Check, Settings | None]:
    """floe.toml read and valid; FLOE_HOME there (every command makes it: the catalog's SQLite lives there)."""
    try:
        settings = load_settings(home)
        settings.home.mkdir(parents=True, exist_ok=True)
    except FloeError as exc:
        return failed("config", str(exc), CONFIG_TODO), None
    except OSError as exc:
        return failed("config", f"FLOE_HOME cannot be made: {one_line(exc)}",
                      "set FLOE_HOME to a directory floe may write"), None
    user_file = settings.home / "floe.toml"
    return passed("config", str(user_file) if user_file.exists() else f"defaults (no {user_file})"), settings


def setting_strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(where, text) of every string in the settings, walked field by field, whatever their layout."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from setting_strings(getattr(value, f.name), f"{path}.{f.name}" if path else f.name)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from setting_strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, (list, tuple)) and value and all(_pair(item) for item in value):
        for key, item in value:  # (key, value) pairs: [catalog]'s properties, a stream's options
            yield from setting_strings(item, f"{path}.{key}" if path else key)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from setting_strings(item, f"{path}[{i}]")
    elif isinstance(value, str):
        yield path, value


def _pair(item: Any) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)


def secret_key(key: str) -> bool:
    """A setting whose value is a secret: Kafka's names for them, and PyIceberg's (`credential`, `s3.access-key-id`)."""
    return is_secret(key) or bool(_CATALOG_SECRET.search(key))


def check_secrets(settings: Settings, secrets: set[str]) -> Check:
    """Every `${env:...}`/`${file:...}` reference in the settings resolves. `secrets` receives every
    value a secret setting holds in clear, for them to be masked in every line (what references resolve
    to is masked anyway, see `secrets.scrub`)."""
    found = list(setting_strings(settings))
    secrets.update(text for where, text in found if secret_key(where) and not has_reference(text))
    secrets.update(m.group(2) for _, text in found for m in URI_PASSWORD.finditer(text)
                   if not has_reference(m.group(2)))
    references = [(where, text) for where, text in found if has_reference(text)]
    problems = []
    for where, text in references:
        try:
            resolve(text, where, secret_key(where))
        except SecretUnresolved as exc:
            problems.append(str(exc))
    if problems:
        return failed("secrets", "; ".join(problems), SECRET_TODO)
    return passed("secrets", f"{plural(len(references), 'reference')} in the settings, all resolved"
                  if references else "no secret references in the settings")


def stream_secrets(stream: StreamDef) -> set[str]:
    """The values a stream's secret options and its resolvable references hold."""
    found: set[str] = set()
    for source in [stream.kafka] + ([stream.registry] if stream.registry else []):
        for key, value in source.options:
            if has_reference(value):
                found.update(reference_values(value))
            elif secret_key(key):
                found.add(value)
    return found


def check_state(settings: Settings) -> tuple[Check, list[StreamDef]]:
    """The state database readable, and the streams it defines (for their brokers' checks)."""
    if not settings.state_db.exists():
        return passed("state", f"no state database yet ({settings.state_db}): no streams"), []
    with StateStore(settings.state_db) as state:
        streams, stages = state.streams(), state.stages()
    return passed("state", f"{plural(len(streams), 'stream')}, {plural(len(stages), 'stage')} in "
                           f"{settings.state_db}"), streams
