"""A yield function over a folder tree ``root/<class>/<video>``, as UCF101 is laid out.

``VideoFolder`` is the ``VideoDataset`` of the tree's videos, labelled by class
folder (see ``folder_samples``). See :doc:`/video/datasets`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Literal

from ..._faults.quarantine import Quarantine
from .._indexes.cache import IndexCache
from .._samples.annotations import VIDEO_EXTENSIONS, folder_samples
from .._samples.augment import Augment, Resize
from .._samples.exclude import Exclude
from .._samples.parsing import root_path
from .._samples.sampling import Sampling
from .dataset import VideoDataset
from .draws import Weights
from .outputs import BatchTransform, Labels, Transform
from .short_clips import ShortClips

__all__ = ["VideoFolder"]


class VideoFolder(VideoDataset):
    """Batches of clips and labels from a tree ``root/<class>/<video>``, as UCF101 is laid out.

    It is the ``VideoDataset`` of ``folder_samples(root, classes, extensions)``.
    The labels are the indices of the class folders' names, in sorted order
    (``classes``). The samples are the videos, in sorted order. Files and folders
    whose names start with ``.`` are ignored. Everything else works as in
    ``VideoDataset``: batches, sampling, augmentation, views and bad videos.

    Args:
        root: the folder whose subfolders are the classes.
        batch_size: clips per batch.
        clip_len: frames per clip.
        stride: the step between a clip's frames.
        size: ``(height, width)`` of the output frames.
        train: augment and shuffle (training) or not (evaluation).
        seed: makes the augmentation and shuffling reproducible; ``None`` draws one.
        on_error: ``"raise"`` or ``"skip"``, see ``VideoDataset``.
        dtype: ``"float32"`` (values in [0, 1]) or ``"uint8"``.
        crop_fraction: the crop's share of the box each frame is fitted to, see ``VideoDataset``.
        classes: class folder names to use, in label order (e.g. the training set's
            ``classes`` for a validation set); default: every subfolder, sorted.
        extensions: the file name endings that count as videos; other files are ignored.
        exact_counts: index every video at construction and count the frames
            that decode, finding bad files there.
        seek: passed to ``read_clip``: start at the keyframe before a clip, or
            decode every frame from the first with ``False``.
        sampling: ``"clip"`` or ``"segments"``, see ``VideoDataset``.
        num_clips: clips per video in evaluation; given, the batch has a views axis.
        num_crops: crops per clip in evaluation, 1 or 3; given, the batch has a views axis.
        exclude: files to leave out: paths, or the JSON-lines file the check command writes.
        quarantine: where bad videos are kept, see ``VideoDataset``.
        index_cache: where the videos' indexes are kept; default: ``default_index_cache()``.
        find_missing: name files gone since the folders were listed, see ``VideoDataset``.
        augment: the spatial augmentation, see ``Augment``.
        scale: ``(min, max)`` short side for scale jitter, see ``VideoDataset``.
        transform: a function of each clip and its generator, see ``VideoDataset``.
        batch_transform: a function of each batch and its generator, e.g. ``Mixup``.
        labels: ``"int"`` or ``"one_hot"``.
        label_smoothing: with one-hot labels, the share of each label spread over all classes.
        return_index: add each clip's index in ``samples`` to the batch.
        stream: the stream read from each video, see ``VideoDataset``.
        fps: sample each clip at this many frames a second, see ``VideoDataset``.
        weights: how often training draws each video: ``"balanced"``, or one number
            per video found, in sorted order (excluded ones included); see ``VideoDataset``.
        samples_per_epoch: the videos an epoch draws in training; default: as many as there are.
        resize: how a frame is fitted before the crop, see ``VideoDataset``.
        short_clips: how a video too short for a clip is read, see ``VideoDataset``.

    Raises:
        TypeError: ``root`` is not a path, or an argument has the wrong type.
        ValueError: an argument is out of range, or ``root`` has no class folder
            or no video (the message says where it looked).
        FileNotFoundError: ``root``, a named class folder or the ``exclude`` file
            does not exist; or, with ``on_error="raise"``, a video is gone since the
            folders were listed.
        VideoDecodeError: with ``on_error="raise"`` and ``exact_counts=True``, a
            video does not open or is too short.

    See :doc:`/video/datasets` and :doc:`/video/augmentation`.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        batch_size: int,
        clip_len: int,
        stride: int = 1,
        size: tuple[int, int] = (112, 112),
        train: bool = True,
        seed: int | None = None,
        on_error: Literal["raise", "skip"] = "raise",
        *,
        dtype: Literal["float32", "uint8"] = "float32",
        crop_fraction: float = 0.875,
        classes: Sequence[str] | None = None,
        extensions: Sequence[str] = tuple(sorted(VIDEO_EXTENSIONS)),
        exact_counts: bool = False,
        seek: bool = True,
        sampling: Sampling = "clip",
        num_clips: int | None = None,
        num_crops: int | None = None,
        exclude: Exclude = None,
        quarantine: Quarantine | None = None,
        index_cache: IndexCache | None = None,
        find_missing: bool = True,
        augment: Augment | None = None,
        scale: tuple[int, int] | None = None,
        transform: Transform | None = None,
        batch_transform: BatchTransform | None = None,
        labels: Labels = "int",
        label_smoothing: float = 0.0,
        return_index: bool = False,
        stream: int | None = None,
        fps: float | None = None,
        weights: Weights = None,
        samples_per_epoch: int | None = None,
        resize: Resize = "short_side",
        short_clips: ShortClips = "loop",
    ) -> None:
        self.root = root_path(root)
        super().__init__(
            folder_samples(self.root, classes, extensions),
            batch_size,
            clip_len,
            stride,
            size,
            train,
            seed,
            on_error,
            dtype=dtype,
            crop_fraction=crop_fraction,
            exact_counts=exact_counts,
            seek=seek,
            sampling=sampling,
            num_clips=num_clips,
            num_crops=num_crops,
            exclude=exclude,
            quarantine=quarantine,
            index_cache=index_cache,
            find_missing=find_missing,
            augment=augment,
            scale=scale,
            transform=transform,
            batch_transform=batch_transform,
            labels=labels,
            label_smoothing=label_smoothing,
            return_index=return_index,
            stream=stream,
            fps=fps,
            weights=weights,
            samples_per_epoch=samples_per_epoch,
            resize=resize,
            short_clips=short_clips,
        )

    def _describe(self) -> str:
        return f"{str(self.root)!r} {super()._describe()}"
