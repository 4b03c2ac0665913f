"""Arrays that cross to other processes through one memory-mapped file, not as copies.

A ``ColumnFile`` writes a sample list's arrays once into a file that has no
name: the operating system frees it when the process that wrote it closes it or
ends, even by ``SIGKILL``. A pickle carries only a reference: the writer's
process id, the file's descriptor, a random token and where each array lies.
Another process on the same host opens the file through ``/proc/<pid>/fd/<fd>``
and maps it read-only, for work on whole columns. It reads single samples with
``pread`` (``ColumnRows``), which maps nothing. The pages are the page cache's,
shared by every process. So a worker's memory does not grow with the rows listed.

Where ``/proc`` is missing, the file is named in the temporary folder. It is
removed when its writer closes it or exits; a killed writer leaves it there.
A process on another host cannot open either kind. Nothing here knows
of samples, threads or loaders. See :doc:`/video/datasets`.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import secrets
import tempfile
import weakref
from typing import NamedTuple

import numpy as np

__all__ = ["ColumnFile", "ColumnReference", "ColumnRows", "SharedColumnsGone", "map_columns"]

log = logging.getLogger(__name__)

_TOKEN_BYTES = 16
_ALIGN = 64  # each array starts on a cache line
# Written this many bytes at a time. The page cache keeps a file in folios as large as the writes
# that made them (Linux 6.16 and later), and a process that reads one byte of a folio maps all of it.
_PIECE = 64 * 1024


class SharedColumnsGone(OSError):
    """The file a sample list was shared through cannot be opened here (its writer ended, or another host)."""


class ColumnReference(NamedTuple):
    """What a pickle carries instead of the arrays: where the file is and where each array lies in it."""

    pid: int
    path: str  # ``/proc/<pid>/fd/<fd>``, or the named file where there is no /proc
    token: bytes
    layout: tuple[tuple[str, str, tuple[int, ...], int], ...]  # (name, dtype, shape, offset)
    size: int


class ColumnFile:
    """Arrays written once to an unnamed file, for other processes to map. Made by the process that owns them.

    Args:
        arrays: the arrays by name; each is written C-contiguous.

    Raises:
        OSError: the temporary folder has no room (the caller then pickles the arrays as they are).
    """

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        token = secrets.token_bytes(_TOKEN_BYTES)
        layout, offset = [], _TOKEN_BYTES
        for name, array in arrays.items():
            offset = -(-offset // _ALIGN) * _ALIGN
            layout.append((name, array.dtype.str, tuple(array.shape), offset))
            offset += array.nbytes
        named = not _proc_fds()
        if named:
            file = tempfile.NamedTemporaryFile(prefix="parallel-loader-samples-", delete=False)  # noqa: SIM115
        else:
            file = tempfile.TemporaryFile(prefix="parallel-loader-samples-")  # noqa: SIM115 (closed by _close)
        try:
            file.write(token)
            for (_, _, _, at), array in zip(layout, arrays.values(), strict=True):
                file.seek(at)
                data = memoryview(np.ascontiguousarray(array)).cast("B")
                for piece in range(0, len(data), _PIECE):  # small writes make small page-cache folios
                    file.write(data[piece : piece + _PIECE])
            file.truncate(max(offset, _TOKEN_BYTES))
            file.flush()
        except BaseException:
            _close(file, file.name if named else None)
            raise
        path = file.name if named else f"/proc/{os.getpid()}/fd/{file.fileno()}"
        self.reference = ColumnReference(os.getpid(), path, token, tuple(layout), max(offset, _TOKEN_BYTES))
        # Frees the file when the owner is dropped or the program exits; an unnamed one also when killed.
        self._finalizer = weakref.finalize(self, _close, file, file.name if named else None)

    def close(self) -> None:
        """Close the file (and remove a named one). Maps made already stay readable. Idempotent."""
        self._finalizer()


def map_columns(reference: ColumnReference) -> tuple[dict[str, np.ndarray], ColumnRows]:
    """Map the file ``reference`` names read-only: its arrays (read-only views of the map), and its rows.

    The arrays serve whole-column work (a mask, a fancy index). ``ColumnRows``
    reads one row's values without mapping them, for work a sample at a time.

    Raises:
        SharedColumnsGone: the file cannot be opened here or is not the one the reference names.
    """
    try:
        fd = os.open(reference.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SharedColumnsGone(
            f"cannot open the file a sample list was shared through ({reference.path}, written by process "
            f"{reference.pid}): {exc}. It lives as long as the list in the process that pickled it, on "
            "that host only; keep that list alive, or make the list again in this process"
        ) from None
    rows = ColumnRows(fd, reference.layout)  # closes the descriptor when dropped
    if os.pread(fd, _TOKEN_BYTES, 0) != reference.token:
        raise SharedColumnsGone(
            f"{reference.path} is no longer the file a sample list was shared through: process "
            f"{reference.pid} ended or dropped the list; make the list again in this process"
        )
    mapped = mmap.mmap(fd, reference.size, access=mmap.ACCESS_READ)
    buffer = memoryview(mapped)
    arrays = {}
    for name, dtype, shape, offset in reference.layout:
        count = int(np.prod(shape, dtype=np.int64))
        if count == 0:  # may lie past the file's end, where frombuffer refuses even 0 items
            arrays[name] = np.empty(shape, dtype=np.dtype(dtype))
            continue
        arrays[name] = np.frombuffer(buffer, dtype=np.dtype(dtype), count=count, offset=offset).reshape(shape)
    return arrays, rows


class ColumnRows:
    """A shared file's rows, read with ``pread``: one sample's values without mapping its pages.

    A read through the map would make the kernel map the pages around it too.
    A sample at a time, at random, that would put the whole file in the
    process's resident set over an epoch. A ``pread`` maps nothing. Thread-safe.

    Args:
        fd: the file, open for reading; closed when this is dropped.
        layout: where each array lies, as ``ColumnReference.layout``.
    """

    def __init__(self, fd: int, layout: tuple[tuple[str, str, tuple[int, ...], int], ...]) -> None:
        self._fd = fd
        self._at = {}  # name -> (dtype, shape of a row, where the array starts, bytes a row)
        for name, dtype, shape, offset in layout:
            kind = np.dtype(dtype)
            self._at[name] = (kind, shape[1:], offset, kind.itemsize * int(np.prod(shape[1:], dtype=np.int64)))
        self._finalizer = weakref.finalize(self, os.close, fd)

    def rows(self, name: str, i: int, count: int = 1) -> np.ndarray:
        """Rows ``i`` to ``i + count`` of array ``name``."""
        dtype, shape, offset, size = self._at[name]
        values = np.frombuffer(os.pread(self._fd, size * count, offset + size * i), dtype=dtype)
        return values.reshape(count, *shape) if shape else values

    def bytes(self, name: str, start: int, stop: int) -> bytes:
        """Bytes ``start`` to ``stop`` of the (uint8) array ``name``."""
        return os.pread(self._fd, stop - start, self._at[name][2] + start)


def _proc_fds() -> bool:
    """Whether this system shows a process's open files in ``/proc/<pid>/fd`` (Linux does)."""
    return os.path.isdir(f"/proc/{os.getpid()}/fd")


def _close(file: object, name: str | None) -> None:
    file.close()  # type: ignore[attr-defined]
    if name is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
