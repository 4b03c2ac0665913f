"""How an exception crosses from a worker process to the loader: pickled, with its traceback as text.

The worker sends ``portable(exc)``: the exception, or a ``RuntimeError`` that
stands for it when it cannot be pickled, and its traceback as text. The loader
raises ``rebuilt(exc, text)``, whose ``__cause__`` shows that traceback, as
``concurrent.futures`` does. See :doc:`/guide/threads_and_processes`.
"""

from __future__ import annotations

import pickle
import threading
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from .worker_launch import dumps_back

__all__ = ["RemoteTraceback", "hook_everywhere", "portable", "rebuilt"]


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker process, as text (its ``__cause__``)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


def portable(exc: BaseException) -> tuple[BaseException, str]:
    """``exc``, or a ``RuntimeError`` standing for it if it cannot be pickled, and its traceback as text.

    The stand-in keeps the notes of ``exc``.
    """
    text = "".join(traceback.format_exception(exc))
    try:
        pickle.loads(dumps_back(exc))
        return exc, text
    except Exception as why:
        stand_in = RuntimeError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc} (not picklable: {why!r})")
        for note in getattr(exc, "__notes__", ()):
            stand_in.add_note(note)
        return stand_in, text


def rebuilt(exc: BaseException, text: str) -> BaseException:
    """``exc`` from a worker, its ``__cause__`` set to its traceback ``text``; returns ``exc``."""
    exc.__cause__ = RemoteTraceback(f'\n"""\n{text}"""')
    return exc


def hook_everywhere(
    own: Callable[[int], Any],
    lock: threading.RLock,
    running: Callable[[], Iterable[Any]],
    tell: Callable[[Any, int], tuple[BaseException, str] | None],
) -> Callable[[int], None]:
    """An epoch hook run here, then in each worker ``running()`` lists; raises the first failure ``tell`` answers.

    The hook runs here under ``lock``, the lock under which workers start. So a worker
    starting meanwhile either gets the state after the hook, or is among those told.
    """

    def run(epoch: int) -> None:
        with lock:
            own(epoch)
            workers = list(running())
        for worker in workers:
            reply = tell(worker, epoch)
            if reply is not None:  # the hook raised in the worker
                raise rebuilt(*reply)

    return run
