"""The consumer's side of an epoch: tagged results in, batches out, in the epoch's order.

``Delivery.batches(plan)`` takes results from the queue (``results`` says what
one is) and yields the batches of ``plan``'s epoch:

* results tagged with another plan belong to an abandoned epoch (dropped), or to
  the next epoch, made ahead (kept in ``early`` for it);
* in ordered mode a result that comes before its turn waits in ``pending``, and
  each batch delivered moves the dispatcher's window on by one;
* a failed call is counted as done. One made ahead for this epoch is settled
  now: recorded against the budget, or raised. The samples replaced in a batch
  are counted against the budget as it is received. So a fraction's samples
  lost and the calls received it is measured against are of the same batches.
  The budget is checked whenever a new failure was recorded or a
  sample replaced;
* every position delivered or skipped is marked done in the plan, for ``state_dict``.

It also holds the counts ``state_dict`` saves: calls done, and the failures among
them. And it holds the count of results received, against which a fractional
error budget is measured. The consumer's thread alone calls it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from .._core.fifo_queue import FIFOQueue, QueueClosed
from .._core.telemetry import QueueWatch
from .._faults.error_budget import ErrorBudget, error_context
from .._faults.errors import LoaderClosed
from .._faults.results import NO_BATCH, Failed, Result
from .autotune import ThreadTuner
from .dispatch import Dispatcher
from .epoch_plan import EpochPlan
from .shutdown import Shutdown
from .state import LoadedState

__all__ = ["Delivery"]

log = logging.getLogger(__name__)


class Delivery:
    """Hands out an epoch's batches from the queue in the epoch's order. Consumer's thread only.

    Args:
        name: the loader's name, for messages.
        results: the queue the loader threads fill.
        dispatcher: the threads' side, whose ordered window each delivery moves on.
        shutdown: the loader's closed state and failure.
        budget: the error budget and its records.
        yield_fn: for the context of a failure's record.
        ordered: deliver in slot order.
        on_error: ``"raise"`` or ``"skip"``, for failures made ahead.
        watch: the consumer's telemetry (counts batches), or ``None`` without telemetry.
        tuner: with ``num_threads="auto"``: asked after each batch whether a sample is due.
        tune: called with ``tuner`` when it is.
    """

    def __init__(
        self,
        name: str,
        results: FIFOQueue,
        dispatcher: Dispatcher,
        shutdown: Shutdown,
        budget: ErrorBudget,
        yield_fn: Any,
        *,
        ordered: bool,
        on_error: str,
        watch: QueueWatch | None,
        tuner: ThreadTuner | None,
        tune: Callable[[ThreadTuner], None],
    ) -> None:
        self.name = name
        self._results = results
        self._dispatcher = dispatcher
        self._shutdown = shutdown
        self._budget = budget
        self._yield_fn = yield_fn
        self._ordered = ordered
        self._on_error = on_error
        self._watch = watch
        self._tuner = tuner
        self._tune = tune
        self.early: list[Result] = []  # results of the next epoch's plan, read during this one
        self.calls = 0  # results received, for a fractional error budget
        self.errors_before = 0  # failures recorded before a load_state_dict
        self.lost_before = 0  # samples lost before a load_state_dict
        # What state_dict counts: calls done (delivered or skipped) and the failures
        # among them, the loaded state's included. A result made but not delivered
        # is made again after a resume, so its failure must not be counted twice.
        self.done_calls = 0
        self.done_errors = 0
        self.done_replaced = 0  # samples replaced in the calls done in this run

    def batches(self, plan: EpochPlan) -> Iterator[Any]:
        """Yield the batches of ``plan``'s epoch; return once every slot handed out is in.

        Raises:
            LoaderClosed: the loader was closed meanwhile.
            BaseException: a loader thread's failure.
        """
        epoch = plan.epoch
        early, self.early = self.early[::-1], []  # results of this plan read during the last epoch; pop() is FIFO
        received = 0
        pending: dict[int, tuple[int, Any, int]] = {}  # ordered mode: results that came ahead of their turn
        next_slot = 0
        budget = self._budget
        # Threads start before this runs and may have failed already: check at the first result.
        errors_seen = -1
        results = self._results
        dispatcher = self._dispatcher
        shutdown = self._shutdown
        watch = self._watch
        tuner = self._tuner
        while True:
            # Read without the lock: only a stream's end changes slots during an
            # epoch, and that is set before the end's marker is queued, so it is
            # seen here by the time that marker has been received.
            if received == dispatcher.slots:
                break
            if shutdown.failure is not None:
                shutdown.raise_failure()
            if early:
                tag, slot, position, batch, replaced = early.pop()
            else:
                try:
                    tag, slot, position, batch, replaced = results.dequeue()
                except QueueClosed:
                    tag = None  # handled outside the except, so as not to chain QueueClosed to the error
            if tag is None:
                if shutdown.failure is not None:
                    shutdown.raise_failure()
                raise LoaderClosed(f"{self.name} was closed during epoch {epoch}")
            if tag != plan.tag:
                self.keep_if_ahead((tag, slot, position, batch, replaced))  # else made for an epoch that was abandoned
                continue
            received += 1
            self.calls += 1
            if replaced:
                budget.count_replaced(replaced)
                errors_seen = -1
            if budget.failures != errors_seen:  # a new failure, or a sample replaced
                errors_seen = budget.failures
                self._check_budget()
            if self._ordered:
                pending[slot] = (position, batch, replaced)
                if next_slot not in pending:
                    continue
                position, batch, replaced = pending.pop(next_slot)
                next_slot = dispatcher.release(next_slot + 1)
            while True:
                plan.mark_done(position, delivered=type(batch) is not Failed and batch is not NO_BATCH)
                self.done_calls += 1
                self.done_replaced += replaced
                if type(batch) is Failed:
                    if batch.deferred:
                        self._settle(batch)
                    self.done_errors += 1
                elif batch is not NO_BATCH:
                    if watch is not None:
                        watch.batches += 1
                        if tuner is not None and tuner.due(watch.batches, results.waited):
                            self._tune(tuner)
                    yield batch
                if not self._ordered or next_slot not in pending:
                    break
                position, batch, replaced = pending.pop(next_slot)
                next_slot = dispatcher.release(next_slot + 1)
        # Every slot is in: calls still running belong to abandoned epochs, or to the
        # next one, made ahead. Wait for the former, so that a failure of theirs is
        # raised here and not lost.
        ahead = dispatcher.ahead
        dispatcher.wait_idle(None if ahead is None else lambda task: task[0] != ahead.tag)
        if shutdown.failure is not None:
            shutdown.raise_failure()

    def keep_if_ahead(self, result: Result) -> None:
        """Keep a result of the next epoch, made ahead, for it; drop any other."""
        if self._dispatcher.made_ahead(result[0]):
            self.early.append(result)

    def drain(self) -> None:
        """After an abandoned epoch: free the memory of results nobody will take, keeping those made ahead.

        Threads still busy with the abandoned epoch add theirs later; the next epoch
        drops them by their tag.
        """
        while True:
            try:
                self.keep_if_ahead(self._results.dequeue(timeout=0))
            except (TimeoutError, QueueClosed):
                break

    def _check_budget(self) -> None:
        try:
            budget = self._budget
            lost = self.lost_before / budget.samples_per_call + budget.lost
            budget.check(self.errors_before + budget.count, self.calls, lost)
        except BaseException:
            self._shutdown.stop()
            raise

    def load(self, state: LoadedState) -> None:
        """Go on with the counts of a loaded state: the budget then covers the whole run."""
        self.errors_before = self.done_errors = state.errors
        self.calls = self.done_calls = state.calls
        # A state saved before ``lost`` was kept: each error a whole call, as the budget counted then.
        self.lost_before = state.errors * self._budget.samples_per_call if state.lost is None else state.lost
        self._budget.earlier = state.first_errors

    def lost_samples(self) -> int:
        """Samples lost over the whole run, for ``state_dict``: failed calls done, and each sample replaced in them.

        Only the calls done count, as in ``done_calls``. A sample replaced in a batch
        made but not delivered yet is not counted here. A resumed run counts it when
        it makes and delivers that batch again.
        """
        failed = self.done_errors - self.errors_before  # failed calls delivered since the load
        return self.lost_before + failed * self._budget.samples_per_call + self.done_replaced

    def _settle(self, failed: Failed) -> None:
        """A deferred failure, now delivered in its epoch: record it against the budget, or raise it."""
        if self._on_error != "skip":
            self._shutdown.fail(failed.exc)
            self._shutdown.raise_failure()
        context = error_context(self._yield_fn, failed.index, failed.exc)
        self._budget.record(failed.epoch, failed.index, failed.exc, context, thread=failed.thread)
        log.warning(
            "%s: skipped index %s of epoch %d: %s",
            self.name,
            failed.index,
            failed.epoch,
            str(failed.exc).split("\n")[0],
        )
