"""Named fault points for tests: FLOE_FAILPOINTS=name[,name=SECONDS] makes the process
pass a point badly, on purpose.

- `name` kills the process (SIGKILL, as a power cut would) the first time it passes there.
  Random kills rarely land in the narrow windows between two commits; these make every
  window testable on purpose.
- `name=SECONDS` stalls there that long, as a hung disk or a huge input would, so a test
  can act (stop the engine, say) while the work is surely in flight. A line on stderr,
  `failpoint NAME: stalling`, says when: a test waits for it rather than guessing.

Unset, a failpoint costs one dict lookup. Spark's Python workers inherit the variable,
so points inside Spark tasks work too.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def _parse(text: str) -> dict[str, float | None]:
    armed: dict[str, float | None] = {}
    for item in (p.strip() for p in text.split(",")):
        if item:
            name, _, seconds = item.partition("=")
            armed[name.strip()] = float(seconds) if seconds else None
    return armed


_ARMED = _parse(os.environ.get("FLOE_FAILPOINTS", ""))


def failpoint(name: str) -> None:
    if name not in _ARMED:
        return
    stall = _ARMED[name]
    if stall is None:
        os.kill(os.getpid(), signal.SIGKILL)
    else:
        print(f"failpoint {name}: stalling {stall:g}s", file=sys.stderr, flush=True)
        time.sleep(stall)
