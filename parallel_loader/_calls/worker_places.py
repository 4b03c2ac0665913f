"""The places of process mode's workers: ``Worker`` (a process, replaced as need be) and ``Lane`` (one of its threads).

Also the requests on a worker's control pipe (``remote``) and the end of every
worker (``shutdown``). ``ProcessCalls`` (``worker_processes``) keeps these under its lock.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from .._core.interrupt_safe import new_lock
from .shared_batches import BlockPool
from .worker_launch import WorkerProcess

__all__ = ["EXIT_WAIT", "Lane", "Worker", "remote", "retire", "shutdown", "signal_name"]

EXIT_WAIT = 2.0  # seconds a worker is given to exit on its own at close() before it is killed


class Worker:
    """One worker process's place: the process running in it now, replaced as need be, and its lanes."""

    def __init__(self, number: int, name: str) -> None:
        self.number = number
        self.name = name
        self.lanes: list[Lane] = []  # one thread each in the process; a process started here runs these
        self.process: WorkerProcess | None = None
        self.control: Connection | None = None  # stacks and epoch hooks, one request at a time
        self.control_lock = new_lock()
        self.tag = 0  # the last request's tag on the control pipe (remote)
        self.owed: int | None = None  # a tag read whose reply is still to come on the pipe
        self.generation = 0  # how many processes were started in this place
        self.killed: set[int] = set()  # generations the watchdog killed
        self.died: dict[int, tuple[int | None, int | None]] = {}  # generations that died: (pid, exit code)
        self.closed = False  # ended by close(), or at exit without it


class Lane:
    """A pipe to one thread of one worker process, used by one loader thread at a time.

    ``number`` is what ``thread_init`` gets in the worker thread. A lane that moves
    to another worker (``gil_split``) is retired, and its successor, with its number, takes its place.
    """

    def __init__(self, worker: Worker, number: int) -> None:
        self.worker = worker
        self.number = number
        worker.lanes.append(self)
        self.thread = 0  # its thread's index in the worker process, set as the process starts
        self.conn: Connection | None = None
        self.generation = 0
        self.greeted = False  # the worker thread's ready message was taken
        self.successor: Lane | None = None  # in a new worker: its loader thread moves there once it is ready

    @property
    def moving(self) -> bool:
        """Whether the lane moves to a successor (``gil_split``)."""
        return self.successor is not None

    @property
    def thread_name(self) -> str:
        return f"{self.worker.name}-thread-{self.thread}"


def retire(lane: Lane) -> None:
    """Take a lane that moved off its worker, and close its pipe: the worker's thread for it ends. Lock held."""
    lane.worker.lanes.remove(lane)
    conn, lane.conn = lane.conn, None
    if conn is not None:
        conn.close()


def remote(worker: Worker, request: tuple[Any, ...], timeout: float | None) -> Any:
    """Send ``request`` on ``worker``'s control pipe and return the reply; None if none came in ``timeout``.

    The worker sends each request's tag, then its reply. A reply to a request given up on
    earlier (its time ran out) comes first: it is dropped.
    """
    with worker.control_lock:
        control = worker.control
        if control is None:
            return None
        worker.tag += 1
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            control.send((worker.tag, *request))
            while True:
                if deadline is not None and not control.poll(max(0.0, deadline - time.monotonic())):
                    return None
                message = control.recv()
                if worker.owed is None:  # a tag: its reply comes next
                    worker.owed = message
                    continue
                tag, worker.owed = worker.owed, None
                if tag == worker.tag:
                    return message
        except (EOFError, OSError):
            return None


def signal_name(exitcode: int | None) -> str:
    if exitcode is None or exitcode >= 0:
        return ""
    try:
        return f" ({signal.Signals(-exitcode).name})"
    except ValueError:
        return ""


def shutdown(workers: list[Worker], blocks: BlockPool, stop: Callable[[], None] | None = None) -> None:
    """End every worker process (closing its control pipe asks it to exit) and unlink the blocks.

    ``stop`` ends what reviews the workers first (``GilSplit.stop``).
    """
    if stop is not None:
        stop()
    try:
        for worker in workers:
            worker.closed = True
            process = worker.process
            if process is not None and process.booting:
                process.kill()  # it has no work yet; the write of its boot, perhaps waiting, then fails
            with worker.control_lock:
                control, worker.control = worker.control, None
            if control is not None:
                control.close()
        for worker in workers:
            process = worker.process
            if process is None:
                continue
            process.join(EXIT_WAIT)
            if process.exitcode is None:
                process.kill()
                process.join(EXIT_WAIT)
    finally:
        blocks.close()
