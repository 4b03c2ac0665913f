"""Start a worker interpreter that runs nothing of the user's script: ``WorkerProcess``.

``multiprocessing``'s ``spawn`` runs the main script's imports again in every
child. A training script imports TensorFlow at its top, so each worker would
take hundreds of megabytes and seconds to start. Here a worker is a fresh
``python -c`` that ignores Ctrl-C and calls ``worker_main.boot``. Its pipes are
inherited file descriptors. Its work (the yield function and ``thread_init``)
comes on the control pipe, pickled with cloudpickle (``dumps``). So what the
user's script defines travels by value, and the worker imports only the modules
that code names. See :doc:`/guide/threads_and_processes`.

Objects crossing back (batches, errors) are pickled by reference when they can
be, and by value otherwise (``dumps_back``). So a batch or an exception of a
class from the user's script still arrives.
"""

from __future__ import annotations

import contextlib
import pickle
import subprocess
import sys
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

import cloudpickle
import psutil

__all__ = ["WorkerProcess", "dumps", "dumps_back", "worker_children"]

# The worker's program, in the standard library alone until sys.path is the consumer's: the package is then
# found as the consumer found it. Ctrl-C is the consumer's, so it is ignored before anything else runs.
_BOOT = (
    "import os, pickle, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "from multiprocessing.connection import Connection; "
    "control = Connection(int(sys.argv[1]))\n"
    "try: path, args = pickle.loads(control.recv_bytes())\n"
    "except (EOFError, OSError): os._exit(0)\n"
    "sys.path[:] = path; from parallel_loader._calls.worker_main import boot; boot(control, args)"
)


def dumps(obj: Any) -> bytes:
    """``obj`` pickled for a worker: what the user's script defines goes by value (cloudpickle).

    Raises:
        Exception: whatever cloudpickle raises for an object that cannot be pickled.
    """
    return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def dumps_back(obj: Any) -> bytes:
    """``obj`` pickled by reference, as ``multiprocessing`` does, or by value where that fails.

    The first is the common case and the fast one. The second serves the classes of the
    user's script, which exist in this worker only because cloudpickle made them.
    """
    try:
        return bytes(ForkingPickler.dumps(obj))
    except Exception:  # PicklingError, or whatever a __reduce__ raises: cloudpickle may still manage
        return dumps(obj)


class WorkerProcess:
    """One worker interpreter, started with its pipes; the parts of ``multiprocessing.Process`` the loader uses.

    Args:
        name: the worker's name, for messages.
        boot: what ``worker_main.boot`` needs, sent pickled on ``control`` once it starts:
            the arguments of ``worker_main`` before the pipes.
        control: the worker's end of the control pipe.
        lanes: the worker's ends of the lane pipes.
    """

    def __init__(self, name: str, boot: tuple[Any, ...], control: Connection, lanes: list[Connection]) -> None:
        self.name = name
        self._boot = boot
        self._ends = [control, *lanes]
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The process id, once started."""
        return None if self._popen is None else self._popen.pid

    @property
    def exitcode(self) -> int | None:
        """None while it runs; its exit status after, negative for the signal that ended it."""
        return None if self._popen is None else self._popen.poll()

    def start(self, parent_control: Connection) -> None:
        """Start the interpreter, hand it its pipes, and send it ``boot`` on ``parent_control``.

        Raises:
            OSError: the interpreter could not be started.
        """
        fds = [end.fileno() for end in self._ends]
        try:
            self._popen = subprocess.Popen(
                # The interpreter's flags (-O, -X dev, -W) as multiprocessing passes them to its children.
                [sys.executable, *subprocess._args_from_interpreter_flags(), "-c", _BOOT, *map(str, fds)],
                pass_fds=fds,
                stdin=subprocess.DEVNULL,
                process_group=0,  # a Ctrl-C at the terminal is the consumer's alone, even while a worker starts
            )
        finally:
            for end in self._ends:
                end.close()  # the worker holds them now: its death is a broken pipe here
        # sys.path first: what the payload names by reference is found as in this process.
        message = pickle.dumps((list(sys.path), self._boot), protocol=pickle.HIGHEST_PROTOCOL)
        with contextlib.suppress(OSError):  # it died at once: the lanes' broken pipes tell the loader threads
            parent_control.send_bytes(message)

    def join(self, timeout: float | None = None) -> None:
        """Wait until it ends, at most ``timeout`` seconds."""
        if self._popen is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout)

    def kill(self) -> None:
        """Send it SIGKILL (nothing if it has ended)."""
        if self._popen is not None and self._popen.poll() is None:
            self._popen.kill()


def worker_children() -> list[int]:
    """The process ids of this process's worker processes still running (or not yet reaped)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if _BOOT in child.cmdline():
                found.append(child.pid)
        except psutil.Error:
            continue  # ended meanwhile
    return found
