"""The loader's threads: each takes a task, makes it, hands the result on, and takes the next.

``WorkerPool`` owns the threads, their start and their end. ``resize`` adds
threads or retires some while they run. The pool also owns the count of calls in
progress and the time of each call (``telemetry.CallTimes``). Its watchdog notices
a call stuck for longer than ``call_timeout``. What a task is, how it is made and
where the result goes is the loader's business, given as three functions. The
pool knows nothing of epochs, batches or queues.

Locking: the pool shares one lock with its owner, since the loader's state and
the pool's are read together when handing out work. It is an ``RLock`` from
``interrupt_safe.new_lock``, taken as ``with lock`` and waited on through
``interrupt_safe.wait``. So a Ctrl-C in the main thread at any point leaves it
as it should be (see that module).
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any

from .interrupt_safe import interrupts_deferred, new_thread, notify_all, wait
from .telemetry import CallTimes

__all__ = ["CallSlot", "WorkerPool", "thread_frames"]

log = logging.getLogger(__name__)


class CallSlot:
    """What one thread is doing: the task of its call in progress and when the call began.

    Written by its thread; read by the watchdog and by ``close()``.
    """

    __slots__ = ("abandoned", "number", "started", "task", "thread", "times")

    def __init__(self, number: int, thread: threading.Thread) -> None:
        self.number = number
        self.thread = thread
        self.task: Any = None
        self.started: float | None = None  # None while the thread is not in a call
        self.abandoned = False  # the watchdog gave up on this thread's call
        self.times = CallTimes()  # the durations of its calls, written by its thread only

    def stack(self, skip: tuple[str, ...] = ()) -> str:
        """The thread's current stack from the yield function down, most recent call last ('' if it has ended).

        The frames of ``threading``, of this module and of the files in ``skip`` above
        the call are left out: they are the same for every call and say nothing about
        where it is stuck.
        """
        frame = thread_frames().get(self.thread.ident or -1)
        if frame is None:
            return ""
        frames = traceback.extract_stack(frame)
        first = 0
        while first < len(frames) - 1 and frames[first].filename in (threading.__file__, __file__, *skip):
            first += 1
        return "".join(traceback.format_list(frames[first:][-_STACK_FRAMES:]))


_STACK_FRAMES = 20  # the most frames a stuck call's stack shows


def thread_frames() -> dict[int, FrameType]:
    """``sys._current_frames()``, with the cyclic garbage collector paused while it runs.

    On Python 3.11 a collection inside that call can deadlock the interpreter
    (CPython issue 106883, fixed in 3.12): the watchdog would then hang its loader.
    """
    enabled = gc.isenabled()
    if enabled:
        gc.disable()
    try:
        return sys._current_frames()
    finally:
        if enabled:
            gc.enable()


class WorkerPool:
    """Threads that call ``take``, ``make`` and ``put`` in a loop until stopped.

    Args:
        name: prefix of the thread names (``name-0``, ``name-1``, ...).
        lock: the lock guarding the owner's state that ``take`` reads.
        take: called with ``lock`` held; returns the next task, or ``None`` when
            there is nothing to do now (the thread then waits for ``notify``).
        make: makes a task, outside the lock. Its result goes to ``put``.
        put: hands the result on; returns False to end the thread.
        fail: called with an exception from ``thread_init`` (and the thread ends).
        thread_init: called in each thread with its number before its first task.
        call_timeout: seconds after which a call counts as stuck; ``None``: never.
        on_stuck: called by the watchdog, outside the lock, with the slot of a
            call that passed ``call_timeout``. The slot is then abandoned: the
            call's result, if it ever comes, is dropped and its thread ends.

    Methods that start or wait for threads are for the owner's thread; ``stop``
    and ``notify`` are safe from any thread.
    """

    def __init__(
        self,
        name: str,
        lock: threading.RLock,
        take: Callable[[], Any],
        make: Callable[[Any], Any],
        put: Callable[[Any, Any], bool],
        fail: Callable[[BaseException], None],
        thread_init: Callable[[int], Any] | None = None,
        call_timeout: float | None = None,
        on_stuck: Callable[[CallSlot], None] | None = None,
    ) -> None:
        self.name = name
        self.timed = True  # record each call's time in its slot's CallTimes
        self._lock = lock
        self._take = take
        self._make = make
        self._put = put
        self._fail = fail
        self._thread_init = thread_init
        self.call_timeout = call_timeout
        self._on_stuck = on_stuck
        # All under ``lock``: loader threads wait on _work for work, the owner on
        # _idle for the calls in progress to end.
        self._work = threading.Condition(lock)
        self._idle = threading.Condition(lock)
        self._stopping = False
        self._busy = 0  # calls in progress, abandoned ones not counted
        self._selective_waiters = 0  # wait_idle calls waiting for the calls their match names
        self._live = 0  # threads that take work: started, not retired, ended or abandoned
        self._retire = 0  # threads asked to end at their next take (resize)
        self._slots: list[CallSlot] = []
        self._watchdog: threading.Thread | None = None
        # The watchdog sleeps on this until a call may pass call_timeout; stop() wakes it. Not a
        # threading.Event: Event.set() takes its own lock through Condition.__enter__, which a
        # Ctrl-C can leave held (see interrupt_safe), and stop() runs in the main thread.
        self._watchdog_wake = threading.Condition(lock)

    @property
    def threads(self) -> tuple[threading.Thread, ...]:
        """The last thread started under each number, abandoned ones included."""
        return tuple(slot.thread for slot in self._slots)

    @property
    def busy(self) -> int:
        """Calls in progress now, abandoned ones not counted (approximate)."""
        return self._busy

    @property
    def size(self) -> int:
        """Threads that take work now, less those asked to retire (approximate)."""
        return self._live - self._retire

    def call_times(self) -> dict[str, CallTimes]:
        """The call times by thread name; a name's record goes on with the later threads given its number."""
        return {slot.thread.name: slot.times for slot in self._slots}

    def stuck(self) -> list[CallSlot]:
        """Slots whose call the watchdog abandoned and whose thread still runs it."""
        return [s for s in self._slots if s.abandoned and s.thread.is_alive()]

    def start(self, count: int) -> None:
        """Start ``count`` threads, and the watchdog when there is a ``call_timeout``. Call with the lock held."""
        for _ in range(count):
            self._start_thread()
        if self.call_timeout is not None and self._watchdog is None:
            self._watchdog = new_thread(self._watch, f"{self.name}-watchdog")
            self._watchdog.start()
        log.debug("%s started %d threads", self.name, count)

    def resize(self, count: int) -> None:
        """Run ``count`` threads: start more, or ask some to end at their next take. Safe from any thread.

        A thread asked to end finishes the call it is in and hands its result on
        first, so no task taken is lost. Does nothing once stopping.
        """
        with self._lock:
            if self._stopping:
                return
            size = self._live - self._retire
            if count > size:
                kept = min(self._retire, count - size)  # cancel retirements not carried out yet
                self._retire -= kept
                for _ in range(count - size - kept):
                    self._start_thread()
            elif count < size:
                self._retire += size - count
            self._work.notify_all()  # idle threads retire now; others may take more work

    def replace(self, slot: CallSlot) -> None:
        """Start a thread to take over from the abandoned ``slot``'s. Safe from any thread."""
        with self._lock:
            if not self._stopping:
                self._start_thread()

    def notify(self, all_threads: bool = False) -> None:
        """Wake one waiting thread (or all) to call ``take`` again. Call with the lock held."""
        if all_threads:
            self._work.notify_all()
        else:
            self._work.notify()

    def stop(self) -> None:
        """Tell every thread to end after its current call, without waiting. Idempotent, any thread."""
        with self._lock:
            self._stopping = True
            notify_all(self._work, self._idle, self._watchdog_wake)

    def wait_idle(self, give_up: Callable[[], bool], match: Callable[[Any], bool] | None = None) -> bool:
        """Wait until no call is in progress (abandoned calls aside), or until ``give_up()`` holds.

        With ``match``, wait only for the calls whose task it returns True for.

        Returns:
            True when idle; False when it gave up (the pool is stopping, or ``give_up()``).
        """
        with self._lock:
            self._selective_waiters += match is not None
            try:
                while self._running(match) and not self._stopping and not give_up():
                    wait(self._idle, self._lock)
                return not self._running(match)
            finally:
                self._selective_waiters -= match is not None

    def join(self, timeout: float | None = None) -> list[str]:
        """Wait for the threads to end, ``timeout`` seconds at most in all.

        A thread in a call is waited for no longer than its call may run under
        ``call_timeout``; an abandoned one is not waited for.

        Returns:
            The names of the threads still running.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        current = threading.current_thread()
        threads = [self._watchdog] if self._watchdog is not None else []
        for slot in self._slots:
            if slot.thread is current:
                continue
            if slot.abandoned:
                continue
            until = deadline
            started = slot.started
            if self.call_timeout is not None and started is not None:
                call_deadline = started + self.call_timeout
                until = call_deadline if until is None else min(until, call_deadline)
            _join(slot.thread, until)
        for thread in threads:
            if thread is not current:
                _join(thread, deadline)
        return [s.thread.name for s in self._slots if s.thread.is_alive()]

    def _running(self, match: Callable[[Any], bool] | None) -> bool:
        """Whether a call (one ``match`` accepts) is in progress. Call with the lock held."""
        if match is None:
            return self._busy > 0
        return any(s.started is not None and not s.abandoned and match(s.task) for s in self._slots)

    # Private: the threads' side.

    def _start_thread(self) -> None:
        # The number (and the call times) of a thread that has ended, retired or given up on, go to
        # the new one: numbers stay below the most threads running at once, and the records do not
        # grow with every thread a tuner starts over a run of days.
        ended = next((s for s in self._slots if _ended(s.thread)), None)
        number = len(self._slots) if ended is None else ended.number
        thread = new_thread(self._run, f"{self.name}-{number}")
        slot = CallSlot(number, thread)
        if ended is not None:
            slot.times = ended.times
        thread._pool_slot = slot  # type: ignore[attr-defined]
        # Listed before it starts, so that an interrupt between the two cannot hide it from join().
        if ended is None:
            self._slots.append(slot)
        else:
            self._slots[number] = slot
        self._live += 1
        with interrupts_deferred():
            thread.start()

    def _run(self) -> None:
        slot: CallSlot = threading.current_thread()._pool_slot  # type: ignore[attr-defined]
        counted = False
        try:
            counted = self._serve(slot)
        finally:
            if not counted:
                with self._lock:
                    if not slot.abandoned:  # an abandoned slot was taken off the count by the watchdog
                        self._live -= 1

    def _serve(self, slot: CallSlot) -> bool:
        """Take, make and put until told to end; True if it took itself off ``_live`` (retiring)."""
        if self._thread_init is not None:
            try:
                self._thread_init(slot.number)
            except BaseException as exc:  # handed to the consumer, which re-raises it
                exc.add_note(f"raised by thread_init in loader thread {slot.thread.name}")
                self._fail(exc)
                return False
        take, make, put = self._take, self._make, self._put
        record = slot.times.add if self.timed else None
        while True:
            with self._lock:
                while True:
                    if self._stopping:
                        return False
                    if self._retire:
                        # Both counts under the same lock, so that resize() never sees this thread
                        # neither retiring nor live, and retires one thread too many.
                        self._retire -= 1
                        self._live -= 1
                        log.debug("%s: %s retired", self.name, slot.thread.name)
                        return True
                    task = take()
                    if task is not None:
                        break
                    wait(self._work, self._lock)
                self._busy += 1
                slot.task = task
                slot.started = started = time.monotonic()
            result = make(task)
            if record is not None:
                record(time.monotonic() - started)
            with self._lock:
                if slot.abandoned:
                    return False  # the watchdog gave up on this call and accounted for it
                slot.started = None
                slot.task = None
                self._busy -= 1
                if not self._busy or self._selective_waiters:
                    self._idle.notify_all()
            if not put(task, result):
                return False

    def _watch(self) -> None:
        timeout = self.call_timeout
        assert timeout is not None
        pause = timeout
        while True:
            stuck: list[CallSlot] = []
            with self._lock:
                if not self._stopping:
                    wait(self._watchdog_wake, self._lock, pause)
                if self._stopping:
                    return
                now = time.monotonic()
                pause = timeout
                for slot in self._slots:
                    started = slot.started
                    if started is None or slot.abandoned:
                        continue
                    if now - started >= timeout:
                        slot.abandoned = True
                        self._busy -= 1
                        self._live -= 1
                        stuck.append(slot)
                    else:
                        pause = min(pause, started + timeout - now)
                if stuck and not self._busy:
                    self._idle.notify_all()
            for slot in stuck:
                if self._on_stuck is not None:
                    self._on_stuck(slot)


def _ended(thread: threading.Thread) -> bool:
    """Whether ``thread`` ran and has ended; not one whose ``start()`` has yet to mark it started."""
    return thread._started.is_set() and not thread.is_alive()


def _join(thread: threading.Thread, deadline: float | None) -> None:
    """Join ``thread`` until ``deadline`` (monotonic; None: for ever), also one launched a moment ago.

    A ``Thread.start()`` interrupted by Ctrl-C can leave a thread launched but not
    yet marked started, which ``join`` refuses; it is marked within moments.
    """
    if thread.ident is None:
        return  # never launched
    while True:
        try:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            return
        except RuntimeError:  # launched, not yet marked started
            if deadline is not None and time.monotonic() >= deadline:
                return
            time.sleep(0.001)
