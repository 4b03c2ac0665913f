"""What runs in a Ray actor of ``workers=RayWorkers(...)``: the yield function, called for the loader's tasks.

``CallActor`` is a plain class; ``ray_calls`` makes it an actor. It holds its
own copy of the yield function and calls it in up to ``calls_per_actor`` threads.
A call answers ``("ok", batch, reports, seconds)``, or ``("error", exc, text,
reports, seconds)`` with what the yield function raised and its traceback as text.
So the exception reaches the loader as itself, not wrapped by Ray. Stacks and
epoch hooks are served too. This module imports no Ray.
See :doc:`/guide/ray_cluster`.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from .._core.worker_pool import thread_frames
from .._data.yield_function import call_of
from .._faults.results import Task
from .remote_errors import portable
from .worker_main import WorkerSink

__all__ = ["CallActor"]


class CallActor:
    """One actor's side of the calls: a copy of the yield function and the threads that call it.

    Args:
        yield_fn: the batch-level yield function.
        thread_init: called in each of the actor's threads with its number, before its first call.
        number: the actor's place among the loader's actors; its threads get
            ``number * calls + j``.
        calls: calls it runs at once.
        skip: whether the loader skips failures: the yield function's error sink says so.
    """

    def __init__(
        self, yield_fn: Any, thread_init: Callable[[int], Any] | None, number: int, calls: int, skip: bool
    ) -> None:
        self._yield_fn = yield_fn
        self._thread_init = thread_init
        self._call = call_of(yield_fn, False)
        self._numbers = itertools.count(number * calls)
        self._local = threading.local()
        self._threads: dict[int, int] = {}  # call id -> the ident of the thread making it
        self.where = f"Ray actor {number} (pid {os.getpid()} on {socket.gethostname()})"
        sink = getattr(yield_fn, "set_error_sink", None)
        if sink is not None:
            sink(WorkerSink(self._local, skip))

    def call(self, task: Task, call_id: int) -> tuple[Any, ...]:
        """Make the batch of ``task``; what the yield function raised is answered, not raised."""
        local = self._local
        local.list = []
        started = time.perf_counter()
        self._threads[call_id] = threading.get_ident()
        try:
            self._init_thread()
            batch = self._call(task[4], task[1])
        except BaseException as exc:
            exc.add_note(f"raised in {self.where}, thread {threading.current_thread().name}")
            return ("error", *portable(exc), local.list, time.perf_counter() - started)
        finally:
            self._threads.pop(call_id, None)
        return "ok", batch, local.list, time.perf_counter() - started

    def stack(self, call_id: int) -> str:
        """The stack of the thread making call ``call_id`` now ("" if none is)."""
        frame = thread_frames().get(self._threads.get(call_id, -1))
        return "".join(traceback.format_stack(frame)[-20:]) if frame is not None else ""

    def hook(self, name: str, epoch: int) -> tuple[BaseException, str] | None:
        """Run the epoch hook ``name``; what it raised, with its traceback as text, or None."""
        try:
            getattr(self._yield_fn, name)(epoch)
        except BaseException as exc:
            exc.add_note(f"raised by {name} in {self.where}")
            return portable(exc)
        return None

    def _init_thread(self) -> None:
        """Call ``thread_init`` once in this thread; a failure fails each of its calls."""
        local = self._local
        if not hasattr(local, "init_error"):
            local.init_error = None
            if self._thread_init is not None:
                try:
                    self._thread_init(next(self._numbers))
                except BaseException as exc:
                    exc.add_note("raised by thread_init")
                    local.init_error = exc
        if local.init_error is not None:
            raise local.init_error
