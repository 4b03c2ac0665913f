"""The plan of one epoch: which positions it has, the index made at each, which were done.

A position is a place in the epoch's sequence, 0 to length - 1. The index at a
position is what the yield function is called with. It is the same number unless
the epoch is shuffled. Loader threads are handed *slots*, 0, 1, 2, ... in turn: a
slot names the next position still to make. An epoch normally makes every
position; an epoch resumed from a checkpoint makes only those that were not
done, in the same order. Done means delivered to the consumer, or skipped as a
failure under an error budget.

The plan is what ``DataLoader.state_dict`` saves and ``load_state_dict``
restores; it knows nothing of threads or queues.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = ["EpochPlan", "shuffled_order"]

# A word of the random key of the shuffled order, so that it differs from any
# random stream a yield function derives from the same seed and epoch.
_SHUFFLE_KEY = 0x5348554646


def shuffled_order(seed: int, epoch: int, length: int) -> list[int]:
    """The epoch's random order of ``range(length)``, the same for a given seed and epoch."""
    return np.random.default_rng([seed, _SHUFFLE_KEY, epoch]).permutation(length).tolist()


class EpochPlan:
    """Positions of one epoch, the index made at each, and which are done.

    Args:
        epoch: the epoch's number.
        length: the number of positions; ``None`` for a stream, which has as many
            as it makes before its yield function raises ``StopIteration``.
        order: the index made at each position; ``None`` means the position itself.
        done: positions done before this plan was made (a resumed epoch).
        tag: what the results made from this plan are tagged with. The loader
            gives each plan its own, so results of an abandoned plan are recognised.

    Slots are handed out by the loader under its lock; ``mark_done`` is called by
    the consuming thread only.
    """

    def __init__(
        self,
        epoch: int,
        length: int | None,
        order: Sequence[int] | None = None,
        done: Iterable[int] = (),
        tag: int = 0,
    ) -> None:
        self.epoch = epoch
        self.tag = tag
        self.length = length
        self._order = order
        self._done = bytearray(length or 0)
        self._done_count = 0
        self._stream_done = 0  # a stream's done calls: it has no positions to name
        # The positions marked done in this run, in order; ~position for one that gave no batch.
        self._marked: list[int] | None = None
        for position in done:
            self.mark_done(position)
        self._before = bytes(self._done), self.done_count  # what a loaded state said was done
        self._marked = []
        # The positions to make, in order; None while it is every position (the common case).
        self._todo: list[int] | None = None
        if self._done_count:
            self._todo = [p for p in range(length or 0) if not self._done[p]]

    @property
    def slots(self) -> int | None:
        """How many calls make this epoch, the positions not yet done at the start (``None`` for a stream)."""
        if self.length is None:
            return None
        return len(self._todo) if self._todo is not None else self.length

    def task(self, slot: int) -> tuple[int, int]:
        """The (position, index) that ``slot`` makes."""
        position = slot if self._todo is None else self._todo[slot]
        return position, position if self._order is None else self._order[position]

    def mark_done(self, position: int, delivered: bool = False) -> None:
        """Record that ``position`` was delivered (``delivered``) or skipped. Consuming thread only."""
        if self._marked is not None:  # None while the loaded state's positions are marked
            self._marked.append(position if delivered else ~position)
        if self.length is None:
            self._stream_done += 1
        elif not self._done[position]:
            self._done[position] = 1
            self._done_count += 1

    @property
    def done_count(self) -> int:
        """Positions done so far, those of an earlier run of this epoch included."""
        return self._stream_done if self.length is None else self._done_count

    @property
    def complete(self) -> bool:
        return self.length is not None and self._done_count == self.length

    def done_ranges(self) -> list[list[int]]:
        """The done positions as ``[start, stop)`` pairs, for a compact JSON state."""
        ranges: list[list[int]] = []
        flags = np.frombuffer(bytes(self._done), dtype=np.uint8)
        if not flags.size:
            return ranges
        edges = np.flatnonzero(np.diff(np.concatenate(([0], flags, [0]))))
        return [[int(a), int(b)] for a, b in zip(edges[::2], edges[1::2], strict=True)]

    def done_after(self, batches: int) -> list[list[int]] | int:
        """What was done once the first ``batches`` batches of this run were delivered.

        The positions skipped up to the next batch are done too. Returns ranges as
        ``done_ranges`` does, or a count for a stream.
        """
        flags, count = bytearray(self._before[0]), self._before[1]
        for mark in self._marked or ():
            if mark >= 0:
                if batches == 0:
                    break
                batches -= 1
            count += 1
            if self.length is not None:
                flags[mark if mark >= 0 else ~mark] = 1
        if self.length is None:
            return count
        return EpochPlan(self.epoch, self.length, done=[p for p in range(self.length) if flags[p]]).done_ranges()

    @staticmethod
    def positions(ranges: Any, length: int) -> list[int]:
        """The positions named by ``done_ranges`` output, checked against ``length``.

        Raises:
            ValueError: the ranges are malformed or outside ``range(length)``.
        """
        positions: list[int] = []
        try:
            for start, stop in ranges:
                if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start < stop <= length):
                    raise ValueError
                positions.extend(range(start, stop))
        except (TypeError, ValueError):
            raise ValueError(
                f"the state's 'done' must be [start, stop) pairs within the epoch's {length} positions, got {ranges!r}"
            ) from None
        return positions
