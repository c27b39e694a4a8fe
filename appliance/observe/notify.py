"""Notifications through Apprise (Slack, email, Teams, ntfy, JSON webhooks...), from a thread of
their own, so a target that is slow or down never holds up ingestion.

Each URL is sent to on its own (Apprise's result for several is all-or-nothing, and a retry
must not notify twice those that worked), tried `notify_attempts` times, then given up with an
event. Apprise reports failure by return value, not by raising: every result is checked. URLs
carry tokens and passwords: only `masked_url` ever reaches a log line, a screen or an error.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from dataclasses import dataclass
from typing import Callable

import apprise

from appliance.config.alerts import masked_url
from appliance.config.settings import Settings
from appliance.core.errors import SecretUnresolved
from appliance.core.secrets import resolve
from appliance.core.vocabulary import EventKind, EventLevel
from appliance.state.store import StateStore

log = logging.getLogger(__name__)



class _Reasons(logging.Handler):
    """Apprise says why a target failed only in its log: its warnings are kept here, per thread, to
    give as the failure's reason (secrets taken out), and go to no log file (they may name a target
    in full)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        found = getattr(self.local, "found", None)
        if found is None:
            return
        text = " ".join(record.getMessage().split())
        # Its warnings, and the exception behind a failed request (logged at debug level).
        if record.levelno >= logging.WARNING:
            found.append(text)
        elif text.startswith("Socket Exception"):  # urllib3's long story: its cause alone
            cause = _CAUSE.search(text)
            found.append(cause.group(0).strip() if cause else text)


_CAUSE = re.compile(r"\[Errno -?\d+\][^'\"()]*|Failed to resolve '[^']+'|[Rr]ead timed out|timed out")
_REASONS = _Reasons()
_apprise_log = logging.getLogger("apprise")
_apprise_log.setLevel(logging.DEBUG)
_apprise_log.propagate = False
_apprise_log.addHandler(_REASONS)

TIMEOUTS = {"cto": "4", "rto": "4"}  # connect and read timeouts of every HTTP target, seconds


def _with_timeouts(url: str) -> str:
    if not url.startswith(("json", "xml", "form", "http")):
        return url
    present = url.split("?", 1)[1] if "?" in url else ""
    extra = "&".join(f"{k}={v}" for k, v in TIMEOUTS.items() if f"{k}=" not in present)
    return url if not extra else url + ("&" if "?" in url else "?") + extra


def send_once(url: str, title: str, body: str, failure: bool) -> bool:
    """One attempt at one target; True when Apprise says it was delivered. `url` as given: its
    secret references are resolved here, for this attempt only (SecretUnresolved names one that
    does not resolve). Why it failed, as Apprise put it: `last_reason()`."""
    resolved = resolve(url)
    _apprise_log.setLevel(logging.DEBUG)  # whoever quietened it: its lines come to `_REASONS` only
    _REASONS.local.found = []
    try:
        target = apprise.Apprise()
        if not target.add(_with_timeouts(resolved)):
            _REASONS.local.found.append("Apprise does not understand this URL")
            return False
        kind = apprise.NotifyType.FAILURE if failure else apprise.NotifyType.SUCCESS
        try:
            # The one target's plugin called here, not through Apprise's thread pool: its log lines
            # then come from this thread, where they are kept as the reason.
            return bool(target[0].notify(body=body, title=title, notify_type=kind))
        except Exception as exc:  # a plugin's bug: a failed attempt like any other
            log.warning("notification to %s raised %s", masked_url(url), type(exc).__name__)
            _REASONS.local.found.append(f"{type(exc).__name__} in Apprise")
            return False
    finally:
        _REASONS.local.reason = _scrubbed("; ".join(dict.fromkeys(_REASONS.local.found)), resolved)
        _REASONS.local.found = None


def last_reason() -> str:
    """Why this thread's last `send_once` failed, as far as Apprise said (secrets masked); "" if unknown."""
    return getattr(_REASONS.local, "reason", "")


def _scrubbed(text: str, url: str) -> str:
    """`text` without the URL's secrets: its password, and any long path part or query value (tokens)."""
    from urllib.parse import parse_qsl, urlsplit

    try:
        parts = urlsplit(url)
        # The password whatever its length; a user name long enough not to mask common words.
        secrets = {parts.password or ""} | ({parts.username} if len(parts.username or "") >= 4 else set())
        secrets |= {p for p in parts.path.split("/") if len(p) >= 8}
        host = parts.hostname or ""
        if len(host) >= 8 and "." not in host:  # not a host name but a token (slack://TOKEN/...)
            secrets.add(parts.netloc.split("@")[-1].split(":")[0])
        secrets |= {v for _, v in parse_qsl(parts.query) if len(v) >= 8}
    except ValueError:
        return "(reason withheld: the target's URL does not parse)"
    for secret in sorted((x for x in secrets if x), key=len, reverse=True):
        text = text.replace(secret, "****")
    return text[:300]


@dataclass(frozen=True)
class Message:
    urls: tuple[str, ...]
    title: str
    body: str
    failure: bool  # an incident opening (else: resolving, or a test)
    subject: str = ""  # the stream, stage (they share names) or table it is about, for the failure's event
    incident: int | None = None  # marked notified (opened or resolved) once every target got it
    resolved: bool = False


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


def deliver(message: Message, attempts: int, wait: Callable[[float], bool] = _sleep,
            report: Callable[[str], None] | None = None, reasons: dict[str, str] | None = None
            ) -> list[tuple[str, bool]]:
    """Send to each URL, each tried up to `attempts` times; `wait(s)` True means give up (stopping).
    `reasons`, if given, gets why each failed URL failed (its last attempt, as Apprise said)."""
    out = []
    for url in message.urls:
        ok, why = False, ""
        for attempt in range(attempts):
            try:
                if send_once(url, message.title, message.body, message.failure):
                    ok = True
                    break
                why = f" ({last_reason()})" if last_reason() else ""
            except SecretUnresolved as exc:  # tried again: a secret file may be back by then
                why = f" ({exc})"
            if attempt + 1 < attempts and wait(min(2.0 ** attempt, 10.0)):
                break
        if not ok and report is not None:
            report(f"notification to {masked_url(url)} failed after {attempts} attempt(s){why}: {message.title}")
        if not ok and reasons is not None:
            reasons[url] = why.strip()[1:-1] if why else "Apprise gave no reason"
        out.append((url, ok))
    return out


def deliver_recorded(message: Message, attempts: int, state: StateStore,
                     wait: Callable[[float], bool] = _sleep) -> bool:
    """`deliver`, with each failure an event and the incident marked notified when all got it."""
    results = deliver(message, attempts, wait, lambda text: state.add_event(
        EventKind.NOTIFICATION_FAILED, text, message.subject or None, EventLevel.ERROR))
    ok = all(ok for _, ok in results)
    if ok and message.incident is not None:
        state.mark_notified(message.incident, message.resolved)
    return ok


class Notifier(threading.Thread):
    """Sends queued messages one after the other; never raises into the engine."""

    def __init__(self, settings: Settings, stopping: threading.Event) -> None:
        super().__init__(name="floe-notifier", daemon=True)
        self.settings = settings
        self.stopping = stopping
        self.queue: queue.Queue[Message] = queue.Queue()

    def send(self, message: Message) -> None:
        self.queue.put(message)

    def run(self) -> None:
        state = StateStore(self.settings.state_db, durable=False)
        try:
            while not (self.stopping.is_set() and self.queue.empty()):
                try:
                    message = self.queue.get(timeout=0.5)
                except queue.Empty:
                    continue
                try:
                    deliver_recorded(message, self.settings.alerting.notify_attempts, state, self.stopping.wait)
                except Exception:  # never into the engine
                    log.exception("notifier")
                finally:
                    self.queue.task_done()
        finally:
            state.close()

