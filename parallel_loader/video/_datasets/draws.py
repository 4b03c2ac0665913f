"""Which samples a training epoch draws: each once, shuffled, or a weighted draw with replacement.

An epoch's *draw* is the sample at each of its positions. ``EpochDraws`` makes
it from the seed and the epoch alone. So it is the same whichever thread or
process asks, and a resumed epoch makes the positions it lacks from the same
draw. The weights are given per listed sample; ``EpochDraws.of`` keeps those of
the samples left after files were excluded or found missing. This module knows
nothing of batches or files. See :doc:`/video/datasets`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from ..._core.checks import check_int
from .seeds import DRAW_KEY, SHARD_KEY, epoch_order

__all__ = ["EpochDraws", "Weights", "check_order", "check_weights", "shard_order"]

# None (each sample once an epoch), "balanced" (1 / the sample's class count), or one weight per sample.
Weights = Sequence[float] | np.ndarray | Literal["balanced"] | None


def check_weights(
    weights: Weights, samples_per_epoch: int | None, count: int, train: bool
) -> tuple[np.ndarray | str | None, int | None]:
    """Check ``weights`` and ``samples_per_epoch`` for a list of ``count`` samples; return them normalised.

    A sequence of weights becomes a ``float64`` array.

    Raises:
        TypeError: ``weights`` is neither ``None``, ``"balanced"`` nor numbers;
            or ``samples_per_epoch`` is not an int.
        ValueError: a weight is negative or not finite, there is not one per
            sample, all are zero; ``samples_per_epoch`` is below 1; or either is
            given in evaluation.
    """
    if samples_per_epoch is not None:
        samples_per_epoch = check_int("samples_per_epoch", samples_per_epoch, minimum=1)
    if (weights is not None or samples_per_epoch is not None) and not train:
        raise ValueError(
            "weights and samples_per_epoch are for training; evaluation takes each sample once: pass train=True"
        )
    if weights is None or (isinstance(weights, str) and weights == "balanced"):
        return weights, samples_per_epoch
    if isinstance(weights, str | bytes | Mapping):
        raise TypeError(f"weights must be None, 'balanced' or one number per sample, got {weights!r:.80}")
    try:
        array = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"weights must be numbers, one per sample, got {weights!r:.80}") from None
    if array.ndim == 0:
        raise TypeError(f"weights must be None, 'balanced' or one number per sample, got {weights!r:.80}")
    if array.ndim != 1 or len(array) != count:
        raise ValueError(f"weights must be one number per sample: {count} samples, got shape {array.shape}")
    bad = np.flatnonzero(~np.isfinite(array) | (array < 0))
    if bad.size:
        raise ValueError(
            f"weights must be finite and at least 0: {bad.size} are not, the first at sample {bad[0]} ({array[bad[0]]})"
        )
    if not array.any():
        raise ValueError(f"weights are all zero: no sample of the {count} can be drawn")
    with np.errstate(over="ignore"):  # an overflow is the error raised here
        total = array.sum()
    if not np.isfinite(total):
        raise ValueError("weights sum to more than a float holds: divide them by their largest")
    return array, samples_per_epoch


def check_order(order: object, window: object, weights: object, per_epoch: object) -> str:
    """Check ``order`` and ``shard_window`` (see ``VideoDataset``); return ``order``.

    Raises:
        TypeError: ``shard_window`` is not an int.
        ValueError: ``order`` is neither ``"global"`` nor ``"shards"``; ``shard_window``
            is below 1; or ``"shards"`` comes with weights or ``samples_per_epoch``.
    """
    if order not in ("global", "shards"):
        raise ValueError(f"order must be 'global' or 'shards', got {order!r}")
    check_int("shard_window", window, minimum=1)
    if order == "shards" and (weights is not None or per_epoch is not None):
        raise ValueError("order='shards' takes each sample once an epoch: give it without weights or samples_per_epoch")
    return str(order)


class EpochDraws:
    """The sample at each position of a training epoch, made from the seed and the epoch.

    Without weights, an epoch is a shuffled order of every sample. With
    ``per_epoch``, that order is cut, or followed by further shuffled orders,
    to that many positions. With weights, each position draws a sample with
    probability proportional to its weight, with replacement.

    Args:
        count: the samples to draw from.
        weights: one weight per sample, not all zero; ``None`` for a shuffled order.
        per_epoch: positions per epoch; ``None`` for ``count``.
        shards: each sample's shard number, for a shard-local order (``shard_order``); ``None`` for a global one.
        window: positions shuffled together in a shard-local order.
    """

    def __init__(
        self,
        count: int,
        weights: np.ndarray | None = None,
        per_epoch: int | None = None,
        shards: np.ndarray | None = None,
        window: int = 1,
    ) -> None:
        self.count = count
        self.shards, self.window = shards, window  # see ``shard_order``
        self.length = count if per_epoch is None else per_epoch
        # The cumulative weights: position k draws the sample whose share of the total holds a uniform number.
        self._cumulative = None if weights is None else np.cumsum(weights, dtype=np.float64)
        self._last = None if weights is None else int(np.flatnonzero(weights)[-1])  # the last sample drawable

    @classmethod
    def of(
        cls, weights: np.ndarray | str | None, per_epoch: int | None, labels: np.ndarray, kept: np.ndarray
    ) -> EpochDraws:
        """Return the draws over the samples left, as ``check_weights`` returned its arguments.

        Args:
            weights: ``None``, ``"balanced"`` or one weight per listed sample.
            per_epoch: positions per epoch, or ``None``.
            labels: the labels of the samples left; with several a sample, one column each, the first weighing.
            kept: the listed samples left, as indices into the list ``weights`` is given for.

        Raises:
            ValueError: every sample of non-zero weight was left out.
        """
        if isinstance(weights, str):  # "balanced": each class (of the first head) weighs the same in all
            labels = labels if labels.ndim == 1 else labels[:, 0]
            counts = np.bincount(labels)
            return cls(len(labels), 1.0 / counts[labels], per_epoch)
        if weights is not None:
            weights = weights[kept]
            if not weights.any():
                raise ValueError(
                    f"every sample of non-zero weight was left out (excluded or missing): the {len(kept)} left weigh 0"
                )
        return cls(len(labels), weights, per_epoch)

    def order(self, seed: int, epoch: int) -> np.ndarray:
        """Return the sample at each of epoch ``epoch``'s ``length`` positions."""
        if self.shards is not None:
            return shard_order(seed, epoch, self.shards, self.window)
        if self._cumulative is None:
            if self.length == self.count:
                return epoch_order(seed, epoch, self.count)
            rng = np.random.default_rng([seed, DRAW_KEY, epoch])
            rounds = math.ceil(self.length / self.count)
            return np.concatenate([rng.permutation(self.count) for _ in range(rounds)])[: self.length]
        rng = np.random.default_rng([seed, DRAW_KEY, epoch])
        # Sorted uniform numbers, as running sums of exponential spacings: the search then runs through the
        # cumulative weights in order, several times faster at a million than with unsorted numbers, whose
        # every search misses the cache. Shuffled after the search, the draws are independent again.
        sums = np.cumsum(rng.standard_exponential(self.length + 1))
        targets = sums[:-1] * (self._cumulative[-1] / sums[-1])
        chosen = np.searchsorted(self._cumulative, targets, side="right")
        # A target rounded up to the total would pass the end, or land on a trailing sample of weight 0.
        return rng.permutation(np.minimum(chosen, self._last))


def shard_order(seed: int, epoch: int, shards: np.ndarray, window: int) -> np.ndarray:
    """Each sample once, shard by shard: the shards shuffled, then each ``window`` positions shuffled among themselves.

    A reader then moves from shard to shard, as WebDataset reads them. The
    window mixes neighbouring samples, as WebDataset's shuffle buffer does. It
    spans a shard's end into the next shard's start.

    Args:
        seed: the dataset's seed.
        epoch: the epoch.
        shards: each sample's shard, numbered from 0.
        window: positions shuffled together (1: each shard's samples in listed order).
    """
    rng = np.random.default_rng([seed, SHARD_KEY, epoch])
    place = rng.permutation(int(shards.max()) + 1)  # shard -> its place in the epoch
    grouped = np.argsort(place[shards], kind="stable")  # by shard, in listed order within one
    windows = np.arange(len(grouped)) // window
    return grouped[np.lexsort((rng.random(len(grouped)), windows))]
