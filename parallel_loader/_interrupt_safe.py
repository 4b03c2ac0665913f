"""Waits and wake-ups that a Ctrl-C cannot leave half done.

CPython runs a pending signal handler (Ctrl-C's ``KeyboardInterrupt``) in the main
thread right after a C call returns, as a function starts, and on a backward jump.
``threading.Condition.wait`` releases its lock and only then enters the ``try``
whose ``finally`` takes it back, so an interrupt landing between the two leaves the
lock released; the caller's ``with lock`` then fails with a ``RuntimeError`` ("release
unlocked lock") instead of raising the interrupt, and with a plain ``Lock`` it may
release the lock while another thread holds it. The wait may
also leave its waiter queued in the condition, where it takes a later ``notify()``
that a real waiter needed.

``wait`` mends both: on any exception out of the wait it takes the lock back if
this thread no longer holds it (an ``RLock`` knows its owner) and wakes every
waiter, so the stale one is gone and the others re-check what they wait for (each
caller waits in a loop on its own condition, so a spurious wake-up costs nothing).
The lock must therefore be an ``RLock``, taken once (``wait`` takes it back once,
not as many times as it was held), with ``with lock`` (its C-level ``__enter__``
cannot be interrupted half way), never ``with`` the condition
(``Condition.__enter__`` is Python code: an interrupt after its acquire would keep
the lock for ever). For the same reason, code that may run in the main thread uses
no ``threading.Event`` of its own: ``Event.set()`` goes through ``Condition.__enter__``.

An interrupt inside ``Condition.notify_all`` leaves the waiters after the point
it reached asleep: when that wake-up was a stop, they would wait for ever.
``notify_all`` makes the wake-ups again before raising.
"""

from __future__ import annotations

import threading

__all__ = ["new_lock", "notify_all", "wait"]


def new_lock() -> threading.RLock:
    """The lock to share with the conditions passed to ``wait``."""
    return threading.RLock()


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
