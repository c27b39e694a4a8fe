"""Secrets by reference: `${env:NAME}` and `${file:/path}` (Kafka Connect's config-provider spelling).

A setting that holds a reference is stored, logged and shown as the reference; its value is looked up
only where it is used, each time it is used, so a rotated file or a changed environment is taken up
without touching Floe's state, and the value is never written anywhere by Floe. `${file:/path:key}`
reads one key of a properties file, as Kafka Connect's FileConfigProvider does.

A reference inside a URI's user-info (`postgresql://floe:${env:PGPASSWORD}@db/lake`) is percent-encoded
as it is resolved: the user writes the password as it is, and a `@`, `/` or `#` in it cannot cut the URI
elsewhere. Every value a reference resolves to in this process is remembered (in memory only) so that
`scrub` can mask it in any error or log line: the value, its percent-encoded forms, and, for a secret,
the pieces a parser may cut it into at its punctuation (a driver's `could not translate host name "ss"`).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from urllib.parse import quote, quote_plus

from appliance.core.errors import SecretUnreadable, SecretUnresolved

REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")
MASK = "***"
# A URI's user-info: from `scheme://` to the last `@` of its authority (the text is searched with every
# reference blanked out first: a `${file:/run/secrets/pw}` holds slashes of its own).
_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/?#\s]*)@")
# The password of a `//user:password@` URI as shown: up to the last `@` before a blank or another `//`,
# so that one written unencoded (`p@ss`) is masked whole.
URI_PASSWORD = re.compile(r"(//[^:/@\s]*:)((?:(?!//)\S)*)@")
_SHORTEST = 4  # a shorter value is no credential (a timeout's number); masking it would garble every line
# Where a parser may cut a value: its punctuation, a percent-escape taken whole or not.
_CUTS = (re.compile(r"%[0-9A-Fa-f]{2}|[^A-Za-z0-9._~-]+"), re.compile(r"[^A-Za-z0-9._~-]+"))
_seen: dict[str, bool] = {}  # every value a reference resolved to here -> whether its pieces are masked too
_seen_lock = threading.Lock()
_patterns: dict[frozenset, tuple[re.Pattern | None, re.Pattern | None]] = {}


def references(text: str) -> list[str]:
    """The references in `text`, as written."""
    return [m.group(0) for m in REFERENCE.finditer(text or "")]


def env_names(text: str) -> list[str]:
    """The environment variables `text`'s `${env:NAME}` references name."""
    return [m.group(2) for m in REFERENCE.finditer(text or "") if m.group(1) == "env"]


def has_reference(text: object) -> bool:
    return isinstance(text, str) and REFERENCE.search(text) is not None


def resolve(text: str, where: str = "", secret: bool = False) -> str:
    """`text` with every reference replaced by its value, percent-encoded inside a URI's user-info;
    SecretUnresolved naming the reference (and `where` it was given) when one has no value. `secret`:
    the value is a secret (a password, a key) whose pieces are masked too, as user-info always is."""
    if not has_reference(text):
        return text
    inside = _in_userinfo(text)

    def value(m: re.Match) -> str:
        found = _value(m.group(1), m.group(2), m.group(0), where)
        _remember(found, secret or m.start() in inside)
        return quote(found, safe="") if m.start() in inside else found

    return REFERENCE.sub(value, text)


def resolve_all(values: Mapping[str, str], where: str = "",
                secret: Callable[[str], bool] = lambda key: False) -> dict[str, str]:
    """Every value of `values` resolved; keys stay as they are. `secret(key)`: that key holds a secret."""
    return {k: resolve(v, f"{where} {k}".strip(), secret(k)) if isinstance(v, str) else v
            for k, v in values.items()}


def reference_values(text: str) -> list[str]:
    """What each reference in `text` resolves to now (those that do not resolve are left out)."""
    found = []
    for reference in references(text):
        try:
            found.append(resolve(reference))
        except (SecretUnresolved, SecretUnreadable):
            continue
    return found


def _in_userinfo(text: str) -> set[int]:
    """The start of every reference of `text` that lies in a URI's user-info."""
    spans = [m.span() for m in REFERENCE.finditer(text)]
    blank = REFERENCE.sub(lambda m: "x" * len(m.group(0)), text)
    infos = [m.span(1) for m in _USERINFO.finditer(blank)]
    return {start for start, end in spans if any(a <= start and end <= b for a, b in infos)}


def forget_values() -> None:
    """Forget every value remembered for `scrub`: a process that leaves one configuration for another (a test
    worker runs hundreds) masks only the values it resolves from then on, not text that happens to hold one."""
    with _seen_lock:
        _seen.clear()
        _patterns.clear()


def _remember(value: str, secret: bool) -> None:
    if len(value) >= _SHORTEST:
        with _seen_lock:
            _seen[value] = _seen.get(value, False) or secret


def mask_uri_password(text: str) -> str:
    """Every `//user:password@` in `text` with its password shown as ***."""
    return URI_PASSWORD.sub(rf"\1{MASK}@", text) if "//" in text else text


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every secret masked, whatever a driver or client made of it: each value a reference
    resolved to in this process and each of `secrets` (and the password of any `//user:password@`),
    as it is and percent-encoded; and where a secret stands cut at its punctuation, each piece of it
    that stands alone (`host name "ss"`)."""
    with _seen_lock:
        known = dict(_seen)
    for value in secrets:
        if value and len(value) >= _SHORTEST:
            known[value] = True
    for m in URI_PASSWORD.finditer(text) if "//" in text else ():
        if not has_reference(m.group(2)) and len(m.group(2)) >= _SHORTEST:
            known[m.group(2)] = True
    wholes, pieces = _masks(frozenset(known.items()))
    if wholes is not None:
        text = wholes.sub(MASK, text)
    if pieces is not None:
        text = pieces.sub(MASK, text)
    return mask_uri_password(text)


def _masks(known: frozenset) -> tuple[re.Pattern | None, re.Pattern | None]:
    """One pattern for the values' whole forms, anywhere; one for their pieces, standing alone."""
    if known in _patterns:
        return _patterns[known]
    wholes: set[str] = set()
    pieces: set[str] = set()
    for value, secret in known:
        forms = {value, quote(value, safe=""), quote(value), quote_plus(value)}
        wholes |= forms
        if secret:
            pieces |= {p for form in forms for p in _pieces(form)}
    pieces -= wholes

    def alternation(texts: set[str], alone: bool) -> re.Pattern | None:
        if not texts:
            return None
        body = "|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True))
        return re.compile(rf"(?<![A-Za-z0-9_])(?:{body})(?![A-Za-z0-9_])" if alone else body)

    made = (alternation(wholes, False), alternation(pieces, True))
    if len(_patterns) > 64:
        _patterns.clear()
    _patterns[known] = made
    return made


def _pieces(form: str) -> set[str]:
    """Every run of `form` that starts after one of its cuts and ends at another (or at its end), two
    characters or more: what a parser that cut the value there takes for a host, a port, a path and
    shows (`p@ss` is shown as host `ss`). What comes before the first cut it takes for the password, and
    never shows: not masked alone, so that a `floe:...` credential does not mask every word `floe`."""
    found = set()
    for cut in _CUTS:
        spans = [m.span() for m in cut.finditer(form)]
        starts = [end for _, end in spans]
        ends = [start for start, _ in spans] + [len(form)]
        found |= {form[a:b] for a in starts for b in ends if b - a >= 2}
    return found


class ScrubbingFormatter(logging.Formatter):
    """A log line, traceback and all, with every secret scrubbed out (see `scrub`)."""

    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record))


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
