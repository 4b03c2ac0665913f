"""Copy batches onto an accelerator ahead of the step that uses them.

A batch made by loader threads lies in host memory. A step on a GPU first copies
it to the device, and without prefetching that copy is part of the step. Here
the next batches are copied while the current step runs:

* ``DevicePrefetcher`` wraps any iterable of batches (a ``DataLoader`` epoch).
  A background thread takes the next batch and copies it with ``tf.identity``
  under ``tf.device``. It hands it over through a bounded ``FIFOQueue``.
  ``Train(prefetch_to_device=...)`` composes one.
* ``prefetch_dataset`` does the same for a ``tf.data.Dataset``: tf.data's
  ``copy_to_device``, then a ``prefetch`` placed on the device.

``find_device`` resolves the device's name. A device this process does not
have (``"/GPU:0"`` on a machine without a GPU) makes both a no-op, with one
log line. So the same script runs on a laptop and on a GPU server.
See :doc:`/guide/training`.

TensorFlow is imported only when one of these is called, never at import.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from .._core.checks import check_int
from .._core.fifo_queue import FIFOQueue, QueueClosed
from .._core.interrupt_safe import new_thread

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = ["DevicePrefetcher", "find_device", "prefetch_dataset"]

log = logging.getLogger(__name__)

# The value of the slot after the last batch. Never None: None can be a batch.
_END = object()


def find_device(name: str) -> str | None:
    """The full name of the local device ``name`` (e.g. ``"/GPU:0"``, ``"gpu:1"``, ``"/CPU:0"``), or ``None``.

    ``None`` means this process has no such device: no GPU, or fewer GPUs than
    the index. That is logged once per call as a warning. Callers then leave
    batches where they are.

    Raises:
        TypeError: ``name`` is not a string.
        ValueError: ``name`` is not a device name with a device type.
    """
    if not isinstance(name, str):
        raise TypeError(f"the device must be a name such as '/GPU:0', got {type(name).__name__} {name!r}")
    import tensorflow as tf

    try:
        spec = tf.DeviceSpec.from_string(name)
    except ValueError as exc:
        raise ValueError(f"not a device name: {name!r}; name one such as '/GPU:0' or '/CPU:0' ({exc})") from None
    if spec.device_type is None:
        raise ValueError(f"the device name {name!r} has no device type; name one such as '/GPU:0' or '/CPU:0'")
    index = spec.device_index or 0
    devices = tf.config.list_logical_devices()
    for device in devices:
        found = tf.DeviceSpec.from_string(device.name)
        if found.device_type == spec.device_type and (found.device_index or 0) == index:
            return device.name
    log.warning(
        "no device %s in this process (it has %s): batches are not prefetched to a device",
        name, ", ".join(d.name for d in devices) or "none",
    )  # fmt: skip
    return None


def prefetch_dataset(dataset: tf.data.Dataset, device: str, buffer: int = 2) -> tf.data.Dataset:
    """Copy the elements of ``dataset`` to ``device``, up to ``buffer`` of them ahead of the consumer.

    ``copy_to_device`` moves each element. The ``prefetch`` after it is placed on
    the device too: unplaced, it would run on the host and copy the elements back.
    Apply it last: any transformation after it runs on the host.
    The result's cardinality is unknown to TensorFlow, which ``model.fit``
    accepts (an epoch ends when the data does). A device this process does not
    have leaves ``dataset`` as it is (see ``find_device``).

    Raises:
        TypeError, ValueError: ``device`` is not a device name, or ``buffer`` < 1.
    """
    buffer = check_int("device_buffer", buffer, minimum=1)
    target = find_device(device)
    if target is None:
        return dataset
    import tensorflow as tf

    dataset = dataset.apply(tf.data.experimental.copy_to_device(target))
    with tf.device(target):
        return dataset.prefetch(buffer)


class DevicePrefetcher:
    """Copies the batches of an iterable onto a device in a background thread, ``buffer`` batches ahead.

    ``iterate(batches)`` yields each batch of ``batches`` as tensors on the device
    (``tf.nest.map_structure(tf.identity, batch)`` under ``tf.device``), in the
    same order. Its thread takes batch ``k + 1`` from ``batches`` and copies it
    while the caller's step runs on batch ``k``; TensorFlow releases the GIL
    during the copy. At most ``buffer`` batches are copied ahead (waiting or
    being copied), besides the one the caller holds.

    The thread is the one that iterates ``batches``: a ``DataLoader``'s
    ``on_epoch_begin`` and ``on_epoch_end`` run in it. An exception raised by
    ``batches`` or by a copy is re-raised by ``iterate`` in the caller's thread,
    with its traceback. Batches must be arrays, numbers or strings, or tuples,
    lists and dicts of them.

    A device this process does not have makes the prefetcher a no-op (logged
    once, at construction): ``iterate`` then yields the batches unchanged and
    starts no thread.

    Args:
        device: the target, e.g. ``"/GPU:0"``; ``"/CPU:0"`` works everywhere.
        buffer: the most batches copied ahead of the one in use, at least 1.
        name: the threads' name.

    Raises:
        TypeError, ValueError: ``device`` is not a device name, or ``buffer`` < 1.
    """

    def __init__(self, device: str, buffer: int = 2, name: str = "device-prefetch") -> None:
        self.buffer = check_int("device_buffer", buffer, minimum=1)
        self.device = find_device(device)
        self.name = name
        # Guards _running: iterate() adds to it in the consumer's thread, close() reads it from any.
        self._lock = threading.Lock()
        self._running: list[tuple[threading.Thread, FIFOQueue]] = []

    @property
    def active(self) -> bool:
        """Whether batches are copied, False when the device was not found."""
        return self.device is not None

    def iterate(self, batches: Iterable[Any]) -> Iterator[Any]:
        """Yield the batches of ``batches``, each already copied to the device.

        Iterate from one thread at a time. Leaving the loop early stops the copy
        thread at its next hand-over; ``close()`` waits for it.

        Raises:
            BaseException: what iterating ``batches`` or copying a batch raised.
        """
        if self.device is None:
            yield from batches
            return
        slots = FIFOQueue(self.buffer)
        thread = new_thread(self._copy_loop, self.name, (batches, slots))
        with self._lock:
            self._running.append((thread, slots))
        thread.start()
        completed = False
        try:
            while True:
                batch = slots.dequeue().result()  # waits for the copy; re-raises the thread's error
                if batch is _END:
                    completed = True
                    return
                yield batch
        finally:
            slots.close()  # a copy thread still going stops at its next hand-over
            if completed:
                thread.join()  # it has handed over its last slot and returns
                with self._lock:
                    self._running.remove((thread, slots))

    def close(self, timeout: float | None = None) -> None:
        """Stop the copy threads and wait for them, at most ``timeout`` seconds in all.

        A thread waiting for its next batch from the source ends once that batch
        comes or the source stops: stop the source first (``DataLoader.stop()``).
        Idempotent; safe from any thread.
        """
        with self._lock:
            running, self._running = self._running, []
        for _, slots in running:
            slots.close()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread, _ in running:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        alive = [t.name for t, _ in running if t.is_alive()]
        if alive:
            log.warning("%s: a copy thread is still waiting for its source %.1f s after close()", self.name, timeout)

    def __enter__(self) -> DevicePrefetcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _copy_loop(self, batches: Iterable[Any], slots: FIFOQueue) -> None:
        import tensorflow as tf

        source = _each(batches)
        try:
            while True:
                # Take a slot before the batch: the queue's capacity then bounds the
                # batches copied ahead, the one being copied included.
                slot: Future = Future()
                slots.enqueue(slot)
                try:
                    batch = next(source)
                except StopIteration:
                    slot.set_result(_END)
                    return
                except BaseException as exc:  # the loader failed: the consumer re-raises it
                    slot.set_exception(exc)
                    return
                try:
                    with tf.device(self.device):
                        slot.set_result(tf.nest.map_structure(tf.identity, batch))
                except BaseException as exc:
                    exc.add_note(f"raised copying a batch to {self.device} in thread {self.name}")
                    slot.set_exception(exc)
                    return
        except QueueClosed:
            return  # the consumer left
        finally:
            source.close()  # ends a DataLoader epoch left part way


def _each(batches: Iterable[Any]) -> Iterator[Any]:
    """A closable generator over ``batches``; ``iter()`` is called at the first ``next``, in the copy thread."""
    yield from batches
