"""The consumer's side of an epoch on its own: tagged results in, batches out in the epoch's order.

No loader threads here: each test queues the results a loader thread would have
made, then reads the epoch through ``Delivery.batches``.
"""

from __future__ import annotations

import threading

import pytest

from parallel_loader._calls.thread_calls import ThreadCalls
from parallel_loader._core.fifo_queue import FIFOQueue
from parallel_loader._core.interrupt_safe import new_lock
from parallel_loader._faults.error_budget import ErrorBudget
from parallel_loader._faults.errors import ErrorBudgetExceeded, LoaderClosed
from parallel_loader._faults.results import NO_BATCH, Failed
from parallel_loader._loader.delivery import Delivery
from parallel_loader._loader.dispatch import Dispatcher
from parallel_loader._loader.epoch_plan import EpochPlan
from parallel_loader._loader.shutdown import Shutdown


class IdlePool:
    """Stands in for the worker pool: no call is ever in progress; counts the wake-ups."""

    def __init__(self):
        self.notified = 0
        self.stopped = False

    def notify(self, all_threads=False):
        self.notified += 1

    def wait_idle(self, give_up, match=None):
        return True

    def stop(self):
        self.stopped = True


class Parts:
    """A delivery wired to a queue, a dispatcher and a shutdown, as a loader wires them."""

    def __init__(self, ordered=False, on_error="raise", max_errors=None, capacity=32):
        self.results = FIFOQueue(capacity)
        lock = new_lock()
        self.pool = IdlePool()
        self.budget = ErrorBudget(max_errors)
        self.shutdown = Shutdown("test", lock, self.results)
        self.shutdown.threads = self.pool
        self.dispatcher = Dispatcher(
            "test", lambda i: i, False, lock, self.results, self.budget, self.shutdown,
            ThreadCalls(lambda i: i, False, None, None),
            on_error=on_error, max_len=capacity, ordered=ordered, num_threads=2, call_timeout=None,
        )  # fmt: skip
        self.dispatcher.pool = self.pool
        self.delivery = Delivery(
            "test", self.results, self.dispatcher, self.shutdown, self.budget, lambda i: i,
            ordered=ordered, on_error=on_error, watch=None, tuner=None, tune=lambda tuner: None,
        )  # fmt: skip

    def epoch(self, plan, following=None):
        """Hand ``plan`` out as the loader does at the start of its epoch."""
        self.dispatcher.hand_out(plan, plan.slots, following, reused=False)

    def queue(self, plan, *slots_and_batches):
        for slot, batch in slots_and_batches:
            position, _ = plan.task(slot)
            self.results.enqueue((plan.tag, slot, position, batch, 0))


def test_unordered_batches_come_as_queued_and_every_position_is_marked_done():
    parts = Parts()
    plan = EpochPlan(0, 3, tag=1)
    parts.epoch(plan)
    parts.queue(plan, (2, "c"), (0, "a"), (1, "b"))
    assert list(parts.delivery.batches(plan)) == ["c", "a", "b"]
    assert plan.complete and parts.delivery.done_calls == 3
    assert parts.pool.notified == 0  # no ordered window to move on


def test_ordered_batches_are_reassembled_and_each_moves_the_window_on():
    parts = Parts(ordered=True)
    plan = EpochPlan(0, 4, order=[3, 2, 1, 0], tag=1)
    parts.epoch(plan)
    parts.queue(plan, (2, "s2"), (0, "s0"), (3, "s3"), (1, "s1"))
    assert list(parts.delivery.batches(plan)) == ["s0", "s1", "s2", "s3"]
    assert parts.dispatcher.released == 4 and parts.pool.notified == 4


def test_an_abandoned_epochs_results_are_dropped_and_the_next_epochs_kept_for_it():
    parts = Parts()
    abandoned, plan, ahead = EpochPlan(0, 2, tag=1), EpochPlan(1, 2, tag=2), EpochPlan(2, 2, tag=3)
    parts.epoch(plan, following=ahead)
    parts.queue(abandoned, (0, "old"))
    parts.queue(ahead, (0, "ahead-0"))
    parts.queue(plan, (0, "a"), (1, "b"))
    assert list(parts.delivery.batches(plan)) == ["a", "b"]
    assert [r[3] for r in parts.delivery.early] == ["ahead-0"]
    # The next epoch takes the result made ahead first, then the queue.
    parts.dispatcher.hand_out(ahead, ahead.slots, None, reused=True)
    parts.queue(ahead, (1, "ahead-1"))
    assert list(parts.delivery.batches(ahead)) == ["ahead-0", "ahead-1"]


def test_skipped_calls_and_a_streams_end_are_done_but_not_delivered():
    parts = Parts(on_error="skip")
    plan = EpochPlan(0, 3, tag=1)
    parts.epoch(plan)
    record = parts.budget.record(0, 1, ValueError("bad 1"), None)
    parts.queue(plan, (0, "a"), (1, Failed(ValueError("bad 1"), record)), (2, NO_BATCH))
    assert list(parts.delivery.batches(plan)) == ["a"]
    assert plan.complete
    assert (parts.delivery.done_calls, parts.delivery.done_errors) == (3, 1)


def test_a_failure_made_ahead_is_recorded_when_its_epoch_delivers_it_under_skip():
    parts = Parts(on_error="skip")
    plan = EpochPlan(1, 2, tag=2)
    parts.epoch(plan)
    deferred = Failed(ValueError("bad 0"), None, epoch=1, index=0, deferred=True)
    parts.queue(plan, (0, deferred), (1, "b"))
    assert list(parts.delivery.batches(plan)) == ["b"]
    (record,) = parts.budget.records
    assert (record.epoch, record.index, record.type) == (1, 0, "ValueError")
    assert record.thread == threading.current_thread().name  # where it failed: here, the test's thread


def test_a_failure_made_ahead_is_raised_when_its_epoch_delivers_it_under_raise():
    parts = Parts()
    plan = EpochPlan(1, 2, tag=2)
    parts.epoch(plan)
    parts.queue(plan, (0, Failed(KeyError("bad 0"), None, epoch=1, index=0, deferred=True)))
    with pytest.raises(KeyError, match="bad 0"):
        list(parts.delivery.batches(plan))
    assert parts.shutdown.closed and parts.pool.stopped
    with pytest.raises(LoaderClosed, match="a loader thread failed"):  # raised once; then closed
        parts.shutdown.raise_failure()


def test_a_new_failure_over_the_budget_stops_the_loader():
    parts = Parts(on_error="skip", max_errors=0)
    plan = EpochPlan(0, 2, tag=1)
    parts.epoch(plan)
    parts.queue(plan, (0, "a"))
    batches = parts.delivery.batches(plan)
    assert next(batches) == "a"
    record = parts.budget.record(0, 1, ValueError("bad 1"), None)  # as a loader thread records it
    parts.queue(plan, (1, Failed(ValueError("bad 1"), record)))
    with pytest.raises(ErrorBudgetExceeded):
        next(batches)
    assert parts.shutdown.closed


def test_a_closed_queue_ends_the_epoch_with_loader_closed_or_the_failure_that_closed_it():
    parts = Parts()
    plan = EpochPlan(0, 2, tag=1)
    parts.epoch(plan)
    parts.queue(plan, (0, "a"))
    parts.shutdown.stop()
    batches = parts.delivery.batches(plan)
    assert next(batches) == "a"  # what was queued before the close is still delivered
    with pytest.raises(LoaderClosed, match="closed during epoch 0"):
        next(batches)

    failing = Parts()
    failing.epoch(plan)
    failing.shutdown.fail(OSError("disk gone"))
    with pytest.raises(OSError, match="disk gone"):
        list(failing.delivery.batches(plan))


def test_drain_keeps_only_the_results_made_ahead():
    parts = Parts()
    plan, ahead = EpochPlan(0, 3, tag=1), EpochPlan(1, 3, tag=2)
    parts.epoch(plan, following=ahead)
    parts.queue(plan, (0, "a"), (1, "b"))
    parts.queue(ahead, (0, "ahead-0"))
    parts.delivery.drain()
    assert len(parts.results) == 0
    assert [r[3] for r in parts.delivery.early] == ["ahead-0"]
