"""File locks (flock) between Floe's processes: the OS releases them when a holder dies, even by kill -9."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class FileLock:
    """An exclusive lock on `path`. With `busy` it does not wait: it raises `busy` if held."""

    def __init__(self, path: Path, busy: Exception | None = None, note: str = "") -> None:
        self.path = path
        self.busy = busy
        self.note = note  # written into the file, for a human who wonders who holds it
        self._fd: int | None = None

    def __enter__(self) -> FileLock:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
        except FileNotFoundError:  # its folder made only when missing: a stream takes a commit lock a batch
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (fcntl.LOCK_NB if self.busy else 0))
        except BlockingIOError:
            os.close(fd)
            raise self.busy from None
        if self.note:
            os.ftruncate(fd, 0)
            os.write(fd, self.note.encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the lock
            self._fd = None
