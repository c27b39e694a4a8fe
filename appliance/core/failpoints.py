"""Named fault points for tests: FLOE_FAILPOINTS=name[,name=SECONDS][,name=raise[@PATH]] makes the
process pass a point badly, on purpose.

- `name` kills the process (SIGKILL, as a power cut would) the first time it passes there.
  Random kills rarely land in the narrow windows between two commits; these make every
  window testable on purpose.
- `name=SECONDS` stalls there that long, as a hung disk or a huge input would, so a test
  can act (stop the engine, say) while the work is surely in flight. A line on stderr,
  `failpoint NAME: stalling`, says when: a test waits for it rather than guessing.
- `name=raise` raises a RuntimeError there, as a bug in Floe would; `name=raise@PATH` only while
  the file PATH exists, so a test can make the fault go away without restarting anything.

A point passed with a scope (`failpoint("stream_task", "orders")`) is armed by its name alone or
by `name:scope` (`stream_task:orders=raise`): one stream's fault among several.

Unset, a failpoint costs one dict lookup. Spark's Python workers inherit the variable,
so points inside Spark tasks work too.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

RAISE = "raise"


def _parse(text: str) -> dict[str, str | None]:
    armed: dict[str, str | None] = {}
    for item in (p.strip() for p in text.split(",")):
        if item:
            name, _, action = item.partition("=")
            armed[name.strip()] = action.strip() or None
    return armed


_ARMED = _parse(os.environ.get("FLOE_FAILPOINTS", ""))


def failpoint(name: str, scope: str | None = None) -> None:
    if not _ARMED:
        return
    point = f"{name}:{scope}" if scope is not None and f"{name}:{scope}" in _ARMED else name
    if point not in _ARMED:
        return
    action = _ARMED[point]
    if action is None:
        os.kill(os.getpid(), signal.SIGKILL)
    elif action.startswith(RAISE):
        _, _, path = action.partition("@")
        if not path or Path(path).exists():
            raise RuntimeError(f"failpoint {point}")
    else:
        stall = float(action)
        print(f"failpoint {point}: stalling {stall:g}s", file=sys.stderr, flush=True)
        time.sleep(stall)
