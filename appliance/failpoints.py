"""Named crash points for exactly-once tests: FLOE_FAILPOINTS=name[,name] kills the
process (SIGKILL, as a power cut would) the first time the engine passes that point.

Random kills rarely land in the narrow windows between two commits; these make
every window testable on purpose. Unset, a failpoint costs one set lookup.
"""

from __future__ import annotations

import os
import signal

_ARMED = frozenset(p.strip() for p in os.environ.get("FLOE_FAILPOINTS", "").split(",") if p.strip())


def failpoint(name: str) -> None:
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
