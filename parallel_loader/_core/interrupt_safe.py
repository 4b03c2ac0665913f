"""Waits and wake-ups that a Ctrl-C cannot leave half done.

CPython runs a pending signal handler (Ctrl-C's ``KeyboardInterrupt``) in the main
thread at three points: right after a C call returns, as a function starts, and on
a backward jump. ``threading.Condition.wait`` releases its lock and only then
enters the ``try`` whose ``finally`` takes it back. An interrupt landing between
the two leaves the lock released. The caller's ``with lock`` then fails with a
``RuntimeError`` ("release unlocked lock") instead of raising the interrupt. With
a plain ``Lock``, it may even release the lock while another thread holds it. The
wait may also leave its waiter queued in the condition, where it takes a later
``notify()`` that a real waiter needed.

``wait`` mends both. On any exception out of the wait, it takes the lock back if
this thread no longer holds it (an ``RLock`` knows its owner). Then it wakes every
waiter, so the stale one is gone and the others re-check what they wait for. Each
caller waits in a loop on its own condition, so a spurious wake-up costs nothing.

So the lock must be an ``RLock``, and:

* it is taken once, since ``wait`` takes it back once, not as many times as it was held;
* it is taken with ``with lock``, whose C-level ``__enter__`` cannot be interrupted half way;
* it is never taken ``with`` the condition. ``Condition.__enter__`` is Python code:
  an interrupt after its acquire would keep the lock for ever.

For the same reason, code that may run in the main thread uses no
``threading.Event`` of its own: ``Event.set()`` goes through ``Condition.__enter__``.

An interrupt inside ``Condition.notify_all`` leaves the waiters after the point
it reached asleep: when that wake-up was a stop, they would wait for ever.
``notify_all`` makes the wake-ups again before raising.

A KeyboardInterrupt raised in Python code that runs as an object is freed is not
raised at all. Such code is a weakref callback or a ``__del__``. The interpreter
prints "Exception ignored" and the Ctrl-C is lost. ``threading`` keeps every
``Thread`` in a ``WeakSet`` whose callback is Python code. A loader's thread objects
sit in reference cycles, so they are freed in the main thread. The garbage
collector frees them at any allocation, long after the loader closed, or where
their last reference goes. ``new_thread`` makes threads whose freeing runs no
Python code.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["interrupts_deferred", "new_lock", "new_thread", "notify_all", "wait"]

_DANGLING = getattr(threading, "_dangling", None)  # the WeakSet of every Thread made (see new_thread)


def new_lock() -> threading.RLock:
    """The lock to share with the conditions passed to ``wait``."""
    return threading.RLock()


def new_thread(target: Callable[..., object], name: str, args: tuple[Any, ...] = ()) -> threading.Thread:
    """A daemon ``Thread`` (not started) whose object, when freed, runs no Python code a Ctrl-C could be lost in.

    It is taken out of ``threading._dangling``, the ``WeakSet`` of every thread
    made. That set only serves two ends: it resets the locks of threads that ended
    before a ``fork()``, and it lists threads for CPython's own tests. The loader
    needs neither: none of its threads is joined after a ``fork()``. A Ctrl-C is
    held back from the moment ``Thread.__init__`` adds it there until it is out.
    Call from any thread.
    """
    with interrupts_deferred():
        thread = threading.Thread(target=target, name=name, args=args, daemon=True)
        try:
            _undangle(thread)
        except BaseException:  # an interrupt that is no signal (a trace function's)
            _undangle(thread)
            raise
    return thread


def _undangle(thread: threading.Thread) -> None:
    if _DANGLING is not None:
        _DANGLING.discard(thread)


def wait(cond: threading.Condition, lock: threading.RLock, timeout: float | None = None) -> bool:
    """``cond.wait(timeout)``, with ``lock`` (``cond``'s) held again however the wait ends.

    Call with ``lock`` held once (not recursively), from any thread. Returns what
    ``Condition.wait`` returns.
    """
    try:
        return cond.wait(timeout)
    except BaseException:
        if not lock._is_owned():  # interrupted after the wait released it, before it took it back
            lock.acquire()
        cond.notify_all()  # takes out a waiter the interrupted wait may have left queued
        raise


def notify_all(*conds: threading.Condition) -> None:
    """Wake every waiter of each condition (their lock held), all of them even if a Ctrl-C cuts in.

    Call with the conditions' lock held, from any thread.
    """
    try:
        for cond in conds:
            cond.notify_all()
    except BaseException:
        for cond in conds:
            cond.notify_all()
        raise


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """In the main thread, hold a Ctrl-C back until the block ends, then raise it.

    For ``threading``'s own code, which no ``try`` of ours can mend.
    ``Thread.start()`` waits on an Event. A KeyboardInterrupt raised there inside
    ``Condition.__enter__``, just after its lock is taken, leaves that lock held.
    The new thread then blocks for ever in ``Event.set()``. A KeyboardInterrupt
    raised as ``Thread.__init__`` ends leaves a thread in ``threading._dangling``
    (see ``new_thread``). Elsewhere, and when SIGINT has a handler of the user's,
    nothing is changed.
    """
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    received: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        except BaseException:  # an interrupt that is no signal (a trace function's): Ctrl-C must raise again
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise
        if received:
            raise KeyboardInterrupt
