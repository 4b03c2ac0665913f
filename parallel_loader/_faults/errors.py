"""The exceptions a loader raises in the consuming thread, one per meaning.

These are the loader's own. A yield function's own exception is raised as it
is, with the loader thread's traceback and a note naming the thread and the index.
See :doc:`/guide/long_runs`.
"""

from __future__ import annotations

from .._core.exceptions import PicklesAsItself

__all__ = ["ErrorBudgetExceeded", "LoaderClosed", "LoaderTimeout", "WorkerProcessDied"]


class LoaderClosed(RuntimeError):
    """The DataLoader was closed: it cannot start an epoch, or was closed during one."""


class LoaderTimeout(PicklesAsItself, TimeoutError):
    """A call of the yield function ran longer than the loader's ``call_timeout``.

    The message names the thread, the index and the time the call had run, and
    shows the stuck thread's stack at that moment.

    Attributes:
        thread: the name of the loader thread stuck in the call.
        index: the index it was called with (``None`` for a stream).
        elapsed: seconds the call had run when the watchdog saw it.
    """

    def __init__(self, message: str, thread: str, index: int | None, elapsed: float) -> None:
        super().__init__(message)
        self.thread = thread
        self.index = index
        self.elapsed = elapsed


class ErrorBudgetExceeded(PicklesAsItself, RuntimeError):
    """More yield-function calls failed than ``max_errors`` allows.

    Attributes:
        errors: the records of every failure so far (``ErrorRecord``).
        budget: the ``max_errors`` the loader was given.
    """

    def __init__(self, message: str, errors: list, budget: int | float) -> None:
        super().__init__(message)
        self.errors = errors
        self.budget = budget


class WorkerProcessDied(PicklesAsItself, RuntimeError):
    """A worker process (``processes=P``) or Ray actor (``workers=``) ended while making a batch: a crash.

    A segfault in native code or the kernel's OOM killer, say. The message names
    the process, its exit code (negative: the signal that ended it) and the index.
    Every call in progress in that process when it died fails with this error,
    since which of them caused it cannot be told. The process is replaced, so
    with ``on_error="skip"`` the loader goes on. An actor is replaced only up to
    its ``max_restarts``; see :doc:`/guide/ray_cluster`.

    Attributes:
        process: the name of the worker process, or of the actor.
        exitcode: its exit code (``-9`` for SIGKILL), ``None`` if it could not be read (always for an actor).
        index: the index of the call that was in progress.
    """

    def __init__(self, message: str, process: str, exitcode: int | None, index: int | None) -> None:
        super().__init__(message)
        self.process = process
        self.exitcode = exitcode
        self.index = index
