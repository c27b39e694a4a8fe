"""Small text formatters shared by the screens."""

from __future__ import annotations

BARS = "▁▂▃▄▅▆▇█"


def spark(values: list[float]) -> str:
    """A one-line sparkline; an all-zero series is a flat baseline."""
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
