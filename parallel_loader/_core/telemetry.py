"""What a loader measures while it runs, and the snapshot that ``DataLoader.stats()`` returns.

Two sides record, each without a lock of its own:

* each loader thread times its calls of the yield function in a ``CallTimes``
  that only it writes. It holds a count and a total since the thread started.
  It also holds the durations of the last ``WINDOW`` calls in a ring, for the percentiles;
* the consuming thread counts the batches it delivers in a ``QueueWatch``. The
  queue counts how full it was at each take and how long the takes waited
  (``FIFOQueue.taken``, ``fill_total``, ``waited``). It counts under the lock
  its ``dequeue`` holds anyway. The clock is read only when a take has to wait.

A snapshot reads both without stopping anyone, so it is approximate: a call
being recorded at that moment may be left out. ``LoaderStats.since`` gives the
figures between two snapshots (one epoch, one Keras epoch).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .fifo_queue import FIFOQueue

__all__ = ["WINDOW", "CallStats", "CallTimes", "LoaderStats", "QueueWatch", "Rates"]

# How many recent calls per thread the percentiles and the maximum are taken over.
WINDOW = 1024


class CallTimes:
    """The durations of one thread's calls. Written by that thread only; read by any (approximately)."""

    __slots__ = ("_ring", "count", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self._ring = [0.0] * WINDOW

    def add(self, seconds: float) -> None:
        """Record one call of ``seconds``."""
        self._ring[self.count % WINDOW] = seconds
        self.count += 1
        self.total += seconds

    def recent(self) -> list[float]:
        """The durations of the last ``WINDOW`` calls at most, in no particular order."""
        return self._ring[: min(self.count, WINDOW)]

    def stats(self) -> CallStats:
        return CallStats.of(self.count, self.total, self.recent())


class QueueWatch:
    """What the consuming thread delivered. Written by that thread only."""

    __slots__ = ("batches", "started")

    def __init__(self) -> None:
        self.started: float | None = None  # perf_counter() at the first iteration
        self.batches = 0  # delivered


class Rates:
    """``wait_fraction`` and ``batches_per_second`` of a record with ``batches``, ``seconds`` and ``wait_seconds``."""

    batches: int
    seconds: float
    wait_seconds: float

    @property
    def wait_fraction(self) -> float:
        """The share of the time the consumer waited for data (input-bound), 0 when the loader kept up."""
        return self.wait_seconds / self.seconds if self.seconds > 0 else 0.0

    @property
    def batches_per_second(self) -> float:
        return self.batches / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class CallStats:
    """Call times of the yield function.

    Attributes:
        count: calls finished.
        total_seconds: their total time.
        p50, p95, max: the median, 95th percentile and longest of the last
            ``WINDOW`` calls of each thread (0 when there were none).
    """

    count: int = 0
    total_seconds: float = 0.0
    p50: float = 0.0
    p95: float = 0.0
    max: float = 0.0

    @property
    def mean(self) -> float:
        """Mean seconds per call (0 before the first)."""
        return self.total_seconds / self.count if self.count else 0.0

    @classmethod
    def of(cls, count: int, total: float, recent: Iterable[float]) -> CallStats:
        ordered = sorted(recent)
        if not ordered:
            return cls(count, total)
        return cls(count, total, _percentile(ordered, 0.5), _percentile(ordered, 0.95), ordered[-1])

    def since(self, earlier: CallStats) -> CallStats:
        """The calls after ``earlier``; the percentiles stay those of the recent window."""
        return replace(self, count=self.count - earlier.count, total_seconds=self.total_seconds - earlier.total_seconds)


@dataclass(frozen=True)
class LoaderStats(Rates):
    """A snapshot of a loader's figures, from its first iteration (or between two snapshots: ``since``).

    Attributes:
        batches: batches delivered to the consumer.
        seconds: wall time since the first iteration began.
        wait_seconds: time the consumer spent waiting for results from the queue.
        calls: call times of the yield function, all threads together.
        per_thread: the same per loader thread, by thread name. Once a thread has
            ended (retired by ``resize`` or the tuner), the next thread started gets
            its number. That thread's calls add to the same record.
        queue_fill: how full the queue was on average when the consumer took a
            result (0: empty, it waited; 1: full, the loader is ahead).
        takes: results the consumer took from the queue (what ``queue_fill`` averages over).
        threads: loader threads now.
        busy: threads inside a call of the yield function now.
        errors: failures recorded (skipped calls, stuck calls, bad data reported).
        per_actor: with Ray workers, the call times each actor measured, by actor name.
        transfer_seconds: with Ray workers, the loader threads' time beyond the actors' own
            call times, in all: sending the task, queueing, and moving the batch.
    """

    batches: int = 0
    seconds: float = 0.0
    wait_seconds: float = 0.0
    calls: CallStats = field(default_factory=CallStats)
    per_thread: dict[str, CallStats] = field(default_factory=dict)
    queue_fill: float = 0.0
    takes: int = 0
    threads: int = 0
    busy: int = 0
    errors: int = 0
    per_actor: dict[str, CallStats] = field(default_factory=dict)
    transfer_seconds: float = 0.0

    def since(self, earlier: LoaderStats) -> LoaderStats:
        """The figures between ``earlier`` (a snapshot of the same loader) and this one.

        Counts and times are differences; ``threads``, ``busy`` and the call-time
        percentiles are this snapshot's.
        """
        takes = self.takes - earlier.takes
        fill = (self.queue_fill * self.takes - earlier.queue_fill * earlier.takes) / takes if takes > 0 else 0.0
        before = earlier.per_thread
        return replace(
            self,
            batches=self.batches - earlier.batches,
            seconds=self.seconds - earlier.seconds,
            wait_seconds=self.wait_seconds - earlier.wait_seconds,
            calls=self.calls.since(earlier.calls),
            per_thread={name: s.since(before.get(name, CallStats())) for name, s in self.per_thread.items()},
            queue_fill=fill,
            takes=takes,
            errors=self.errors - earlier.errors,
            per_actor={name: s.since(earlier.per_actor.get(name, CallStats())) for name, s in self.per_actor.items()},
            transfer_seconds=self.transfer_seconds - earlier.transfer_seconds,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict, which ``from_dict`` turns back into the snapshot."""
        return asdict(self)

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> LoaderStats:
        """The snapshot ``to_dict`` gave.

        Raises:
            TypeError, KeyError: ``record`` is not such a dict.
        """
        values = dict(record)
        values["calls"] = CallStats(**values.get("calls", {}))
        for key in ("per_thread", "per_actor"):
            values[key] = {name: CallStats(**s) for name, s in values.get(key, {}).items()}
        return cls(**values)

    @classmethod
    def collect(
        cls,
        watch: QueueWatch,
        queue: FIFOQueue,
        times: Mapping[str, CallTimes],
        max_len: int,
        now: float,
        threads: int,
        busy: int,
        errors: int,
        remote: tuple[Mapping[str, CallTimes], float] = ({}, 0.0),
    ) -> LoaderStats:
        """The snapshot of a loader's recorders (``now`` from ``time.perf_counter``).

        The loader calls it; users get its result from ``DataLoader.stats()``.
        ``remote`` holds the call times measured where the calls ran, and the time beyond them.

        :meta private:
        """
        per_thread = {name: t.stats() for name, t in times.items()}
        count = sum(s.count for s in per_thread.values())
        total = sum(s.total_seconds for s in per_thread.values())
        recent = [d for t in times.values() for d in t.recent()]
        takes = queue.taken
        return cls(
            batches=watch.batches,
            seconds=now - watch.started if watch.started is not None else 0.0,
            wait_seconds=queue.waited,
            calls=CallStats.of(count, total, recent),
            per_thread=per_thread,
            queue_fill=queue.fill_total / takes / max_len if takes else 0.0,
            takes=takes,
            threads=threads,
            busy=busy,
            errors=errors,
            per_actor={name: t.stats() for name, t in remote[0].items()},
            transfer_seconds=remote[1],
        )


def _percentile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values, by the nearest rank."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
