"""The start and end of each epoch of a loader, and where the loader stands for ``state_dict``.

``Epochs.run`` is one iteration of a ``DataLoader``: one epoch, in the consumer's
thread. It makes the epoch's plan, or takes the one made ahead, and calls the
epoch hooks. It hands the plan to the dispatcher and the delivery, and starts
the loader threads at the first epoch. It counts the epochs, and keeps a loaded
state until the first plan takes it. See :doc:`/guide/long_runs`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .._calls.thread_calls import YieldCalls
from .._core.fifo_queue import FIFOQueue
from .._core.telemetry import QueueWatch
from .._core.worker_pool import WorkerPool
from .._data.yield_function import epoch_length
from .._faults.errors import LoaderClosed
from .autotune import ThreadTuner
from .delivery import Delivery
from .dispatch import Dispatcher
from .epoch_plan import EpochPlan
from .planner import EpochPlanner
from .shutdown import Shutdown
from .state import LoadedState

__all__ = ["Epochs"]


class Epochs:
    """Runs a loader's epochs, one per iteration, and counts them. Consumer's thread.

    Args:
        name: the loader's name, for messages.
        lock: the loader's lock.
        yield_fn: the yield function, asked for each epoch's length.
        calls: where the calls run; gives the epoch hooks.
        planner: makes each epoch's plan.
        dispatcher: the loader threads' side, handed each plan.
        delivery: the consumer's side, which yields the batches.
        pool: the loader threads, started at the first epoch.
        shutdown: the loader's closed state and failure.
        results: the queue, for the tuner's samples.
        watch: the consumer's telemetry.
        tuner: with ``num_threads="auto"``, the tuner, restarted at each epoch.
        stream: whether ``yield_fn`` is a stream.
        batches_per_epoch: a stream's epoch length, or ``None``.
        overlap_epochs: whether the next epoch's plan is made ahead.
        first_epoch: the number of the first epoch.
        threads: the loader threads to start, read under the lock at the first epoch.

    Attributes:
        epoch: the epoch being iterated, or the last one.
        completed: the last epoch delivered whole.
        active: an iteration is in progress (under the lock).
        started: the loader threads were started (under the lock).
        loaded: the state from ``load_state_dict``, until the first plan takes it.
    """

    def __init__(
        self,
        name: str,
        lock: threading.RLock,
        yield_fn: Any,
        calls: YieldCalls,
        *,
        planner: EpochPlanner,
        dispatcher: Dispatcher,
        delivery: Delivery,
        pool: WorkerPool,
        shutdown: Shutdown,
        results: FIFOQueue,
        watch: QueueWatch,
        tuner: ThreadTuner | None,
        stream: bool,
        batches_per_epoch: int | None,
        overlap_epochs: bool,
        first_epoch: int,
        threads: Callable[[], int],
    ) -> None:
        self.name = name
        self._lock = lock
        self._yield_fn = yield_fn
        self._calls = calls
        self._planner = planner
        self._dispatcher = dispatcher
        self._delivery = delivery
        self._pool = pool
        self._shutdown = shutdown
        self._results = results
        self._watch = watch
        self._tuner = tuner
        self._stream = stream
        self._batches_per_epoch = batches_per_epoch
        self._overlap = overlap_epochs
        self._threads = threads
        self.epoch = first_epoch - 1
        self.completed = first_epoch - 1
        self.active = False
        self.started = False
        self.loaded: LoadedState | None = None

    def run(self, seed: int) -> Iterator[Any]:
        """Run one epoch and yield its batches; see ``DataLoader.__iter__`` for what it raises.

        Args:
            seed: the seed of the epoch's shuffled order.
        """
        plan = self._begin(seed)
        completed = False
        try:
            yield from self._delivery.batches(plan)
            completed = True
        finally:
            self._end(completed)
        self.completed = plan.epoch
        on_epoch_end = self._calls.hook("on_epoch_end")
        if on_epoch_end is not None:
            if not self._overlap:
                self._dispatcher.wait_idle()  # a call left over from an abandoned epoch may still run
            on_epoch_end(plan.epoch)

    @property
    def begun(self) -> bool:
        """Whether the loader was iterated, or is being iterated now."""
        return self.started or self._dispatcher.plan is not None or self.active

    def position(self) -> tuple[int, Any]:
        """Where the loader stands: the epoch to go on with, and what of it was done.

        What was done is a list of ranges of positions, or a count for a stream.
        """
        plan = self._dispatcher.plan
        if self.loaded is not None:  # loaded, not iterated yet: pass it on unchanged
            return self.epoch + 1, self.loaded.done
        if plan is None or plan.epoch <= self.completed:
            return self.completed + 1, 0 if self._stream else []
        return plan.epoch, plan.done_count if self._stream else plan.done_ranges()

    def position_after(self, batches: int) -> tuple[int, Any]:
        """Where the loader would stand had only the first ``batches`` batches of this epoch's run been delivered."""
        plan = self._dispatcher.plan
        if self.loaded is not None or plan is None:
            return self.position()
        done = plan.done_after(batches)
        if done == [[0, plan.length]]:  # the whole epoch: the next one comes next
            return plan.epoch + 1, []
        return plan.epoch, done

    def load(self, state: LoadedState) -> None:
        """Go on from ``state``: its epoch comes next, without the positions it says were done."""
        self.loaded = state
        self.epoch = self.completed = state.epoch - 1
        self._delivery.load(state)

    def _begin(self, seed: int) -> EpochPlan:
        length = self._batches_per_epoch if self._stream else epoch_length(self._yield_fn)
        shutdown, dispatcher, planner = self._shutdown, self._dispatcher, self._planner
        if shutdown.failure is not None:
            shutdown.raise_failure()  # a failure in an abandoned epoch is not lost either
        with self._lock:
            if shutdown.closed:
                raise LoaderClosed(shutdown.message()) from shutdown.failure
            if self.active:
                raise RuntimeError(
                    f"{self.name}: an iteration over this DataLoader is in progress; "
                    "finish it or close its iterator before starting another"
                )
            # Active, but nothing to hand out until the epoch's slots are set below.
            self.active = True
            dispatcher.slots = dispatcher.next = 0
            self.epoch += 1
            epoch = self.epoch
        try:
            on_epoch_begin = self._calls.hook("on_epoch_begin")
            if on_epoch_begin is not None:
                if not self._overlap:  # with get_batch, calls of another epoch may run meanwhile
                    dispatcher.wait_idle()  # a call left over from an abandoned epoch may still run
                on_epoch_begin(epoch)
            ahead = dispatcher.ahead
            if ahead is not None and (ahead.epoch, ahead.length) != (epoch, planner.length(length)):
                ahead = None  # made for another epoch, or the data's length changed
            if ahead is None:
                # The first plan made takes the loaded state's done positions.
                done, self.loaded = (self.loaded.resume if self.loaded else None), None
                plan = planner.plan(epoch, length, seed, done)
            else:
                plan = ahead
            following = planner.plan(epoch + 1, length, seed) if self._overlap else None
        except BaseException:
            with self._lock:
                self.active = False
            raise
        if self._watch.started is None:
            self._watch.started = time.perf_counter()
        if self._tuner is not None:
            self._tuner.restart(
                self._tuner.measure(self._pool.call_times().values(), self._watch.batches, self._results.waited)
            )
        slots = planner.slots(plan)
        with self._lock:
            dispatcher.hand_out(plan, slots, following, reused=ahead is not None)
            if not self.started and not shutdown.closed:
                # Under the lock, so that a close() in another thread sees every thread.
                self.started = True
                self._pool.start(self._threads())
            self._pool.notify(all_threads=True)
        if ahead is None:
            self._delivery.early.clear()
        return plan

    def _end(self, completed: bool) -> None:
        with self._lock:
            self.active = False
            if not completed:
                self._dispatcher.close_epoch()  # hand out nothing more of this epoch
        if not completed:
            self._delivery.drain()
