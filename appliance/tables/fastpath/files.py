"""A commit's new files (manifests, manifest lists, metadata, a trickle's small data files), each written whole
under a name never used; and the old metadata files a commit pushes out of the log, deleted.

PyIceberg's `create(overwrite=False)` on a local warehouse asks whether the file exists, then has PyArrow
make its folder again and open it for writing: eight system calls a file, three files a commit. A local
file is opened here with O_EXCL instead (which also refuses, atomically, a file that appeared after the
check), its folder made only when it is missing; what is written is the same bytes, with as little
flushed to disk as PyArrow's (none: the catalog's swap is the commit's durable step). Other stores
(S3, any other FileIO) go through PyIceberg.
"""

from __future__ import annotations

import os

from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def write_new(io: FileIO, location: str, data: bytes) -> None:
    """`data` as the new file `location`; FileExistsError if there is one."""
    path = _local_path(io, location)
    if path is None:
        with io.new_output(location).create(overwrite=False) as out:
            out.write(data)
        return
    _write_local(path, data)


def is_local(io: FileIO, location: str) -> bool:
    """Whether `write_new` writes `location` itself, without PyIceberg's existence check (an S3 request)."""
    return _local_path(io, location) is not None


def _write_local(path: str, data: bytes) -> None:
    try:
        fd = os.open(path, _FLAGS, 0o666)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, _FLAGS, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def delete_file(io: FileIO, location: str) -> None:
    """Delete a file; OSError if it cannot be. A local one unlinked directly: PyArrow's delete asks what the
    path is first (a tenth of a millisecond, at every commit that pushes an old metadata file out)."""
    path = _local_path(io, location)
    if path is None:
        io.delete(location)
    else:
        os.unlink(path)


def _local_path(io: FileIO, location: str) -> str | None:
    if type(io) is not PyArrowFileIO:
        return None
    if location.startswith("file:///"):  # a local warehouse's, as PyIceberg names them: no URL to parse
        return location[len("file://"):]
    scheme, _, path = PyArrowFileIO.parse_location(location)
    return path if scheme == "file" else None
