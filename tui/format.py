"""Small text formatters shared by the panes and screens."""

from __future__ import annotations

import datetime as dt

BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float]) -> str:
    """A one-line chart of `values` in block characters; an all-zero series is a flat baseline."""
    top = max(values, default=0.0)
    if top <= 0:
        return BARS[0] * len(values)
    return "".join(BARS[min(len(BARS) - 1, int(v / top * (len(BARS) - 1) + 0.5))] for v in values)


def count(n: int | float | None) -> str:
    if n is None:
        return "–"
    n = float(n)
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def number(n: int | None) -> str:
    return "–" if n is None else f"{n:,}"


def plural(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    if seconds < 60:
        return f"{seconds:.0f}s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def seconds(t: float) -> str:
    """A duration as the query status line shows it."""
    if t < 10:
        return f"{t:.2f} s"
    if t < 120:
        return f"{t:.1f} s"
    return f"{int(t // 60)} min {t % 60:.0f} s"


def size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def clock(value: str | dt.datetime | None) -> str:
    """A UTC instant (ISO text or datetime) as local date and time to the second."""
    if value is None or value == "":
        return "–"
    when = dt.datetime.fromisoformat(value) if isinstance(value, str) else value
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def utc(value: str | None) -> str:
    """A UTC instant as UTC date and time to the second."""
    if not value:
        return ""
    return dt.datetime.fromisoformat(value).astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def one_line(text: str, width: int) -> str:
    """Control characters made visible, newlines folded, clipped to `width`."""
    text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    text = "".join(c if c.isprintable() else "·" for c in text)
    return text if len(text) <= width else text[: width - 1] + "…"


def first_line(exc: BaseException) -> str:
    """An error's first line (DuckDB's and PyArrow's messages run on)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else exc.__class__.__name__
