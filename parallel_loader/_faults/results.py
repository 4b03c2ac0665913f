"""What passes between the loader threads and the consumer: tasks, and the tagged results they make.

A task is ``(tag, epoch, slot, position, index)``:

* ``tag``: the tag of the epoch plan it belongs to;
* ``epoch``: the epoch;
* ``slot``: the order in which it was handed out;
* ``position``: the position in the epoch's order;
* ``index``: the index the yield function is called with.

A thread queues ``(tag, slot, position, result, replaced)``. The result is the
batch, a ``Failed`` call, or ``NO_BATCH`` for a stream call that ended the
stream. ``replaced`` is how many samples the yield function replaced in the
batch (see ``error_sink``). The tag lets the consumer tell an abandoned epoch's results
and the next epoch's, made ahead, from the current epoch's. The consumer counts
``replaced`` against the budget when it delivers the batch, so a batch never
delivered costs nothing.
"""

from __future__ import annotations

import threading
from typing import Any

from .error_budget import ErrorRecord

__all__ = ["NEVER_SKIPPED", "NO_BATCH", "Failed", "Result", "Task"]

# (plan tag, epoch, slot, position, index)
Task = tuple[int, int, int, int, int]
# (plan tag, slot, position, batch or Failed or NO_BATCH, samples replaced in it)
Result = tuple[int, int, int, Any, int]

# Stands in the result queue for a stream call that raised StopIteration, so that
# every slot handed out is accounted for. Never None: None can be a batch.
NO_BATCH = object()

# Exceptions that on_error="skip" never skips.
NEVER_SKIPPED = (MemoryError,)


class Failed:
    """A call that failed. ``record`` is set when it is skipped, ``None`` when it stops the loader.

    A call made ahead for the next epoch is ``deferred``. What its failure means is
    settled when its epoch delivers it: a record against the budget, or the error
    raised. So an epoch that never runs neither counts nor raises it.
    """

    __slots__ = ("deferred", "epoch", "exc", "index", "record", "thread")

    def __init__(
        self,
        exc: BaseException,
        record: ErrorRecord | None,
        epoch: int = 0,
        index: int | None = None,
        deferred: bool = False,
    ) -> None:
        self.exc = exc
        self.record = record
        self.epoch = epoch
        self.index = index
        self.deferred = deferred
        self.thread = threading.current_thread().name  # where it failed, for a deferred record
