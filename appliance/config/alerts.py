"""Alert definitions: a rule over a per-stream (per-stage, or engine) measure, a window, where to notify.

Parsed and checked here, once, whether they come from `floe alert add`, `[[alerts]]` in
floe.toml or the UI, so a bad rule is one line naming it, never a failure in the engine.
"""

from __future__ import annotations

import logging
import operator
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable

from appliance.config.units import parse_duration
from appliance.core.errors import AlertRuleError, ConfigError, SecretUnresolved
from appliance.core.secrets import REFERENCE, has_reference, resolve


class Measure(StrEnum):
    """What a rule looks at. Threshold measures compare a number; the others are conditions."""

    LAG_MESSAGES = "lag_messages"
    LAG_SECONDS = "lag_seconds"
    FRESHNESS_SECONDS = "freshness_seconds"
    DEAD_LETTER_RATIO = "dead_letter_ratio"
    FAILED = "failed"
    STALLED = "stalled"
    THROTTLED = "throttled"
    AUTH_FAILED = "auth_failed"
    MAINTENANCE_FAILED = "maintenance_failed"
    ENGINE_DOWN = "engine_down"
    DEPENDENCY_DOWN = "dependency_down"  # the running engine waits for its catalog, warehouse, broker or registry


THRESHOLDS = (Measure.LAG_MESSAGES, Measure.LAG_SECONDS, Measure.FRESHNESS_SECONDS, Measure.DEAD_LETTER_RATIO)
ENGINE_LEVEL = (Measure.MAINTENANCE_FAILED, Measure.ENGINE_DOWN, Measure.DEPENDENCY_DOWN)
STAGE_RULES = (Measure.FAILED, Measure.STALLED)  # the only measures a stage has
# Measures taken over a window (`for`): the window's default. The others hold for `for` before opening.
WINDOWED = {Measure.DEAD_LETTER_RATIO: 300.0, Measure.STALLED: 300.0, Measure.THROTTLED: 60.0}
DEFAULT_FOR = {Measure.FAILED: 60.0}
# Every other rule opens as soon as it holds (thresholds, auth_failed, maintenance_failed, engine_down,
# dependency_down).
FOR_HELP = "default: 5m for dead_letter_ratio and stalled, 1m for failed and throttled, at once for the others"


def default_window(measure: Measure) -> float:
    """The rule's `for` when none is given: its window, its hold, or 0 (it opens as soon as it holds)."""
    return WINDOWED.get(measure) or DEFAULT_FOR.get(measure, 0.0)


def describe_window(seconds: float) -> str:
    """A window as a user writes one: `5m`, `90s`, `1h`; 0 is `at once`."""
    if seconds <= 0:
        return "at once"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"

OPERATORS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
}
_RULE = re.compile(r"^\s*([a-z_]+)\s*(?:(>=|<=|>|<)\s*(\S+))?\s*$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


@dataclass(frozen=True)
class Rule:
    measure: Measure
    op: str = ""
    threshold: float | None = None
    text: str = ""

    @property
    def engine_level(self) -> bool:
        return self.measure in ENGINE_LEVEL

    def crossed(self, value: float | None) -> bool:
        """Whether a measured value breaks a threshold rule (None: nothing to measure)."""
        if value is None or self.threshold is None:
            return False
        return OPERATORS[self.op](value, self.threshold)

    def __str__(self) -> str:
        return self.text


def parse_rule(text: str) -> Rule:
    """`lag_messages > 100000`, `lag_seconds > 5m`, `dead_letter_ratio > 0.05`, `stalled`..."""
    if not isinstance(text, str):
        raise AlertRuleError(f"rule must be text, not {text!r}")
    match = _RULE.match(text)
    known = ", ".join(m.value for m in Measure)
    if not match:
        raise AlertRuleError(f"rule {text!r} is not MEASURE OP NUMBER or a condition (measures: {known})")
    name, op, raw = match.groups()
    try:
        measure = Measure(name)
    except ValueError:
        raise AlertRuleError(f"rule {text!r}: unknown measure {name!r} (known: {known})") from None
    if measure in THRESHOLDS:
        if not op:
            raise AlertRuleError(f"rule {text!r}: {name} needs a comparison, e.g. `{name} > 100`")
        threshold = _threshold(measure, raw, text)
        return Rule(measure, op, threshold, f"{name} {op} {raw}")
    if op:
        raise AlertRuleError(f"rule {text!r}: {name} is a condition and takes no comparison")
    return Rule(measure, text=name)


def _threshold(measure: Measure, raw: str, text: str) -> float:
    try:
        if measure in (Measure.LAG_SECONDS, Measure.FRESHNESS_SECONDS) and not re.fullmatch(r"[0-9.]+", raw):
            value = parse_duration(raw, f"rule {text!r}")
        else:
            value = float(raw)
    except (ValueError, ConfigError):
        raise AlertRuleError(f"rule {text!r}: {raw!r} is not a number (or, for seconds, a duration)") from None
    if value < 0 or value != value:
        raise AlertRuleError(f"rule {text!r}: the threshold must be a number at least 0")
    if measure is Measure.DEAD_LETTER_RATIO and value > 1:
        raise AlertRuleError(f"rule {text!r}: dead_letter_ratio is a share between 0 and 1")
    return value


@dataclass(frozen=True)
class AlertDef:
    name: str
    rule: Rule
    stream: str | None = None  # None (and no stage): every stream (or the engine, for engine-level rules)
    for_seconds: float | None = None  # None: the rule's default
    notify: tuple[str, ...] = field(default=())
    origin: str = "cli"  # cli (the state database) or config (floe.toml)
    stage: str | None = None  # one stage; with no stream nor stage, failed and stalled watch every stage too

    @property
    def covers_stages(self) -> bool:
        return self.stage is not None or (self.stream is None and self.rule.measure in STAGE_RULES)

    @property
    def covers_streams(self) -> bool:
        return self.stage is None

    @property
    def window(self) -> float:
        """How far back a windowed measure looks, or how long a condition holds before it opens."""
        return self.for_seconds if self.for_seconds is not None else default_window(self.rule.measure)


def make_alert(name: Any, rule: Any, stream: Any = None, for_: Any = None, notify: Any = (),
               origin: str = "cli", stage: Any = None) -> AlertDef:
    """A checked alert; AlertRuleError names what is wrong. URLs are checked apart (`observe.notify`)."""
    if not isinstance(name, str) or not NAME.match(name):
        raise AlertRuleError(f"alert name {name!r} must be letters, digits, '_', '.' or '-' (up to 63)")
    parsed = parse_rule(rule)
    if stream is not None and (not isinstance(stream, str) or not stream):
        raise AlertRuleError(f"alert {name}: stream must be a stream's name")
    if stage is not None and (not isinstance(stage, str) or not stage or " " in stage):
        raise AlertRuleError(f"alert {name}: stage must be a stage's name")
    if stream and stage:
        raise AlertRuleError(f"alert {name}: name a stream or a stage, not both")
    if stream and parsed.engine_level:
        raise AlertRuleError(f"alert {name}: {parsed.measure} is about the engine, not one stream (leave out stream)")
    if stage and parsed.measure not in STAGE_RULES:
        raise AlertRuleError(f"alert {name}: {parsed.measure} is not measured on a stage "
                             f"(a stage's rules: {', '.join(STAGE_RULES)})")
    seconds = None if for_ in (None, "") else parse_duration(for_, f"alert {name}: for")
    if isinstance(notify, str):
        notify = (notify,)
    if not isinstance(notify, (list, tuple)) or not notify or not all(isinstance(u, str) and u for u in notify):
        raise AlertRuleError(f"alert {name}: notify needs at least one Apprise URL")
    return AlertDef(name, parsed, stream or None, seconds, tuple(notify), origin, stage or None)


def alerts_from_config(raw: Any, source: str) -> list[AlertDef]:
    """`[[alerts]]` of floe.toml: each checked, names unique."""
    if not isinstance(raw, list):
        raise AlertRuleError(f"{source}: alerts must be an array of tables ([[alerts]])")
    out: list[AlertDef] = []
    for i, entry in enumerate(raw, 1):
        if not isinstance(entry, dict):
            raise AlertRuleError(f"{source}: alerts entry {i} must be a table")
        unknown = set(entry) - {"name", "rule", "stream", "stage", "for", "notify"}
        if unknown:
            raise AlertRuleError(f"{source}: alerts entry {i}: unknown key(s) {', '.join(sorted(unknown))}")
        try:
            alert = make_alert(entry.get("name"), entry.get("rule"), entry.get("stream"), entry.get("for"),
                               entry.get("notify", ()), origin="config", stage=entry.get("stage"))
        except AlertRuleError as exc:
            raise AlertRuleError(f"{source}: alerts entry {i}: {exc}") from None
        check_urls(alert.notify, f"{alert.name} ({source})")
        if any(a.name == alert.name for a in out):
            raise AlertRuleError(f"{source}: two alerts named {alert.name}")
        out.append(alert)
    return out


def _plugin(url: str):
    import apprise  # noqa: PLC0415  (a third of a second: only for those who need it)

    quiet = logging.getLogger("apprise")  # its messages may name a target in full: never to a log
    quiet.propagate = False
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    return apprise.Apprise.instantiate(url)


def masked_url(url: str) -> str:
    """A URL as it may be shown: Apprise's own privacy form, without options, long path parts cut.
    Secret references (`${env:NAME}`, `${file:/path}`) are shown as written, never resolved."""
    if has_reference(url):
        return _masked_with_references(url)
    plugin = _plugin(url)
    scheme = url.split("://", 1)[0] if "://" in url else "?"
    if plugin is None:
        return f"{scheme}://…"
    text = plugin.url(privacy=True).split("?", 1)[0].rstrip("/")
    head, _, path = text.partition("://")
    host, _, rest = path.partition("/")
    return f"{head}://{host}" + ("/" + "/".join(_cut(p) for p in rest.split("/")) if rest else "")


def _cut(part: str) -> str:
    return part if len(part) <= 8 or "…" in part or "..." in part else f"{part[:2]}…{part[-1]}"


def _masked_with_references(url: str) -> str:
    """A URL holding references, masked without Apprise (which cannot parse a reference where a
    token goes, and must not see the values): the references as written, options left out as the
    privacy form leaves them, a clear password masked and long clear parts cut."""
    refs = [m.group(0) for m in REFERENCE.finditer(url)]
    numbers = iter(range(len(refs)))
    # each reference a token of no URL punctuation while the URL is taken apart ('/' is in `${file:/p}`)
    text = REFERENCE.sub(lambda m: f"\0{next(numbers)}\0", url)

    def back(part: str) -> str:
        return _TOKEN.sub(lambda m: refs[int(m.group(1))], part)

    def shown(part: str) -> str:
        return back(part) if _TOKEN.search(part) else _cut(part)

    scheme, sep, rest = text.partition("://")
    if not sep:
        return "?://…"
    netloc, _, path = rest.split("?", 1)[0].rstrip("/").partition("/")
    userinfo, at, host = netloc.rpartition("@")
    # a host name has dots; a long part without is a token where the host goes (Slack's, say)
    host = back(host) if _TOKEN.search(host) or "." in host or ":" in host or host == "localhost" else _cut(host)
    if at:
        user, colon, password = userinfo.partition(":")
        password = back(password) if re.fullmatch(r"(\0\d+\0)+", password) else "****"
        host = f"{shown(user)}{':' + password if colon else ''}@{host}"
    return f"{back(scheme)}://{host}" + ("/" + "/".join(shown(p) for p in path.split("/")) if path else "")


_TOKEN = re.compile(r"\0(\d+)\0")


def check_urls(urls: tuple[str, ...] | list[str], alert: str) -> None:
    """Each URL one Apprise can send to; AlertRuleError naming the first that is not (masked).

    A URL holding secret references is checked with their values when they resolve here (looked
    at and forgotten), else only its scheme: they are resolved again at each send, in the engine,
    whose environment and files may differ from this process's."""
    for i, url in enumerate(urls, 1):
        if not isinstance(url, str) or not _sendable(url):
            scheme = url.split("://", 1)[0] if isinstance(url, str) and "://" in url else "?"
            raise AlertRuleError(f"alert {alert}: notify URL {i} ({scheme}://…) is not a URL Apprise can send to "
                                 f"(see https://github.com/caronc/apprise/wiki)")


def _sendable(url: str) -> bool:
    if not has_reference(url):
        return _plugin(url) is not None
    try:
        return _plugin(resolve(url)) is not None
    except SecretUnresolved:
        from apprise.manager_plugins import NotificationManager  # noqa: PLC0415

        return url.split("://", 1)[0].lower() in NotificationManager() if "://" in url else False
