"""Loader threads that call a yield function and queue its batches.

``DataLoader`` composes the pieces of a loader, each in its own module:

* the epoch plan (``epoch_plan``): which positions an epoch has, the index made
  at each, which were done; it is what ``state_dict`` saves;
* the worker pool (``worker_pool``): the threads, the count of calls in
  progress, and the watchdog for stuck calls;
* the calls (``yield_calls``): where a thread's call of the yield function runs,
  in the thread itself or, with ``processes``, in a worker process
  (``worker_processes``), chosen once at construction;
* the error budget (``error_budget``): which failed calls may be skipped, and
  the manifest of those that were;
* the bounded ``FIFOQueue`` between the threads and the consumer;
* the telemetry (``telemetry``): call times per thread, the consumer's wait and
  the queue's fill, read by ``stats()``;
* with ``num_threads="auto"``, the thread tuner (``autotune``), which the
  consumer hands the running totals and which answers a new thread count.

What stays here is the consumer's side: starting and ending epochs, handing
slots of the plan to the threads, ordered reassembly, and raising failures.
The loader knows nothing of what a batch is: no video, no TensorFlow.

Every queued result is tagged with its plan's tag, so results of an epoch that was
abandoned part way are recognised and dropped, and results of the next epoch made
ahead (see ``overlap_epochs``) are kept for it.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ._checks import check_bool, check_callable, check_int, check_timeout
from ._interrupt_safe import new_lock
from .autotune import Sample, ThreadTuner
from .batching import SampleBatches
from .epoch_plan import EpochPlan, shuffled_order
from .error_budget import ErrorBudget, ErrorRecord, error_context
from .errors import LoaderClosed, LoaderTimeout
from .fifo_queue import FIFOQueue, QueueClosed
from .sharding import Remainder, check_shard, shard_length, shard_positions
from .telemetry import LoaderStats, QueueWatch
from .worker_pool import CallSlot, WorkerPool
from .yield_calls import yield_calls
from .yield_function import epoch_length, has_epoch_hooks

__all__ = ["STOP_TIMEOUT", "DataLoader", "LoaderClosed"]

log = logging.getLogger(__name__)

# After an error or Ctrl-C, how long to wait for loader threads still inside a call
# of the yield function: they take no more work and end when that call returns.
STOP_TIMEOUT = 0.5

# The version of the dict that state_dict() returns.
_STATE_FORMAT = 1

# Stands in the result queue for a stream call that raised StopIteration, so that
# every slot handed out is accounted for. Never None: None can be a batch.
_NO_BATCH = object()
# What a loader thread makes: (plan tag, epoch, slot, position, index).
_Task = tuple[int, int, int, int, int]

# Exceptions that on_error="skip" never skips.
_NEVER_SKIPPED = (MemoryError,)


class _Failed:
    """A call that failed. ``record`` is set when it is skipped, ``None`` when it stops the loader.

    A call made ahead for the next epoch is ``deferred``: what its failure means
    (a record against the budget, or the error raised) is settled when its epoch
    delivers it, so an epoch that never runs neither counts nor raises it.
    """

    __slots__ = ("deferred", "epoch", "exc", "index", "record", "thread")

    def __init__(
        self,
        exc: BaseException,
        record: ErrorRecord | None,
        epoch: int = 0,
        index: int | None = None,
        deferred: bool = False,
    ) -> None:
        self.exc = exc
        self.record = record
        self.epoch = epoch
        self.index = index
        self.deferred = deferred
        self.thread = threading.current_thread().name  # where it failed, for a deferred record


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
            in ``errors``; the epoch's other batches still come exactly once.
        max_errors: the error budget: ``None`` (no limit), a count, or a fraction in
            (0, 1) of the calls made so far. One failure past it raises
            ``ErrorBudgetExceeded`` in the consumer.
        error_log: a file to which each failure is appended at once as a JSON line.
        call_timeout: seconds a call of the yield function may run. A longer call
            raises ``LoaderTimeout`` in the consumer, naming the thread and index
            and showing the thread's stack; with ``on_error="skip"`` it is recorded
            as a failure instead, another thread takes over, and a late result is
            dropped (it raises anyway once more than ``num_threads`` calls are stuck).
            With ``processes``, the stuck call's worker process is killed and replaced.
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
        processes: make the calls in this many worker processes, each running
            ``num_threads`` threads (see ``parallel_loader.worker_processes``), for
            yield functions that hold the GIL; batches come back through shared
            memory. The yield function and ``thread_init`` must be picklable, and
            ``thread_init`` is called in each worker thread. 0 (default): threads of
            this process only.

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
        shuffle, ordered = check_bool("shuffle", shuffle), check_bool("ordered", ordered)
        self._seed_given = seed is not None
        self._samples: SampleBatches | None = None
        num_shards, shard_index, shard_remainder = check_shard(num_shards, shard_index, shard_remainder)
        if num_shards > 1 and shuffle and seed is None:
            raise ValueError(
                "shuffle=True with num_shards > 1 needs a seed, the same on every shard: "
                "each draws the epoch's global order from it"
            )
        if batch_size is not None:
            # The adapter shuffles the samples, so the batches need no other order than the one they are made in.
            yield_fn = SampleBatches(
                yield_fn, batch_size, drop_last=drop_last, collate=collate, shuffle=shuffle, seed=seed
            )
            self._samples = yield_fn
            shuffle, seed = False, yield_fn.seed
        elif check_bool("drop_last", drop_last) or collate is not None:
            raise ValueError("drop_last and collate batch samples: pass batch_size too")
        self.telemetry = check_bool("telemetry", telemetry)
        self._tuner = _tuner(num_threads, min_threads, max_threads, self.telemetry)
        if self._tuner is not None:
            self._tuner.name = name
            num_threads = self._tuner.initial
        num_threads = check_int("num_threads", num_threads, minimum=1)
        max_len = check_int("max_len", max_len, minimum=1)
        first_epoch = check_int("first_epoch", first_epoch, minimum=0)
        if seed is not None:
            seed = check_int("seed", seed, minimum=0)
        if on_error not in ("raise", "skip"):
            raise ValueError(f'on_error must be "raise" or "skip", got {on_error!r}')
        call_timeout = check_timeout(call_timeout, "call_timeout")
        if call_timeout == 0:
            raise ValueError("call_timeout must be more than 0 seconds, or None for no watchdog")
        check_callable("thread_init", thread_init)
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__} {name!r}")
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
        # get_batch(index, epoch): calls that name their epoch, so two epochs' calls may run at once.
        self._get_batch: Callable[[int, int], Any] | None = getattr(yield_fn, "get_batch", None)
        self.overlap_epochs = (
            check_bool("overlap_epochs", overlap_epochs)
            and not self._stream
            and (self._get_batch is not None or not has_epoch_hooks(yield_fn))
        )
        self.num_threads = num_threads
        self.max_len = max_len
        self.shuffle = shuffle
        # With no seed, draw one now, so that each epoch's order still differs from the last.
        self.seed = seed if seed is not None else int(np.random.SeedSequence().entropy % 2**63)
        self.ordered = ordered
        self.name = name
        self.on_error = on_error
        self.call_timeout = call_timeout
        self._budget = ErrorBudget(max_errors, error_log)
        self.processes = check_int("processes", processes, minimum=0)
        if self.processes and self._tuner is not None:
            raise ValueError('num_threads="auto" tunes the threads of this process: with processes, give an int')
        self._yield_calls = yield_calls(
            yield_fn,
            self.processes,
            stream=self._stream,
            num_threads=num_threads,
            thread_init=thread_init,
            report=self._report_skip,
            name=name,
            max_batches=max_len + self.processes * num_threads,
        )
        self.num_shards = num_shards
        self.shard_index = shard_index
        self.shard_remainder = shard_remainder
        self._results = FIFOQueue(max_len)
        # One lock guards the state below and the pool's; it is taken as ``with self._lock``
        # and waited on through ``_interrupt_safe.wait`` (see worker_pool's docstring).
        self._lock = new_lock()
        self._watch = QueueWatch()
        self._pool = WorkerPool(
            name,
            self._lock,
            take=self._take,
            make=self._make,
            put=self._put,
            fail=self._fail,
            thread_init=self._yield_calls.thread_init,
            call_timeout=call_timeout,
            on_stuck=self._on_stuck,
        )
        self._pool.timed = self.telemetry
        self._started = False
        self._closed = False
        self._failure: BaseException | None = None
        self._failure_raised = False
        self._active = False  # an iteration is in progress
        self._epoch = first_epoch - 1
        self._plan: EpochPlan | None = None  # the current or last epoch's
        self._tags = itertools.count(1)  # each plan's tag, for its results
        # The next epoch's plan, made at the start of this one when epochs overlap: once
        # this epoch's slots are all handed out, threads make up to max_len of its
        # slots ahead. Its results wait in the queue or, once the consumer has read
        # them during this epoch, in _early.
        self._ahead: EpochPlan | None = None
        self._ahead_next = 0  # next slot of the ahead plan to hand out
        self._early: list[tuple[int, int, int, Any]] = []
        self._completed = first_epoch - 1  # the last epoch delivered whole
        self._resume: list[int] | int | None = None  # done positions (a count for a stream) from load_state_dict
        self._loaded_done: Any = None  # the same, as the state gave it, until the first epoch starts
        self._slots: int | None = 0  # slots this epoch; None while a stream runs with no end
        self._next = 0  # next slot to hand out
        self._released = 0  # slots delivered, in ordered mode
        self._window = max_len + self._yield_calls.width(num_threads) if ordered else None
        self._calls = 0  # results the consumer received, for a fractional error budget
        self._errors_before = 0  # failures recorded before a load_state_dict
        # What state_dict counts: calls done (delivered or skipped) and the failures
        # among them, the loaded state's included. A result made but not delivered
        # is made again after a resume, so its failure must not be counted twice.
        self._done_calls = 0
        self._done_errors = 0
        self._reported = 0  # failures the yield function reported through the error sink

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
            if self._closed:
                return
            self.num_threads = num_threads
            if self.ordered:
                self._window = self.max_len + self._yield_calls.width(num_threads)
            started = self._started
        if started:
            self._pool.resize(self._yield_calls.width(num_threads))

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
            ErrorBudgetExceeded: more calls failed than ``max_errors`` allows.
            LoaderTimeout: a call ran longer than ``call_timeout``.
            BaseException: whatever the yield function raised in a loader thread,
                re-raised here with that thread's traceback; the loader is then
                stopped, and ``close()`` waits for the threads still in a call.
        """
        plan = self._begin_epoch()
        completed = False
        try:
            yield from self._deliver(plan)
            completed = True
        finally:
            self._end_epoch(completed)
        self._completed = plan.epoch
        on_epoch_end = self._yield_calls.hook("on_epoch_end")
        if on_epoch_end is not None:
            if not self.overlap_epochs:
                self._wait_idle()  # a call left over from an abandoned epoch may still run
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
        plan = self._plan
        if self._loaded_done is not None:  # loaded, not iterated yet: pass it on unchanged
            epoch, done = self._epoch + 1, self._loaded_done
        elif plan is None or plan.epoch <= self._completed:
            epoch, done = self._completed + 1, 0 if self._stream else []
        else:
            epoch, done = plan.epoch, plan.done_count if self._stream else plan.done_ranges()
        return {
            "format": _STATE_FORMAT,
            "epoch": epoch,
            "done": done,
            "length": None if self._stream else len(self),
            "seed": self.seed,
            "shuffle": self._shuffled,
            "shard": [self.shard_index, self.num_shards],
            "errors": self._done_errors + self._reported,
            "calls": self._done_calls,
        }

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
        if self._started or self._plan is not None or self._active:
            raise RuntimeError(f"{self.name}: load_state_dict must be called before the first iteration")
        if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
            raise ValueError(f"not a DataLoader state of format {_STATE_FORMAT}: {state!r:.200}")
        try:
            epoch = check_int("the state's epoch", state["epoch"], minimum=0)
            saved_seed = check_int("the state's seed", state["seed"], minimum=0)
            errors = check_int("the state's errors", state.get("errors", 0), minimum=0)
            calls = check_int("the state's calls", state.get("calls", 0), minimum=0)
            done = state["done"]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed DataLoader state ({exc}): {state!r:.200}") from None
        if state.get("shuffle", False) != self._shuffled:
            raise ValueError(
                f"the state was saved with shuffle={state.get('shuffle')}, this loader has {self._shuffled}"
            )
        shard = [self.shard_index, self.num_shards]
        if state.get("shard", [0, 1]) != shard:
            raise ValueError(
                f"the state was saved by shard {state.get('shard')} (index, count), this loader is shard {shard}: "
                "each shard resumes from its own state"
            )
        if self._shuffled and self._seed_given and saved_seed != self.seed:
            raise ValueError(
                f"the state was saved with seed={saved_seed}, this loader has seed={self.seed}: "
                "the shuffled orders would differ; pass the same seed, or none"
            )
        if self._stream:
            self._resume = check_int("the state's done count", done, minimum=0)
        else:
            length = len(self)
            if state.get("length") != length:
                raise ValueError(
                    f"the state was saved for {state.get('length')} batches per epoch, the yield function "
                    f"now has {length}: it is not the same data"
                )
            self._resume = EpochPlan.positions(done, length)
        self._loaded_done = done
        if not self._seed_given:
            self.seed = saved_seed
            if self._samples is not None:
                self._samples.seed = saved_seed
        self._epoch = epoch - 1
        self._completed = epoch - 1
        self._errors_before = self._done_errors = errors
        self._calls = self._done_calls = calls

    @property
    def _shuffled(self) -> bool:
        """Whether epochs are shuffled: the batches, or with ``batch_size`` the samples."""
        return self.shuffle or (self._samples is not None and self._samples.shuffle)

    def stop(self) -> None:
        """Tell every loader thread to stop, without waiting: the first half of ``close()``.

        Threads take no more work; those blocked on the full queue wake and end.
        Safe from any thread; idempotent.
        """
        try:
            with self._lock:
                self._closed = True
        finally:
            try:
                self._pool.stop()
            finally:
                self._results.close()

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
        if self._failure is not None and not self._failure_raised:
            log.error("%s: a loader thread failed and nobody took the error", self.name, exc_info=self._failure)
            self._failure_raised = True

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
            f"epoch={self._epoch}{' closed' if self._closed else ''}>"
        )

    # The consumer's side of an epoch.

    def _begin_epoch(self) -> EpochPlan:
        length = self.batches_per_epoch if self._stream else epoch_length(self._yield_fn)
        if self._failure is not None:
            self._raise_failure()  # a failure in an abandoned epoch is not lost either
        with self._lock:
            if self._closed:
                raise LoaderClosed(self._closed_message()) from self._failure
            if self._active:
                raise RuntimeError(
                    f"{self.name}: an iteration over this DataLoader is in progress; "
                    "finish it or close its iterator before starting another"
                )
            # Active, but nothing to hand out until the epoch's slots are set below.
            self._active = True
            self._slots = self._next = 0
            self._epoch += 1
            epoch = self._epoch
        try:
            on_epoch_begin = self._yield_calls.hook("on_epoch_begin")
            if on_epoch_begin is not None:
                if not self.overlap_epochs:  # with get_batch, calls of another epoch may run meanwhile
                    self._wait_idle()  # a call left over from an abandoned epoch may still run
                on_epoch_begin(epoch)
            ahead = self._ahead
            if ahead is not None and (ahead.epoch, ahead.length) != (epoch, self._planned_length(length)):
                ahead = None  # made for another epoch, or the data's length changed
            plan = ahead or self._make_plan(epoch, length)
            following = self._make_plan(epoch + 1, length, resume=False) if self.overlap_epochs else None
        except BaseException:
            with self._lock:
                self._active = False
            raise
        if self._watch.started is None:
            self._watch.started = time.perf_counter()
        if self._tuner is not None:
            self._tuner.restart(self._tuner_sample())
        with self._lock:
            # Slots of the plan made ahead that threads took already count as handed out.
            self._next = self._ahead_next if ahead is not None else 0
            self._plan = plan
            self._slots = plan.slots if not self._stream else self._stream_slots(plan)
            self._released = 0
            self._ahead, self._ahead_next = following, 0
            if not self._started and not self._closed:
                # Under the lock, so that a close() in another thread sees every thread.
                self._started = True
                self._pool.start(self._yield_calls.width(self.num_threads))
            self._pool.notify(all_threads=True)
        if ahead is None:
            self._early.clear()
        return plan

    def _make_plan(self, epoch: int, length: int | None, resume: bool = True) -> EpochPlan:
        """Epoch ``epoch``'s plan; with ``resume``, the first one made takes the loaded state's done positions."""
        done: Any = None
        if resume:
            done, self._resume, self._loaded_done = self._resume, None, None
        tag = next(self._tags)
        if self._stream:
            plan = EpochPlan(epoch, None, tag=tag)
            for _ in range(done or 0):
                plan.mark_done(0)
            return plan
        order: Sequence[int] | None = shuffled_order(self.seed, epoch, length) if self.shuffle and length else None
        if self.num_shards > 1:
            # Every shard computed the same global order: keep this shard's positions of it.
            positions = shard_positions(length, self.num_shards, self.shard_index, self.shard_remainder)
            order = [order[p] for p in positions] if order is not None else positions
            length = len(order)
        return EpochPlan(epoch, length, order, done=done or (), tag=tag)

    def _planned_length(self, length: int | None) -> int | None:
        """The number of positions a plan of an epoch of ``length`` has (this shard's)."""
        if length is None or self.num_shards == 1:
            return length
        return shard_length(length, self.num_shards, self.shard_remainder)

    def _stream_slots(self, plan: EpochPlan) -> int | None:
        if self.batches_per_epoch is None:
            return None
        return max(0, self.batches_per_epoch - plan.done_count)

    def _deliver(self, plan: EpochPlan) -> Iterator[Any]:
        epoch = plan.epoch
        early, self._early = self._early[::-1], []  # results of this plan read during the last epoch; pop() is FIFO
        received = 0
        pending: dict[int, tuple[int, Any]] = {}  # ordered mode: results that came ahead of their turn
        next_slot = 0
        budget = self._budget
        errors_seen = len(budget.records)
        results = self._results
        watch = self._watch if self.telemetry else None
        tuner = self._tuner
        while True:
            # Read without the lock: only a stream's end changes _slots during an
            # epoch, and that is set before the end's marker is queued, so it is
            # seen here by the time that marker has been received.
            if received == self._slots:
                break
            if self._failure is not None:
                self._raise_failure()
            if early:
                tag, slot, position, batch = early.pop()
            else:
                try:
                    tag, slot, position, batch = results.dequeue()
                except QueueClosed:
                    tag = None  # handled outside the except, so as not to chain QueueClosed to the error
            if tag is None:
                if self._failure is not None:
                    self._raise_failure()
                raise LoaderClosed(f"{self.name} was closed during epoch {epoch}")
            if tag != plan.tag:
                self._keep_if_ahead((tag, slot, position, batch))  # else made for an epoch that was abandoned
                continue
            received += 1
            self._calls += 1
            if len(budget.records) != errors_seen:
                errors_seen = len(budget.records)
                self._check_budget()
            if self.ordered:
                pending[slot] = (position, batch)
                if next_slot not in pending:
                    continue
                position, batch = pending.pop(next_slot)
                next_slot = self._release(next_slot + 1)
            while True:
                plan.mark_done(position)
                self._done_calls += 1
                if type(batch) is _Failed:
                    if batch.deferred:
                        self._settle(batch)
                    self._done_errors += 1
                elif batch is not _NO_BATCH:
                    if watch is not None:
                        watch.batches += 1
                        if tuner is not None and tuner.due(watch.batches):
                            self._tune(tuner)
                    yield batch
                if not self.ordered or next_slot not in pending:
                    break
                position, batch = pending.pop(next_slot)
                next_slot = self._release(next_slot + 1)
        # Every slot is in: calls still running belong to abandoned epochs, or to the
        # next one, made ahead. Wait for the former, so that a failure of theirs is
        # raised here and not lost.
        ahead = self._ahead
        self._wait_idle(None if ahead is None else lambda task: task[0] != ahead.tag)
        if self._failure is not None:
            self._raise_failure()

    def _tuner_sample(self) -> Sample:
        times = self._pool.call_times().values()
        watch = self._watch
        calls, call_seconds = sum(t.count for t in times), sum(t.total for t in times)
        return self._tuner.sample(watch.batches, self._results.waited, calls, call_seconds)  # type: ignore[union-attr]

    def _tune(self, tuner: ThreadTuner) -> None:
        """Hand the tuner the totals now; resize the pool if it answers a new count. Consumer's thread."""
        target = tuner.observe(self._tuner_sample(), self.num_threads)
        if target is not None:
            self.resize(target)

    def _release(self, released: int) -> int:
        """Ordered mode: the window moves on to ``released``; one waiting thread may take a slot."""
        with self._lock:
            self._released = released
            self._pool.notify()
        return released

    def _end_epoch(self, completed: bool) -> None:
        with self._lock:
            self._active = False
            if not completed:
                self._slots = self._next  # hand out nothing more of this epoch
        if completed:
            return
        # Free the memory of results nobody will take; threads still busy with this
        # epoch add theirs later, and the next epoch drops them by their tag.
        while True:
            try:
                self._keep_if_ahead(self._results.dequeue(timeout=0))
            except (TimeoutError, QueueClosed):
                break

    def _keep_if_ahead(self, result: tuple[int, int, int, Any]) -> None:
        """Keep a result of the next epoch, made ahead, for it; drop any other. Consuming thread."""
        if self._ahead is not None and result[0] == self._ahead.tag:
            self._early.append(result)

    def _check_budget(self) -> None:
        try:
            self._budget.check(self._errors_before + len(self._budget.records), self._calls)
        except BaseException:
            self.stop()
            raise

    def _raise_failure(self) -> None:
        failure = self._failure
        if self._failure_raised:
            raise LoaderClosed(self._closed_message()) from failure
        self._failure_raised = True
        # Raise at once; the other threads end after their current call. Leaving the
        # with-block (or close()) then waits for them.
        self.stop()
        raise failure

    def _wait_idle(self, match: Callable[[Any], bool] | None = None) -> None:
        """Wait for calls in progress (those whose task ``match`` accepts) to end.

        Raises ``LoaderClosed`` if the loader closes meanwhile.
        """
        if not self._pool.wait_idle(give_up=lambda: self._closed, match=match):
            if self._failure is not None:
                self._raise_failure()
            raise LoaderClosed(f"{self.name} was closed while waiting for calls of the yield function to end")

    def _closed_message(self) -> str:
        if self._failure is not None:
            return f"{self.name} is closed: a loader thread failed with {self._failure!r}"
        return f"{self.name} is closed"

    # The loader threads' side (called by the pool).

    def _take(self) -> _Task | None:
        """The next task, ``(tag, epoch, slot, position, index)``, or ``None``. Called with the lock held."""
        slot = self._next
        if self._slots is not None and slot >= self._slots:
            return self._take_ahead()
        if self._window is not None and slot >= self._released + self._window:
            return None
        self._next = slot + 1
        plan: EpochPlan = self._plan  # type: ignore[assignment]
        if self._stream:
            return plan.tag, plan.epoch, slot, slot, slot
        position, index = plan.task(slot)
        return plan.tag, plan.epoch, slot, position, index

    def _take_ahead(self) -> _Task | None:
        """A slot of the next epoch's plan, up to ``max_len`` of them ahead, or ``None``. Lock held."""
        ahead = self._ahead
        slot = self._ahead_next
        if ahead is None or self._closed or slot >= min(ahead.slots or 0, self.max_len):
            return None
        self._ahead_next = slot + 1
        position, index = ahead.task(slot)
        return ahead.tag, ahead.epoch, slot, position, index

    def _make(self, task: _Task) -> Any:
        tag, _, _, _, index = task
        try:
            return self._yield_calls.call(task)
        except StopIteration as exc:
            if self._stream:
                self._end_stream(tag)
                return _NO_BATCH
            error = RuntimeError(f"the yield function raised StopIteration for index {index}")
            error.__cause__ = exc
            return self._failed(error, task)
        except BaseException as exc:
            return self._failed(exc, task)

    def _failed(self, exc: BaseException, task: _Task) -> _Failed:
        tag, epoch, _, _, index = task
        where = None if self._stream else index
        exc.add_note(f"raised in loader thread {threading.current_thread().name} for index {where}")
        if not isinstance(exc, Exception) or isinstance(exc, _NEVER_SKIPPED):
            return _Failed(exc, None)  # stops the loader now, whichever epoch it was for
        if self._made_ahead(tag):
            return _Failed(exc, None, epoch, where, deferred=True)
        if self.on_error == "skip":
            record = self._budget.record(epoch, where, exc, error_context(self._yield_fn, where, exc))
            log.warning("%s: skipped index %s of epoch %d: %r", self.name, where, epoch, exc)
            return _Failed(exc, record)
        return _Failed(exc, None)

    def _made_ahead(self, tag: int) -> bool:
        """Whether a task of plan ``tag`` is of the next epoch, made ahead (any thread; a stale read says no)."""
        ahead = self._ahead
        return ahead is not None and tag == ahead.tag

    def _settle(self, failed: _Failed) -> None:
        """A deferred failure, now delivered in its epoch: record it against the budget, or raise it."""
        if self.on_error != "skip":
            self._fail(failed.exc)
            self._raise_failure()
        context = error_context(self._yield_fn, failed.index, failed.exc)
        self._budget.record(failed.epoch, failed.index, failed.exc, context, thread=failed.thread)
        log.warning(
            "%s: skipped index %s of epoch %d: %s",
            self.name,
            failed.index,
            failed.epoch,
            str(failed.exc).split("\n")[0],
        )

    def _put(self, task: _Task, result: Any) -> bool:
        if type(result) is _Failed and result.record is None and not result.deferred:
            self._fail(result.exc)
            return False
        try:
            self._results.enqueue((task[0], task[2], task[3], result))
        except QueueClosed:
            return False
        return True

    def _end_stream(self, tag: int) -> None:
        with self._lock:
            if self._plan is not None and tag == self._plan.tag:  # not a call left over from an abandoned epoch
                self._slots = self._next  # slots handed out so far are all there will be

    def _fail(self, exc: BaseException) -> None:
        log.debug("%s: loader thread failed", self.name, exc_info=exc)
        with self._lock:
            if self._failure is None:
                self._failure = exc
            self._closed = True
        self._pool.stop()
        self._results.close()

    def _on_stuck(self, slot: CallSlot) -> None:
        """The watchdog saw a call past ``call_timeout`` (runs in the watchdog thread)."""
        _, epoch, _, _, index = slot.task
        where = None if self._stream else index
        started = slot.started
        elapsed = time.monotonic() - started if started is not None else float(self.call_timeout or 0)
        error = LoaderTimeout(
            f"{self.name}: the call of the yield function for index {where} in thread {slot.thread.name} "
            f"has run {elapsed:.1f} s, past call_timeout={self.call_timeout} s. Its stack now:\n"
            + self._yield_calls.stuck(slot, skip=(__file__,)),
            thread=slot.thread.name,
            index=where,
            elapsed=elapsed,
        )
        stuck = len(self._pool.stuck())
        width = self._yield_calls.width(self.num_threads)
        if stuck <= width and self._made_ahead(slot.task[0]):
            self._pool.replace(slot)
            self._put(slot.task, _Failed(error, None, epoch, where, deferred=True))
            return
        if self.on_error != "skip" or stuck > width:
            if self.on_error == "skip":
                error.add_note(
                    f"{stuck} calls are stuck at once, more than num_threads={self.num_threads}"
                    + (f" in each of {self.processes} processes" if self.processes else "")
                )
            self._fail(error)
            return
        record = self._budget.record(epoch, where, error, error_context(self._yield_fn, where, error))
        log.warning("%s: skipped index %s of epoch %d: %s", self.name, where, epoch, str(error).split("\n")[0])
        self._pool.replace(slot)
        self._put(slot.task, _Failed(error, record))

    def _report_skip(self, index: int | None, exc: BaseException, context: dict[str, Any] | None = None) -> None:
        """The error sink given to a yield function that skips bad data itself. Any thread."""
        self._budget.record(self._epoch, index, exc, context or error_context(self._yield_fn, index, exc))
        with self._lock:
            self._reported += 1


def _tuner(
    num_threads: int | str | ThreadTuner,
    min_threads: int | None,
    max_threads: int | None,
    telemetry: bool,
) -> ThreadTuner | None:
    """The tuner that ``num_threads`` asks for, or ``None`` for a fixed count; checks the bounds go with it."""
    if isinstance(num_threads, str):
        if num_threads != "auto":
            raise TypeError(f'num_threads must be an int or "auto", got {num_threads!r}')
        tuner = ThreadTuner(1 if min_threads is None else min_threads, max_threads)
    elif isinstance(num_threads, ThreadTuner):
        tuner = num_threads
    else:
        tuner = None
    if (tuner is None or isinstance(num_threads, ThreadTuner)) and (min_threads, max_threads) != (None, None):
        raise ValueError('min_threads and max_threads bound num_threads="auto"; pass num_threads="auto" with them')
    if tuner is not None and not telemetry:
        raise ValueError('num_threads="auto" tunes from the telemetry: it needs telemetry=True')
    return tuner
