"""Spatial augmentation of a clip: the scale to decode at, the window to cut, and the flip.

An ``Augment`` holds the choices: short-side scale jitter with a random crop, or
a random resized crop; and a horizontal flip. ``Augment.plan`` turns them into a
``Plan`` for one clip, drawn from a ``numpy`` generator. A plan's window is
always the output size: a random resized crop is done by decoding the whole
frame at the scale that makes the window that size. So the decoder scales each
frame once, and no second resize is needed. ``fitted`` says how a frame fills a
box (``resize``): its short side scaled, stretched, or letterboxed. Pure
functions: nothing is decoded here. See :doc:`/video/augmentation`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from .sampling import Crop, crops

__all__ = ["CROPS", "RESIZES", "Augment", "Plan", "Resize", "augment_of", "fitted"]

CropMode = Literal["random", "resized"]
CROPS: tuple[CropMode, ...] = ("random", "resized")
Resize = Literal["short_side", "stretch", "pad"]
RESIZES: tuple[Resize, ...] = ("short_side", "stretch", "pad")
# Tries at a random resized crop's area and ratio before the centre crop is taken, as torchvision does.
_RESIZED_TRIES = 10


class Plan(NamedTuple):
    """How one clip's frames are made: decoded at ``decode_size`` (height, width), then each window cut.

    With a ``box`` (height, width), the decoded frames sit at its centre on
    black, and the windows are cut from the box (letterboxing).
    """

    decode_size: tuple[int, int]
    windows: list[Crop]
    box: tuple[int, int] | None = None


def fitted(frame: tuple[int, int], box: tuple[int, int], resize: Resize) -> tuple[tuple[int, int], bool]:
    """The size to decode frames of ``frame`` (height, width) at, to fill ``box``; and whether to letterbox.

    ``"short_side"`` keeps the aspect ratio and covers the box: the frame's
    short side becomes the box's, for a square box. ``"stretch"`` gives the box
    itself. ``"pad"`` keeps the aspect ratio and fits inside the box, to be
    centred on black.
    """
    if resize == "stretch":
        return box, False
    height, width = frame
    cover = resize == "short_side"
    scale = (max if cover else min)(box[0] / height, box[1] / width)
    size = (max(1, round(height * scale)), max(1, round(width * scale)))
    if cover:  # rounding never leaves the box uncovered
        return (max(size[0], box[0]), max(size[1], box[1])), False
    return (min(size[0], box[0]), min(size[1], box[1])), True


@dataclass(frozen=True)
class Augment:
    """The spatial augmentation of a ``VideoDataset``'s clips.

    Training draws one window per clip; evaluation takes the centre one (or
    three), without flips. ``crop="random"`` cuts a window of the output size
    from the frame scaled to a random short side in ``scale``. Without
    ``scale``, the frame is scaled by the data set's ``crop_fraction`` and
    ``resize``, as without ``Augment``. ``crop="resized"`` is a random resized crop. Its window
    covers ``area`` of the frame at an aspect in ``ratio`` (width / height), and
    is scaled to the output size. Evaluation with ``scale`` scales the short side
    to ``scale[0]``.

    Args:
        scale: ``(min, max)`` of the short side in pixels, drawn uniformly per clip; ``None`` for none.
        crop: ``"random"`` or ``"resized"``.
        area: ``(min, max)`` share of the frame's area a resized crop covers.
        ratio: ``(min, max)`` aspect ratio of a resized crop, drawn log-uniformly.
        flip: flip each training clip horizontally with probability 1/2.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument is out of range, or ``scale`` is given with ``crop="resized"``.

    See :doc:`/video/augmentation`.
    """

    scale: tuple[int, int] | None = None
    crop: CropMode = "random"
    area: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True

    def __post_init__(self) -> None:
        if self.crop not in CROPS:
            raise ValueError(f"crop must be one of {CROPS}, got {self.crop!r}")
        if not isinstance(self.flip, bool | np.bool_):
            raise TypeError(f"flip must be True or False, got {type(self.flip).__name__} {self.flip!r}")
        if self.scale is not None:
            low, high = _pair("scale", self.scale, integers=True)
            if not 0 < low <= high:
                raise ValueError(f"scale must be (min, max) short sides with 0 < min <= max, got {self.scale!r}")
            if self.crop == "resized":
                raise ValueError("scale is for crop='random'; a resized crop draws its own scale from area and ratio")
            object.__setattr__(self, "scale", (low, high))
        low, high = _pair("area", self.area)
        if not 0 < low <= high <= 1:
            raise ValueError(f"area must be (min, max) with 0 < min <= max <= 1, got {self.area!r}")
        object.__setattr__(self, "area", (low, high))
        low, high = _pair("ratio", self.ratio)
        if not 0 < low <= high:
            raise ValueError(f"ratio must be (min, max) with 0 < min <= max, got {self.ratio!r}")
        object.__setattr__(self, "ratio", (low, high))
        object.__setattr__(self, "flip", bool(self.flip))

    def check_size(self, size: tuple[int, int]) -> None:
        """Check that windows of ``size`` (height, width) fit in any frame scaled to ``scale``.

        Raises:
            ValueError: ``scale``'s smaller short side is below the larger side of ``size``.
        """
        if self.scale is not None and self.scale[0] < max(size):
            raise ValueError(
                f"scale {self.scale} is too small for crops of size {size}: a frame with a short side of "
                f"{self.scale[0]} may not hold one; make scale's min at least {max(size)}"
            )

    def plan(
        self,
        frame: tuple[int, int],
        size: tuple[int, int],
        decode_size: tuple[int, int],
        rng: np.random.Generator | None,
        num_crops: int = 1,
        box: tuple[int, int] | None = None,
    ) -> Plan:
        """Return how to make one clip from frames of ``frame`` (height, width, as displayed).

        Args:
            frame: the video's frame size.
            size: the output size.
            decode_size: the size to decode at without ``scale`` (from ``crop_fraction`` and ``resize``).
            rng: draws the scale, then the window, then the flip (training);
                ``None`` takes ``num_crops`` centred windows (evaluation).
            num_crops: windows without ``rng``: 1 or 3, as ``crops`` takes them.
            box: without ``scale``, the box that ``decode_size`` frames are letterboxed in, if any.
        """
        if self.crop == "resized" and rng is not None:
            return self._resized(frame, size, rng)
        if self.scale is not None:
            short = self.scale[0] if rng is None else int(rng.integers(self.scale[0], self.scale[1] + 1))
            decode_size, box = _short_side(frame, short), None
        cut = decode_size if box is None else box
        if rng is None:
            return Plan(decode_size, crops(cut, size, None, num_crops=num_crops), box)
        spare_h, spare_w = cut[0] - size[0], cut[1] - size[1]
        top, left = int(rng.integers(spare_h + 1)), int(rng.integers(spare_w + 1))
        return Plan(decode_size, [Crop(top, left, self._flip(rng))], box)

    def _resized(self, frame: tuple[int, int], size: tuple[int, int], rng: np.random.Generator) -> Plan:
        """A random resized crop: a window of the frame, and the decode size that makes it ``size``."""
        height, width = frame
        log_ratio = np.log(self.ratio)
        for _ in range(_RESIZED_TRIES):
            area = height * width * rng.uniform(*self.area)
            aspect = math.exp(rng.uniform(*log_ratio))
            w, h = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
            if 0 < w <= width and 0 < h <= height:
                top, left = int(rng.integers(height - h + 1)), int(rng.integers(width - w + 1))
                break
        else:  # the whole frame, narrowed to the nearest allowed ratio, centred (as torchvision does)
            w, h = width, height
            if width / height < self.ratio[0]:
                h = round(width / self.ratio[0])
            elif width / height > self.ratio[1]:
                w = round(height * self.ratio[1])
            top, left = (height - h) // 2, (width - w) // 2
        # The whole frame scaled by size / window: the window becomes size, at its scaled place.
        decode = (max(size[0], round(height * size[0] / h)), max(size[1], round(width * size[1] / w)))
        top = min(round(top * size[0] / h), decode[0] - size[0])
        left = min(round(left * size[1] / w), decode[1] - size[1])
        return Plan(decode, [Crop(top, left, self._flip(rng))])

    def _flip(self, rng: np.random.Generator) -> bool:
        return bool(rng.integers(2)) if self.flip else False


def _short_side(frame: tuple[int, int], short: int) -> tuple[int, int]:
    """Return ``frame`` (height, width) scaled so that its shorter side is ``short``."""
    height, width = frame
    if height <= width:
        return short, max(short, round(width * short / height))
    return max(short, round(height * short / width)), short


def _pair(name: str, value: object, integers: bool = False) -> tuple[float, float]:
    kinds = (int, np.integer) if integers else (int, float, np.number)
    if (
        not isinstance(value, tuple | list)
        or len(value) != 2
        or not all(isinstance(v, kinds) and not isinstance(v, bool) for v in value)
    ):
        what = "ints" if integers else "numbers"
        raise TypeError(f"{name} must be a (min, max) pair of {what}, got {value!r}")
    low, high = value
    return (int(low), int(high)) if integers else (float(low), float(high))


def augment_of(augment: object, scale: object, size: tuple[int, int], resize: Resize = "short_side") -> Augment | None:
    """A data set's augmentation: ``augment``, or ``Augment(scale=scale)``; checked against the output ``size``.

    Raises:
        TypeError: ``augment`` is not an ``Augment``.
        ValueError: both are given, ``scale`` is out of range, or the size does not fit the scale.
            Or ``resize`` is not one of ``RESIZES``, or is not ``"short_side"`` with a ``scale``.
    """
    if resize not in RESIZES:
        raise ValueError(f"resize must be one of {RESIZES}, got {resize!r}")
    if scale is not None:
        if augment is not None:
            raise ValueError("give scale=(min, max) or augment=Augment(scale=...), not both")
        augment = Augment(scale=scale)  # type: ignore[arg-type]
    if augment is None:
        return None
    if not isinstance(augment, Augment):
        raise TypeError(f"augment must be an Augment or None, got {type(augment).__name__}")
    if augment.scale is not None and resize != "short_side":
        raise ValueError(
            f"resize={resize!r} does not go with scale={augment.scale}: scale sets the short side and keeps "
            "the aspect ratio; leave resize out, or leave scale out"
        )
    augment.check_size(size)
    return augment
