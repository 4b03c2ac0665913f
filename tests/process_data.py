"""Yield functions for process-mode tests: at module level, so that worker processes can unpickle them."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np

from parallel_loader import YieldFunction


class Arrays(YieldFunction):
    """Batch ``i``: a dict with an image full of ``i``, a tuple of labels, and the worker's pid."""

    def __init__(self, length: int = 12, fail_at: tuple[int, ...] = (), size: int = 32) -> None:
        self.length = length
        self.fail_at = fail_at
        self.size = size

    def __len__(self) -> int:
        return self.length

    def __call__(self, index: int):
        if index in self.fail_at:
            raise ValueError(f"bad index {index}")
        image = np.full((self.size, self.size, 3), index % 256, np.uint8)
        return {"image": image, "labels": (np.arange(300) + index, index), "pid": os.getpid()}


class Hooked(YieldFunction):
    """Records its epoch hooks; each batch says which epoch its process was told of."""

    def __init__(self, length: int = 6) -> None:
        self.length = length
        self.epoch = -1
        self.calls: list[tuple[str, int]] = []

    def __len__(self) -> int:
        return self.length

    def on_epoch_begin(self, epoch: int) -> None:
        self.epoch = epoch
        self.calls.append(("begin", epoch))

    def on_epoch_end(self, epoch: int) -> None:
        self.calls.append(("end", epoch))

    def __call__(self, index: int):
        return self.epoch, index


class Samples:
    """A sample dataset: sample ``i`` is an array of ``i``, and ``i`` itself."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int):
        return np.full(400, index, np.int32), index


_local = threading.local()


def remember_number(number: int) -> None:
    """A thread_init: the batches of this thread carry its number."""
    _local.number = number


def failing_init(number: int) -> None:
    raise OSError(f"no decoder for thread {number}")


class ThreadNumbers(YieldFunction):
    def __len__(self) -> int:
        return 8

    def __call__(self, index: int):
        return index, _local.number, os.getpid()


class SpinningNumbers(ThreadNumbers):
    """``ThreadNumbers`` of ``length`` batches, each ``spin_ms`` of pure Python first: the GIL is all it waits for."""

    def __init__(self, length: int, spin_ms: float) -> None:
        self.length = length
        self.spin_ms = spin_ms

    def __len__(self) -> int:
        return self.length

    def __call__(self, index: int):
        end = time.perf_counter() + self.spin_ms / 1000
        while time.perf_counter() < end:
            pass
        return super().__call__(index)


class Trouble(YieldFunction):
    """Index ``at`` hangs (``"hang"``) or kills its own process (``"kill"``); the others return ``index``."""

    def __init__(self, what: str, at: int = 2, length: int = 8) -> None:
        self.what = what
        self.at = at
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __call__(self, index: int):
        if index == self.at:
            if self.what == "hang":
                wait_for_ever()
            if self.what == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
        return index


def wait_for_ever() -> None:
    while True:
        time.sleep(0.05)


class Unpicklable(YieldFunction):
    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return 3

    def __call__(self, index: int):
        return index


class Reporting(YieldFunction):
    """Skips a bad sample of index 1 itself and reports it through the loader's error sink."""

    def __init__(self) -> None:
        self.sink = None

    def set_error_sink(self, sink) -> None:
        self.sink = sink

    def __len__(self) -> int:
        return 4

    def __call__(self, index: int):
        if index == 1 and self.sink is not None:
            self.sink(index, OSError("clip_1.mp4 is truncated"), {"path": "clip_1.mp4", "pid": os.getpid()})
        return index


class IndexedSamples:
    """A sample dataset whose sample ``i`` carries ``i``: ``((features, i), target)``, and raises at ``bad``."""

    def __init__(self, length: int = 40, bad: int | None = None) -> None:
        self.length = length
        self.bad = bad

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        if index == self.bad:
            raise ValueError(f"bad sample {index}")
        features = np.random.default_rng(index).normal(size=4).astype(np.float32)
        return (features, np.int32(index)), np.float32(features.sum() + 1)


class BadSamples:
    """A sample dataset of ``length`` numbers in which the samples ``bad`` always raise."""

    def __init__(self, length: int, bad: tuple[int, ...] = ()) -> None:
        self.length = length
        self.bad = set(bad)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        if index in self.bad:
            raise ValueError(f"sample {index} is corrupt")
        return index


class DiesOnce(Trouble):
    """Index ``at`` kills its own process the first time only: ``marker`` is made then, on a disk all share."""

    def __init__(self, marker: str, at: int = 2, length: int = 6) -> None:
        super().__init__("kill", at, length)
        self.marker = marker

    def __call__(self, index: int):
        if index == self.at:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return index
        return super().__call__(index)


class Pairs:
    """A sample dataset for a one-weight regression: sample ``i`` is ``([i, 1] / length, i / length)``."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        x = np.array([index, 1], np.float32) / self.length
        return x, np.float32(index / self.length)


class HookedDiesOnce(Hooked):
    """``Hooked``, whose process kills itself at index ``at`` of epoch ``die_epoch``, once: ``marker`` is made then."""

    def __init__(self, marker: str, die_epoch: int, at: int = 2, length: int = 6) -> None:
        super().__init__(length)
        self.marker = marker
        self.die_epoch = die_epoch
        self.at = at

    def __call__(self, index: int):
        if (self.epoch, index) == (self.die_epoch, self.at):
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
                os.kill(os.getpid(), signal.SIGKILL)
            except FileExistsError:
                pass
        return super().__call__(index)


class SlowInitElsewhere:
    """A thread_init that takes ``seconds`` in every worker process but the first to run it (marked in ``mark``)."""

    def __init__(self, mark: str, seconds: float) -> None:
        self.mark = mark
        self.seconds = seconds

    def __call__(self, number: int) -> None:
        remember_number(number)
        try:
            fd = os.open(self.mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
        except FileExistsError:
            time.sleep(0.05)  # the first process writes its pid right after creating the file
            with open(self.mark) as file:
                if file.read().strip() != str(os.getpid()):
                    time.sleep(self.seconds)


class HoldsTheGil(YieldFunction):
    """Index ``at`` blocks ``seconds`` in C with the GIL held, as a decoder stuck in C would; returns the index."""

    def __init__(self, length: int, at: int, seconds: float) -> None:
        self.length = length
        self.at = at
        self.seconds = seconds

    def __len__(self) -> int:
        return self.length

    def __call__(self, index: int) -> int:
        if index == self.at:
            import ctypes

            ctypes.PyDLL(None).sleep(int(self.seconds))  # PyDLL keeps the GIL through the call
        time.sleep(0.005)
        return index
