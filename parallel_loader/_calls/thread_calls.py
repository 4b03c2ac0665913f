"""Where a loader thread calls the yield function: the ``YieldCalls`` protocol, and ``ThreadCalls``.

``DataLoader`` makes every call through one ``YieldCalls`` object, chosen once
from its options (``LoaderOptions.calls``). ``ThreadCalls`` calls the yield
function in the loader thread itself (``processes=0``). ``ProcessCalls``
(``worker_processes``) makes the call in a worker process, ``RayCalls``
(``ray_calls``) in a Ray actor. Epochs, order, budget
and resume stay with the loader: only where the call runs differs. See
:doc:`/guide/threads_and_processes`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .._core.telemetry import CallTimes
from .._core.worker_pool import CallSlot
from .._data.yield_function import call_of
from .._faults.results import Task

__all__ = ["Report", "ThreadCalls", "YieldCalls"]

# Where a yield function that skips bad data itself reports it: (index, exception, context).
Report = Callable[..., None]


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

    def times(self) -> tuple[dict[str, CallTimes], float]:
        """Call times measured where the calls ran, by actor, and the loader's time beyond them."""
        ...

    def close(self) -> None:
        """End what the calls hold (idempotent); loader threads still in a call then fail or end."""
        ...


class ThreadCalls:
    """Calls made in the loader thread itself (``processes=0``)."""

    resizable = True

    def __init__(
        self,
        yield_fn: Any,
        stream: bool,
        thread_init: Callable[[int], Any] | None,
        report: Report,
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

    def times(self) -> tuple[dict[str, CallTimes], float]:
        return {}, 0.0  # the pool's own call times are all there is

    def close(self) -> None:
        pass
