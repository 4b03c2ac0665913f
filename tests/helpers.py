"""Deterministic helpers for testing blocking calls."""

from __future__ import annotations

import importlib.util
import pickle
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from parallel_loader import DataLoader, YieldFunction

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# How long the trigger waits before releasing a call that should block. Long
# enough for the call to reach its wait on a loaded machine; the test is still
# correct if the wait is reached later, only it then proves less.
TRIGGER_DELAY = 0.1


def assert_blocks_until(block: Callable[[], Any], trigger: Callable[[], Any]) -> Any:
    """Call ``block()`` here; a second thread calls ``trigger()`` a moment later.

    Asserts that ``block`` did not return before ``trigger`` ran, which proves it
    blocked (as CPython's test_queue does). Returns what ``block`` returned, or
    re-raises what it raised.
    """
    triggered = threading.Event()

    def run_trigger() -> None:
        time.sleep(TRIGGER_DELAY)
        triggered.set()
        trigger()

    thread = threading.Thread(target=run_trigger, name="trigger")
    thread.start()
    try:
        result = block()
    finally:
        thread.join(5)
        assert not thread.is_alive(), "trigger thread did not end"
    assert triggered.is_set(), "the call returned before the trigger: it did not block"
    return result


def run_in_thread(fn: Callable[[], Any], name: str = "helper") -> tuple[threading.Thread, dict[str, Any]]:
    """Start ``fn`` in a thread; the dict gets 'result' or 'error' when it ends."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = fn()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target, name=name)
    thread.start()
    return thread, outcome


def join_all(threads: list[threading.Thread], timeout: float = 5.0) -> None:
    """Join every thread within ``timeout`` seconds in all; fail if one is still alive."""
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    assert not alive, f"threads did not end in {timeout} s: {alive}"


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` by its path (the examples are scripts, not a package).

    The examples folder is put on ``sys.path`` first, as when a script there runs,
    so that an example can import its neighbours.
    """
    if str(EXAMPLES) not in sys.path:
        sys.path.append(str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The most seconds a Faulty call hangs: a test that never releases it fails
# instead of hanging for ever.
HANG_LIMIT = 10.0


class Faulty(YieldFunction):
    """Batch ``i`` is ``i``, except at the indices chosen to fail or to hang.

    Args:
        length: batches per epoch.
        fail: index -> exception class raised (with the message ``"bad <index>"``) for it.
        hang: indices whose call waits for ``release`` (``HANG_LIMIT`` seconds at most).
    """

    def __init__(self, length: int, fail: dict[int, type[BaseException]] | None = None, hang: Any = ()) -> None:
        self.length = length
        self.fail = dict(fail or {})
        self.hang = set(hang)
        self.release = threading.Event()
        self.hung = threading.Event()  # set when a call starts to hang
        self.hung_threads: list[threading.Thread] = []

    def __len__(self) -> int:
        return self.length

    def __call__(self, index: int) -> int:
        if index in self.hang:
            self.hung_threads.append(threading.current_thread())
            self.hung.set()
            hang_until_released(self.release)
        error = self.fail.get(index)
        if error is not None:
            raise error(f"bad {index}")
        return index

    def unhang(self) -> None:
        """Release every hung call and wait for the threads that made them to end.

        Call it once the loader is closed, or the watchdog gave up on those calls:
        otherwise the threads go on to their next call.
        """
        self.release.set()
        join_all(self.hung_threads)


def hang_until_released(release: threading.Event) -> None:
    """Where a hung call waits: the watchdog's stack of it names this function."""
    if not release.wait(HANG_LIMIT):
        raise AssertionError(f"a hung call was not released within {HANG_LIMIT} s")


def resumed_rest(source: Any, *, batches: int = 1, threads: int = 2) -> list[Any]:
    """The batches a loader restored after ``batches`` of an epoch gives, over a pickled copy of ``source``.

    The first loader stops after ``batches``; the second, with ``threads`` threads, loads its state.
    """
    with DataLoader(source, num_threads=2, seed=1, ordered=True, name="cut") as loader:
        delivered = iter(loader)
        for _ in range(batches):
            next(delivered)
        state = loader.state_dict(batches=batches)
    resumed = DataLoader(pickle.loads(pickle.dumps(source)), num_threads=threads, seed=1, ordered=True, name="resumed")
    resumed.load_state_dict(state)
    with resumed:
        return list(resumed)
