"""Batches that cross from a worker process to the consumer through shared memory.

A *block* is one named shared-memory segment. Only the consuming process makes
and unlinks blocks (``BlockPool``). A worker process only opens one by name,
writes into it, and closes it. A batch is sent in two parts:

* its *skeleton*, which is small and is pickled. It is the batch with every large
  numpy array inside tuples, lists and dicts replaced by an ``ArrayRef`` (offset,
  dtype, shape). Large means at least ``INLINE_BYTES`` bytes, with a dtype
  without Python objects;
* the arrays' bytes, written once, side by side, into one block (``write_arrays``).

The consumer's side (``BlockPool.build``) maps the block afresh. Each array is a
view of that mapping, so the data is neither copied again nor unpickled.
The block goes back to the pool when the last of those arrays is garbage, not
before: the mapping's finalizer returns it. So a batch kept by the consumer stays
valid, and blocks are reused from one batch to the next.

The pool keeps at most ``capacity`` free blocks, and unlinks a block released
past that. The loader sets ``capacity`` to the most batches it holds at once.
``close()`` unlinks every block, in use or not. A mapping still held stays
readable until it is dropped: the operating system keeps an unlinked segment
while it is mapped. A worker killed while writing leaves nothing behind, since
it owns no block.

This module knows nothing of processes, threads or loaders. POSIX only.
"""

from __future__ import annotations

import _posixshmem  # CPython's own POSIX shared-memory calls (what shared_memory uses), to open without tracking
import contextlib
import logging
import mmap
import os
import secrets
import threading
import weakref
from multiprocessing import resource_tracker, shared_memory
from typing import Any, NamedTuple

import numpy as np

__all__ = ["INLINE_BYTES", "ArrayRef", "Block", "BlockPool", "WorkerMappings", "split_arrays", "write_arrays"]

log = logging.getLogger(__name__)

# Arrays smaller than this are pickled with the skeleton: a block costs a round trip to ask for it
# and a mapping, about 0.1 ms a batch, more than pickling such an array through the pipe.
INLINE_BYTES = 64 * 1024
_ALIGN = 64  # each array starts on a cache line
_ROUND = 1 << 16  # block sizes are multiples of this, so that batches of nearly one size share blocks


class ArrayRef(NamedTuple):
    """Where an array of a batch lies in its block."""

    offset: int
    dtype: str
    shape: tuple[int, ...]


class Block:
    """One shared-memory segment of the pool: its name and size in bytes."""

    __slots__ = ("_shm", "name", "size")

    def __init__(self, size: int, prefix: str) -> None:
        self.name = f"{prefix}{secrets.token_hex(6)}"
        # Python's resource tracker unlinks it even if this process is killed before it can (a
        # worker opens it without registering, see _open). Registered before it is made, since
        # SharedMemory registers only after: a kill in between would leave the segment behind.
        resource_tracker.register("/" + self.name, "shared_memory")
        try:
            self._shm = shared_memory.SharedMemory(self.name, create=True, size=size)
        except BaseException:
            resource_tracker.unregister("/" + self.name, "shared_memory")
            raise
        self.size = size

    def unlink(self) -> None:
        """Remove the segment; mappings still held stay valid until dropped. Idempotent."""
        shm, self._shm = self._shm, None
        if shm is not None:
            shm.close()
            with contextlib.suppress(FileNotFoundError):
                shm.unlink()

    def __repr__(self) -> str:
        return f"<Block {self.name} {self.size} bytes>"


class BlockPool:
    """The blocks of one consumer: handed to workers to write into, reused, unlinked at ``close()``.

    Args:
        capacity: the most free blocks kept for reuse; a block released past that is unlinked.
        prefix: the start of each block's name (a unique part follows).

    Safe from any thread, finalizers included.
    """

    def __init__(self, capacity: int, prefix: str = "pl_") -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.prefix = prefix
        self._lock = threading.RLock()  # a finalizer may run in a thread that holds it
        self._free: list[Block] = []
        self._used: set[Block] = set()
        self._closed = False
        self.made = 0  # blocks made so far, for tests and telemetry

    @property
    def free(self) -> int:
        """Blocks waiting for reuse."""
        return len(self._free)

    @property
    def in_use(self) -> int:
        """Blocks handed out and not yet released."""
        return len(self._used)

    def names(self) -> list[str]:
        """The names of every block that exists now."""
        with self._lock:
            return [b.name for b in (*self._free, *self._used)]

    def acquire(self, nbytes: int) -> Block:
        """A block of at least ``nbytes`` bytes: the smallest free one that fits, else a new one.

        Raises:
            RuntimeError: the pool is closed.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("the shared-memory pool is closed")
            fits = [b for b in reversed(self._free) if b.size >= nbytes]
            if fits:
                # The smallest that fits, of those the latest released: few blocks go round, and a
                # worker's mapping of each (WorkerMappings) is used again.
                block = min(fits, key=lambda b: b.size)
                self._free.remove(block)
            else:
                if len(self._free) >= self.capacity:
                    self._free.pop(0).unlink()  # the oldest free block fits nothing now asked for
                block = Block(max(_ROUND, -(-nbytes // _ROUND) * _ROUND), self.prefix)
                self.made += 1
            self._used.add(block)
            return block

    def release(self, block: Block) -> None:
        """Give ``block`` back for reuse (or unlink it when the pool is full or closed). Idempotent."""
        with self._lock:
            if block not in self._used:
                return
            self._used.discard(block)
            if self._closed or len(self._free) >= self.capacity:
                block.unlink()
            else:
                self._free.append(block)

    def build(self, skeleton: Any, block: Block | None) -> Any:
        """The batch of ``skeleton``, its arrays views of ``block``; the block returns when they are dropped.

        With no block (a batch without large arrays), ``skeleton`` is the batch.
        The block is released at once if the skeleton refers to none of it.
        """
        if block is None:
            return skeleton
        mapping = _open(block.name, block.size)
        batch = _fill(skeleton, mapping)
        weakref.finalize(mapping, self.release, block)
        return batch  # the mapping is dropped here unless an array views it

    def close(self) -> None:
        """Unlink every block; later releases unlink theirs. Idempotent, any thread."""
        with self._lock:
            self._closed = True
            blocks, self._free = [*self._free, *self._used], []
        for block in blocks:
            block.unlink()


def split_arrays(batch: Any) -> tuple[Any, list[np.ndarray], int]:
    """Take the large arrays out of ``batch`` (a worker's side).

    Returns:
        The skeleton (``ArrayRef`` in place of each array taken out), the arrays,
        and the bytes of block they need.
    """
    arrays: list[np.ndarray] = []
    offset = 0

    def visit(obj: Any) -> Any:
        nonlocal offset
        kind = type(obj)
        if kind is np.ndarray and obj.nbytes >= INLINE_BYTES and not obj.dtype.hasobject:
            ref = ArrayRef(offset, obj.dtype.str, obj.shape)
            arrays.append(obj)
            offset += -(-obj.nbytes // _ALIGN) * _ALIGN
            return ref
        if kind is tuple or kind is list:
            return kind(visit(item) for item in obj)
        if kind is dict:
            return {key: visit(value) for key, value in obj.items()}
        return obj

    skeleton = visit(batch)
    return skeleton, arrays, offset


class WorkerMappings:
    """A worker's mappings of the blocks it wrote into, kept for the next write into the same block.

    Mapping a block afresh costs a page fault per page on the first write (a 20 MB
    batch: ~5,000); the pool hands the same few blocks round, so the mappings are
    kept, the ``keep`` latest used. A kept mapping of a block the pool has unlinked
    holds that block's memory until it is dropped, so ``keep`` bounds that too.
    Safe from any thread of the worker.
    """

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        self._mappings: dict[tuple[str, int], mmap.mmap] = {}  # in the order last used

    def get(self, name: str, size: int) -> mmap.mmap:
        with self._lock:
            mapping = self._mappings.pop((name, size), None)
            if mapping is None:
                mapping = _open(name, size)
            self._mappings[name, size] = mapping
            while len(self._mappings) > self.keep:
                self._mappings.pop(next(iter(self._mappings))).close()
            return mapping


def write_arrays(
    name: str, size: int, skeleton: Any, arrays: list[np.ndarray], mappings: WorkerMappings | None = None
) -> None:
    """Copy ``arrays`` into block ``name`` at the offsets of ``skeleton`` (a worker's side).

    With ``mappings``, through the worker's kept mapping of the block.
    """
    mapping = _open(name, size) if mappings is None else mappings.get(name, size)
    try:
        for ref, array in zip(_refs(skeleton), arrays, strict=True):
            view = np.ndarray(ref.shape, np.dtype(ref.dtype), buffer=mapping, offset=ref.offset)
            np.copyto(view, array, casting="no")
            del view
    finally:
        if mappings is None:
            mapping.close()


def _refs(obj: Any) -> list[ArrayRef]:
    """The ``ArrayRef`` of a skeleton, in the order ``split_arrays`` made them."""
    kind = type(obj)
    if kind is ArrayRef:
        return [obj]
    if kind is tuple or kind is list:
        return [ref for item in obj for ref in _refs(item)]
    if kind is dict:
        return [ref for value in obj.values() for ref in _refs(value)]
    return []


def _fill(obj: Any, mapping: mmap.mmap) -> Any:
    kind = type(obj)
    if kind is ArrayRef:
        return np.ndarray(obj.shape, np.dtype(obj.dtype), buffer=mapping, offset=obj.offset)
    if kind is tuple or kind is list:
        return kind(_fill(item, mapping) for item in obj)
    if kind is dict:
        return {key: _fill(value, mapping) for key, value in obj.items()}
    return obj


def _open(name: str, size: int) -> mmap.mmap:
    """Map block ``name``: a new mapping each time, which keeps the memory while any view of it lives.

    Opened with the POSIX call itself rather than ``SharedMemory(name)``. In Python
    3.11, ``SharedMemory(name)`` registers the segment with the resource tracker
    again in each process that opens it.
    """
    fd = _posixshmem.shm_open("/" + name, os.O_RDWR, mode=0o600)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)
