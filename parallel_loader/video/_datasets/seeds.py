"""The random streams of a ``VideoDataset``: each epoch's sample order or draw, and each clip's choices.

Each stream has its own key, so the streams are independent of each other and
of the ``DataLoader``'s shuffle. No generator is shared between threads, so a
batch is the same whichever thread makes it. See :doc:`/video/datasets`.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "BATCH_KEY",
    "CLIP_KEY",
    "DRAW_KEY",
    "ORDER_KEY",
    "SHARD_KEY",
    "TRANSFORM_KEY",
    "batch_rng",
    "clip_rng",
    "epoch_order",
    "transform_rng",
]

# Tag words of the random keys. numpy's SeedSequence ignores trailing zero words,
# so keys of different lengths can collide ([s, e] == [s, e, 0]); every key here
# has a fixed length and its own tag, distinct from each other and from the
# DataLoader's shuffle tag (0x5348554646, "SHUFF").
ORDER_KEY = 0x4F52444552  # "ORDER": the epoch's sample order, [seed, ORDER_KEY, epoch]
DRAW_KEY = 0x4452415753  # "DRAWS": the epoch's weighted or resized draw, [seed, DRAW_KEY, epoch]
SHARD_KEY = 0x5348415244  # "SHARD": the epoch's shard-local order, [seed, SHARD_KEY, epoch]
CLIP_KEY = 0x434C4950  # "CLIP": one clip, [seed, CLIP_KEY, epoch, position, attempt]
TRANSFORM_KEY = 0x5846524D  # "XFRM": a clip's transform=, [seed, TRANSFORM_KEY, epoch, position]
BATCH_KEY = 0x4241544348  # "BATCH": a batch's batch_transform=, [seed, BATCH_KEY, epoch, index]


def epoch_order(seed: int, epoch: int, count: int) -> np.ndarray:
    """Return the order of ``count`` samples in training epoch ``epoch``: a permutation of ``range(count)``.

    It is ``int32`` where the count allows: every process holds one, 40 MB at ten million samples.
    """
    order = np.random.default_rng([seed, ORDER_KEY, epoch]).permutation(count)
    return order.astype(np.int32) if count <= np.iinfo(np.int32).max else order


def clip_rng(seed: int, epoch: int, position: int, attempt: int) -> np.random.Generator:
    """Return the generator of one clip's choices.

    Args:
        seed: the dataset's seed.
        epoch: the epoch.
        position: the sample's place in the epoch's order.
        attempt: how many samples were tried for this place before (0 unless one was replaced).
    """
    return np.random.default_rng([seed, CLIP_KEY, epoch, position, attempt])


def transform_rng(seed: int, epoch: int, position: int) -> np.random.Generator:
    """Return the generator a clip's ``transform`` receives: the sample's place ``position`` in epoch ``epoch``."""
    return np.random.default_rng([seed, TRANSFORM_KEY, epoch, position])


def batch_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """Return the generator batch ``index`` of epoch ``epoch`` gives its ``batch_transform``."""
    return np.random.default_rng([seed, BATCH_KEY, epoch, index])
