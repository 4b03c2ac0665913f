"""The pickle a worker process starts from: ``Payload``, made once and again after an epoch hook.

Every worker of a loader starts from one pickle of the yield function and
``thread_init``. An epoch hook may change the yield function's state, so a
hook drops the pickle (``changed``). The next start pickles the state again,
and a later worker starts with what the hook left. A pickle is made outside the
loader's lock (``made``), unless a hook ran meanwhile (``for_start``).
See :doc:`/guide/threads_and_processes`.
"""

from __future__ import annotations

import threading
from typing import Any

from .._core.interrupt_safe import new_lock
from .worker_launch import dumps

__all__ = ["Payload"]


class Payload:
    """The yield function and ``thread_init``, pickled for the starts of worker processes.

    Args:
        objects: what crosses: ``(yield_fn, thread_init)``.
        pickled: their pickle, made once already to check that they cross.
        lock: the loader's lock (``ProcessCalls``); ``changed`` and ``for_start`` run under it.
    """

    def __init__(self, objects: tuple[Any, ...], pickled: bytes, lock: threading.RLock) -> None:
        self.closing = False  # set at close(): no pickle is made then
        self._objects = objects
        self._pickle: bytes | None = pickled
        self._hooks = 0  # the hooks run so far
        self._lock = lock
        self._pickling = new_lock()  # one pickle at a time, made outside the loader's lock

    def changed(self) -> None:
        """An epoch hook ran: the next start pickles the state again. Lock held."""
        self._pickle = None
        self._hooks += 1

    def made(self) -> tuple[bytes | None, int]:
        """The pickle to start a worker from, and the hooks run then; made now if a hook dropped it. Lock not held.

        None when closing, or when pickling failed: ``for_start`` then pickles under the lock.
        """
        with self._pickling:  # threads starting workers at once share one pickle
            with self._lock:
                pickled, hooks = self._pickle, self._hooks
                if self.closing:
                    return None, hooks
            if pickled is None:
                try:
                    pickled = dumps(self._objects)
                except Exception:  # perhaps a hook changing the state meanwhile: for_start tries again
                    return None, hooks
                with self._lock:
                    if self._hooks == hooks:
                        self._pickle = pickled
            return pickled, hooks

    def for_start(self, made: tuple[bytes | None, int]) -> bytes:
        """The pickle a worker starts from now: ``made`` (from ``made()``), unless a hook ran since. Lock held.

        Raises:
            Exception: what pickling raises, when a hook ran since and its state cannot be pickled.
        """
        if made[0] is not None and made[1] == self._hooks:
            return made[0]
        # A hook ran since: pickle its state under the lock, so that no later hook passes this worker by.
        if self._pickle is None:
            self._pickle = dumps(self._objects)
        return self._pickle
