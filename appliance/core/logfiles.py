"""Log files that stay small: each is rolled over at a size (`name` -> `name.1` -> ... `name.N`, the
oldest dropped), for months of unattended running.

Two kinds of writer. Python's logging goes through `RollingHandler`, the standard library's rotating
handler made safe for several processes on one file (the engine, the UI, a command): a process that
finds the file already rolled by another reopens it instead of rolling it again. A process's console
(its stdout and stderr, which Spark's JVM and its Python workers inherit) goes through a `ConsoleSink`:
a pipe whose reader thread writes what comes into a rolling file, because a file descriptor handed to
the JVM could never be rolled.
"""

from __future__ import annotations

import atexit
import logging
import os
import select
import stat
import sys
import threading
from logging.handlers import RotatingFileHandler
from pathlib import Path

from appliance.core.secrets import ScrubbingFormatter

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
OWN = "appliance"  # the package whose loggers `[logs] level` sets
QUIET = ("py4j", "pyiceberg", "sqlalchemy")  # libraries whose INFO lines say nothing a user needs
# Set by `control/processes.spawn` for a command it starts in the background: that command's console
# (and its JVM's) goes to this file, rolled like the logs, not to a descriptor that could never be rolled.
CONSOLE_LOG = "FLOE_CONSOLE_LOG"


def roll(path: Path, keep: int) -> None:
    """`path` becomes `path.1`, `path.1` becomes `path.2`..., `path.<keep>` is dropped."""
    for n in range(keep - 1, 0, -1):
        older = path.with_name(f"{path.name}.{n}")
        if older.exists():
            os.replace(older, path.with_name(f"{path.name}.{n + 1}"))
    if path.exists():
        os.replace(path, path.with_name(f"{path.name}.1"))


class RollingHandler(RotatingFileHandler):
    """A rotating file handler whose files are 0600, for processes that share the file.

    Each line is formatted once and costs one `stat` of the path: it says both whether another process
    rolled the file (another inode there) and how full the shared file is (its size, every writer's lines)."""

    def __init__(self, path: Path, max_bytes: int, keep: int) -> None:
        super().__init__(path, maxBytes=max_bytes, backupCount=keep, encoding="utf-8", delay=True)
        self._inode = -1  # of the file our stream writes to

    def _open(self):
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._inode = os.fstat(fd).st_ino
        return open(fd, "a", encoding=self.encoding, errors=self.errors)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
            if self._full(len(line)):
                self.doRollover()
            if self.stream is None:
                self.stream = self._open()
            self.stream.write(line)
            self.stream.flush()
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - logging's own rule: a line that cannot be written never stops the caller
            self.handleError(record)

    def shouldRollover(self, record: logging.LogRecord) -> bool:  # noqa: N802 (logging's name)
        return self._full(len(self.format(record)) + len(self.terminator))

    def _full(self, length: int) -> bool:
        """Whether `length` more characters would take the file to its cap (reopened first if rolled)."""
        try:
            found = os.stat(self.baseFilename)
        except OSError:
            found = None  # nothing there (its folder removed, say): keep writing where we were
        if self.stream is None:
            self.stream = self._open()
        elif found is not None and found.st_ino != self._inode:
            self.stream.close()  # another process rolled the file: write to the new one
            self.stream = self._open()
            found = os.fstat(self.stream.fileno())
        if found is None:
            found = os.fstat(self.stream.fileno())
        elif not stat.S_ISREG(found.st_mode):
            return False  # never roll what is no regular file (/dev/null, say)
        return self.maxBytes > 0 and found.st_size > 0 and found.st_size + length >= self.maxBytes


def logging_to_file() -> bool:
    """Whether this process's log lines go to a file (`log_to` was called)."""
    return any(isinstance(h, RollingHandler) for h in logging.getLogger().handlers)


def log_to(path: Path, max_bytes: int, keep: int, level: str = "info") -> None:
    """This process's log lines into `path`, rolled at `max_bytes`: Floe's own at `level` and up (`[logs] level`),
    libraries' at INFO and up (those of `QUIET` at WARNING: a library's debug lines are never a user's). Once per
    process: a second call changes nothing."""
    root = logging.getLogger()
    if logging_to_file():
        return
    handler = RollingHandler(path, max_bytes, keep)
    handler.setFormatter(ScrubbingFormatter(FORMAT))  # a driver's message may carry a piece of a password
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger(OWN).setLevel(level.upper())
    for noisy in QUIET:
        logging.getLogger(noisy).setLevel(logging.WARNING)


class ConsoleSink:
    """A pipe's write end (`fd`) for processes to write to; a thread writes what comes into `path`,
    rolled at `max_bytes`, until every holder of the write end has closed it, or this process finishes."""

    def __init__(self, path: Path, max_bytes: int, keep: int) -> None:
        self.path, self.max_bytes, self.keep = path, max_bytes, keep
        read, self.fd = os.pipe()
        self._finishing = threading.Event()
        self._thread = threading.Thread(target=self._drain, args=(read,), name="floe-console", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Close this process's write end: the processes that inherited it go on writing."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def finish(self, timeout: float = 2.0) -> None:
        """What is in the pipe now written, then the thread ends (at this process's exit)."""
        self.release()
        self._finishing.set()
        self._thread.join(timeout)

    def _drain(self, read: int) -> None:
        out = -1
        try:
            while True:
                ready, _, _ = select.select([read], [], [], 0.2)
                if not ready:
                    if self._finishing.is_set():
                        return
                    continue
                chunk = os.read(read, 65536)
                if not chunk:
                    return
                try:
                    out = self._write(out, chunk)
                except OSError:  # a full disk, say: what is written meanwhile is lost, never the writer blocked
                    out = _closed(out)
        finally:
            _closed(out)
            os.close(read)

    def _write(self, out: int, chunk: bytes) -> int:
        """`chunk` appended, the file rolled wherever it would pass the cap (at a line's end if one is near)."""
        while chunk:
            if out < 0:
                out = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            room = self.max_bytes - os.fstat(out).st_size
            if len(chunk) <= room:
                os.write(out, chunk)
                return out
            cut = chunk.rfind(b"\n", 0, max(room, 0)) + 1 or max(room, 0)
            os.write(out, chunk[:cut])
            chunk = chunk[cut:]
            out = _closed(out)
            roll(self.path, self.keep)
        return out


def capture_console(path: Path, max_bytes: int, keep: int) -> ConsoleSink:
    """This process's stdout and stderr (and those of every process it starts) into `path`, rolled at
    `max_bytes`; at exit, what was written last is waited for."""
    sink = ConsoleSink(path, max_bytes, keep)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(sink.fd, 1)
    os.dup2(sink.fd, 2)

    def finish() -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
        sink.finish()

    atexit.register(finish)
    return sink


def _closed(fd: int) -> int:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass
    return -1
