"""Start a worker interpreter that runs nothing of the user's script: ``WorkerProcess``.

``multiprocessing``'s ``spawn`` runs the main script's imports again in every
child. A training script imports TensorFlow at its top, so each worker would
take hundreds of megabytes and seconds to start. Here a worker is a fresh
``python -c`` that ignores Ctrl-C and calls ``worker_main.boot``. The interpreter
is the one ``multiprocessing.set_executable`` names, ``sys.executable`` by default.
Its pipes are inherited file descriptors. Its work (the yield function and
``thread_init``) comes on a boot pipe of its own, pickled with cloudpickle
(``dumps``). So what the user's script defines travels by value, and the worker
imports only the modules that code names. See :doc:`/guide/threads_and_processes`.

Starting is two steps. ``start`` runs the interpreter, which takes a few
milliseconds. ``send_boot`` then writes the work, which waits for the new
interpreter to read it: seconds for a large pickle. A caller holding a lock
releases it between the two.

Objects crossing back (batches, errors) are pickled by reference when they can
be, and by value otherwise (``dumps_back``). So a batch or an exception of a
class from the user's script still arrives.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import subprocess
import sys
from multiprocessing import spawn
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

import cloudpickle
import psutil

__all__ = ["WorkerProcess", "dumps", "dumps_back", "executable", "worker_children"]

# The worker's program, in the standard library alone until sys.path is the consumer's: the package is then
# found as the consumer found it. Ctrl-C is the consumer's, so it is ignored before anything else runs.
# Its arguments are the file descriptors of the boot pipe, the control pipe and the lanes.
_BOOT = (
    "import os, pickle, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "from multiprocessing.connection import Connection; "
    "pipe = Connection(int(sys.argv[1]), writable=False)\n"
    "try: path, args = pickle.loads(pipe.recv_bytes()); payload = pipe.recv_bytes()\n"
    "except (EOFError, OSError): os._exit(0)\n"
    "pipe.close(); sys.path[:] = path\n"
    "from parallel_loader._calls.worker_main import boot; boot(Connection(int(sys.argv[2])), (payload, *args))"
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
        boot: the arguments of ``worker_main`` between the payload and the pipes.
        payload: the pickled ``(yield_fn, thread_init)`` (``dumps``); every worker may share one.
        control: the worker's end of the control pipe.
        lanes: the worker's ends of the lane pipes.
    """

    def __init__(
        self, name: str, boot: tuple[Any, ...], payload: bytes, control: Connection, lanes: list[Connection]
    ) -> None:
        self.name = name
        self._boot = boot
        self._payload = payload
        self._ends = [control, *lanes]
        self._popen: subprocess.Popen[bytes] | None = None
        self._boot_end: Connection | None = None  # ours, until send_boot has written the work

    @property
    def pid(self) -> int | None:
        """The process id, once started."""
        return None if self._popen is None else self._popen.pid

    @property
    def exitcode(self) -> int | None:
        """None while it runs; its exit status after, negative for the signal that ended it."""
        return None if self._popen is None else self._popen.poll()

    @property
    def booting(self) -> bool:
        """Started, and its work not yet written: it has nothing to finish, so it may be killed at once."""
        return self._boot_end is not None

    def start(self) -> None:
        """Start the interpreter and hand it its pipes; ``send_boot`` then gives it its work.

        Raises:
            OSError: the interpreter could not be started.
        """
        reader, self._boot_end = multiprocessing.Pipe(duplex=False)
        ends = [reader, *self._ends]
        fds = [end.fileno() for end in ends]
        try:
            self._popen = subprocess.Popen(
                # The interpreter's flags (-O, -X dev, -W) as multiprocessing passes them to its children.
                [executable(), *subprocess._args_from_interpreter_flags(), "-c", _BOOT, *map(str, fds)],
                pass_fds=fds,
                stdin=subprocess.DEVNULL,
                process_group=0,  # a Ctrl-C at the terminal is the consumer's alone, even while a worker starts
            )
        except BaseException:
            self._boot_end.close()
            self._boot_end = None
            raise
        finally:
            for end in ends:
                end.close()  # the worker holds them now: its death is a broken pipe here

    def send_boot(self) -> None:
        """Write the worker's work on its boot pipe, then close the pipe. Call once, after ``start``, without locks.

        It waits until the new interpreter reads the work. A worker that died, or
        was killed meanwhile (``booting``), ends it with a broken pipe. That is not
        raised: the lanes' broken pipes tell the loader threads.
        """
        end = self._boot_end
        if end is None:
            return
        try:
            # sys.path first: what the payload names by reference is found as in this process. The
            # payload goes as it is, not inside another pickle, which would copy it.
            with contextlib.suppress(OSError):
                end.send_bytes(pickle.dumps((list(sys.path), self._boot), protocol=pickle.HIGHEST_PROTOCOL))
                end.send_bytes(self._payload)
        finally:
            self._boot_end = None
            self._payload = b""  # read by the worker, or never to be: not kept alive here
            end.close()

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


def executable() -> str | bytes:
    """The interpreter a worker runs: ``multiprocessing.set_executable``'s, else ``sys.executable``."""
    return spawn.get_executable() or sys.executable


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
