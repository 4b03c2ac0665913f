"""Checks a ``VideoDataset`` makes at construction: its arguments, and which samples it can use.

``check_arguments`` checks the arguments and returns them normalised.
``sample_list_of`` makes the sample list, and ``class_names`` names its classes.
``usable`` leaves out missing files and, with ``exact_counts``, the samples that
cannot give a clip. No file is opened unless ``exact_counts`` asks for it. See :doc:`/video/datasets`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..._core.checks import check_bool, check_int
from .._base.errors import VideoDecodeError
from .._base.file_pass import each_file
from .._bytes.tar_members import container_path
from .._indexes.cache import IndexCache, default_index_cache
from .._read.clips import _check_clip_args
from .._samples.annotations import sample_list
from .._samples.exclude import Exclude, kept_mask
from .._samples.finding import missing_files
from .._samples.sample_list import SampleList
from .._samples.sampling import CROP_COUNTS, SAMPLINGS, Sampling
from .reader import SampleReader, Video, listed
from .replacing import BadSamples

__all__ = ["Arguments", "check_arguments", "class_names", "sample_list_of", "usable"]


class Arguments(NamedTuple):
    """A ``VideoDataset``'s arguments, checked; see ``VideoDataset`` for each."""

    batch_size: int
    clip_len: int
    stride: int
    size: tuple[int, int]
    train: bool
    seed: int
    on_error: str
    dtype: str
    decode_size: tuple[int, int]
    sampling: Sampling
    num_clips: int
    num_crops: int
    views: int | None  # None: no views axis
    exact_counts: bool
    seek: bool
    index_cache: IndexCache | None
    find_missing: bool


def check_arguments(
    *,
    batch_size: int,
    clip_len: int,
    stride: int,
    size: tuple[int, int],
    train: bool,
    seed: int | None,
    on_error: str,
    dtype: str,
    crop_fraction: float,
    sampling: Sampling,
    num_clips: int | None,
    num_crops: int | None,
    exact_counts: bool,
    seek: bool,
    index_cache: IndexCache | None,
    find_missing: bool,
) -> Arguments:
    """Check a ``VideoDataset``'s arguments, and return them normalised.

    A ``seed`` of ``None`` becomes one drawn from the operating system.
    ``num_clips`` and ``num_crops`` of ``None`` become 1.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument is out of range, or ``num_clips`` or ``num_crops`` is given for training.
    """
    batch_size = check_int("batch_size", batch_size, minimum=1)
    if index_cache is not None and not isinstance(index_cache, IndexCache):
        raise TypeError(f"index_cache must be an IndexCache or None, got {type(index_cache).__name__}")
    clip_len = check_int("clip_len", clip_len, minimum=1)
    stride = check_int("stride", stride, minimum=1)
    _check_clip_args(0, clip_len, stride, size)
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if dtype not in ("float32", "uint8"):
        raise ValueError(f"dtype must be 'float32' or 'uint8', got {dtype!r}")
    if isinstance(crop_fraction, bool) or not isinstance(crop_fraction, int | float | np.number):
        raise TypeError(
            f"crop_fraction must be a number in (0, 1], got {type(crop_fraction).__name__} {crop_fraction!r}"
        )
    if not 0 < crop_fraction <= 1:
        raise ValueError(f"crop_fraction must be in (0, 1], got {crop_fraction!r}")
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
    if sampling == "segments" and stride != 1:
        raise ValueError(f"stride applies to sampling='clip' only; segments take one frame each, got {stride}")
    multi_view = num_clips is not None or num_crops is not None
    num_clips = 1 if num_clips is None else check_int("num_clips", num_clips, minimum=1)
    num_crops = 1 if num_crops is None else check_int("num_crops", num_crops, minimum=1)
    if num_crops not in CROP_COUNTS:
        raise ValueError(f"num_crops must be one of {CROP_COUNTS}, got {num_crops}")
    if multi_view and train:
        raise ValueError("num_clips and num_crops are for evaluation: pass train=False")
    if seed is not None:
        seed = check_int("seed", seed, minimum=0)
    size = (int(size[0]), int(size[1]))
    return Arguments(
        batch_size=batch_size,
        clip_len=clip_len,
        stride=stride,
        size=size,
        train=check_bool("train", train),
        seed=seed if seed is not None else int(np.random.SeedSequence().entropy % 2**63),
        on_error=on_error,
        dtype=dtype,
        decode_size=(round(size[0] / crop_fraction), round(size[1] / crop_fraction)),
        sampling=sampling,
        num_clips=num_clips,
        num_crops=num_crops,
        views=num_clips * num_crops if multi_view else None,
        exact_counts=check_bool("exact_counts", exact_counts),
        seek=check_bool("seek", seek),
        index_cache=index_cache,
        find_missing=check_bool("find_missing", find_missing),
    )


def sample_list_of(
    samples: SampleList | Sequence[Sequence[object]],
    classes: Sequence[str] | Sequence[Sequence[str]] | None,
    exclude: Exclude,
) -> tuple[SampleList, np.ndarray]:
    """Return the samples a ``VideoDataset`` is given as a ``SampleList``, without the excluded files.

    Returns:
        The sample list, and the indices of its samples in ``samples``.

    Raises:
        ValueError: ``classes`` is given with a ``SampleList``, or does not give one list
            of names a head; or every sample is excluded.
        AnnotationError: a row is malformed or names an unknown class.
    """
    if not isinstance(samples, SampleList):
        samples = sample_list(samples, classes)
    elif classes is not None:
        raise ValueError("a SampleList has its classes: pass classes to the reader that made it")
    mask = kept_mask(samples, exclude)
    if mask is None:
        return samples, np.arange(len(samples))
    return samples.keep(mask), np.flatnonzero(mask)


def class_names(samples: SampleList) -> list[str] | tuple[list[str], ...]:
    """A data set's ``classes``: a list of names, or a tuple of one list a head with several labels a sample."""
    if samples.labels.ndim == 2:
        return tuple(list(head) for head in samples.classes)
    return list(samples.classes)  # type: ignore[arg-type]


def usable(
    samples: SampleList,
    reader: SampleReader,
    bad: BadSamples,
    *,
    find_missing: bool,
    index_cache: IndexCache | None,
) -> tuple[SampleList, np.ndarray]:
    """Return the samples to draw from, leaving out or raising for the bad ones found now.

    Missing files are found with ``find_missing``. With ``exact_counts``, every
    file is indexed now, and samples that cannot give a clip are found too.
    Each bad sample goes to ``bad.reject``: skipped, or raised for.

    Returns:
        The samples left, and their indices in ``samples``.

    Raises:
        FileNotFoundError: with ``on_error="raise"``, listed files are missing (the message names them).
        VideoDecodeError: with ``on_error="raise"`` and ``exact_counts``, a sample cannot give a clip.
        ValueError: no sample is left.
    """
    keep = np.ones(len(samples), dtype=bool)
    if find_missing:
        missing = missing_files(container_path(p) for p in samples.paths())  # a tar member: its shard
        if missing and bad.on_error == "raise":
            named = "; ".join(f"{samples.path(i)}{listed(samples.origin(i))}" for i in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            raise FileNotFoundError(
                2,
                f"{len(missing)} of {len(samples)} videos are missing: {named}{more}; on_error='skip' leaves them out",
                samples.path(missing[0]),
            )
        for i in missing:
            bad.reject(samples.path(i), "no such video file" + listed(samples.origin(i)), FileNotFoundError())
        keep[missing] = False
    if reader.exact_counts:
        cache = default_index_cache() if index_cache is None else index_cache
        _count_exactly(samples, keep, reader, bad, cache)
    if not keep.any():
        raise ValueError(f"no usable video: all {len(samples)} samples were skipped, see .skipped")
    return (samples, np.arange(len(samples))) if keep.all() else (samples.keep(keep), np.flatnonzero(keep))


def _count_exactly(
    samples: SampleList, keep: np.ndarray, reader: SampleReader, bad: BadSamples, cache: IndexCache
) -> None:
    """Index every file now, on threads with a progress display; reject the samples that cannot give a clip."""
    paths = sorted({p for i, p in enumerate(samples.paths()) if keep[i]})
    index_of = functools.partial(cache.get, stream=reader.stream)
    failures = {
        path: exc
        for path, _, exc in each_file(paths, index_of, what="counting frames (exact_counts=True)")
        if exc is not None
    }
    for i in np.flatnonzero(keep).tolist():
        video = Video.at(samples, i)
        exc = failures.get(video.path)
        try:
            if exc is not None:
                raise exc
            first, stop = reader.range(video, cache)
            lacking = reader.lacking(video, first, stop, cache)
            if lacking:
                raise VideoDecodeError(video.path, lacking)
        except (VideoDecodeError, OSError) as exc:
            keep[i] = False
            reason = exc.reason if isinstance(exc, VideoDecodeError) else str(exc)
            key = video.key if video.path not in failures and not video.whole else video.path
            bad.reject(video.path, reason + listed(video.origin), exc, key=key)
