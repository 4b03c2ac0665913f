"""The loader threads' side: which task a free thread takes next, the call, and where its result goes.

``Dispatcher`` does three things for a free thread:

* it hands out the slots of the current epoch's plan, within the ordered window.
  Then it hands out up to ``max_len`` slots of the next epoch's plan, made ahead;
* it makes the call through the ``YieldCalls`` object given at construction
  (``thread_calls``), in the loader thread or in a worker process;
* it queues the tagged result (``results``) for the consumer, with how many
  samples the yield function replaced in the call. The consumer counts them
  against the budget when it delivers the batch. A failure that stops the loader goes to
  ``Shutdown`` instead.

It also answers the watchdog about a stuck call: skip it under the budget, defer
it when it was made ahead, or stop the loader.

The pool (``worker_pool``) calls ``take`` with the loader's lock held, and
``make`` and ``put`` outside it. The consumer sets what there is to hand out
(``hand_out``, ``close_epoch``, ``release``) under the same lock. The dispatcher
knows nothing of what a batch is, nor of the consumer's order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .._calls.thread_calls import YieldCalls
from .._core.fifo_queue import FIFOQueue, QueueClosed
from .._core.worker_pool import CallSlot, WorkerPool
from .._data.yield_function import call_of
from .._faults.error_budget import ErrorBudget, error_context
from .._faults.errors import LoaderClosed, LoaderTimeout
from .._faults.results import NEVER_SKIPPED, NO_BATCH, Failed, Task
from .epoch_plan import EpochPlan
from .shutdown import Shutdown

__all__ = ["Dispatcher"]

log = logging.getLogger(__name__)

# Frames a stuck call's stack leaves out above the yield function: the call's own, the same for every call.
_CALL_FILES = (__file__, call_of.__code__.co_filename)


class Dispatcher:
    """Hands tasks to the loader threads, makes them, and queues their results.

    Args:
        name: the loader's name, for messages.
        yield_fn: what the threads call.
        stream: whether ``yield_fn`` is a stream (no ``__len__``).
        lock: the loader's lock, which guards the hand-out state below.
        results: the queue to the consumer.
        budget: records the failures that ``on_error="skip"`` skips.
        shutdown: where a failure that stops the loader goes.
        calls: where the calls run (``LoaderOptions.calls``): in the loader threads, or in worker processes.
        on_error: ``"raise"`` or ``"skip"``.
        max_len: the queue's capacity: also how many slots of the next epoch may be made ahead.
        ordered: whether slots are handed out within a window after the last one delivered.
        num_threads: the loader threads (all processes' with ``processes``), for the window and for how
            many calls may be stuck.
        call_timeout: for the watchdog's message.

    Set ``pool`` once the pool exists.
    """

    def __init__(
        self,
        name: str,
        yield_fn: Any,
        stream: bool,
        lock: threading.RLock,
        results: FIFOQueue,
        budget: ErrorBudget,
        shutdown: Shutdown,
        calls: YieldCalls,
        *,
        on_error: str,
        max_len: int,
        ordered: bool,
        num_threads: int,
        call_timeout: float | None,
    ) -> None:
        self.name = name
        self.pool: WorkerPool = None  # type: ignore[assignment]  # set by the owner
        self._yield_fn = yield_fn
        self._calls = calls
        self._stream = stream
        self._lock = lock
        self._results = results
        self._budget = budget
        self._shutdown = shutdown
        self._on_error = on_error
        self._max_len = max_len
        self._ordered = ordered
        self._call_timeout = call_timeout
        # What there is to hand out, under the lock: the current plan's slots up to
        # ``slots`` (None while a stream runs with no end), and once those are all
        # out, up to max_len slots of ``ahead``, the next epoch's plan.
        self.plan: EpochPlan | None = None
        self.slots: int | None = 0
        self.next = 0  # next slot to hand out
        self.released = 0  # slots delivered, in ordered mode
        self.ahead: EpochPlan | None = None
        self.ahead_next = 0  # next slot of the ahead plan to hand out
        self.num_threads = num_threads
        self.window: int | None = None
        self.set_threads(num_threads)

    # The consumer's settings (lock held).

    def set_threads(self, num_threads: int) -> None:
        """The thread count from now on: ordered mode hands out at most ``max_len + num_threads`` slots ahead."""
        self.num_threads = num_threads
        if self._ordered:
            self.window = self._max_len + num_threads

    def hand_out(self, plan: EpochPlan, slots: int | None, following: EpochPlan | None, reused: bool) -> None:
        """Hand out ``plan``'s first ``slots``; then slots of ``following``, made ahead. Lock held.

        With ``reused``, ``plan`` is the one made ahead, and the slots threads took of it count as handed out.
        """
        self.next = self.ahead_next if reused else 0
        self.plan = plan
        self.slots = slots
        self.released = 0
        self.ahead, self.ahead_next = following, 0

    def close_epoch(self) -> None:
        """Hand out nothing more of the current epoch. Lock held."""
        self.slots = self.next

    def release(self, released: int) -> int:
        """Ordered mode: the window moves on to ``released``; one waiting thread may take a slot."""
        with self._lock:
            self.released = released
            self.pool.notify()
        return released

    def made_ahead(self, tag: int) -> bool:
        """Whether a task of plan ``tag`` is of the next epoch, made ahead (any thread; a stale read says no)."""
        ahead = self.ahead
        return ahead is not None and tag == ahead.tag

    def wait_idle(self, match: Callable[[Any], bool] | None = None) -> None:
        """Wait for calls in progress (those whose task ``match`` accepts) to end. Consumer's thread.

        Raises:
            LoaderClosed: the loader closed meanwhile (the failure, if one closed it).
        """
        if not self.pool.wait_idle(give_up=lambda: self._shutdown.closed, match=match):
            if self._shutdown.failure is not None:
                self._shutdown.raise_failure()
            raise LoaderClosed(f"{self.name} was closed while waiting for calls of the yield function to end")

    # The pool's callbacks.

    def take(self) -> Task | None:
        """The next task, ``(tag, epoch, slot, position, index)``, or ``None``. Called with the lock held."""
        slot = self.next
        if self.slots is not None and slot >= self.slots:
            return self._take_ahead()
        if self.window is not None and slot >= self.released + self.window:
            return None
        self.next = slot + 1
        plan: EpochPlan = self.plan  # type: ignore[assignment]
        if self._stream:
            return plan.tag, plan.epoch, slot, slot, slot
        position, index = plan.task(slot)
        return plan.tag, plan.epoch, slot, position, index

    def _take_ahead(self) -> Task | None:
        """A slot of the next epoch's plan, up to ``max_len`` of them ahead, or ``None``. Lock held."""
        ahead = self.ahead
        slot = self.ahead_next
        if ahead is None or self._shutdown.closed or slot >= min(ahead.slots or 0, self._max_len):
            return None
        self.ahead_next = slot + 1
        position, index = ahead.task(slot)
        return ahead.tag, ahead.epoch, slot, position, index

    def make(self, task: Task) -> Any:
        """Call the yield function for ``task``: its batch, ``NO_BATCH`` at a stream's end, or ``Failed``."""
        self._budget.take_replaced()  # drop any left by a call the watchdog abandoned in this thread
        try:
            return self._calls.call(task)
        except StopIteration as exc:
            if self._stream:
                self._end_stream(task[0])
                return NO_BATCH
            error = RuntimeError(f"the yield function raised StopIteration for index {task[4]}")
            error.__cause__ = exc
            return self._failed(error, task)
        except BaseException as exc:
            return self._failed(exc, task)

    def put(self, task: Task, result: Any) -> bool:
        """Queue ``result`` for the consumer; False (the thread ends) when it stops the loader or the queue closed.

        Called by the thread that made it, right after ``make``: the result carries the samples replaced in it.
        """
        replaced = self._budget.take_replaced()
        if type(result) is Failed:
            replaced = 0  # the whole call is lost: its record counts it
            if result.record is None and not result.deferred:
                self._shutdown.fail(result.exc)
                return False
        try:
            self._results.enqueue((task[0], task[2], task[3], result, replaced))
        except QueueClosed:
            return False
        return True

    def on_stuck(self, slot: CallSlot) -> None:
        """The watchdog saw a call past ``call_timeout`` (runs in the watchdog thread)."""
        _, epoch, _, _, index = slot.task
        where = None if self._stream else index
        started = slot.started
        elapsed = time.monotonic() - started if started is not None else float(self._call_timeout or 0)
        error = LoaderTimeout(
            f"{self.name}: the call of the yield function for index {where} in thread {slot.thread.name} "
            f"has run {elapsed:.1f} s, past call_timeout={self._call_timeout} s. Its stack now:\n"
            + self._calls.stuck(slot, skip=_CALL_FILES),
            thread=slot.thread.name,
            index=where,
            elapsed=elapsed,
        )
        stuck = len(self.pool.stuck())
        if stuck <= self.num_threads and self.made_ahead(slot.task[0]):
            self.pool.replace(slot)
            self.put(slot.task, Failed(error, None, epoch, where, deferred=True))
            return
        if self._on_error != "skip" or stuck > self.num_threads:
            if self._on_error == "skip":
                error.add_note(f"{stuck} calls are stuck at once, more than num_threads={self.num_threads}")
            self._shutdown.fail(error)
            return
        record = self._budget.record(epoch, where, error, error_context(self._yield_fn, where, error))
        log.warning("%s: skipped index %s of epoch %d: %s", self.name, where, epoch, str(error).split("\n")[0])
        self.pool.replace(slot)
        self.put(slot.task, Failed(error, record))

    def _failed(self, exc: BaseException, task: Task) -> Failed:
        tag, epoch, _, _, index = task
        where = None if self._stream else index
        exc.add_note(f"raised in loader thread {threading.current_thread().name} for index {where}")
        if not isinstance(exc, Exception) or isinstance(exc, NEVER_SKIPPED):
            return Failed(exc, None)  # stops the loader now, whichever epoch it was for
        if self.made_ahead(tag):
            return Failed(exc, None, epoch, where, deferred=True)
        if self._on_error == "skip":
            record = self._budget.record(epoch, where, exc, error_context(self._yield_fn, where, exc))
            log.warning("%s: skipped index %s of epoch %d: %r", self.name, where, epoch, exc)
            return Failed(exc, record)
        return Failed(exc, None)

    def _end_stream(self, tag: int) -> None:
        with self._lock:
            if self.plan is not None and tag == self.plan.tag:  # not a call left over from an abandoned epoch
                self.slots = self.next  # slots handed out so far are all there will be
