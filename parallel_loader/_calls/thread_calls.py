"""How a loader thread calls the yield function: in the thread itself, or in a worker process.

A *task* is what a loader thread makes: ``(tag, epoch, slot, position, index)``;
the call for it is ``yield_fn()`` for a stream, ``get_batch(index, epoch)`` when the
yield function has one, else ``yield_fn(index)`` (``call_yield_fn``).

``DataLoader`` makes every call through one ``YieldCalls`` object chosen at
construction (``yield_calls``):

* ``ThreadCalls`` calls the yield function in the loader thread (``processes=0``);
* ``ProcessCalls`` (``worker_processes``) forwards the task to a worker process
  and returns the batch it sends back through shared memory.

Both give the loader's pool a ``thread_init``, make a call (``call``), tell the
watchdog where a stuck call is (``stuck``), give the epoch hooks (``hook``), and
end (``close``). Epochs, order, budget and resume stay with the loader: what
differs is only where the call runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .._core.worker_pool import CallSlot
from .._data.yield_function import call_of

__all__ = ["ThreadCalls", "YieldCalls", "call_yield_fn", "yield_calls"]

# What a loader thread makes: (plan tag, epoch, slot, position, index).
Task = tuple[int, int, int, int, int]
# Where a yield function that skips bad data itself reports it: (index, exception, context).
ErrorSink = Callable[..., None]


class YieldCalls(Protocol):
    """The calls of one loader's yield function."""

    thread_init: Callable[[int], Any] | None  # the pool calls it in each loader thread with its number
    resizable: bool  # whether the loader's thread count may change while it runs

    def width(self, num_threads: int) -> int:
        """The loader threads that ``num_threads`` (the loader's argument) means."""
        ...

    def call(self, task: Task) -> Any:
        """Make the batch of ``task`` (in a loader thread); raises what the yield function raised."""
        ...

    def stuck(self, slot: CallSlot, skip: tuple[str, ...] = ()) -> str:
        """The stack of the call in ``slot``, past ``call_timeout`` (watchdog thread); may end that call."""
        ...

    def hook(self, name: str) -> Callable[[int], Any] | None:
        """The epoch hook ``name`` (``on_epoch_begin``, ``on_epoch_end``) as the consumer calls it, or None."""
        ...

    def close(self) -> None:
        """End what the calls hold (idempotent); loader threads still in a call then fail or end."""
        ...


def call_yield_fn(yield_fn: Any, stream: bool, task: Task) -> Any:
    """Call ``yield_fn`` for ``task``: ``yield_fn()``, ``get_batch(index, epoch)`` or ``yield_fn(index)``."""
    _, epoch, _, _, index = task
    if stream:
        return yield_fn()
    get_batch = getattr(yield_fn, "get_batch", None)
    if get_batch is not None:
        return get_batch(index, epoch)
    return yield_fn(index)


class ThreadCalls:
    """Calls made in the loader thread itself (``processes=0``)."""

    resizable = True

    def __init__(
        self,
        yield_fn: Any,
        stream: bool,
        thread_init: Callable[[int], Any] | None,
        report: ErrorSink,
    ) -> None:
        self._yield_fn = yield_fn
        self._call = call_of(yield_fn, stream)  # chosen once: no lookup per call
        self.thread_init = thread_init
        sink = getattr(yield_fn, "set_error_sink", None)
        if sink is not None:  # a yield function that replaces bad data itself reports it here (VideoFolder)
            sink(report)

    def width(self, num_threads: int) -> int:
        return num_threads

    def call(self, task: Task) -> Any:
        return self._call(task[4], task[1])

    def stuck(self, slot: CallSlot, skip: tuple[str, ...] = ()) -> str:
        return slot.stack(skip=(*skip, __file__))

    def hook(self, name: str) -> Callable[[int], Any] | None:
        return getattr(self._yield_fn, name, None)

    def close(self) -> None:
        pass


def yield_calls(
    yield_fn: Any,
    processes: int,
    *,
    stream: bool,
    num_threads: int,
    thread_init: Callable[[int], Any] | None,
    report: ErrorSink,
    name: str,
    max_batches: int,
) -> YieldCalls:
    """The calls for a loader: ``ThreadCalls`` with ``processes=0``, else ``ProcessCalls``.

    Args:
        yield_fn: the (batch-level) yield function.
        processes: worker processes; 0 for none.
        stream: whether ``yield_fn`` is a stream (called with no index).
        num_threads: threads per worker process.
        thread_init: the loader's ``thread_init``.
        report: the loader's error sink, for a yield function that reports what it skips.
        name: the loader's name, for the processes' names.
        max_batches: the most batches the loader holds at once (shared-memory blocks kept).

    Raises:
        TypeError, ValueError: ``processes`` does not fit the other arguments
            (see ``worker_processes.ProcessCalls``).
    """
    if not processes:
        return ThreadCalls(yield_fn, stream, thread_init, report)
    from .worker_processes import ProcessCalls

    return ProcessCalls(
        yield_fn,
        processes,
        num_threads,
        stream=stream,
        thread_init=thread_init,
        report=report,
        name=name,
        max_batches=max_batches,
    )
