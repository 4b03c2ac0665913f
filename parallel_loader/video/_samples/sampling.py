"""Which frames and which pixels make a clip: temporal sampling and spatial crops.

Two temporal samplings, chosen per data set:

* ``"clip"``: ``clip_len`` frames ``stride`` apart, from a random start in
  training (temporal jitter) and from the centre in evaluation;
* ``"segments"`` (as TSN): the frames split into ``clip_len`` equal segments,
  one frame from each, at random in training and at the centre in evaluation.

In evaluation a sample can give ``num_clips`` clips spread evenly over its
frames, times ``num_crops`` crops. Training takes one random crop, flipped
horizontally with probability 1/2. These are pure functions of their arguments
and of a ``numpy`` generator; they decode nothing. See :doc:`/video/datasets`.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np

__all__ = ["SAMPLINGS", "Crop", "crops", "frames_needed", "temporal_views"]

Sampling = Literal["clip", "segments"]
SAMPLINGS: tuple[Sampling, ...] = ("clip", "segments")
CROP_COUNTS = (1, 3)


class Crop(NamedTuple):
    """A window of a frame: its top row and left column, and whether to flip it horizontally."""

    top: int
    left: int
    flip: bool


def frames_needed(sampling: Sampling, clip_len: int, stride: int) -> int:
    """The fewest frames a sample needs: a clip's span, or one frame per segment."""
    return (clip_len - 1) * stride + 1 if sampling == "clip" else clip_len


def temporal_views(
    sampling: Sampling,
    first: int,
    stop: int,
    clip_len: int,
    stride: int = 1,
    rng: np.random.Generator | None = None,
    num_views: int = 1,
) -> list[np.ndarray]:
    """The frame indices of each temporal view of the frames ``first`` to ``stop - 1``.

    Args:
        sampling: ``"clip"`` or ``"segments"`` (see the module docstring).
        first: the sample's first frame.
        stop: one past its last frame; ``stop - first`` must be at least ``frames_needed``.
        clip_len: frames per view.
        stride: the step between a clip's frames (``"clip"`` only).
        rng: draws one random view (training); ``None`` gives ``num_views``
            evenly spaced views (evaluation). A clip's start is the one draw
            of ``"clip"``; ``"segments"`` draws one index per segment.
        num_views: how many views to give without ``rng``.

    Returns:
        One increasing ``int64`` array of ``clip_len`` frame indices per view.
    """
    frames = stop - first
    if frames < frames_needed(sampling, clip_len, stride):
        raise ValueError(f"{frames} frames are too few for {clip_len} frames by {sampling!r} sampling")
    if rng is not None and num_views != 1:
        raise ValueError("a random draw gives one view")
    if sampling == "clip":
        room = frames - frames_needed(sampling, clip_len, stride)  # the last possible start, from first
        if rng is not None:
            starts = [int(rng.integers(room + 1))]
        else:
            starts = [room * (2 * j + 1) // (2 * num_views) for j in range(num_views)]
        return [first + s + stride * np.arange(clip_len, dtype=np.int64) for s in starts]
    segment = np.arange(clip_len, dtype=np.int64)
    if rng is not None:
        bounds = frames * np.arange(clip_len + 1, dtype=np.int64) // clip_len  # segment i is bounds[i]:bounds[i+1]
        return [first + rng.integers(bounds[:-1], bounds[1:])]
    # View j of n in segment i sits at (i + (2j + 1) / 2n) segment lengths: the centre when n == 1.
    n = num_views
    return [first + frames * (2 * n * segment + 2 * j + 1) // (2 * n * clip_len) for j in range(n)]


def crops(
    frame: tuple[int, int], size: tuple[int, int], rng: np.random.Generator | None = None, num_crops: int = 1
) -> list[Crop]:
    """The windows of size ``size`` (height, width) to cut from frames of size ``frame``.

    Args:
        frame: ``(height, width)`` of the decoded frames, at least ``size``.
        size: ``(height, width)`` of a crop.
        rng: draws one random crop and flip (training), in that order: top,
            left, flip; ``None`` gives ``num_crops`` crops without flips (evaluation).
        num_crops: 1 (the centre) or 3 (both ends and the centre of the long side), without ``rng``.
    """
    spare_h, spare_w = frame[0] - size[0], frame[1] - size[1]
    if spare_h < 0 or spare_w < 0:
        raise ValueError(f"a crop of {size} does not fit in a frame of {frame}")
    if rng is not None:
        if num_crops != 1:
            raise ValueError("a random draw gives one crop")
        top, left = int(rng.integers(spare_h + 1)), int(rng.integers(spare_w + 1))
        return [Crop(top, left, bool(rng.integers(2)))]
    if num_crops == 1:
        return [Crop(spare_h // 2, spare_w // 2, False)]
    if num_crops != 3:
        raise ValueError(f"num_crops must be one of {CROP_COUNTS}, got {num_crops!r}")
    if frame[1] >= frame[0]:  # wide: left, centre, right
        return [Crop(spare_h // 2, left, False) for left in (0, spare_w // 2, spare_w)]
    return [Crop(top, spare_w // 2, False) for top in (0, spare_h // 2, spare_h)]
