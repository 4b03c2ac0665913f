"""Loader threads that call a yield function and queue its batches.

``DataLoader`` starts N threads once and reuses them for every epoch. Each thread
takes the next position of the epoch, calls the yield function for it and puts
the batch in a bounded ``FIFOQueue``; iterating the loader takes batches out.
The loader knows nothing of what a batch is: no video, no TensorFlow.

How work is handed out: one condition guards the epoch's state (which positions
exist, which were taken, how far the consumer got). Threads wait on it for work;
the consumer notifies it when an epoch starts, when it moves the ordered window,
and on close. Every queued result is tagged with its epoch, so results of an
epoch that was abandoned part way are recognised and dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ._checks import check_int
from .fifo_queue import FIFOQueue, QueueClosed
from .sharding import Remainder, check_shard, shard_length, shard_positions
from .yield_function import epoch_length

__all__ = ["DataLoader", "LoaderClosed"]

log = logging.getLogger(__name__)

# A word of the random key of the shuffled order, so that it differs from any
# random stream a yield function derives from the same seed and epoch.
_SHUFFLE_KEY = 0x5348554646

# Stands in the result queue for a stream call that raised StopIteration, so that
# every position handed out is accounted for. Never None: None can be a batch.
_NO_BATCH = object()


# After an error or Ctrl-C, how long to wait for loader threads still inside a call
# of the yield function: they take no more work and end when that call returns.
STOP_TIMEOUT = 0.5


class LoaderClosed(RuntimeError):
    """The DataLoader was closed: it cannot start an epoch, or was closed during one."""


class DataLoader:
    """Calls a yield function in ``num_threads`` threads and yields its batches.

    Iterating the loader gives one epoch: every index in ``range(len(yield_fn))``
    exactly once, whatever the number of threads. A yield function without
    ``__len__`` is a stream: each iteration calls it until it raises
    ``StopIteration``, ``batches_per_epoch`` times if that is given, or for ever,
    until the consumer stops. Loader threads call a stream concurrently, in no
    particular order.

    Threads start at the first iteration and stop at ``close()``; use the loader
    as a context manager. Iterate from one thread at a time.

    Args:
        yield_fn: a ``YieldFunction`` (or any callable with ``__len__`` taking an
            index), or a zero-argument callable for a stream.
        num_threads: how many loader threads call ``yield_fn`` at once.
        max_len: capacity of the batch queue. At most about ``max_len + num_threads``
            batches exist at once, in ordered mode too.
        shuffle: visit the indices of each epoch in a new random order.
        seed: makes the shuffled orders reproducible; each epoch still differs.
        ordered: deliver batches in index order (as ``tf.data``'s
            ``deterministic=True``); otherwise each batch comes as soon as it is ready.
            Needs a yield function with ``__len__``.
        name: prefix of the thread names.
        first_epoch: the number of the first epoch, to continue a run's sequence of
            shuffled orders (and the epochs passed to ``on_epoch_begin``/``on_epoch_end``) in a new loader.
        batches_per_epoch: for a stream only: the most calls that make one epoch.
        num_shards: how many workers share each epoch (multi-worker training). Every
            worker computes the same global order of the epoch (so with ``shuffle``,
            give all the same ``seed``) and delivers only its own shard of it:
            positions ``shard_index, shard_index + num_shards, ...`` (see
            ``parallel_loader.sharding``). The shards are disjoint, together they are
            the whole epoch, and each has ``len(loader)`` batches.
        shard_index: this worker's shard, ``0 <= shard_index < num_shards``.
        shard_remainder: when the epoch's length is not a multiple of ``num_shards``:
            ``"pad"`` tops the short shards up from the start of the global order
            (those batches are read twice), ``"drop"`` leaves the last positions of the
            order out (they differ per epoch when shuffling).

    Raises:
        TypeError, ValueError: an argument is of the wrong type or out of range;
            the message says which and what is allowed.
    """

    def __init__(
        self,
        yield_fn: Callable[..., Any],
        num_threads: int = 4,
        max_len: int = 8,
        shuffle: bool = False,
        seed: int | None = None,
        ordered: bool = False,
        name: str = "DataLoader",
        first_epoch: int = 0,
        batches_per_epoch: int | None = None,
        num_shards: int = 1,
        shard_index: int = 0,
        shard_remainder: Remainder = "pad",
    ) -> None:
        num_threads = check_int("num_threads", num_threads, minimum=1)
        max_len = check_int("max_len", max_len, minimum=1)
        first_epoch = check_int("first_epoch", first_epoch, minimum=0)
        if seed is not None:
            seed = check_int("seed", seed, minimum=0)
        num_shards, shard_index, shard_remainder = check_shard(num_shards, shard_index, shard_remainder)
        if num_shards > 1 and shuffle and seed is None:
            raise ValueError(
                "shuffle=True with num_shards > 1 needs a seed, the same on every shard: "
                "each draws the epoch's global order from it"
            )
        self._stream = epoch_length(yield_fn) is None  # also checks yield_fn, early
        if self._stream:
            for option, value in (("shuffle", shuffle), ("ordered", ordered)):
                if value:
                    raise ValueError(
                        f"{option}=True needs a yield function with __len__ (a YieldFunction); "
                        "a stream has no indices to put in order"
                    )
            if num_shards > 1:
                raise ValueError(
                    "num_shards > 1 needs a yield function with __len__ (a YieldFunction); "
                    "a stream has no positions to share out among the shards"
                )
            if batches_per_epoch is not None:
                batches_per_epoch = check_int("batches_per_epoch", batches_per_epoch, minimum=1)
        elif batches_per_epoch is not None:
            raise ValueError(
                "batches_per_epoch is for a stream; a yield function with __len__ gives its own epoch length"
            )
        self.batches_per_epoch = batches_per_epoch
        self._yield_fn = yield_fn
        self.num_threads = num_threads
        self.max_len = max_len
        self.shuffle = shuffle
        # With no seed, draw one now, so that each epoch's order still differs from the last.
        self.seed = seed if seed is not None else int(np.random.SeedSequence().entropy % 2**63)
        self.ordered = ordered
        self.name = name
        self.num_shards = num_shards
        self.shard_index = shard_index
        self.shard_remainder = shard_remainder
        self._results = FIFOQueue(max_len)
        self._threads: list[threading.Thread] = []
        # One lock guards everything below. Loader threads wait on _work for work;
        # the consumer waits on _idle for calls left running to finish.
        lock = threading.Lock()
        self._work = threading.Condition(lock)
        self._idle = threading.Condition(lock)  # notified when _busy drops to 0
        self._closed = False
        self._failure: BaseException | None = None
        self._failure_raised = False
        self._active = False  # an iteration is in progress
        self._busy = 0  # calls of the yield function running now
        self._epoch = first_epoch - 1  # also tags results, to drop those of an abandoned epoch
        self._order: Sequence[int] = ()
        self._length: int | None = 0  # positions this epoch; None while a stream runs
        self._next = 0  # next position to hand out
        self._yielded = 0  # positions delivered, in ordered mode
        self._window = max_len + num_threads if ordered else None

    # Public API, for the consuming thread.

    @property
    def epoch(self) -> int:
        """The number of the epoch being iterated, or of the last one; ``first_epoch - 1`` before the first."""
        return self._epoch

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called or a loader thread failed."""
        return self._closed

    @property
    def yield_fn(self) -> Callable[..., Any]:
        """The yield function the threads call."""
        return self._yield_fn

    @property
    def threads(self) -> tuple[threading.Thread, ...]:
        """The loader threads started so far (none before the first iteration)."""
        return tuple(self._threads)

    def __len__(self) -> int:
        """Batches per epoch (this shard's), as the yield function says now."""
        if self._stream:
            raise TypeError("a DataLoader over a stream (a yield function without __len__) has no length")
        return shard_length(epoch_length(self._yield_fn), self.num_shards, self.shard_remainder)

    def __bool__(self) -> bool:
        return True  # a loader is a loader, whatever len() says (a stream has none)

    def __iter__(self) -> Iterator[Any]:
        """Run one epoch and yield its batches.

        Raises:
            LoaderClosed: the loader is closed, or was closed by another thread
                during the epoch.
            RuntimeError: another iteration over this loader is in progress.
            BaseException: whatever the yield function raised in a loader thread,
                re-raised here with that thread's traceback; the loader is then
                stopped, and ``close()`` waits for the threads still in a call.
        """
        epoch = self._begin_epoch()
        completed = False
        try:
            yield from self._deliver(epoch)
            completed = True
        finally:
            self._end_epoch(completed)
        on_epoch_end = getattr(self._yield_fn, "on_epoch_end", None)
        if on_epoch_end is not None:
            self._wait_idle()  # a call left over from an abandoned epoch may still run
            on_epoch_end(epoch)

    def stop(self) -> None:
        """Tell every loader thread to stop, without waiting: the first half of ``close()``.

        Threads take no more work; those blocked on the full queue wake and end.
        Safe from any thread; idempotent.
        """
        try:
            with self._work:
                self._closed = True
                self._work.notify_all()
        finally:
            self._results.close()

    def close(self, timeout: float | None = None) -> None:
        """Stop every loader thread and wait for them to end.

        Threads busy in the yield function finish that call first. Idempotent.

        Args:
            timeout: the most seconds to wait for all the threads together; ``None``
                waits until each ends. Threads still running then are logged; they
                take no more work and end when their call returns.
        """
        self.stop()
        deadline = None if timeout is None else time.monotonic() + timeout
        current = threading.current_thread()
        others = [t for t in self._threads if t is not current]
        for thread in others:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        running = [t.name for t in others if t.is_alive()]
        if running:
            log.warning(
                "%s: %s still inside the yield function %.1f s after close(); they end when that call returns",
                self.name, ", ".join(running), timeout,
            )  # fmt: skip
        if self._failure is not None and not self._failure_raised:
            log.error("%s: a loader thread failed and nobody took the error", self.name, exc_info=self._failure)
            self._failure_raised = True

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        # On an error or Ctrl-C, wait only a moment: a slow call must not hold it back.
        self.close(timeout=None if exc_type is None else STOP_TIMEOUT)

    def __repr__(self) -> str:
        return (
            f"<DataLoader {self.name!r} threads={self.num_threads} max_len={self.max_len} "
            f"epoch={self._epoch}{' closed' if self._closed else ''}>"
        )

    # The consumer's side of an epoch.

    def _begin_epoch(self) -> int:
        length = self.batches_per_epoch if self._stream else epoch_length(self._yield_fn)
        if self._failure is not None:
            self._raise_failure()  # a failure in an abandoned epoch is not lost either
        with self._work:
            if self._closed:
                raise LoaderClosed(self._closed_message()) from self._failure
            if self._active:
                raise RuntimeError(
                    f"{self.name}: an iteration over this DataLoader is in progress; "
                    "finish it or close its iterator before starting another"
                )
            # Active, but nothing to hand out until the epoch's positions are set below.
            self._active = True
            self._epoch += 1
            epoch = self._epoch
        try:
            on_epoch_begin = getattr(self._yield_fn, "on_epoch_begin", None)
            if on_epoch_begin is not None:
                self._wait_idle()  # a call left over from an abandoned epoch may still run
                on_epoch_begin(epoch)
            order: Sequence[int] = range(length or 0)
            if self.shuffle:
                order = np.random.default_rng([self.seed, _SHUFFLE_KEY, epoch]).permutation(length).tolist()
            if self.num_shards > 1:
                # Every shard computed the same global order: keep this shard's positions of it.
                positions = shard_positions(length, self.num_shards, self.shard_index, self.shard_remainder)
                order = [order[p] for p in positions]
                length = len(order)
        except BaseException:
            with self._work:
                self._active = False
            raise
        with self._work:
            self._order = order
            self._length = length
            self._next = 0
            self._yielded = 0
            if not self._threads and not self._closed:
                # Under the lock, so that a close() in another thread sees every thread.
                self._start_threads()
            self._work.notify_all()
        return epoch

    def _deliver(self, epoch: int) -> Iterator[Any]:
        received = 0
        pending: dict[int, Any] = {}  # ordered mode: results that came ahead of their turn
        next_position = 0
        while True:
            # Read without the lock: only a stream's end changes _length during an
            # epoch, and that is set before the end's marker is queued, so it is
            # seen here by the time that marker has been received.
            if received == self._length:
                return
            if self._failure is not None:
                self._raise_failure()
            try:
                tag, position, batch = self._results.dequeue()
            except QueueClosed:
                tag = None  # handled outside the except, so as not to chain QueueClosed to the error
            if tag is None:
                if self._failure is not None:
                    self._raise_failure()
                raise LoaderClosed(f"{self.name} was closed during epoch {epoch}")
            if tag != epoch:
                continue  # made for an epoch that was abandoned
            received += 1
            if not self.ordered:
                if batch is not _NO_BATCH:
                    yield batch
                continue
            pending[position] = batch
            while next_position in pending:
                batch = pending.pop(next_position)
                next_position += 1
                with self._work:
                    self._yielded = next_position
                    self._work.notify()  # the window has room for one more position: one thread will do
                if batch is not _NO_BATCH:
                    yield batch

    def _end_epoch(self, completed: bool) -> None:
        with self._work:
            self._active = False
            if not completed:
                self._length = self._next  # hand out nothing more of this epoch
        if completed:
            return
        # Free the memory of results nobody will take; threads still busy with this
        # epoch add theirs later, and the next epoch drops them by their tag.
        while True:
            try:
                self._results.dequeue(timeout=0)
            except (TimeoutError, QueueClosed):
                break

    def _raise_failure(self) -> None:
        failure = self._failure
        if self._failure_raised:
            raise LoaderClosed(self._closed_message()) from failure
        self._failure_raised = True
        # Raise at once; the other threads end after their current call. Leaving the
        # with-block (or close()) then waits for them.
        self.stop()
        raise failure

    def _wait_idle(self) -> None:
        with self._idle:
            while self._busy:
                self._idle.wait()

    def _closed_message(self) -> str:
        if self._failure is not None:
            return f"{self.name} is closed: a loader thread failed with {self._failure!r}"
        return f"{self.name} is closed"

    # The loader threads' side.

    def _start_threads(self) -> None:
        for i in range(self.num_threads):
            thread = threading.Thread(target=self._work_loop, name=f"{self.name}-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.debug("%s started %d threads", self.name, self.num_threads)

    def _work_loop(self) -> None:
        call = self._yield_fn
        while True:
            task = self._take()
            if task is None:
                return
            epoch, position, index = task
            try:
                batch = call() if self._stream else call(index)
            except StopIteration as exc:
                if not self._stream:
                    error = RuntimeError(f"the yield function raised StopIteration for index {index}")
                    error.__cause__ = exc
                    self._fail(error, index)
                    return
                self._end_stream(epoch)
                batch = _NO_BATCH
            except BaseException as exc:  # handed to the consumer, which re-raises it
                self._fail(exc, index)
                return
            finally:
                self._call_done()
            try:
                self._results.enqueue((epoch, position, batch))
            except QueueClosed:
                return

    def _take(self) -> tuple[int, int, int] | None:
        """Wait for the next position to make; ``None`` means stop."""
        with self._work:
            while True:
                if self._closed:
                    return None
                if self._may_hand_out():
                    position = self._next
                    self._next += 1
                    self._busy += 1
                    index = position if self._stream else self._order[position]
                    return self._epoch, position, index
                self._work.wait()

    def _may_hand_out(self) -> bool:
        if not self._active:
            return False
        if self._length is not None and self._next >= self._length:
            return False
        return self._window is None or self._next < self._yielded + self._window

    def _call_done(self) -> None:
        with self._work:
            self._busy -= 1
            if not self._busy:
                self._idle.notify_all()

    def _end_stream(self, epoch: int) -> None:
        with self._work:
            if epoch == self._epoch:  # not a call left over from an abandoned epoch
                self._length = self._next  # positions handed out so far are all there will be

    def _fail(self, exc: BaseException, index: int) -> None:
        exc.add_note(f"raised in loader thread {threading.current_thread().name} for index {index}")
        log.debug("%s: loader thread failed", self.name, exc_info=exc)
        with self._work:
            if self._failure is None:
                self._failure = exc
            self._closed = True
            self._work.notify_all()
        self._results.close()
