"""Index records written to the store off the readers' threads: ``StoreWriter``, one thread per store, in batches.

A first touch makes a file's index and packet table and keeps both in the
store, for other processes and later runs. A SQLite transaction a file costs a
reader thread about 0.1 ms. A cache hands its records to the store's
``StoreWriter`` instead (``writer_for``: one per store file in a process,
shared by every cache on it). Its thread writes what has gathered in one
transaction (``IndexStore.write``).

- Seen at once: ``pending`` gives a record queued and not yet written. So every
  cache of the process finds it, as if it were in the store.
- Bounded: a ``submit`` that finds ``MAX_QUEUED`` records or more waiting waits for
  the thread, or after ``FULL_WAIT_S`` writes its records itself. One submit adds all its records.
- Batched: the thread waits ``GATHER_S`` after a batch's first record for others.
- Once: each name's newest record is written once. An older one, queued before or
  after it, is dropped: the store would keep the newer.
- Lifecycle: the thread starts at a submit and ends after ``IDLE_S`` with
  nothing queued. ``close`` writes what is queued and ends it. At the
  interpreter's exit every writer is closed. A forked child starts empty: its
  parent writes what it queued. A process ended without its exit handlers
  (``os._exit``, a kill) loses what was queued; those indexes are made again when needed.

Nothing here decodes or reads video files; ``cache`` decides what is written.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import threading
import time

from .store import BUSY_S, IndexStore, Record

__all__ = ["FULL_WAIT_S", "GATHER_S", "IDLE_S", "MAX_QUEUED", "StoreWriter", "close_all", "writer_for"]

log = logging.getLogger(__name__)

MAX_QUEUED = 256  # records waiting to be written (an index: ~100 bytes; a packet table: ~1 KB a 10-second file)
GATHER_S = 0.05  # how long a batch waits for more records after its first
IDLE_S = 1.0  # how long the thread waits with nothing queued before it ends
FULL_WAIT_S = BUSY_S + 5.0  # how long a submit waits for room before writing its records itself


class StoreWriter:
    """Writes records to one store in batches, from one thread of its own (see the module docstring).

    Safe to use from several threads at once.

    Args:
        store: the store the records go to.
    """

    def __init__(self, store: IndexStore) -> None:
        self.store = store
        self._reset()

    def _reset(self) -> None:
        """The state of a writer with nothing queued and no thread (also a forked child's)."""
        # Held while reading or changing the fields below, never while writing.
        self._lock = threading.Lock()
        self._queued = threading.Condition(self._lock)  # a record was queued, or a flush or close wants it now
        self._written = threading.Condition(self._lock)  # a batch was taken or written, or the thread ended
        self._queue: dict[str, Record] = {}  # name -> its newest record not yet taken by the thread
        self._taken: dict[str, Record] = {}  # the batch being written
        self._submitted = 0  # submits so far
        self._waiting = 0  # submits whose records are in the queue
        self._done = 0  # submits whose records are written (or failed) so far
        self._thread: threading.Thread | None = None
        self._hurry = False  # a flush or close waits: write what is queued without gathering
        self._closing = False  # the thread ends once the queue is empty

    def submit(self, records: list[Record]) -> None:
        """Queue ``records``; the writer's thread writes them soon (see the module docstring)."""
        with self._lock:
            # Never wait without end: past FULL_WAIT_S the thread is stuck (a store locked for long).
            full = len(self._queue) >= MAX_QUEUED
            if not full or self._written.wait_for(lambda: len(self._queue) < MAX_QUEUED, FULL_WAIT_S):
                first = not self._queue
                for record in records:
                    old = self._queue.pop(record.name, None)  # one record a name, the newest, queued last
                    self._queue[record.name] = record if old is None or old.written_ns <= record.written_ns else old
                self._submitted += 1
                self._waiting += 1
                if self._thread is None:
                    thread = threading.Thread(target=self._run, name="video-index-writer", daemon=True)
                    thread.start()  # if no thread can start, this raises and a later submit tries again
                    self._thread = thread
                elif first or len(self._queue) >= MAX_QUEUED // 2:  # it waits for a first record or a full batch
                    self._queued.notify()
                return
            self._submitted += 1
        self._write(records, 1, taken=False)

    def pending(self, name: str) -> Record | None:
        """The record of ``name`` queued or being written, or None."""
        with self._lock:
            return self._queue.get(name) or self._taken.get(name)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record submitted before this call is written; False if ``timeout`` seconds passed first."""
        with self._lock:
            target = self._submitted
            self._hurry = True
            self._queued.notify()
            return self._written.wait_for(lambda: self._done >= target, timeout)

    def close(self, timeout: float = FULL_WAIT_S) -> None:
        """Write what is queued and end the thread (a later ``submit`` starts another). Waits up to ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._closing = True
            self._queued.notify()
            thread = self._thread
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.warning("the video index writer did not finish in %.0f s; it goes on writing", timeout)
        with self._lock:
            self._closing = False

    def _run(self) -> None:
        """The thread: take what gathered and write it, until nothing comes for ``IDLE_S``.

        An unexpected error is logged and ends the thread; a later submit starts another.
        """
        try:
            self._serve()
        except Exception:
            log.exception("the video index writer of %s failed; its batch is lost", self.store.path)
        finally:
            with self._lock:
                self._thread = None  # under the lock: a submit from now on starts another thread
                self._written.notify_all()
            self.store.close()  # its file descriptors are not held while idle; the next use opens it again

    def _serve(self) -> None:
        while True:
            with self._lock:
                if not self._queued.wait_for(lambda: self._queue or self._closing, IDLE_S) or not self._queue:
                    return
                first = time.monotonic()
                self._queued.wait_for(
                    lambda: self._hurry or self._closing or len(self._queue) >= MAX_QUEUED // 2,
                    max(0.0, first + GATHER_S - time.monotonic()),
                )
                self._taken, self._queue, self._hurry = self._queue, {}, False
                submits, self._waiting = self._waiting, 0
                self._written.notify_all()  # room for submits waiting
            self._write(list(self._taken.values()), submits, taken=True)

    def _write(self, records: list[Record], submits: int, taken: bool) -> None:
        """Write ``records`` in one transaction (the store logs a failure); count ``submits`` done whatever happens.

        ``taken``: they are the thread's batch, which ``pending`` shows until written.
        """
        try:
            self.store.write(records)
        finally:
            with self._lock:
                if taken:
                    self._taken = {}
                self._done += submits
                self._written.notify_all()


def writer_for(store: IndexStore) -> StoreWriter:
    """The writer of ``store``'s file in this process, made at the first call: shared by every cache on it."""
    name = _real_path(store.path) if os.path.isabs(store.path) else os.path.realpath(store.path)
    with _writers_lock:
        writer = _writers.get(name)
        if writer is None:
            writer = _writers[name] = StoreWriter(store)
        return writer


@functools.lru_cache(maxsize=64)
def _real_path(path: os.PathLike[str] | str) -> str:
    """An absolute ``path`` resolved once: ``writer_for`` runs once a clip (``member_bytes.read_kept``)."""
    return os.path.realpath(path)


def close_all() -> None:
    """Close every writer of this process: their queues written, their threads ended (at exit, after tests)."""
    with _writers_lock:
        writers = list(_writers.values())
    for writer in writers:
        writer.close()


def _forked() -> None:
    """In a forked child: every writer starts empty, without a thread (the parent writes what it queued)."""
    global _writers_lock
    _writers_lock = threading.Lock()
    for writer in _writers.values():
        writer._reset()
        writer.store._lock = threading.Lock()  # the parent's writer thread may have held it at the fork


_writers: dict[str, StoreWriter] = {}  # the store file's real path -> its writer
_writers_lock = threading.Lock()  # held while finding or making a writer
atexit.register(close_all)
os.register_at_fork(after_in_child=_forked)
