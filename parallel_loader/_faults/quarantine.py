"""Quarantine: the data items of a run known to be bad, so that each is tried once.

An *item* is what a dataset draws a sample from: a file, or a part of one (a
segment). A *key* names it: a file's path, or its path and the part. An item
that failed for a reason in the data itself is put in quarantine. Such reasons
are not a video, truncated, too short, an unreadable stream: any ``Exception``
but those that may pass. Later draws of it are replaced at once, without opening
it again. Failures that may pass are not put in quarantine, and the next draw
tries the file again. These are the failures for which ``lasting(exc)`` is False:
a ``TimeoutError``, or an ``OSError`` other than a missing file.

What the quarantine remembers across runs is pluggable (``QuarantineMemory``):
``known(path, size, mtime)`` and ``remember(path, size, mtime, reason)``. They are
keyed by the file's size and modification time, so that a file replaced since is
tried again. ``InProcessMemory``, the default, keeps nothing past the process.
A store that keeps file facts on disk (an index store) can implement the two
methods, to keep known-bad files across runs. See :doc:`/guide/long_runs`.

The quarantine knows nothing of video, of threads beyond being safe to call from
any of them, or of the loader.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Protocol

__all__ = ["InProcessMemory", "Quarantine", "QuarantineMemory", "lasting"]

log = logging.getLogger(__name__)


def lasting(exc: BaseException) -> bool:
    """Whether a failure says something lasting about the data (quarantine it) rather than one that may pass.

    A missing file (``FileNotFoundError``) is lasting. A ``TimeoutError`` or any
    other ``OSError`` may pass: a network share that hiccups, a permission fixed
    later. Any other ``Exception`` is lasting: a decode error, a file too short.
    """
    if isinstance(exc, FileNotFoundError):
        return True
    return not isinstance(exc, OSError | TimeoutError)


class QuarantineMemory(Protocol):
    """Where known-bad files are remembered; a persistent store keeps them across runs."""

    def known(self, path: str, size: int, mtime: int) -> str | None:
        """The reason ``path`` is bad, if it was found bad while it had this size and mtime (ns); else ``None``."""

    def remember(self, path: str, size: int, mtime: int, reason: str) -> None:
        """Keep that ``path``, with this size and mtime (ns), is bad for ``reason``."""


class InProcessMemory:
    """A ``QuarantineMemory`` that lasts as long as the process (the default)."""

    def __init__(self) -> None:
        self._bad: dict[tuple[str, int, int], str] = {}

    def known(self, path: str, size: int, mtime: int) -> str | None:
        """See ``QuarantineMemory.known``."""
        return self._bad.get((path, size, mtime))

    def remember(self, path: str, size: int, mtime: int, reason: str) -> None:
        """See ``QuarantineMemory.remember``."""
        self._bad[(path, size, mtime)] = reason


class Quarantine:
    """The items known to be bad, and why. Safe from any thread.

    Args:
        memory: where bad files are also remembered (and first looked up), keyed
            by their size and modification time; default ``InProcessMemory()``.

    Attributes:
        reasons: ``key -> reason`` of each item put in quarantine in this run (or
            found in the memory); written only under the lock, read freely.
    """

    def __init__(self, memory: QuarantineMemory | None = None) -> None:
        self.memory = InProcessMemory() if memory is None else memory
        self.reasons: dict[str, str] = {}
        self._looked_up: set[str] = set()  # paths already asked of the memory: one stat per file and run
        self._lock = threading.Lock()  # guards reasons and _looked_up: each item is added, and reported, once

    def reason(self, key: str, path: str | None = None) -> str | None:
        """Why ``key`` (or the file ``path`` it is part of) is bad, or ``None`` if it is not known to be."""
        found = self.reasons.get(key)
        if found is None and path is not None:
            found = self.reasons.get(path)
            if found is None and path not in self._looked_up:
                found = self._recall(path)
        return found

    def add(self, key: str, reason: str, path: str | None = None) -> bool:
        """Put ``key`` in quarantine for ``reason``; True if it was not there yet (the caller reports it then).

        When ``key`` is a whole file (``path`` is given and equal to it), the
        file is remembered in the memory too. A part of a file, or an item that
        is no file, is kept in this run only.
        """
        with self._lock:
            if key in self.reasons:
                return False
            self.reasons[key] = reason
        if path is not None and path == key:
            stamp = _stamp(key)
            if stamp is not None:
                self.memory.remember(key, *stamp, reason)
        return True

    def __contains__(self, key: object) -> bool:
        return key in self.reasons

    def __getstate__(self) -> dict[str, object]:
        """Pickled without its lock (a dataset sent to a worker process takes its quarantine along)."""
        with self._lock:
            return {"memory": self.memory, "reasons": dict(self.reasons), "_looked_up": set(self._looked_up)}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.reasons)

    def __repr__(self) -> str:
        return f"<Quarantine of {len(self.reasons)} items, memory {type(self.memory).__name__}>"

    def _recall(self, path: str) -> str | None:
        """Ask the memory about ``path`` once per run; a file it knows is bad joins this run's quarantine."""
        with self._lock:
            if path in self._looked_up:
                return self.reasons.get(path)
            self._looked_up.add(path)
        stamp = _stamp(path)
        found = None if stamp is None else self.memory.known(path, *stamp)
        if found is not None:
            with self._lock:
                self.reasons.setdefault(path, found)
            log.info("%s is known to be bad (size and mtime unchanged): %s", path, found)
        return found


def _stamp(path: str) -> tuple[int, int] | None:
    """``(size, mtime_ns)`` of a file, or ``None`` when it cannot be read (a missing file is kept in this run only)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns
