"""Process mode: the loader's calls of the yield function, made in worker processes.

For yield functions that hold the GIL (Python loops), threads of one process run
one at a time; ``DataLoader(..., processes=P)`` makes the calls in ``P`` worker
processes instead, each running ``num_threads`` threads. ``ProcessCalls`` is the
``YieldCalls`` (see ``yield_calls``) of that mode.

How it works, and why it keeps every guarantee of the threaded loader:

* Everything that decides *what* is made stays in the consuming process: the
  epoch plan, the order, the error budget, the state for resume, the telemetry.
  The loader still runs ``P * num_threads`` loader threads; each is bound to one
  *lane*, a pipe to one thread of one worker process, forwards its task there and
  waits for the reply. A worker process only calls the yield function.
* Worker processes start with ``spawn`` (a fresh interpreter: safe after
  TensorFlow or CUDA started, unlike ``fork``), when the first loader thread
  needs them, and serve every epoch after. Each gets a fresh pickle of the yield
  function and of ``thread_init``, which it calls in each of its threads with the
  number ``process * num_threads + thread``. SIGINT is ignored there, once the
  worker's imports are done: a Ctrl-C is the consuming process's to handle, and it
  ends the workers.
* A batch comes back through shared memory (``shared_batches``): the worker
  tells how many bytes its arrays need, the loader thread hands it a block of the
  consumer's ``BlockPool``, the worker writes the arrays into it once and sends
  the rest pickled (arrays under 64 KiB too); the batch's arrays are views of the
  block, which returns to the pool when the consumer drops them. Blocks belong to
  the consuming process alone, so a worker killed at any moment leaks none, and
  ``close()`` unlinks them. A worker keeps its mappings of the few blocks the pool
  hands round (``WorkerMappings``).
* The epoch hooks run in the consuming process (on its copy of the yield
  function) and then in each running worker, through a control pipe; a worker
  started later gets a pickle of the copy the hooks have already changed.
* A call past ``call_timeout``: ``stuck`` asks the worker for the stack of the
  thread making it, kills the process and starts a replacement. The loader thread
  of that call gives its lane to the thread the pool starts in its place and ends
  (its result would be dropped); the other calls that were in progress in the
  killed process are sent again to the replacement, not lost.
* A worker that dies on its own (a segfault, the OOM killer) breaks its pipes: each
  call in progress there fails with ``WorkerProcessDied``, naming the process, its
  exit code and the index, and the process is replaced. Nothing waits for ever.
  If the consuming process dies, the workers see their control pipe close and exit.

An error in the worker crosses with its traceback as text (the exception's
``__cause__``, as ``concurrent.futures`` does) and a note naming the process and
thread; the loader adds the loader thread and the index.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import traceback
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

from .._core.interrupt_safe import new_lock, notify_all, wait
from .._core.worker_pool import CallSlot
from .._faults.errors import LoaderClosed, WorkerProcessDied
from .shared_batches import BlockPool, WorkerMappings, split_arrays, write_arrays
from .thread_calls import ErrorSink, Task, call_yield_fn

__all__ = ["ProcessCalls"]

log = logging.getLogger(__name__)

START_METHOD = "spawn"
_STACK_WAIT = 2.0  # seconds to wait for a stuck worker's stack before killing it without
_EXIT_WAIT = 2.0  # seconds a worker is given to exit on its own at close() before it is killed


class ProcessCalls:
    """The calls of one loader's yield function, made in ``processes`` worker processes.

    Args:
        yield_fn: the batch-level yield function; must be picklable.
        processes: worker processes, at least 1.
        num_threads: threads in each worker process.
        stream: whether ``yield_fn`` is a stream (refused: see Raises).
        thread_init: called in each worker thread with its number; must be picklable.
        report: where failures that the yield function reports itself go (its error sink).
        name: the loader's name; the processes are ``name-process-0``, ...
        max_batches: the most batches the loader holds at once: shared-memory
            blocks kept for reuse.

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
        report: ErrorSink,
        name: str,
        max_batches: int,
    ) -> None:
        if stream:
            raise ValueError(
                "processes > 0 needs a yield function with __len__ (a YieldFunction): each worker process "
                "has its own copy of the function, so a stream would be read once per process"
            )
        try:
            ForkingPickler.dumps((yield_fn, thread_init))
        except Exception as exc:
            raise TypeError(
                f"processes={processes} sends the yield function and thread_init to each worker process by "
                f"pickling them, and they cannot be pickled: {exc!r}. Define them at module level (not as "
                "lambdas or local functions or classes), keep open files, locks and decoders out of their "
                "state (open those in thread_init, or on first use in each process), or use processes=0"
            ) from exc
        self.processes = processes
        self.num_threads = num_threads
        self.name = name
        self._yield_fn = yield_fn
        self._thread_init = thread_init
        self._report = report
        self._context = multiprocessing.get_context(START_METHOD)
        self._blocks = BlockPool(max(1, max_batches), prefix=f"pl{os.getpid()}_")
        # Guards the workers, the lanes and the flag below; _changed is notified when a lane
        # is freed, a worker is replaced, or closing begins.
        self._lock = new_lock()
        self._changed = threading.Condition(self._lock)
        self._closing = False
        self._workers = [_Worker(i, f"{name}-process-{i}") for i in range(processes)]
        self._lanes = [_Lane(w, j) for w in self._workers for j in range(num_threads)]
        self._free = list(self._lanes)  # lanes no loader thread is bound to
        self._bound: dict[threading.Thread, _Lane] = {}
        self._abandoned: set[threading.Thread] = set()  # loader threads whose stuck call was given up
        self._local = threading.local()
        # Ends the workers and unlinks the blocks if the loader is dropped or the program
        # exits without close().
        self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._blocks)
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
        lane: _Lane = self._local.lane
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
        text = _remote(worker, ("stack", lane.thread), _STACK_WAIT)
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
        process.join(_EXIT_WAIT)
        with self._lock:
            if worker.generation == generation and not self._closing:
                self._start(worker)
            self._free.append(lane)
            notify_all(self._changed)
        return f"in worker process {process.name} (pid {process.pid}), thread {lane.thread_name}:\n{stack}"

    def hook(self, name: str) -> Callable[[int], Any] | None:
        own = getattr(self._yield_fn, name, None)
        if own is None:
            return None

        def run(epoch: int) -> None:
            # Under the lock, so that a worker starting meanwhile either gets the state after
            # the hook (its pickle is taken after) or is among those told below.
            with self._lock:
                own(epoch)
                running = [w for w in self._workers if w.process is not None]
            for worker in running:
                reply = _remote(worker, ("hook", name, epoch), None)
                if isinstance(reply, tuple):  # the hook raised in the worker
                    raise _rebuilt(*reply)
                # None: the worker died or was replaced; a replacement gets the state after the hook.

        return run

    def close(self) -> None:
        with self._lock:
            self._closing = True
            notify_all(self._changed)
        self._finalizer()

    # Private: the loader threads' side.

    def _bind(self, number: int) -> None:
        """The pool's thread_init: bind this loader thread to a free lane, starting its worker if need be."""
        with self._lock:
            while not self._free and not self._closing:
                wait(self._changed, self._lock)
            if self._closing:
                raise LoaderClosed(f"{self.name}: the worker processes are closed")
            lane = self._free.pop(0)
            self._bound[threading.current_thread()] = lane
            if lane.worker.process is None:
                self._start(lane.worker)
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

    def _greet(self, lane: _Lane, conn: Connection) -> BaseException | None:
        """Take the worker thread's first message: ready (None), or the exception its thread_init raised."""
        reply = conn.recv()
        if reply[0] == "init_error":
            return _rebuilt(reply[1], reply[2])
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
                    return False, _rebuilt(reply[1], reply[2])
                batch = self._blocks.build(reply[1], block)
                block = None
                return True, batch
        finally:
            if block is not None:
                self._blocks.release(block)

    def _forward(self, reports: list[tuple[Any, BaseException, Any]]) -> None:
        for index, exc, context in reports:
            self._report(index, exc, context)

    def _broken(self, lane: _Lane, generation: int, task: Task | None) -> bool:
        """The lane's pipe broke during a call: wait for the replacement (False), or raise why not.

        Returns True for a call the watchdog abandoned (its lane went to another thread): it is dropped.
        """
        worker = lane.worker
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
                process.join(_EXIT_WAIT)
                worker.died[generation] = (process.pid, process.exitcode)
                log.error("%s: worker process %s died with exit code %s", self.name, process.name, process.exitcode)
                if worker.generation == generation:
                    self._start(worker)
            pid, exitcode = worker.died[generation]
        index = None if task is None else task[4]
        what = "starting" if task is None else f"making index {index}"
        raise WorkerProcessDied(
            f"{self.name}: worker process {worker.name} (pid {pid}) died with exit code {exitcode}"
            f"{_signal_name(exitcode)} while {what}; every call in progress in it fails, and it was replaced",
            process=worker.name,
            exitcode=exitcode,
            index=index,
        )

    def _start(self, worker: _Worker) -> None:
        """Start (or replace) ``worker``'s process with a pickle of the yield function now. Lock held."""
        pipes = [self._context.Pipe() for _ in range(self.num_threads + 1)]
        payload = ForkingPickler.dumps((self._yield_fn, self._thread_init))
        process = self._context.Process(
            target=_worker_main,
            args=(
                bytes(payload),
                worker.number,
                worker.name,
                self._blocks.capacity,
                pipes[0][1],
                [p[1] for p in pipes[1:]],
            ),
            name=worker.name,
            daemon=True,
        )
        process.start()
        for _, child_end in pipes:
            child_end.close()
        worker.process = process
        worker.control = pipes[0][0]
        worker.generation += 1
        for lane in self._lanes:
            if lane.worker is worker:
                lane.conn = pipes[1 + lane.thread][0]
                lane.generation = worker.generation
                lane.greeted = False
        notify_all(self._changed)
        log.debug("%s: started worker process %s (pid %s)", self.name, process.name, process.pid)


class _Worker:
    """One worker process's place: the process running in it now, replaced as need be."""

    def __init__(self, number: int, name: str) -> None:
        self.number = number
        self.name = name
        self.process: multiprocessing.process.BaseProcess | None = None
        self.control: Connection | None = None  # stacks and epoch hooks, one request at a time
        self.control_lock = new_lock()
        self.generation = 0  # how many processes were started in this place
        self.killed: set[int] = set()  # generations the watchdog killed
        self.died: dict[int, tuple[int | None, int | None]] = {}  # generations that died: (pid, exit code)
        self.closed = False  # ended by close(), or at exit without it


class _Lane:
    """A pipe to one thread of one worker process, used by one loader thread at a time."""

    def __init__(self, worker: _Worker, thread: int) -> None:
        self.worker = worker
        self.thread = thread
        self.thread_name = f"{worker.name}-thread-{thread}"
        self.conn: Connection | None = None
        self.generation = 0
        self.greeted = False  # the worker thread's ready message was taken


class _RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker process, as text (its ``__cause__``)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


def _rebuilt(exc: BaseException, text: str) -> BaseException:
    exc.__cause__ = _RemoteTraceback(f'\n"""\n{text}"""')
    return exc


def _remote(worker: _Worker, request: tuple[Any, ...], timeout: float | None) -> Any:
    """Send ``request`` on ``worker``'s control pipe and return the reply; None if none came."""
    with worker.control_lock:
        control = worker.control
        if control is None:
            return None
        try:
            control.send(request)
            if timeout is not None and not control.poll(timeout):
                return None
            return control.recv()
        except (EOFError, OSError):
            return None


def _signal_name(exitcode: int | None) -> str:
    if exitcode is None or exitcode >= 0:
        return ""
    try:
        return f" ({signal.Signals(-exitcode).name})"
    except ValueError:
        return ""


def _shutdown(workers: list[_Worker], blocks: BlockPool) -> None:
    """End every worker process (closing its control pipe asks it to exit) and unlink the blocks."""
    try:
        for worker in workers:
            worker.closed = True
            with worker.control_lock:
                control, worker.control = worker.control, None
            if control is not None:
                control.close()
        for worker in workers:
            process = worker.process
            if process is None:
                continue
            process.join(_EXIT_WAIT)
            if process.exitcode is None:
                process.kill()
                process.join(_EXIT_WAIT)
    finally:
        blocks.close()


# The worker process's side.


def _worker_main(
    payload: bytes, number: int, name: str, keep: int, control: Connection, lanes: list[Connection]
) -> None:
    """A worker process: a thread serves each lane; this one serves the control pipe.

    ``keep``: how many blocks' mappings to keep (``WorkerMappings``).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the consumer's: it ends the workers
    yield_fn, thread_init = pickle.loads(payload)
    threads = len(lanes)
    mappings = WorkerMappings(keep)
    reports = threading.local()
    sink = getattr(yield_fn, "set_error_sink", None)
    if sink is not None:
        sink(lambda index, exc, context=None: reports.list.append((index, _portable(exc)[0], context)))
    workers = [
        threading.Thread(
            target=_serve,
            args=(conn, yield_fn, thread_init, number * threads + j, f"{name} (pid {os.getpid()})", reports, mappings),
            name=f"{name}-thread-{j}",
            daemon=True,
        )
        for j, conn in enumerate(lanes)
    ]
    for thread in workers:
        thread.start()
    while True:
        try:
            request = control.recv()
        except (EOFError, OSError):
            os._exit(0)  # the consumer closed, or died: no orphan
        if request[0] == "stack":
            frame = sys._current_frames().get(workers[request[1]].ident or -1)
            control.send("".join(traceback.format_stack(frame)[-20:]) if frame is not None else "")
        elif request[0] == "hook":
            try:
                getattr(yield_fn, request[1])(request[2])
                control.send("ok")
            except BaseException as exc:
                exc.add_note(f"raised by {request[1]} in worker process {name} (pid {os.getpid()})")
                control.send(_portable(exc))


def _serve(
    conn: Connection,
    yield_fn: Any,
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
        _send(conn, ("init_error", *_portable(exc)))
        return
    _send(conn, ("ready",))
    while True:
        try:
            _, task = conn.recv()
            _answer(conn, task, yield_fn, f"worker process {where}, thread {thread}", reports, mappings)
        except (EOFError, OSError):  # raised by the pipe alone: _answer sends every other error
            return  # the consumer closed the lane, or is gone


def _answer(
    conn: Connection, task: Task, yield_fn: Any, where: str, reports: threading.local, mappings: WorkerMappings
) -> None:
    """Make the batch of ``task`` and send it (its arrays through a block), or send what was raised."""
    reports.list = []
    try:
        batch = call_yield_fn(yield_fn, False, task)
        skeleton, arrays, nbytes = split_arrays(batch)
        del batch
    except BaseException as exc:
        exc.add_note(f"raised in {where}")
        _send(conn, ("error", *_portable(exc), reports.list))
        return
    if arrays:
        _send(conn, ("need", nbytes))
        _, block, size = conn.recv()
        try:
            write_arrays(block, size, skeleton, arrays, mappings)
        except BaseException as exc:
            exc.add_note(f"raised in {where}, writing the batch into shared memory")
            _send(conn, ("error", *_portable(exc), reports.list))
            return
    _send(conn, ("ok", skeleton, reports.list))


def _send(conn: Connection, message: tuple[Any, ...]) -> None:
    """Send ``message``; one that cannot be pickled goes as an error saying so."""
    try:
        data = ForkingPickler.dumps(message)
    except Exception as exc:
        error = TypeError(f"the batch cannot be pickled to cross from the worker process: {exc!r}")
        data = ForkingPickler.dumps(("error", *_portable(error), []))
    conn.send_bytes(bytes(data))


def _portable(exc: BaseException) -> tuple[BaseException, str]:
    """``exc`` (or a RuntimeError that stands for it, if it cannot cross) and its traceback as text."""
    text = "".join(traceback.format_exception(exc))
    try:
        pickle.loads(ForkingPickler.dumps(exc))
        return exc, text
    except Exception as why:
        stand_in = RuntimeError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc} (not picklable: {why!r})")
        for note in getattr(exc, "__notes__", ()):
            stand_in.add_note(note)
        return stand_in, text
