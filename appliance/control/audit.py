"""The audit trail: every change made through the CLI or the UI, who made it, from where, and how
it ended, with secrets masked exactly as the CLI masks them. It lands in `floe.audit`.

Operations are wrapped where the CLI and the UI share them (`@audited`), so both are recorded
the same way; `FLOE_VIA` says which one the process serves (the UI sets it, and the `floe`
commands it starts inherit it). Work the running engine does for a command or the UI
(`control/answers.py`) is recorded by the engine, once, in its asker's name (`on_behalf`).
"""

from __future__ import annotations

import dataclasses
import functools
import getpass
import inspect
import os
import re
import socket
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from appliance.config.settings import Settings, ensure_home
from appliance.kafka.settings import MASK, is_secret
from appliance.state.store import StateStore

VIA_ENV = "FLOE_VIA"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")
SKIPPED = ("settings", "spark", "checked")  # arguments that are the process's, not the change's

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class Acting:
    who: dict[str, str]  # the asker's user, host and via
    stopping: threading.Event  # the engine's: once set, work that breaks off is left to the asker, unrecorded


_acting: ContextVar[Acting | None] = ContextVar("floe_audit_acting", default=None)


def via() -> str:
    return os.environ.get(VIA_ENV) or "cli"


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no name for this uid (a container): its number
        return str(os.getuid())


def identity() -> dict[str, str]:
    """Who this process acts for, as the audit trail names them."""
    return {"user": _user(), "host": socket.gethostname(), "via": via()}


@contextmanager
def on_behalf(who: dict[str, str], stopping: threading.Event) -> Iterator[None]:
    """Changes made inside the block are recorded in `who`'s name (the engine working for an asker); one
    that fails while the engine stops is not recorded: its asker does it again, and records it."""
    token = _acting.set(Acting(who, stopping))
    try:
        yield
    finally:
        _acting.reset(token)


def masked(value: Any, key: str = "") -> Any:
    """`value` as the audit trail keeps it: secret keys' values and URL passwords masked."""
    if key and is_secret(key) and value:
        return MASK
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if hasattr(value, "masked_options"):  # Kafka and registry settings: what the CLI shows
            return {"address": getattr(value, "bootstrap", None) or masked(getattr(value, "url", "")),
                    "options": value.masked_options()}
        return {f.name: masked(getattr(value, f.name), f.name) for f in dataclasses.fields(value)
                if not f.name.startswith("_")}
    if isinstance(value, dict):
        return {str(k): masked(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [masked(v) for v in value]
    if isinstance(value, str):
        return _URL.sub(lambda m: _mask_url(m.group(0)), value)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)
    return type(value).__name__  # a Mapping object, say: named, not dumped


def _mask_url(url: str) -> str:
    """A URL with the password of its user info masked. The user info ends at the last '@' before
    the host; a password may hold '/' or '@', a port is digits (`host:8081/p@th` has no password)."""
    scheme, _, rest = url.partition("://")
    at = rest.rfind("@")
    if at < 0:
        return url
    userinfo, host = rest[:at], rest[at + 1:]
    user, colon, secret = userinfo.partition(":")
    if not colon or "/" in user or secret.split("/", 1)[0].isdigit():
        return url  # no password (or the '@' is in the path)
    return f"{scheme}://{user}:{MASK}@{host}"


def record(settings: Settings, action: str, target: str, arguments: dict[str, Any], outcome: str,
           detail: str = "") -> None:
    ensure_home(settings)
    acting = _acting.get()
    who = acting.who if acting is not None else identity()
    with StateStore(settings.state_db) as state:
        state.record_audit(who.get("user", ""), who.get("host", ""), who.get("via", ""), action, target,
                           masked(arguments), outcome, masked(" ".join(detail.split())[:500]))


@contextmanager
def change(settings: Settings, action: str, target: str, **arguments: Any) -> Iterator[None]:
    """Record the change made inside the block, with its outcome (a failure is recorded, then raised)."""
    try:
        yield
    except BaseException as exc:
        acting = _acting.get()
        left_to_asker = acting is not None and acting.stopping.is_set()
        if not isinstance(exc, (KeyboardInterrupt, SystemExit)) and not left_to_asker:
            record(settings, action, target, arguments, "failed", str(exc) or type(exc).__name__)
        raise
    record(settings, action, target, arguments, "ok")


def audited(action: str | Callable[[dict[str, Any]], str], target: str = "name",
            mask: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Callable[[F], F]:
    """Record every call of an operation `fn(settings, ...)`; `target` names the argument (or the
    attribute `arg.attr`) that says what it changed."""
    def wrap(fn: F) -> F:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = {k: v for k, v in bound.arguments.items() if k not in SKIPPED}
            base, _, attr = target.partition(".")
            what = arguments.get(base)
            what = getattr(what, attr, "") if attr else what
            named = action(arguments) if callable(action) else action
            shown = mask(arguments) if mask else arguments
            with change(bound.arguments["settings"], named, str(what or ""), **shown):
                return fn(*args, **kwargs)
        return inner  # type: ignore[return-value]
    return wrap
