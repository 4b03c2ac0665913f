"""What runs in a worker process of process mode: one thread per lane, and the control pipe.

``boot`` is the process's program (``worker_launch``). ``worker_main`` unpickles
the yield function and ``thread_init``, starts one thread per lane, and serves stack, hook and GIL requests
on the control pipe. Each thread calls ``thread_init``, then answers the tasks
its lane brings. A batch's arrays go through a shared-memory block the loader
hands over (``shared_batches``). The process exits when the control pipe closes.
See :doc:`/guide/threads_and_processes`.

A worker thread first sends ``("ready",)``, or ``("init_error", exc, text)``.
For each task, it sends ``("need", nbytes)`` when its arrays need a block. It
then sends ``("ok", skeleton, reports)`` or ``("error", exc, text, reports)``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from .._core.gil_meter import GilMeter
from .._core.worker_pool import thread_frames
from .._data.yield_function import call_of
from .._faults.results import Task
from .remote_errors import portable
from .shared_batches import WorkerMappings, split_arrays, write_arrays
from .worker_launch import dumps_back

__all__ = ["WorkerSink", "boot", "worker_main"]

# The one call of a yield function, chosen once per worker thread (yield_function.call_of).
Call = Callable[[int, int], Any]


def boot(control: Connection, args: tuple[Any, ...]) -> None:
    """Run ``worker_main`` on the lanes named on the command line, once its work came on the boot pipe.

    ``args`` are the arguments of ``worker_main`` before the pipes (``worker_launch.WorkerProcess``).
    """
    worker_main(*args, control, [Connection(int(fd)) for fd in sys.argv[3:]])


def worker_main(
    payload: bytes,
    numbers: list[int],
    name: str,
    keep: int,
    skip: bool,
    control: Connection,
    lanes: list[Connection],
) -> None:
    """Run a worker process: a thread serves each lane; this thread serves the control pipe.

    Args:
        payload: the pickled ``(yield_fn, thread_init)``.
        numbers: the number ``thread_init`` gets in each lane's thread.
        name: the process's name, for messages.
        keep: how many blocks' mappings to keep (``WorkerMappings``).
        skip: whether the loader skips failures: the worker's error sink says so, as the loader's does.
        control: the pipe for stack, hook and GIL requests; its end ends the process.
        lanes: one pipe per worker thread.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the consumer's: it ends the workers
    yield_fn, thread_init = pickle.loads(payload)
    mappings = WorkerMappings(keep)
    reports = threading.local()
    sink = getattr(yield_fn, "set_error_sink", None)
    if sink is not None:
        sink(WorkerSink(reports, skip))
    call = call_of(yield_fn, False)
    workers = [
        threading.Thread(
            target=_serve,
            args=(conn, call, thread_init, numbers[j], f"{name} (pid {os.getpid()})", reports, mappings),
            name=f"{name}-thread-{j}",
            daemon=True,
        )
        for j, conn in enumerate(lanes)
    ]
    for thread in workers:
        thread.start()
    meter = None
    while True:
        try:
            tag, *request = control.recv()
            control.send(tag)  # the reply follows: the consumer drops replies to requests it gave up on
        except (EOFError, OSError):
            _end()  # the consumer closed, or died: no orphan
        if request[0] == "stack":
            thread = workers[request[1]] if request[1] < len(workers) else None
            frame = thread_frames().get(thread.ident or -1) if thread is not None else None
            control.send("".join(traceback.format_stack(frame)[-20:]) if frame is not None else "")
        elif request[0] == "gil":  # the first request starts the meter (gil_meter)
            try:
                meter = meter or GilMeter()
                control.send(meter.reading())
            except RuntimeError:  # no thread can start (a limit on them): no reading
                control.send(None)
        elif request[0] == "hook":
            try:
                getattr(yield_fn, request[1])(request[2])
                control.send("ok")
            except BaseException as exc:
                exc.add_note(f"raised by {request[1]} in worker process {name} (pid {os.getpid()})")
                control.send_bytes(dumps_back(portable(exc)))


def _end() -> None:
    """End this worker: its exit handlers run (an index store writes what it holds), its threads are not waited for.

    The handlers get ``_END_S``: a consumer that died cannot kill a worker whose handler hangs.
    """
    deadline = threading.Timer(_END_S, os._exit, (0,))
    deadline.daemon = True
    deadline.start()
    try:
        atexit._run_exitfuncs()
    finally:
        os._exit(0)


_END_S = 1.5  # below the consumer's wait before it kills a worker at close()


class WorkerSink:
    """The error sink a yield function gets in a worker: keeps each report for the answer of its task.

    Its ``skip`` is the loader's, so a bad sample is replaced here as in a loader thread.
    """

    def __init__(self, reports: threading.local, skip: bool) -> None:
        self.skip = skip
        self._reports = reports

    def __call__(self, index: int | None, exc: BaseException, context: dict[str, Any] | None = None) -> None:
        """Keep one report; it goes to the loader's sink with the task's answer."""
        self._reports.list.append((index, portable(exc)[0], context))


def _serve(
    conn: Connection,
    call: Call,
    thread_init: Callable[[int], Any] | None,
    number: int,
    where: str,
    reports: threading.local,
    mappings: WorkerMappings,
) -> None:
    """One worker thread: call the yield function for each task its lane brings, until the lane closes."""
    thread = threading.current_thread().name
    reports.list = []
    try:
        if thread_init is not None:
            thread_init(number)
    except BaseException as exc:
        exc.add_note(f"raised by thread_init in worker process {where}, thread {thread}")
        with contextlib.suppress(EOFError, OSError):
            _send(conn, ("init_error", *portable(exc)))
        return
    try:
        _send(conn, ("ready",))
    except (EOFError, OSError):
        return  # the lane closed during thread_init: it moved to another worker, or the consumer is gone
    while True:
        try:
            _, task = conn.recv()
            _answer(conn, task, call, f"worker process {where}, thread {thread}", reports, mappings)
        except (EOFError, OSError):  # raised by the pipe alone: _answer sends every other error
            return  # the consumer closed the lane, or is gone


def _answer(
    conn: Connection, task: Task, call: Call, where: str, reports: threading.local, mappings: WorkerMappings
) -> None:
    """Make the batch of ``task`` and send it (its arrays through a block), or send what was raised."""
    reports.list = []
    try:
        batch = call(task[4], task[1])
        skeleton, arrays, nbytes = split_arrays(batch)
        del batch
    except BaseException as exc:
        exc.add_note(f"raised in {where}")
        _send(conn, ("error", *portable(exc), reports.list))
        return
    if arrays:
        _send(conn, ("need", nbytes))
        _, block, size = conn.recv()
        try:
            write_arrays(block, size, skeleton, arrays, mappings)
        except BaseException as exc:
            exc.add_note(f"raised in {where}, writing the batch into shared memory")
            _send(conn, ("error", *portable(exc), reports.list))
            return
    _send(conn, ("ok", skeleton, reports.list))


def _send(conn: Connection, message: tuple[Any, ...]) -> None:
    """Send ``message``; one that cannot be pickled goes as an error saying so."""
    try:
        data = dumps_back(message)
    except Exception as exc:
        error = TypeError(f"the batch cannot be pickled to cross from the worker process: {exc!r}")
        data = dumps_back(("error", *portable(error), []))
    conn.send_bytes(data)
