"""What a ``VideoDataset`` does to a batch once its clips are decoded: transforms, labels, indices and fields.

``Outputs`` holds the per-clip ``transform``, the ``batch_transform``, the form
of the labels and whether the batch carries its samples' indices. It puts a
WebDataset sample's fields (``fields``) last. With several
labels a sample, the labels are a tuple of arrays, one a head, each in that form. Each
transform gets its own generator from ``seeds``: a clip's from its place in the
epoch, a batch's from its index. So the batch is the same whichever thread or
process makes it, and after a resume. See :doc:`/video/augmentation`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from ..._core.checks import check_bool, check_callable
from .seeds import batch_rng, transform_rng

__all__ = ["LABELS", "Outputs"]

Labels = Literal["int", "one_hot"]
LABELS: tuple[Labels, ...] = ("int", "one_hot")

Transform = Callable[[np.ndarray, np.random.Generator], np.ndarray]
# A batch's labels: one array, or a tuple of them (one a head) with several labels a sample.
BatchLabels = np.ndarray | tuple[np.ndarray, ...]
BatchTransform = Callable[[np.ndarray, BatchLabels, np.random.Generator], tuple[np.ndarray, BatchLabels]]


class Outputs:
    """The last steps of making a batch: each clip's ``transform``, the labels, the ``batch_transform``.

    Args:
        transform: ``transform(clip, rng) -> clip`` per clip (per view in
            evaluation), or ``None``; the result keeps the clip's shape.
        batch_transform: ``batch_transform(clips, labels, rng) -> (clips, labels)``, or ``None``.
        labels: ``"int"`` (``int64``, shape ``(batch,)``) or ``"one_hot"`` (``float32``, ``(batch, classes)``),
            for each head.
        label_smoothing: with one-hot labels, the share of each label spread evenly over its head's classes.
        return_index: add each clip's sample index (into the data set's ``samples``) to the batch.
        classes: the data set's class names: a list, or a tuple of one list a head.
        seed: the data set's seed.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument is out of range, or the batch transform needs one-hot labels.
    """

    def __init__(
        self,
        *,
        transform: Transform | None,
        batch_transform: BatchTransform | None,
        labels: Labels,
        label_smoothing: float,
        return_index: bool,
        classes: list[str] | tuple[list[str], ...],
        seed: int,
    ) -> None:
        self.transform = check_callable("transform", transform)
        self.batch_transform = check_callable("batch_transform", batch_transform)
        if labels not in LABELS:
            raise ValueError(f"labels must be one of {LABELS}, got {labels!r}")
        if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, int | float | np.number):
            raise TypeError(f"label_smoothing must be a number in [0, 1), got {type(label_smoothing).__name__}")
        if not 0 <= label_smoothing < 1:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing!r}")
        if label_smoothing and labels != "one_hot":
            raise ValueError("label_smoothing needs one-hot labels: pass labels='one_hot'")
        if getattr(batch_transform, "one_hot_labels", False) and labels != "one_hot":
            raise ValueError(f"{batch_transform!r} mixes one-hot labels: pass labels='one_hot'")
        self.labels = labels
        self.label_smoothing = float(label_smoothing)
        self.return_index = check_bool("return_index", return_index)
        # Classes a head: an int, or a tuple of one int a head with several labels a sample.
        self.num_classes = len(classes) if isinstance(classes, list) else tuple(len(head) for head in classes)
        self.seed = seed

    def finish(
        self,
        clips: np.ndarray,
        samples: np.ndarray,
        labels: np.ndarray,
        positions: list[int],
        epoch: int,
        index: int,
        fields: dict[str, np.ndarray] | None = None,
    ) -> tuple[Any, ...]:
        """Return batch ``index`` of ``epoch``: ``(clips, labels)``, the samples' indices if asked, then ``fields``.

        With several heads, ``labels`` is a tuple of one array a head. A batch
        transform mixes clips and labels only: each clip keeps its own sample's fields.

        Args:
            clips: the decoded clips, changed in place by ``transform``.
            samples: each clip's sample index.
            labels: each clip's label, as an int: ``(batch,)``, or ``(batch, heads)``.
            positions: each clip's place in the epoch.
            epoch: the epoch.
            index: the batch's index.
            fields: each clip's sample's fields, one array an extension; ``None`` for none.

        Raises:
            ValueError: a transform returned the wrong shape or structure.
            TypeError: a transform returned a type that cannot be cast to the clips' ``dtype``.
        """
        if self.transform is not None:
            for clip, position in zip(clips, positions, strict=True):
                rng = transform_rng(self.seed, epoch, position)
                for view in clip if clips.ndim == 6 else [clip]:  # a views axis: each view in turn
                    _write(view, self.transform(view, rng))
        if isinstance(self.num_classes, int):
            encoded: BatchLabels = self._encoded(labels, self.num_classes)
        else:
            encoded = tuple(self._encoded(labels[:, h], count) for h, count in enumerate(self.num_classes))
        if self.batch_transform is not None:
            result = self.batch_transform(clips, encoded, batch_rng(self.seed, epoch, index))
            if not isinstance(result, tuple) or len(result) != 2:
                raise ValueError(f"batch_transform must return (clips, labels), got {type(result).__name__}")
            new_clips, encoded = result
            if np.shape(new_clips) != clips.shape:
                raise ValueError(f"batch_transform changed the clips' shape {clips.shape} to {np.shape(new_clips)}")
            clips = np.asarray(new_clips).astype(clips.dtype, casting="same_kind", copy=False)
        batch = (clips, encoded, samples) if self.return_index else (clips, encoded)
        return batch if fields is None else (*batch, fields)

    def _encoded(self, labels: np.ndarray, count: int) -> np.ndarray:
        """One head's labels in the form asked: ints as they are, or one-hot over its ``count`` classes, smoothed."""
        if self.labels != "one_hot":
            return np.ascontiguousarray(labels)
        smooth = self.label_smoothing
        encoded = np.full((len(labels), count), smooth / count, dtype=np.float32)
        encoded[np.arange(len(labels)), labels] += 1 - smooth
        return encoded


def _write(out: np.ndarray, result: Any) -> None:
    """Write what ``transform`` returned for the clip ``out`` into it."""
    if np.shape(result) != out.shape:
        raise ValueError(f"transform must return a clip of the shape it was given, {out.shape}; got {np.shape(result)}")
    if result is not out:
        np.copyto(out, result, casting="same_kind")
