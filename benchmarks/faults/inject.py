"""How a fault other than a failing call reaches a run: real SIGINTs, a timed close or SIGINT, a traced line.

``Interrupts`` owns the process's SIGINT handler for the whole campaign;
``Trigger`` starts a close or a SIGINT at a chosen batch; ``LineTrap`` raises
``KeyboardInterrupt`` at a chosen line of the package's code, and ``traced`` puts
a run under it. The module knows nothing of what a run consumes or of how its
outcome is judged.
"""

from __future__ import annotations

import dis
import linecache
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import parallel_loader
from parallel_loader import DataLoader

from .config import LEAK_GRACE, Config, Outcome

__all__ = ["Interrupts", "LineTrap", "Trigger", "traced"]


class Interrupts:
    """Real SIGINTs to the main thread, raised as Python's own handler raises a Ctrl-C, only while armed.

    Armed, SIGINT has Python's default handler (so the loader sees the setting a
    user's program has); disarmed, it is ignored, so that a signal sent as a run
    ended cannot land in the checks. Both switches happen in the main thread, where
    Python runs the handler, so a signal is either raised in the run or ignored.
    """

    def __init__(self) -> None:
        self.ignored = 0  # SIGINTs that came while disarmed
        self._previous = signal.signal(signal.SIGINT, self._ignore)

    def arm(self) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def disarm(self) -> None:
        signal.signal(signal.SIGINT, self._ignore)

    def restore(self) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _ignore(self, signum: int, frame: Any) -> None:
        self.ignored += 1


class Trigger:
    """Starts a run's close or SIGINT ``cfg.delay`` seconds after batch ``cfg.at`` is delivered (-1: at once).

    ``fire(batch)`` is called by the consumer before each batch's work and once
    before the first with -1.
    """

    def __init__(self, cfg: Config, interrupts: Interrupts, loader: DataLoader | None = None) -> None:
        self.at = cfg.at if cfg.fault in ("close", "sigint", "train_sigint") else None
        self.delay = cfg.delay
        self.timer: threading.Timer | None = None
        self.fired = False
        self.sent = False  # whether the SIGINT was sent
        if cfg.fault == "close":
            assert loader is not None
            self.action, self.args, self.kwargs = loader.close, (), {"timeout": cfg.delay * 5}
        else:
            main = threading.main_thread().ident
            self.action, self.args, self.kwargs = self._send, (main,), {}
            if self.at is not None:
                interrupts.arm()

    def fire(self, batch: int) -> None:
        if batch == self.at and not self.fired:
            self.fired = True
            self.timer = threading.Timer(self.delay, self.action, self.args, self.kwargs)
            self.timer.name = "faults-trigger"
            self.timer.start()

    def cancel(self) -> None:
        """Stop the timer if it has not fired, wait for its action, and let go of it. Call while disarmed.

        The timer is freed here then, not by the garbage collector in a later run
        (this trigger, its timer and the timer's bound method are a reference cycle):
        freeing a ``Thread`` runs ``threading``'s weakref callback, Python code in
        which a SIGINT that lands is lost (see ``parallel_loader._core.interrupt_safe``).
        Here, disarmed, one is counted by the ignoring handler.
        """
        timer, self.timer = self.timer, None
        if timer is not None:
            timer.cancel()
            timer.join(LEAK_GRACE)

    def _send(self, thread: int) -> None:
        signal.pthread_kill(thread, signal.SIGINT)
        self.sent = True


class LineTrap:
    """A trace function that raises KeyboardInterrupt at the ``line``-th line run in the watched code.

    Watched: the package, and ``threading.Condition``'s methods, through which the
    package waits and wakes. The rest of ``threading`` is not: an interrupt inside
    ``Thread.start`` or the module's own bookkeeping breaks the interpreter's
    thread registry whatever the caller does (the loader defers Ctrl-C around
    ``start()`` for that reason), and is not what this campaign tests.
    """

    def __init__(self, line: int) -> None:
        package = Path(parallel_loader.__file__).parent
        self.watched = {str(p) for p in package.rglob("*.py")}
        self.line = line
        self.count = 0
        self.where: list[str] = []  # the innermost frames where it raised

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        if code.co_filename in self.watched:
            return self._local
        if _is_condition(frame) and (
            frame.f_back.f_code.co_filename in self.watched
            or (_is_condition(frame.f_back) and frame.f_back.f_back.f_code.co_filename in self.watched)
        ):
            return self._local  # a condition method the package called (notify_all calls notify)
        return None

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and _signal_can_land(frame):
            self.count += 1
            if self.count == self.line:
                sys.settrace(None)
                self.where[:] = [
                    f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in traceback.extract_stack(frame)[-4:]
                ]
                raise KeyboardInterrupt
        return self._local


_NOP = dis.opmap["NOP"]


def _is_condition(frame: Any) -> bool:
    code = None if frame is None else frame.f_code
    return code is not None and code.co_filename == threading.__file__ and code.co_qualname.startswith("Condition.")


def _signal_can_land(frame: Any) -> bool:
    """Whether a KeyboardInterrupt raised at this line event is one a real Ctrl-C could cause.

    CPython raises a signal's exception only after a call returns, at a function's
    start and on a backward jump. Two kinds of line event stand where none can:
    a ``NOP`` (the ``try:`` of a ``try`` statement compiles to one, outside the
    enclosing ``with``'s exception handler), and the second event of a ``with``
    line, where its block ends, before ``__exit__`` is called. Every event of a
    line that starts with ``with`` is left out: its first, before the lock or
    context is taken, is the same point as the end of the line before it.
    Line-level tracing also misses points a signal can reach (between a call's
    return and the store of its result, and inside the standard library's own
    Python code beyond ``threading.Condition``); the real SIGINTs cover those.
    """
    if frame.f_code.co_code[frame.f_lasti] == _NOP:
        return False
    return not linecache.getline(frame.f_code.co_filename, frame.f_lineno).lstrip().startswith("with ")


@contextmanager
def traced(cfg: Config, outcome: Outcome) -> Iterator[None]:
    """For a trace fault, run the block under a ``LineTrap`` for ``cfg.line``; for the others, as it is."""
    if cfg.fault not in ("trace", "train_trace"):
        yield
        return
    trap = LineTrap(cfg.line)
    outcome.where = trap.where
    sys.settrace(trap)
    try:
        yield
    finally:
        sys.settrace(None)
