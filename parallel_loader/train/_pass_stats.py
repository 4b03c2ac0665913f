"""The records ``Train.run`` returns: one pass over a data set, and one epoch's passes.

They live below both ``_train``, which fills them, and ``_progress``, which shows
them, so that neither imports the other. ``Means`` makes a pass's ``metrics``.
``epoch_record`` and ``epoch_stats`` turn an epoch's record into JSON for
``Train.state_dict`` and back. See :doc:`/guide/training`.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .._core.telemetry import LoaderStats, Rates

__all__ = ["EpochStats", "Means", "PassStats", "epoch_record", "epoch_stats"]


@dataclass
class PassStats(Rates):
    """One pass over one data set.

    Attributes:
        batches: batches the task was called with.
        seconds: wall time of the pass.
        wait_seconds: time the calling thread spent waiting for the next batch.
        outputs: what the task returned for each batch, when ``keep_outputs`` is set.
        metrics: the mean over the pass of each number the task returned in a
            dict. ``model.train_on_batch(x, y, return_dict=True)`` returns such a
            dict, ``{"loss": ..., "accuracy": ...}``. Values that are not plain
            numbers (tensors) are left out, since reading them would wait for the device.
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


class Means:
    """Running means of the numbers in the dicts a task returns; anything else is ignored.

    Attributes:
        values: the mean of each number so far, by its key.
    """

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self.values: dict[str, float] = {}

    def add(self, output: Any) -> None:
        """Add the numbers of one task's ``output``, if it is a dict."""
        if not isinstance(output, Mapping):
            return
        for name, value in output.items():
            number = _number(value)
            if number is None:
                continue
            self._sums[name] = self._sums.get(name, 0.0) + number
            self._counts[name] = self._counts.get(name, 0) + 1
            self.values[name] = self._sums[name] / self._counts[name]


def epoch_record(stats: EpochStats) -> dict[str, Any]:
    """``stats`` as a JSON-serialisable dict, without the tasks' outputs (which are not JSON)."""
    record = asdict(stats)
    for pass_record in (record["train"], record["val"]):
        if pass_record is not None:
            pass_record["outputs"] = []  # what tasks return is not JSON; it is not part of the state
    return record


def epoch_stats(record: Any) -> EpochStats:
    """The ``EpochStats`` that ``epoch_record`` gave as ``record``.

    Raises:
        ValueError: ``record`` is malformed.
    """
    try:
        val = record.get("val")
        return EpochStats(
            epoch=int(record["epoch"]),
            train=_pass_stats(record["train"]),
            val=_pass_stats(val) if val is not None else None,
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed EpochStats in a Train state ({exc}): {record!r:.200}") from None


def _pass_stats(record: Mapping[str, Any]) -> PassStats:
    values = dict(record)
    if values.get("loader") is not None:
        values["loader"] = LoaderStats.from_dict(values["loader"])
    return PassStats(**values)


def _number(value: Any) -> float | None:
    """``value`` as a float if it is a plain number, never reading a tensor (which would wait for the device)."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iuf":
        return float(value.reshape(()))
    return None
