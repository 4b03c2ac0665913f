"""Batch transforms that mix clips: ``Mixup`` and ``CutMix``.

A batch transform takes a batch's clips, its one-hot labels and a ``numpy``
generator, and returns new clips and labels. With several labels a sample, the
labels are a tuple of one-hot arrays, one a head. One draw mixes every head. ``VideoDataset(batch_transform=...)``
gives it a generator drawn from the seed, the epoch and the batch's index, so a
batch is the same whichever thread makes it. Clips are
``(batch, [views,] frames, height, width, 3)``; one box or weight holds for all
the frames of a clip. See :doc:`/video/augmentation`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import overload

import numpy as np

__all__ = ["CutMix", "Mixup"]


class _Mixing(ABC):
    """What mixups share: ``alpha``, the draws, the check of the labels and their mix."""

    one_hot_labels = True  # VideoDataset checks at construction that its labels are one-hot

    def __init__(self, alpha: float) -> None:
        if isinstance(alpha, bool) or not isinstance(alpha, int | float | np.number):
            raise TypeError(f"alpha must be a positive number, got {type(alpha).__name__} {alpha!r}")
        if not alpha > 0:
            raise ValueError(f"alpha must be a positive number (the Beta distribution's), got {alpha!r}")
        self.alpha = float(alpha)

    @overload
    def __call__(
        self, clips: np.ndarray, labels: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]: ...

    @overload
    def __call__(
        self, clips: np.ndarray, labels: tuple[np.ndarray, ...], rng: np.random.Generator
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]: ...

    def __call__(self, clips, labels, rng):
        """Return the mixed clips and labels: one-hot ``(batch, classes)``, or a tuple of such, one a head.

        Raises:
            ValueError: the labels are not one-hot.
        """
        heads = labels if isinstance(labels, tuple) else (labels,)
        for head in heads:
            shape = np.shape(head)
            if len(shape) != 2 or shape[0] != len(clips):
                raise ValueError(
                    f"{type(self).__name__} mixes one-hot labels of shape (batch, classes), got shape {shape}: "
                    "pass labels='one_hot' to the data set"
                )
        weight, partner = float(rng.beta(self.alpha, self.alpha)), rng.permutation(len(clips))
        mixed, kept = self._mix(clips, weight, partner, rng)
        heads = tuple((kept * head + (1 - kept) * head[partner]).astype(head.dtype) for head in heads)
        return mixed, heads if isinstance(labels, tuple) else heads[0]

    @abstractmethod
    def _mix(
        self, clips: np.ndarray, weight: float, partner: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, float]:
        """Return the mixed clips and the share of each clip's own label, for the weight ``weight``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(alpha={self.alpha:g})"


class Mixup(_Mixing):
    """Mix each clip with another of its batch: ``w * a + (1 - w) * b``, labels alike.

    One weight ``w`` per batch, drawn from ``Beta(alpha, alpha)``, and a random
    partner for each clip (mixup, Zhang et al. 2018). ``uint8`` clips are rounded.
    Call it as ``mixup(clips, labels, rng)``; the labels must be one-hot.
    A tuple of one-hot labels, one a head, is mixed head by head with the same draw.

    Args:
        alpha: the Beta distribution's parameter; 0.2 to 0.8 is usual for video.

    Raises:
        TypeError, ValueError: ``alpha`` is not a positive number.

    See :doc:`/video/augmentation`.
    """

    def _mix(
        self, clips: np.ndarray, weight: float, partner: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, float]:
        mixed = weight * clips.astype(np.float32) + np.float32(1 - weight) * clips[partner]
        if clips.dtype == np.uint8:
            mixed = np.rint(mixed)
        return mixed.astype(clips.dtype, copy=False), weight


class CutMix(_Mixing):
    """Paste a box of another clip of the batch into each clip; labels mix by the box's area.

    One box per batch, the same in every frame (CutMix, Yun et al. 2019). Its
    share of the frame is ``1 - w``, ``w`` drawn from ``Beta(alpha, alpha)``. Its
    centre is uniform, and it is clipped at the edges. The labels' weight is the
    share of the frame left. Call it as ``cutmix(clips, labels, rng)``; the labels must be one-hot.
    A tuple of one-hot labels, one a head, is mixed head by head with the same box.

    Args:
        alpha: the Beta distribution's parameter; 1.0 is usual.

    Raises:
        TypeError, ValueError: ``alpha`` is not a positive number.

    See :doc:`/video/augmentation`.
    """

    def _mix(
        self, clips: np.ndarray, weight: float, partner: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, float]:
        height, width = clips.shape[-3], clips.shape[-2]
        cut = math.sqrt(1 - weight)
        centre_y, centre_x = int(rng.integers(height)), int(rng.integers(width))
        half_h, half_w = int(height * cut) // 2, int(width * cut) // 2
        top, bottom = max(centre_y - half_h, 0), min(centre_y + half_h, height)
        left, right = max(centre_x - half_w, 0), min(centre_x + half_w, width)
        mixed = clips.copy()
        mixed[..., top:bottom, left:right, :] = clips[partner][..., top:bottom, left:right, :]
        return mixed, 1 - (bottom - top) * (right - left) / (height * width)
