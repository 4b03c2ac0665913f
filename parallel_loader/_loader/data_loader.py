"""``DataLoader``: loader threads that call a yield function and queue its batches.

``DataLoader`` wires the parts of a loader together, each in its own module. The
options are checked in ``options``, and each epoch starts and ends in ``epochs``.
The threads' side is ``dispatch``, the consumer's side ``delivery``, and stopping
is ``shutdown``. The loader knows nothing of what a batch is: no video, no
TensorFlow. See :doc:`/guide/threads_and_processes`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

from .._calls.ray_workers import RayWorkers
from .._core.checks import check_int, check_timeout
from .._core.fifo_queue import FIFOQueue
from .._core.interrupt_safe import new_lock
from .._core.telemetry import LoaderStats, QueueWatch
from .._core.worker_pool import WorkerPool
from .._data.yield_function import epoch_length
from .._faults.error_budget import ErrorBudget, ErrorRecord
from .._faults.error_sink import ErrorSink, samples_per_call
from .autotune import ThreadTuner
from .delivery import Delivery
from .dispatch import Dispatcher
from .epochs import Epochs
from .options import LoaderOptions
from .planner import EpochPlanner
from .sharding import Remainder
from .shutdown import Shutdown
from .state import loaded, saved

__all__ = ["STOP_TIMEOUT", "DataLoader"]

# After an error or Ctrl-C, how long to wait for loader threads still inside a call
# of the yield function: they take no more work and end when that call returns.
STOP_TIMEOUT = 0.5


class DataLoader:
    """Calls a yield function in loader threads and yields its batches, one epoch per iteration.

    An epoch gives every index in ``range(len(yield_fn))`` exactly once, whatever the
    number of threads. A yield function without ``__len__`` is a stream: it is called
    until it raises ``StopIteration``. Threads start at the first iteration and stop
    at ``close()``. Use the loader as a context manager, and iterate it from one
    thread at a time.

    Args:
        yield_fn: a ``YieldFunction``, a callable with ``__len__`` taking an index, or a
            zero-argument callable (a stream). With ``batch_size``: a sample dataset.
        num_threads: how many loader threads call ``yield_fn`` at once (default 4). ``"auto"``,
            or a ``ThreadTuner``, changes the count while the loader runs. With processes, the
            threads of each worker process.
        max_len: the capacity of the batch queue; about ``max_len + num_threads`` batches exist at once.
        shuffle: visit each epoch's indices in a new random order (with ``batch_size``, the samples).
        seed: makes the shuffled orders reproducible; each epoch's order still differs.
        ordered: deliver the batches in index order; needs a yield function with ``__len__``.
        name: the prefix of the thread names, also used in messages.
        first_epoch: the number of the first epoch, to go on with a run's shuffled orders.
        batches_per_epoch: for a stream only: the most calls that make one epoch.
        batch_size: batch a sample dataset's samples, this many per batch (see ``SampleBatches``).
        drop_last: with ``batch_size``: leave out each epoch's last, short batch.
        collate: with ``batch_size``: makes a batch from a list of samples (default ``default_collate``).
        on_error: ``"raise"`` (default): a failed call stops the loader and is raised in the
            consumer. ``"skip"``: the call is left out of its epoch and recorded in ``errors``.
        max_errors: the error budget: ``None`` (no limit), a count, or a fraction in (0, 1) of
            the calls made. One failure past it raises ``ErrorBudgetExceeded``.
        error_log: a file to which each failure is appended at once, as a JSON line.
        call_timeout: the most seconds one call may run. A longer call raises
            ``LoaderTimeout``, or is recorded as a failure under ``on_error="skip"``.
        thread_init: called in each loader thread with its number, before its first call.
        num_shards: how many workers share each epoch; each delivers its own shard of it.
        shard_index: this worker's shard, ``0 <= shard_index < num_shards``.
        shard_remainder: ``"pad"`` or ``"drop"``: how shards even out an epoch whose
            length is not a multiple of ``num_shards`` (times ``replicas``).
        replicas: the replicas one step feeds from consecutive batches; each epoch's length is kept a multiple of it.
        overlap_epochs: make the next epoch's first batches while the current one ends,
            when the yield function allows it.
        min_threads: with ``num_threads="auto"``: the fewest threads (default 1).
        max_threads: with ``num_threads="auto"``: the most threads (default 32).
        telemetry: time each call and the consumer's waits, for ``stats()``; ``"auto"`` needs it.
        processes: make the calls in this many worker processes, each running
            ``num_threads`` threads; 0 (default) makes them in this process. ``"auto"`` sizes both
            from the host's cores, then splits a worker that its GIL holds back, measured as it runs.
        workers: make the calls in Ray actors (``parallel_loader.ray.RayWorkers``), not with ``processes``.

    Raises:
        TypeError, ValueError: an argument is of the wrong type or out of range;
            the message says which and what is allowed.

    See :doc:`/guide/threads_and_processes` and :doc:`/guide/ray_cluster`.
    """

    def __init__(
        self,
        yield_fn: Callable[..., Any],
        num_threads: int | str | ThreadTuner | None = None,
        max_len: int = 8,
        shuffle: bool = False,
        seed: int | None = None,
        ordered: bool = False,
        name: str = "DataLoader",
        first_epoch: int = 0,
        batches_per_epoch: int | None = None,
        *,
        batch_size: int | None = None,
        drop_last: bool = False,
        collate: Callable[[list[Any]], Any] | None = None,
        on_error: str = "raise",
        max_errors: int | float | None = None,
        error_log: str | os.PathLike[str] | None = None,
        call_timeout: float | None = None,
        thread_init: Callable[[int], Any] | None = None,
        num_shards: int = 1,
        shard_index: int = 0,
        shard_remainder: Remainder = "pad",
        overlap_epochs: bool = True,
        min_threads: int | None = None,
        max_threads: int | None = None,
        telemetry: bool = True,
        processes: int | Literal["auto"] = 0,
        replicas: int = 1,
        workers: RayWorkers | None = None,
    ) -> None:
        o = LoaderOptions.check(
            yield_fn, num_threads, max_len, shuffle, seed, ordered, name, first_epoch, batches_per_epoch,
            batch_size=batch_size, drop_last=drop_last, collate=collate, on_error=on_error,
            max_errors=max_errors, error_log=error_log, call_timeout=call_timeout, thread_init=thread_init,
            num_shards=num_shards, shard_index=shard_index, shard_remainder=shard_remainder,
            overlap_epochs=overlap_epochs, min_threads=min_threads, max_threads=max_threads, telemetry=telemetry,
            processes=processes, replicas=replicas, workers=workers,
        )  # fmt: skip
        self._yield_fn = o.yield_fn
        self._samples = o.samples
        self._stream = o.stream
        self._seed_given = o.seed_given
        self._tuner = o.tuner
        self.num_threads = o.num_threads
        self.max_len = o.max_len
        self.shuffle = o.shuffle
        self.seed = o.seed
        self.ordered = o.ordered
        self.name = o.name
        self.batches_per_epoch = o.batches_per_epoch
        self.on_error = o.on_error
        self.call_timeout = o.call_timeout
        self.num_shards = o.num_shards
        self.shard_index = o.shard_index
        self.shard_remainder = o.shard_remainder
        self.replicas = o.replicas
        self.overlap_epochs = o.overlap_epochs
        self.telemetry = o.telemetry
        self.processes = o.processes
        self.workers = o.workers

        self._budget = ErrorBudget(o.max_errors, o.error_log)
        # A yield function that replaces bad samples itself (VideoFolder, SampleBatches) reports them here.
        self._sink = ErrorSink(self._budget, self.on_error == "skip", lambda: self._epochs.epoch, self._yield_fn)
        self._budget.samples_per_call = samples_per_call(self._yield_fn)
        # Where the calls run: in the loader threads, or in worker processes. They hand over the sink.
        self._yield_calls = o.calls(report=self._sink)
        self._results = FIFOQueue(self.max_len)
        # One lock guards the state of the loader, the dispatcher and the pool; it is taken as
        # ``with self._lock`` and waited on through ``interrupt_safe.wait`` (see worker_pool's docstring).
        self._lock = new_lock()
        self._shutdown = Shutdown(self.name, self._lock, self._results)
        self._dispatcher = Dispatcher(
            self.name, self._yield_fn, self._stream, self._lock, self._results, self._budget, self._shutdown,
            self._yield_calls, on_error=self.on_error, max_len=self.max_len, ordered=self.ordered,
            num_threads=self._yield_calls.width(self.num_threads), call_timeout=self.call_timeout,
        )  # fmt: skip
        d = self._dispatcher
        self._pool = WorkerPool(
            self.name, self._lock, take=d.take, make=d.make, put=d.put, fail=self._shutdown.fail,
            thread_init=self._yield_calls.thread_init, call_timeout=self.call_timeout, on_stuck=d.on_stuck,
        )  # fmt: skip
        self._pool.timed = self.telemetry
        d.pool = self._shutdown.threads = self._pool
        self._watch = QueueWatch()
        self._delivery = Delivery(
            self.name, self._results, d, self._shutdown, self._budget, self._yield_fn,
            ordered=self.ordered, on_error=self.on_error, watch=self._watch if self.telemetry else None,
            tuner=self._tuner, tune=self._tune,
        )  # fmt: skip
        self._planner = EpochPlanner(
            stream=self._stream, shuffle=self.shuffle, num_shards=self.num_shards, shard_index=self.shard_index,
            shard_remainder=self.shard_remainder, batches_per_epoch=self.batches_per_epoch, replicas=self.replicas,
        )  # fmt: skip
        self._epochs = Epochs(
            self.name, self._lock, self._yield_fn, self._yield_calls, planner=self._planner, dispatcher=d,
            delivery=self._delivery, pool=self._pool, shutdown=self._shutdown, results=self._results,
            watch=self._watch, tuner=self._tuner, stream=self._stream, batches_per_epoch=self.batches_per_epoch,
            overlap_epochs=self.overlap_epochs, first_epoch=o.first_epoch,
            threads=lambda: self._yield_calls.width(self.num_threads),
        )  # fmt: skip

    # Public API, for the consuming thread.

    @property
    def epoch(self) -> int:
        """The number of the epoch being iterated, or of the last one; ``first_epoch - 1`` before the first."""
        return self._epochs.epoch

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called or a loader thread failed."""
        return self._shutdown.closed

    @property
    def yield_fn(self) -> Callable[..., Any]:
        """The yield function the threads call."""
        return self._yield_fn

    @property
    def threads(self) -> tuple[threading.Thread, ...]:
        """The loader threads, the last started under each number (none before the first iteration)."""
        return self._pool.threads

    @property
    def errors(self) -> list[ErrorRecord]:
        """The failures recorded so far (skipped calls, stuck calls, and what the yield function reported)."""
        return list(self._budget.records)

    @property
    def tuner(self) -> ThreadTuner | None:
        """The thread tuner with ``num_threads="auto"`` (its ``changes`` list what it did), else ``None``."""
        return self._tuner

    def stats(self) -> LoaderStats:
        """A snapshot of what the loader measured since its first iteration.

        Safe from any thread; approximate while the loader runs. With
        ``telemetry=False`` the call times and waits stay at zero.
        See :doc:`/guide/telemetry`.
        """
        return LoaderStats.collect(
            self._watch, self._results, self._pool.call_times(), self.max_len, time.perf_counter(),
            threads=self._pool.size, busy=self._pool.busy, errors=len(self._budget.records),
            remote=self._yield_calls.times(),
        )  # fmt: skip

    def resize(self, num_threads: int) -> None:
        """Run ``num_threads`` loader threads from now on: start more, or retire some.

        A retired thread hands on the batch it is making first, so every index
        still comes exactly once. Before the first iteration it sets how many
        threads start. Safe from any thread.

        Raises:
            TypeError, ValueError: ``num_threads`` is not an int of at least 1,
                or differs from the fixed count of a loader with processes or workers.
        """
        num_threads = check_int("num_threads", num_threads, minimum=1)
        if not self._yield_calls.resizable and num_threads != self.num_threads:
            raise ValueError(f"{self.name}: with processes or workers, the calls in progress are fixed at the start")
        with self._lock:
            if self._shutdown.closed:
                return
            self.num_threads = num_threads
            self._dispatcher.set_threads(self._yield_calls.width(num_threads))
            started = self._epochs.started
        if started:
            self._pool.resize(self._yield_calls.width(num_threads))

    def __len__(self) -> int:
        """Batches per epoch (this shard's), as the yield function says now."""
        if self._stream:
            raise TypeError("a DataLoader over a stream (a yield function without __len__) has no length")
        return self._planner.length(epoch_length(self._yield_fn))  # type: ignore[return-value]

    def __bool__(self) -> bool:
        return True  # a loader is a loader, whatever len() says (a stream has none)

    def __iter__(self) -> Iterator[Any]:
        """Run one epoch and yield its batches.

        Raises:
            LoaderClosed: the loader is closed, or was closed by another thread during the epoch.
            RuntimeError: another iteration over this loader is in progress.
            ErrorBudgetExceeded: more calls failed than ``max_errors`` allows.
            LoaderTimeout: a call ran longer than ``call_timeout``.
            BaseException: what the yield function raised in a loader thread, with that
                thread's traceback. The loader is then stopped.
        """
        yield from self._epochs.run(self.seed)

    def state_dict(self, batches: int | None = None) -> dict[str, Any]:
        """Where the loader is: enough for ``load_state_dict`` to go on from here in a new loader.

        Call it from the consuming thread. See :doc:`/guide/long_runs`.

        Args:
            batches: count only the first ``batches`` delivered in this run of the epoch: those
                trained on, for a consumer that prefetches (tf.data, Keras). By default, every one delivered.

        Returns:
            A JSON-serialisable dict with the epoch, the positions of it delivered
            or skipped, the seed, and the error counts.
        """
        epoch, done = self._epochs.position() if batches is None else self._epochs.position_after(batches)
        return saved(
            epoch=epoch,
            done=done,
            length=None if self._stream else len(self),
            seed=self.seed,
            shuffle=self._shuffled,
            shard=[self.shard_index, self.num_shards],
            errors=self._delivery.done_errors + self._sink.reported,
            calls=self._delivery.done_calls,
            lost=self._delivery.lost_samples(),
            first_errors=self._budget.first_quoted(),
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (from ``state_dict``): call it on a new loader before iterating.

        The next iteration delivers the positions of the saved epoch that were not
        delivered. Without a ``seed`` of its own, the loader takes the state's.
        See :doc:`/guide/long_runs`.

        Raises:
            RuntimeError: the loader has already been iterated.
            ValueError: the state is malformed, or does not fit this loader (another
                length, seed, shard or shuffle setting).
        """
        if self._epochs.begun:
            raise RuntimeError(f"{self.name}: load_state_dict must be called before the first iteration")
        state = loaded(
            state,
            length=None if self._stream else len(self),
            shuffle=self._shuffled,
            shard=[self.shard_index, self.num_shards],
            seed=self.seed if self._seed_given else None,
        )
        self._epochs.load(state)
        if not self._seed_given:
            self.seed = state.seed
            if self._samples is not None:
                self._samples.seed = state.seed

    @property
    def _shuffled(self) -> bool:
        """Whether epochs are shuffled (the batches, or with ``batch_size`` the samples)."""
        return self.shuffle or (self._samples is not None and self._samples.shuffle)

    def stop(self) -> None:
        """Tell every loader thread to stop, without waiting: the first half of ``close()``.

        Threads take no more work; those blocked on the full queue wake and end.
        Safe from any thread; idempotent.
        """
        self._shutdown.stop()

    def close(self, timeout: float | None = None) -> None:
        """Stop every loader thread and wait for them to end. Idempotent.

        A thread busy in the yield function finishes that call first, or its
        ``call_timeout`` runs out.

        Args:
            timeout: the most seconds to wait for all the threads together; ``None``
                waits until each ends. Threads still running then are logged.
        """
        self._shutdown.close(check_timeout(timeout), self._yield_calls)

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        # On an error or Ctrl-C, wait only a moment: a slow call must not hold it back.
        try:
            self.close(timeout=None if exc_type is None else STOP_TIMEOUT)
        except BaseException:  # Ctrl-C as close() began: every thread must still be told to stop
            self.stop()
            raise

    def __repr__(self) -> str:
        return (
            f"<DataLoader {self.name!r} threads={self.num_threads} max_len={self.max_len} "
            f"epoch={self._epochs.epoch}{' closed' if self._shutdown.closed else ''}>"
        )

    def _tune(self, tuner: ThreadTuner) -> None:
        """Hand the tuner the totals now; resize the pool if it answers a new count. Consumer's thread."""
        sample = tuner.measure(self._pool.call_times().values(), self._watch.batches, self._results.waited)
        target = tuner.observe(sample, self.num_threads)
        if target is not None:
            self.resize(target)
