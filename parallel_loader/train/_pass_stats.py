"""The records ``Train.run`` returns: one pass over a data set, and one epoch's passes.

They live below both ``train``, which fills them, and ``progress``, which shows
them, so that neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._core.telemetry import LoaderStats, Rates

__all__ = ["EpochStats", "PassStats"]


@dataclass
class PassStats(Rates):
    """One pass over one data set.

    Attributes:
        batches: batches the task was called with.
        seconds: wall time of the pass.
        wait_seconds: time the calling thread spent waiting for the next batch.
        outputs: what the task returned for each batch, when ``keep_outputs`` is set.
        metrics: the mean over the pass of each number the task returned in a
            dict, as ``model.train_on_batch(x, y, return_dict=True)`` returns
            ``{"loss": ..., "accuracy": ...}``; values that are not plain numbers
            (tensors) are left out, since reading them would wait for the device.
        loader: what the loader measured during the pass (``DataLoader.stats()``
            over the pass): its call times per thread, queue fill, thread count.
    """

    batches: int = 0
    seconds: float = 0.0
    wait_seconds: float = 0.0
    outputs: list[Any] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    loader: LoaderStats | None = None


@dataclass
class EpochStats:
    """The record of one epoch: its training pass, and its validation pass if any."""

    epoch: int
    train: PassStats
    val: PassStats | None = None

    # The training pass's figures, the ones asked for most, at the top level.
    @property
    def batches(self) -> int:
        return self.train.batches

    @property
    def seconds(self) -> float:
        return self.train.seconds

    @property
    def wait_fraction(self) -> float:
        return self.train.wait_fraction
