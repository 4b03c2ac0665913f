"""Which plan each epoch of a loader gets: its order, this shard's part of it, and what was done already.

``EpochPlanner`` makes an ``EpochPlan`` for an epoch from the loader's settings:

* the epoch's global order. It is shuffled from the seed and the epoch's number,
  so every shard and every resumed run computes the same one;
* this shard's positions of it (``sharding``);
* the positions a loaded state says were done.

Each plan gets a new tag, which the loader threads put on its results. A
stream's plan has no length; it counts the calls a loaded state says were done.

It knows nothing of threads or queues.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from .epoch_plan import EpochPlan, shuffled_order
from .sharding import Remainder, shard_length, shard_positions

__all__ = ["EpochPlanner"]


class EpochPlanner:
    """Makes each epoch's plan (see the module docstring).

    Args:
        stream: plans of a stream (no length).
        shuffle: shuffle each epoch's global order.
        num_shards, shard_index, shard_remainder: this worker's shard (see ``sharding``).
        batches_per_epoch: for a stream: the most calls of an epoch, or ``None``.
        replicas: the replicas each step feeds; each plan's length is kept a multiple of it.
    """

    def __init__(
        self,
        *,
        stream: bool,
        shuffle: bool,
        num_shards: int,
        shard_index: int,
        shard_remainder: Remainder,
        batches_per_epoch: int | None,
        replicas: int = 1,
    ) -> None:
        self._stream = stream
        self._shuffle = shuffle
        self._num_shards = num_shards
        self._shard_index = shard_index
        self._remainder = shard_remainder
        self._batches_per_epoch = batches_per_epoch
        self._replicas = replicas
        self._tags = itertools.count(1)

    def length(self, length: int | None) -> int | None:
        """The number of positions of this shard's plan of an epoch of ``length`` (``None``: a stream)."""
        if length is None or self._num_shards * self._replicas == 1:
            return length
        return shard_length(length, self._num_shards, self._remainder, self._replicas)

    def plan(self, epoch: int, length: int | None, seed: int, done: Any = None) -> EpochPlan:
        """Epoch ``epoch``'s plan, with the ``done`` positions of a loaded state (a count for a stream)."""
        tag = next(self._tags)
        if self._stream:
            plan = EpochPlan(epoch, None, tag=tag)
            for _ in range(done or 0):
                plan.mark_done(0)
            return plan
        order: Sequence[int] | None = shuffled_order(seed, epoch, length) if self._shuffle and length else None
        if self._num_shards * self._replicas > 1:
            # Every shard computes the same global order: keep this shard's positions of it.
            positions = shard_positions(length, self._num_shards, self._shard_index, self._remainder, self._replicas)
            order = [order[p] for p in positions] if order is not None else positions
            length = len(order)
        return EpochPlan(epoch, length, order, done=done or (), tag=tag)

    def slots(self, plan: EpochPlan) -> int | None:
        """How many calls of ``plan`` to hand out: its positions not done; ``None`` for a stream without end."""
        if not self._stream:
            return plan.slots
        if self._batches_per_epoch is None:
            return None
        return max(0, self._batches_per_epoch - plan.done_count)
