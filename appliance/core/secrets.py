"""Secrets by reference: `${env:NAME}` and `${file:/path}` (Kafka Connect's config-provider spelling).

A setting that holds a reference is stored, logged and shown as the reference; its value is looked up
only where it is used, each time it is used, so a rotated file or a changed environment is taken up
without touching Floe's state, and the value is never written anywhere by Floe. `${file:/path:key}`
reads one key of a properties file, as Kafka Connect's FileConfigProvider does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from appliance.core.errors import SecretUnreadable, SecretUnresolved

REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")


def references(text: str) -> list[str]:
    """The references in `text`, as written."""
    return [m.group(0) for m in REFERENCE.finditer(text or "")]


def env_names(text: str) -> list[str]:
    """The environment variables `text`'s `${env:NAME}` references name."""
    return [m.group(2) for m in REFERENCE.finditer(text or "") if m.group(1) == "env"]


def has_reference(text: object) -> bool:
    return isinstance(text, str) and REFERENCE.search(text) is not None


def resolve(text: str, where: str = "") -> str:
    """`text` with every reference replaced by its value; SecretUnresolved naming the reference
    (and `where` it was given) when one has no value."""
    if not has_reference(text):
        return text
    return REFERENCE.sub(lambda m: _value(m.group(1), m.group(2), m.group(0), where), text)


def resolve_all(values: Mapping[str, str], where: str = "") -> dict[str, str]:
    """Every value of `values` resolved; keys stay as they are."""
    return {k: resolve(v, f"{where} {k}".strip()) if isinstance(v, str) else v for k, v in values.items()}


def _value(provider: str, name: str, reference: str, where: str) -> str:
    said = f"{where}: " if where else ""
    if provider == "env":
        value = os.environ.get(name)
        if value is None:
            raise SecretUnresolved(f"{said}secret reference {reference} cannot be resolved: "
                                   f"no environment variable {name}")
        return value
    path, key = _file_and_key(name)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SecretUnreadable(f"{said}secret reference {reference} cannot be resolved: "
                               f"{exc.strerror or type(exc).__name__} ({path})") from None
    if key is None:
        return text.rstrip("\r\n")
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep and k.strip() == key and not line.lstrip().startswith("#"):
            return v.strip()
    raise SecretUnresolved(f"{said}secret reference {reference} cannot be resolved: no key {key} in {path}")


def _file_and_key(name: str) -> tuple[Path, str | None]:
    """`/path` or `/path:key`: a key only when the whole name is not itself a file."""
    whole = Path(name)
    if whole.exists() or ":" not in name:
        return whole, None
    path, _, key = name.rpartition(":")
    return Path(path), key
