"""Loader threads that call a yield function and queue its batches.

``DataLoader`` composes the pieces of a loader, each in its own module:

* the options (``loader_options``): every argument checked in one place;
* the epoch plan (``epoch_plan``): which positions an epoch has, the index made
  at each, which were done; it is what ``state_dict`` saves (``loader_state``);
* the worker pool (``worker_pool``): the threads, the count of calls in
  progress, and the watchdog for stuck calls;
* the dispatcher (``dispatch``): the threads' side: which task a free thread
  takes, the call of the yield function, and where its result goes;
* the bounded ``FIFOQueue`` between the threads and the consumer, holding
  tagged results (``results``);
* the delivery (``delivery``): the consumer's side: batches out in the epoch's
  order, results made ahead kept, abandoned ones dropped, failures settled;
* the error budget (``error_budget``): which failed calls may be skipped, and
  the manifest of those that were;
* the shutdown state (``shutdown``): closed, the first failure, and stopping;
* the telemetry (``telemetry``): call times per thread, the consumer's wait and
  the queue's fill, read by ``stats()``;
* with ``num_threads="auto"``, the thread tuner (``autotune``), which the
  consumer hands the running totals and which answers a new thread count.

What stays here is the wiring, and the start and end of each epoch: its plan
(shuffled, sharded, resumed), the epoch hooks, and handing the plan to the
dispatcher and the delivery. The loader knows nothing of what a batch is: no
video, no TensorFlow.

Every queued result is tagged with its plan's tag, so results of an epoch that was
abandoned part way are recognised and dropped, and results of the next epoch made
ahead (see ``overlap_epochs``) are kept for it.

Why this module is longer than the package's others (about 550 lines, 480 of them
the class): ``DataLoader`` is the package's public face. A fifth of it is the class
docstring, which documents its 26 arguments, and most of the rest is the contract
of each public method (iteration, ``state_dict``, ``resize``, ``stats``,
``close``); the code of each is a few lines of wiring over the modules above.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .._calls.thread_calls import yield_calls
from .._core.checks import check_int, check_timeout
from .._core.fifo_queue import FIFOQueue
from .._core.interrupt_safe import new_lock
from .._core.telemetry import LoaderStats, QueueWatch
from .._core.worker_pool import WorkerPool
from .._data.yield_function import epoch_length
from .._faults.error_budget import ErrorBudget, ErrorRecord
from .._faults.error_sink import ErrorSink
from .._faults.errors import LoaderClosed
from .autotune import Sample, ThreadTuner
from .delivery import Delivery
from .dispatch import Dispatcher
from .epoch_plan import EpochPlan
from .options import LoaderOptions
from .planner import EpochPlanner
from .sharding import Remainder
from .shutdown import Shutdown
from .state import LoadedState, loaded, saved

__all__ = ["STOP_TIMEOUT", "DataLoader", "LoaderClosed"]

log = logging.getLogger(__name__)

# After an error or Ctrl-C, how long to wait for loader threads still inside a call
# of the yield function: they take no more work and end when that call returns.
STOP_TIMEOUT = 0.5


class DataLoader:
    """Calls a yield function in ``num_threads`` threads and yields its batches.

    Iterating the loader gives one epoch: every index in ``range(len(yield_fn))``
    exactly once, whatever the number of threads. With ``batch_size``, ``yield_fn``
    is a sample dataset instead, and the loader makes the batches (see
    ``SampleBatches``): each thread makes a whole batch, and every sample is in
    exactly one batch per epoch. A yield function without
    ``__len__`` is a stream: each iteration calls it until it raises
    ``StopIteration``, ``batches_per_epoch`` times if that is given, or for ever,
    until the consumer stops. Loader threads call a stream concurrently, in no
    particular order.

    Threads start at the first iteration and stop at ``close()``; use the loader
    as a context manager. Iterate from one thread at a time.

    Args:
        yield_fn: a ``YieldFunction`` (or any callable with ``__len__`` taking an
            index), or a zero-argument callable for a stream. With ``batch_size``:
            a sample dataset (``len()`` samples, ``[index]`` or ``(index)`` one
            sample), which the loader wraps in a ``SampleBatches`` (``.yield_fn``).
        num_threads: how many loader threads call ``yield_fn`` at once; ``"auto"``
            to start with one thread per core this process may use (within
            ``min_threads`` and ``max_threads``) and add or remove threads while running,
            from what the loader measures (see ``parallel_loader.autotune``), each
            change logged; or a ``ThreadTuner`` to do so with settings of its own.
        max_len: capacity of the batch queue. At most about ``max_len + num_threads``
            batches exist at once (``max_len + max_threads`` with ``"auto"``), in
            ordered mode too.
        shuffle: visit the indices of each epoch in a new random order. For a
            batch-level yield function this reorders whole batches, not what is
            in them; with ``batch_size`` the samples are shuffled (batches then
            differ each epoch, and come in the order made).
        seed: makes the shuffled orders reproducible; each epoch still differs.
        ordered: deliver batches in index order (as ``tf.data``'s
            ``deterministic=True``); otherwise each batch comes as soon as it is ready.
            Needs a yield function with ``__len__``.
        name: prefix of the thread names.
        first_epoch: the number of the first epoch, to continue a run's sequence of
            shuffled orders (and the epochs passed to ``on_epoch_begin``/``on_epoch_end``) in a new loader.
        batches_per_epoch: for a stream only: the most calls that make one epoch.
        batch_size: batch the samples of a sample dataset, this many per batch.
        drop_last: with ``batch_size``: leave out each epoch's last, short batch.
        collate: with ``batch_size``: makes a batch from a list of samples
            (default ``default_collate``: stack arrays, recurse into tuples and dicts).
        on_error: ``"raise"`` (default): a call that raises stops the loader, and the
            exception is raised in the consumer. ``"skip"``: a call that raises an
            ``Exception`` (``MemoryError`` aside) is left out of its epoch and recorded
            in ``errors``; the epoch's other batches still come exactly once. A yield
            function that can replace a bad sample (``batch_size``'s batching,
            ``VideoDataset``, any with ``set_error_sink``, see ``error_sink``) then
            replaces it instead, so the batch still comes full, and puts the item
            in quarantine when the failure is lasting: one record per bad item.
        max_errors: the error budget: ``None`` (no limit), a count (of failed calls
            and bad items, each once), or a fraction in (0, 1) of the calls made so
            far (of the samples, counting each replaced sample, when the yield
            function replaces samples). One failure past it raises
            ``ErrorBudgetExceeded`` in the consumer.
        error_log: a file to which each failure is appended at once as a JSON line.
        call_timeout: seconds a call of the yield function may run. A longer call
            raises ``LoaderTimeout`` in the consumer, naming the thread and index
            and showing the thread's stack; with ``on_error="skip"`` it is recorded
            as a failure instead, another thread takes over, and a late result is
            dropped (it raises anyway once more than ``num_threads`` calls are stuck).
        thread_init: called in each loader thread with its number (0, 1, ...)
            before its first call, to set up per-thread state (a connection, a
            decoder). An exception there is raised in the consumer. A thread started
            after another ended (``resize``, ``num_threads="auto"``) takes the ended
            one's number, so numbers stay below the most threads running at once and
            may be given more than once.
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
        min_threads, max_threads: with ``num_threads="auto"``: the fewest threads
            (default 1) and the most (default 32).
        telemetry: time each call and the consumer's waits for ``stats()`` (a clock
            reading or two per batch); ``False`` turns that off, and ``"auto"`` with it.

    Raises:
        TypeError, ValueError: an argument is of the wrong type or out of range;
            the message says which and what is allowed.
    """

    def __init__(
        self,
        yield_fn: Callable[..., Any],
        num_threads: int | str | ThreadTuner = 4,
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
        processes: int = 0,
    ) -> None:
        o = LoaderOptions.check(
            yield_fn, num_threads, max_len, shuffle, seed, ordered, name, first_epoch, batches_per_epoch,
            batch_size=batch_size, drop_last=drop_last, collate=collate, on_error=on_error,
            max_errors=max_errors, error_log=error_log, call_timeout=call_timeout, thread_init=thread_init,
            num_shards=num_shards, shard_index=shard_index, shard_remainder=shard_remainder,
            overlap_epochs=overlap_epochs, min_threads=min_threads, max_threads=max_threads, telemetry=telemetry,
            processes=processes,
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
        self.overlap_epochs = o.overlap_epochs
        self.telemetry = o.telemetry
        self.processes = o.processes

        self._budget = ErrorBudget(o.max_errors, o.error_log)
        # A yield function that replaces bad samples itself (VideoFolder, SampleBatches) reports them here.
        self._sink = ErrorSink(self._budget, self.on_error == "skip", lambda: self._epoch, self._yield_fn)
        # The calls (yield_calls, below) hand it over: in this process, or in each worker process.
        if getattr(self._yield_fn, "set_error_sink", None) is not None:
            batch_size = getattr(self._yield_fn, "batch_size", None)
            if isinstance(batch_size, int) and batch_size > 0:
                self._budget.samples_per_call = batch_size
        # Where the calls run: in the loader threads, or with processes in worker processes (yield_calls).
        self._yield_calls = yield_calls(
            self._yield_fn, self.processes, stream=self._stream, num_threads=self.num_threads,
            thread_init=o.thread_init, report=self._sink, name=self.name,
            max_batches=self.max_len + self.processes * self.num_threads,
        )  # fmt: skip
        self._results = FIFOQueue(self.max_len)
        # One lock guards the state of the loader, the dispatcher and the pool; it is taken as
        # ``with self._lock`` and waited on through ``_interrupt_safe.wait`` (see worker_pool's docstring).
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
        self._started = False
        self._active = False  # an iteration is in progress
        self._epoch = o.first_epoch - 1
        self._completed = o.first_epoch - 1  # the last epoch delivered whole
        self._planner = EpochPlanner(
            stream=self._stream, shuffle=self.shuffle, num_shards=self.num_shards, shard_index=self.shard_index,
            shard_remainder=self.shard_remainder, batches_per_epoch=self.batches_per_epoch,
        )  # fmt: skip
        self._loaded: LoadedState | None = None  # from load_state_dict, until the first epoch's plan takes it

    # Public API, for the consuming thread.

    @property
    def epoch(self) -> int:
        """The number of the epoch being iterated, or of the last one; ``first_epoch - 1`` before the first."""
        return self._epoch

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
        """The failures recorded so far: skipped calls, stuck calls, and what the yield function reported."""
        return list(self._budget.records)

    @property
    def tuner(self) -> ThreadTuner | None:
        """The thread tuner with ``num_threads="auto"`` (its ``changes`` list what it did), else ``None``."""
        return self._tuner

    def stats(self) -> LoaderStats:
        """A snapshot of what the loader measured since its first iteration (see ``telemetry``).

        Safe from any thread; approximate while the loader runs. With
        ``telemetry=False`` the call times and waits stay at zero.
        """
        return LoaderStats.collect(
            self._watch,
            self._results,
            self._pool.call_times(),
            self.max_len,
            time.perf_counter(),
            threads=self._pool.size,
            busy=self._pool.busy,
            errors=len(self._budget.records),
        )

    def resize(self, num_threads: int) -> None:
        """Run ``num_threads`` loader threads from now on: start more, or retire some.

        A thread retired finishes its call and hands its batch on first, so every
        index still comes exactly once, in order in ordered mode. Before the first
        iteration it sets how many start. Any thread may call it; the tuner of
        ``num_threads="auto"`` calls it from the consumer's.

        Raises:
            TypeError, ValueError: ``num_threads`` is not an int of at least 1.
        """
        num_threads = check_int("num_threads", num_threads, minimum=1)
        if not self._yield_calls.resizable and num_threads != self.num_threads:
            raise ValueError(f"{self.name}: the worker processes run num_threads={self.num_threads} each, fixed")
        with self._lock:
            if self._shutdown.closed:
                return
            self.num_threads = num_threads
            self._dispatcher.set_threads(self._yield_calls.width(num_threads))
            started = self._started
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
            LoaderClosed: the loader is closed, or was closed by another thread
                during the epoch.
            RuntimeError: another iteration over this loader is in progress.
            ErrorBudgetExceeded: more calls failed than ``max_errors`` allows.
            LoaderTimeout: a call ran longer than ``call_timeout``.
            BaseException: whatever the yield function raised in a loader thread,
                re-raised here with that thread's traceback; the loader is then
                stopped, and ``close()`` waits for the threads still in a call.
        """
        plan = self._begin_epoch()
        completed = False
        try:
            yield from self._delivery.batches(plan)
            completed = True
        finally:
            self._end_epoch(completed)
        self._completed = plan.epoch
        on_epoch_end = self._yield_calls.hook("on_epoch_end")
        if on_epoch_end is not None:
            if not self.overlap_epochs:
                self._dispatcher.wait_idle()  # a call left over from an abandoned epoch may still run
            on_epoch_end(plan.epoch)

    def state_dict(self) -> dict[str, Any]:
        """Where the loader is: enough for ``load_state_dict`` to go on from here in a new loader.

        A JSON-serialisable dict: the epoch, which of its positions were delivered
        (or skipped), the seed, and the error counts. Batches made but not yet
        delivered are not in it: a resumed loader makes them again. After an epoch
        delivered whole, the state is the start of the next one; after one
        abandoned part way (a ``break``, an error, Ctrl-C), it is that epoch with
        what it delivered, so a checkpoint taken in an ``except`` block resumes
        where the training stopped. Call it from the consuming thread.
        """
        plan = self._dispatcher.plan
        if self._loaded is not None:  # loaded, not iterated yet: pass it on unchanged
            epoch, done = self._epoch + 1, self._loaded.done
        elif plan is None or plan.epoch <= self._completed:
            epoch, done = self._completed + 1, 0 if self._stream else []
        else:
            epoch, done = plan.epoch, plan.done_count if self._stream else plan.done_ranges()
        return saved(
            epoch=epoch,
            done=done,
            length=None if self._stream else len(self),
            seed=self.seed,
            shuffle=self._shuffled,
            shard=[self.shard_index, self.num_shards],
            errors=self._delivery.done_errors + self._sink.reported,
            calls=self._delivery.done_calls,
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from ``state`` (from ``state_dict``): call it on a new loader before iterating.

        The next iteration delivers exactly the positions of the saved epoch that
        were not delivered, in the same order in ordered mode; later epochs go on
        as if never interrupted. The thread count and queue length may differ from
        the saving loader's. Without a ``seed`` of its own the loader takes the
        state's, so shuffled orders match.

        Raises:
            RuntimeError: the loader has already been iterated.
            ValueError: the state does not fit this loader (another length,
                seed, or shuffle setting), or is malformed.
        """
        if self._started or self._dispatcher.plan is not None or self._active:
            raise RuntimeError(f"{self.name}: load_state_dict must be called before the first iteration")
        state = loaded(
            state,
            length=None if self._stream else len(self),
            shuffle=self._shuffled,
            shard=[self.shard_index, self.num_shards],
            seed=self.seed if self._seed_given else None,
        )
        self._loaded = state
        if not self._seed_given:
            self.seed = state.seed
            if self._samples is not None:
                self._samples.seed = state.seed
        self._epoch = self._completed = state.epoch - 1
        delivery = self._delivery
        delivery.errors_before = delivery.done_errors = state.errors
        delivery.calls = delivery.done_calls = state.calls

    @property
    def _shuffled(self) -> bool:
        """Whether epochs are shuffled: the batches, or with ``batch_size`` the samples."""
        return self.shuffle or (self._samples is not None and self._samples.shuffle)

    def stop(self) -> None:
        """Tell every loader thread to stop, without waiting: the first half of ``close()``.

        Threads take no more work; those blocked on the full queue wake and end.
        Safe from any thread; idempotent.
        """
        self._shutdown.stop()

    def close(self, timeout: float | None = None) -> None:
        """Stop every loader thread and wait for them to end.

        Threads busy in the yield function finish that call first; with a
        ``call_timeout``, a call is not waited for past it. Idempotent.

        Args:
            timeout: the most seconds to wait for all the threads together; ``None``
                waits until each ends. Threads still running then are logged; they
                take no more work and end when their call returns.
        """
        timeout = check_timeout(timeout)
        try:
            self.stop()
        except BaseException:  # Ctrl-C cut it short: every thread must still be told before raising
            self.stop()
            raise
        try:
            running = self._pool.join(timeout)
        finally:  # worker processes end even when a Ctrl-C cuts the wait short
            self._yield_calls.close()
        if running:
            log.warning(
                "%s: %s still inside the yield function after close(); they end when that call returns",
                self.name, ", ".join(running),
            )  # fmt: skip
        self._shutdown.log_untaken()

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
            f"epoch={self._epoch}{' closed' if self._shutdown.closed else ''}>"
        )

    # The start and end of an epoch (the consumer's thread).

    def _begin_epoch(self) -> EpochPlan:
        length = self.batches_per_epoch if self._stream else epoch_length(self._yield_fn)
        shutdown, dispatcher = self._shutdown, self._dispatcher
        if shutdown.failure is not None:
            shutdown.raise_failure()  # a failure in an abandoned epoch is not lost either
        with self._lock:
            if shutdown.closed:
                raise LoaderClosed(shutdown.message()) from shutdown.failure
            if self._active:
                raise RuntimeError(
                    f"{self.name}: an iteration over this DataLoader is in progress; "
                    "finish it or close its iterator before starting another"
                )
            # Active, but nothing to hand out until the epoch's slots are set below.
            self._active = True
            dispatcher.slots = dispatcher.next = 0
            self._epoch += 1
            epoch = self._epoch
        try:
            on_epoch_begin = self._yield_calls.hook("on_epoch_begin")
            if on_epoch_begin is not None:
                if not self.overlap_epochs:  # with get_batch, calls of another epoch may run meanwhile
                    dispatcher.wait_idle()  # a call left over from an abandoned epoch may still run
                on_epoch_begin(epoch)
            ahead = dispatcher.ahead
            if ahead is not None and (ahead.epoch, ahead.length) != (epoch, self._planner.length(length)):
                ahead = None  # made for another epoch, or the data's length changed
            if ahead is None:
                # The first plan made takes the loaded state's done positions.
                done, self._loaded = (self._loaded.resume if self._loaded else None), None
                plan = self._planner.plan(epoch, length, self.seed, done)
            else:
                plan = ahead
            following = self._planner.plan(epoch + 1, length, self.seed) if self.overlap_epochs else None
        except BaseException:
            with self._lock:
                self._active = False
            raise
        if self._watch.started is None:
            self._watch.started = time.perf_counter()
        if self._tuner is not None:
            self._tuner.restart(self._tuner_sample())
        slots = self._planner.slots(plan)
        with self._lock:
            dispatcher.hand_out(plan, slots, following, reused=ahead is not None)
            if not self._started and not shutdown.closed:
                # Under the lock, so that a close() in another thread sees every thread.
                self._started = True
                self._pool.start(self._yield_calls.width(self.num_threads))
            self._pool.notify(all_threads=True)
        if ahead is None:
            self._delivery.early.clear()
        return plan

    def _end_epoch(self, completed: bool) -> None:
        with self._lock:
            self._active = False
            if not completed:
                self._dispatcher.close_epoch()  # hand out nothing more of this epoch
        if not completed:
            self._delivery.drain()

    def _tuner_sample(self) -> Sample:
        times = self._pool.call_times().values()
        calls, call_seconds = sum(t.count for t in times), sum(t.total for t in times)
        return self._tuner.sample(self._watch.batches, self._results.waited, calls, call_seconds)  # type: ignore[union-attr]

    def _tune(self, tuner: ThreadTuner) -> None:
        """Hand the tuner the totals now; resize the pool if it answers a new count. Consumer's thread."""
        target = tuner.observe(self._tuner_sample(), self.num_threads)
        if target is not None:
            self.resize(target)
