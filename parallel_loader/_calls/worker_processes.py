"""Process mode, the loader's side: ``ProcessCalls`` makes the calls of the yield function in worker processes.

With ``processes=P`` the loader runs ``P * num_threads`` loader threads. Each is
bound to a *lane*, a pipe to one thread of one worker process, and waits there
for its batch. The plan, the order, the budget and the state stay in the loader.
A worker is a fresh interpreter that runs nothing of the user's script
(``worker_launch``). A stuck worker is killed and replaced, and so is one that
dies. What runs in a worker is in ``worker_main``. See
:doc:`/guide/threads_and_processes`.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

from .._core.interrupt_safe import new_lock, notify_all, wait
from .._core.telemetry import CallTimes
from .._core.worker_pool import CallSlot
from .._data.yield_function import epoch_hook
from .._faults.errors import LoaderClosed, WorkerProcessDied
from .._faults.results import Task
from .gil_split import GilSplit
from .remote_errors import hook_everywhere, rebuilt
from .shared_batches import BlockPool
from .thread_calls import Report
from .worker_launch import WorkerProcess, dumps
from .worker_payload import Payload
from .worker_places import EXIT_WAIT, Lane, Worker, remote, retire, shutdown, signal_name

__all__ = ["ProcessCalls"]

log = logging.getLogger(__name__)

_STACK_WAIT = 2.0  # seconds to wait for a stuck worker's stack before killing it without


class ProcessCalls:
    """The calls of one loader's yield function, made in ``processes`` worker processes.

    Args:
        yield_fn: the batch-level yield function; must be picklable.
        processes: worker processes, at least 1.
        num_threads: threads in each worker process.
        stream: whether ``yield_fn`` is a stream (refused: see Raises).
        thread_init: called in each worker thread with its number; must be picklable.
        report: where failures that the yield function reports itself go (its error sink); its
            ``skip`` reaches the workers' sinks.
        name: the loader's name; the processes are ``name-process-0``, ...
        max_batches: the most batches the loader holds at once: shared-memory
            blocks kept for reuse.
        gil_split: move threads of a worker that its GIL holds back to new workers
            (``gil_split``), as ``processes="auto"`` does.

    Raises:
        TypeError: ``yield_fn`` or ``thread_init`` cannot be pickled.
        ValueError: ``yield_fn`` is a stream.
    """

    resizable = False

    def __init__(
        self,
        yield_fn: Any,
        processes: int,
        num_threads: int,
        *,
        stream: bool,
        thread_init: Callable[[int], Any] | None,
        report: Report,
        name: str,
        max_batches: int,
        gil_split: bool = False,
    ) -> None:
        if stream:
            raise ValueError(
                "processes > 0 needs a yield function with __len__ (a YieldFunction): each worker process "
                "has its own copy of the function, so a stream would be read once per process"
            )
        try:
            payload = dumps((yield_fn, thread_init))
        except Exception as exc:
            raise TypeError(
                f"processes={processes} sends the yield function and thread_init to each worker process by "
                f"pickling them (with cloudpickle), and they cannot be pickled: {exc!r}. Keep open files, locks "
                "and decoders out of their state (open those in thread_init, or on first use in each process), "
                "or use processes=0"
            ) from exc
        self.processes = processes
        self.num_threads = num_threads
        self.name = name
        self._yield_fn = yield_fn
        self._report = report
        self._blocks = BlockPool(max(1, max_batches), prefix=f"pl{os.getpid()}_")
        # Guards the workers, the lanes and the flag below; _changed is notified when a lane
        # is freed, a worker is replaced, or closing begins.
        self._lock = new_lock()
        self._changed = threading.Condition(self._lock)
        self._closing = False
        self._payload = Payload((yield_fn, thread_init), payload, self._lock)  # what every worker starts from
        self._workers = [Worker(i, f"{name}-process-{i}") for i in range(processes)]
        self._free = [Lane(w, w.number * num_threads + j) for w in self._workers for j in range(num_threads)]
        # (lanes no loader thread is bound to)
        self._bound: dict[threading.Thread, Lane] = {}
        self._abandoned: set[threading.Thread] = set()  # loader threads whose stuck call was given up
        self._local = threading.local()
        self.split = GilSplit(name) if gil_split else None  # its splits count the workers split
        # Ends the workers and unlinks the blocks if the loader is dropped or the program
        # exits without close().
        stop = None if self.split is None else self.split.stop
        self._finalizer = weakref.finalize(self, shutdown, self._workers, self._blocks, stop)
        self.thread_init = self._bind

    @property
    def pids(self) -> list[int | None]:
        """The process id of each worker running now (``None`` before it starts)."""
        return [w.process.pid if w.process is not None else None for w in self._workers]

    @property
    def blocks(self) -> BlockPool:
        """The shared-memory blocks of the batches."""
        return self._blocks

    def width(self, num_threads: int) -> int:
        return self.processes * num_threads

    def call(self, task: Task) -> Any:
        lane: Lane = self._local.lane
        if lane.successor is not None:
            lane = self._switch(lane)
        while True:
            with self._lock:
                conn, generation, greeted = lane.conn, lane.generation, lane.greeted
            assert conn is not None
            try:
                failure = None if greeted else self._greet(lane, conn)
                if failure is None:
                    conn.send_bytes(ForkingPickler.dumps(("call", task)))
                    ok, result = self._receive(conn)
                    if ok:
                        return result
                    failure = result
            except (EOFError, OSError):
                if self._broken(lane, generation, task):
                    return None  # an abandoned call: the pool drops its result
                continue  # sent again to the replacement
            raise failure  # what the worker raised: outside the try, which is for the pipe's errors

    def stuck(self, slot: CallSlot, skip: tuple[str, ...] = ()) -> str:
        with self._lock:
            lane = self._bound.get(slot.thread)
            if lane is None or self._closing:
                return slot.stack(skip=skip)
            worker = lane.worker
            process = worker.process
            generation = worker.generation
        assert process is not None
        text = remote(worker, ("stack", lane.thread), _STACK_WAIT)
        stack = text if isinstance(text, str) else "(the worker gave no stack in time)\n"
        with self._lock:
            # The stuck loader thread lets go of its lane now (the pool starts another thread,
            # which takes it); whatever its call returns, or the broken pipe, it then drops.
            self._bound.pop(slot.thread, None)
            self._abandoned.add(slot.thread)
            if worker.generation == generation:
                worker.killed.add(generation)
        log.warning("%s: killing worker process %s (pid %s), stuck in a call", self.name, process.name, process.pid)
        process.kill()
        process.join(EXIT_WAIT)
        pickled = self._payload.made()
        with self._lock:
            started = self._start(worker, pickled) if worker.generation == generation and not self._closing else None
            self._free.append(lane)
            notify_all(self._changed)
        if started is not None:
            started.send_boot()
        return f"in worker process {process.name} (pid {process.pid}), thread {lane.thread_name}:\n{stack}"

    def hook(self, name: str) -> Callable[[int], Any] | None:
        own = epoch_hook(self._yield_fn, name)
        if own is None:  # none, or YieldFunction's no-op: no pickle to make again, no worker to tell
            return None

        def here(epoch: int) -> None:  # under the lock (hook_everywhere)
            try:
                own(epoch)
            finally:
                self._payload.changed()  # the state may have changed: the next start pickles it again

        def tell(worker: Worker, epoch: int) -> tuple[BaseException, str] | None:
            reply = remote(worker, ("hook", name, epoch), None)
            # None: the worker died or was replaced; a replacement gets the state after the hook.
            return reply if isinstance(reply, tuple) else None

        return hook_everywhere(here, self._lock, lambda: [w for w in self._workers if w.process is not None], tell)

    def times(self) -> tuple[dict[str, CallTimes], float]:
        return {}, 0.0  # the loader threads' call times include the pipe's time

    def close(self) -> None:
        with self._lock:
            self._closing = self._payload.closing = True
            notify_all(self._changed)
        if self.split is not None:
            self.split.stop()
        self._finalizer()  # a review under way gets no more answers
        if self.split is not None:
            self.split.join(EXIT_WAIT)

    # Private: the loader threads' side.

    def _bind(self, number: int) -> None:
        """The pool's thread_init: bind this loader thread to a free lane, starting its worker if need be."""
        with self._lock:  # a pickle is made only for a worker to start: a running one has its work
            starts = any(lane.worker.process is None for lane in self._free)
        pickled = self._payload.made() if starts else (None, -1)  # (None, -1): Payload.for_start pickles
        with self._lock:
            while not self._free and not self._closing:
                wait(self._changed, self._lock)
            if self._closing:
                raise LoaderClosed(f"{self.name}: the worker processes are closed")
            lane = self._free.pop(0)
            self._bound[threading.current_thread()] = lane
            if self.split is not None:
                self.split.start(self._review)
            started = self._start(lane.worker, pickled) if lane.worker.process is None else None
        if started is not None:
            started.send_boot()
        self._local.lane = lane
        for attempt in range(2):
            with self._lock:
                conn, generation = lane.conn, lane.generation
            assert conn is not None
            try:
                failure = self._greet(lane, conn)
                break
            except (EOFError, OSError):
                try:
                    self._broken(lane, generation, None)
                    return  # killed by the watchdog meanwhile: the replacement is greeted at the first call
                except WorkerProcessDied:
                    if attempt:
                        raise  # its replacement died as it started too: something kills every start
        if failure is not None:
            raise failure

    def _switch(self, lane: Lane) -> Lane:
        """Move this thread to its lane's successor (``gil_split``) once that sent its ready message; never wait."""
        with self._lock:  # the review marks the successor, then starts its worker, under this lock
            successor = lane.successor
            conn = None if successor is None else successor.conn
        if successor is None or conn is None or not conn.poll():
            return lane  # not started or not ready: this lane serves one more call
        with self._lock:
            if self._bound.get(threading.current_thread()) is not lane:
                return lane  # the watchdog took this thread's lane meanwhile
            self._bound[threading.current_thread()] = successor
            retire(lane)
        self._local.lane = successor
        return successor

    def _review(self) -> None:
        """Split each worker that its GIL holds back, and start the new workers (the review thread: ``gil_split``)."""
        assert self.split is not None
        with self._lock:  # a worker with a greeted lane serves its control pipe
            running = [w for w in self._workers if w.process is not None and any(x.greeted for x in w.lanes)]
        ceilings = self.split.review(running)
        if not ceilings:
            return
        pickled = self._payload.made()
        with self._lock:
            if self._closing:
                return
            self._free, made = self.split.split(ceilings, self._free, self._workers, f"{self.name}-process-")
            started = [self._start(worker, pickled) for worker in made]
            notify_all(self._changed)
        for process in started:
            process.send_boot()

    def _greet(self, lane: Lane, conn: Connection) -> BaseException | None:
        """Take the worker thread's first message: ready (None), or the exception its thread_init raised."""
        reply = conn.recv()
        if reply[0] == "init_error":
            return rebuilt(reply[1], reply[2])
        with self._lock:
            if lane.conn is conn:
                lane.greeted = True
        return None

    def _receive(self, conn: Connection) -> tuple[bool, Any]:
        """The reply to a call: ``(True, batch)`` or ``(False, what the worker raised)``.

        Hands the worker a block to write into when it asks for one.
        """
        block = None
        try:
            while True:
                # No timeout: a worker that stops answering is killed by the watchdog (call_timeout) or
                # by close(), or dies, and each of those closes the pipe.
                reply = conn.recv()
                kind = reply[0]
                if kind == "need":
                    block = self._blocks.acquire(reply[1])
                    conn.send_bytes(ForkingPickler.dumps(("block", block.name, block.size)))
                    continue
                self._forward(reply[-1])
                if kind == "error":
                    return False, rebuilt(reply[1], reply[2])
                batch = self._blocks.build(reply[1], block)
                block = None
                return True, batch
        finally:
            if block is not None:
                self._blocks.release(block)

    def _forward(self, reports: list[tuple[Any, BaseException, Any]]) -> None:
        for index, exc, context in reports:
            self._report(index, exc, context)

    def _broken(self, lane: Lane, generation: int, task: Task | None) -> bool:
        """The lane's pipe broke during a call: wait for the replacement (False), or raise why not.

        Returns True for a call the watchdog abandoned (its lane went to another thread): it is dropped.
        """
        worker = lane.worker
        pickled = self._payload.made()  # for the replacement this thread may start below
        started = None
        with self._lock:
            if self._closing or worker.closed:
                raise LoaderClosed(f"{self.name}: the worker processes were closed during a call")
            if generation in worker.killed:  # the watchdog killed it
                if threading.current_thread() in self._abandoned:
                    self._abandoned.discard(threading.current_thread())
                    return True
                while worker.generation == generation and not self._closing:
                    wait(self._changed, self._lock)
                if self._closing:
                    raise LoaderClosed(f"{self.name}: the worker processes were closed during a call")
                return False
            if generation not in worker.died:
                process = worker.process
                assert process is not None
                process.join(EXIT_WAIT)
                worker.died[generation] = (process.pid, process.exitcode)
                log.error("%s: worker process %s died with exit code %s", self.name, process.name, process.exitcode)
                if worker.generation == generation:
                    started = self._start(worker, pickled)
            pid, exitcode = worker.died[generation]
        if started is not None:
            started.send_boot()
        index = None if task is None else task[4]
        what = "starting" if task is None else f"making index {index}"
        raise WorkerProcessDied(
            f"{self.name}: worker process {worker.name} (pid {pid}) died with exit code {exitcode}"
            f"{signal_name(exitcode)} while {what}; every call in progress in it fails, and it was replaced",
            process=worker.name,
            exitcode=exitcode,
            index=index,
        )

    def _start(self, worker: Worker, pickled: tuple[bytes | None, int]) -> WorkerProcess:
        """Start (or replace) ``worker``'s process, from ``pickled`` (``Payload.made``). Lock held.

        Returns the process, whose ``send_boot`` the caller calls once it has released the lock.
        """
        payload = self._payload.for_start(pickled)  # before the pipes: none left open if it raises
        pipes = [multiprocessing.Pipe() for _ in range(len(worker.lanes) + 1)]
        skip = bool(getattr(self._report, "skip", False))
        boot = ([lane.number for lane in worker.lanes], worker.name, self._blocks.capacity, skip)
        process = WorkerProcess(worker.name, boot, payload, pipes[0][1], [p[1] for p in pipes[1:]])
        try:
            process.start()
        except BaseException:
            for ours, _ in pipes:
                ours.close()  # start() closed the worker's ends
            raise
        worker.process = process
        worker.control, worker.owed = pipes[0][0], None
        worker.generation += 1
        for thread, lane in enumerate(worker.lanes):
            lane.thread = thread
            lane.conn = pipes[1 + thread][0]
            lane.generation = worker.generation
            lane.greeted = False
        notify_all(self._changed)
        log.debug("%s: started worker process %s (pid %s)", self.name, process.name, process.pid)
        return process
