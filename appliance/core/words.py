"""Counts in words, as Floe's messages write them."""


def plural(n: int, what: str) -> str:
    """`n` and `what`, plural unless one: "1 stream", "1,200 files", "3 batches"."""
    return f"{n:,} {what}{'' if n == 1 else 'es' if what.endswith(('s', 'sh', 'ch', 'x')) else 's'}"
