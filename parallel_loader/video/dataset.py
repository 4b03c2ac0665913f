"""A yield function over a list of samples: batches of clips and labels.

``VideoDataset`` turns a ``SampleList`` (see ``annotations``) into batches of
clips and labels, with the temporal sampling chosen (see ``sampling``), seeded
augmentation for training and multi-view evaluation. ``VideoFolder`` (in
``folder``) is the case of a tree ``root/<class>/<video>``.

Nothing here starts or knows of threads. ``__call__`` is safe to call from
several loader threads at once because it keeps its state in local variables
and derives every random choice from ``(seed, epoch, position, attempt)``.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._checks import check_bool, check_int
from ..yield_function import YieldFunction
from .annotations import SampleList, VideoSample, sample_list
from .decode import _check_clip_args, frame_count, probe, read_clip
from .errors import VideoDecodeError
from .index import IndexCache, default_index_cache
from .sampling import CROP_COUNTS, SAMPLINGS, Sampling, crops, frames_needed, temporal_views

__all__ = ["VideoDataset"]

log = logging.getLogger(__name__)

# Tag words of the random keys. numpy's SeedSequence ignores trailing zero words,
# so keys of different lengths can collide ([s, e] == [s, e, 0]); every key here
# has a fixed length and its own tag, distinct from each other and from the
# DataLoader's shuffle tag (0x5348554646, "SHUFF").
_ORDER_KEY = 0x4F52444552  # "ORDER": the epoch's sample order, [seed, ORDER_KEY, epoch]
_CLIP_KEY = 0x434C4950  # "CLIP": one clip, [seed, CLIP_KEY, epoch, position, attempt]


@dataclass(frozen=True)
class _Video:
    """A usable sample: its file, label, frames ``first`` to ``stop - 1`` by the header, and where it was listed.

    ``segment`` is its times, ``"[start, end) s"``, or "" for a whole file.
    """

    path: str
    label: int
    first: int
    stop: int
    origin: str
    segment: str = ""

    @property
    def key(self) -> str:
        """What the sample is listed under in ``skipped`` when it alone is bad: its file, or its segment of it."""
        return f"{self.path} {self.segment}" if self.segment else self.path


class VideoDataset(YieldFunction):
    """Batches of clips and labels from a list of samples: whole videos or segments of them.

    ``samples`` is a ``SampleList`` (from a reader such as ``ucf101_samples`` or
    ``kinetics_samples``) or rows ``(path, label)`` / ``(path, label,
    start_seconds, end_seconds)`` (see ``sample_list``). A sample with times is
    the segment ``[start, end)`` of its file: the frames whose times, at the
    frame rate in the file's header, fall in it. ``self.classes`` are the class
    names in label order; ``self.samples`` the usable samples as ``(path, label,
    frames)``, ``frames`` being those the sample covers.

    A batch is ``(clips, labels)``: clips of shape ``(batch, clip_len, height,
    width, 3)``, RGB, ``float32`` in [0, 1] or ``uint8``; labels ``int64`` of
    shape ``(batch,)``. Frames are decoded at ``size / crop_fraction`` and cropped to ``size``.

    * Training (``train=True``): the samples are shuffled each epoch and cut into
      batches; every batch is full, the last one topped up from the start of the
      epoch's order. Each clip's frames are drawn at random (``sampling``), then
      a random crop and a horizontal flip with probability 1/2.
    * Evaluation (``train=False``): the samples in their listed order, each once,
      so the last batch may be smaller; the centre clip, centre-cropped. Given
      ``num_clips`` or ``num_crops`` (even 1), each sample gives ``num_clips x
      num_crops`` views and clips gain a views axis: ``(batch, views, clip_len,
      height, width, 3)``, view ``j * num_crops + c`` being crop ``c`` of clip ``j``
      (``self.views`` is their number; ``None`` without a views axis).

    Sampling (see ``parallel_loader.video.sampling``): ``"clip"`` takes
    ``clip_len`` frames ``stride`` apart from a random start (the centre in
    evaluation; evenly spread starts for several clips); ``"segments"`` splits the
    sample into ``clip_len`` equal segments and takes one frame from each, at
    random in training and at the centre in evaluation (``stride`` must be 1);
    each of those frames is read with its own ``read_clip`` call.

    Randomness: the epoch's sample order comes from
    ``np.random.default_rng([seed, ORDER, epoch])`` and each clip's choices from
    ``np.random.default_rng([seed, CLIP, epoch, position, attempt])``, where
    ``position`` is the sample's place in the epoch, ``attempt`` counts the
    samples tried for it (0 unless a bad one is replaced), and ``ORDER`` and
    ``CLIP`` are fixed tag words (``_ORDER_KEY``, ``_CLIP_KEY``), so that the
    streams are independent of each other and of the ``DataLoader``'s shuffle.
    Nothing comes from a generator shared by threads, so a batch is the same
    whichever thread makes it, however many there are, and in whatever order
    the batches are made.

    How the epoch reaches the function: the ``DataLoader`` calls
    ``on_epoch_begin(epoch)`` in the consuming thread before the first call of
    each epoch (starting at its ``first_epoch``, and also for epochs later
    abandoned part way), when no loader thread is running this function. That
    sets the epoch and computes its sample order once; loader threads only read
    them, so all the samples of an epoch see the same values without a lock.
    Used without a loader, the function makes epoch 0 until ``set_epoch`` is
    called.

    Frame counts. At construction each file's header gives its frame count and
    frame rate (cheap); ``exact_counts=True`` counts the frames by decoding
    every file instead (slow). A header can claim more frames than a whole file
    decodes (it counts timestamp gaps as frames, or is wrong), so each call also
    asks the file's index (see ``index``: made by decoding the file once, on its
    first read, and kept by ``default_index_cache()``, on disk too if that cache
    has a directory) how many frames decode. When the sample's range reaches
    past them and the file is intact, the clip is drawn from the frames that
    decode instead, so no clip asks for a frame past them. The index is asked in
    the call itself, so a clip depends on the file alone, not on whether another
    thread read it first; once the index is made, asking costs a lookup. A file
    whose header is right gives the clips its header alone would. A sample left
    with too few frames for a clip is a bad sample (see below): its file, or
    only itself when it is a segment. A file that is not intact (truncated,
    damaged) keeps its header's range, since the header may be right about what
    is missing: a clip past what decodes raises a ``VideoDecodeError`` that names
    the file, says it is truncated or corrupt and suggests ``exact_counts=True``,
    which finds such files at construction. ``self.samples`` gives the frames
    the headers claim.

    Bad samples: with ``on_error="raise"``, construction raises for missing files
    (``FileNotFoundError`` listing them all and where they were listed) and for the
    first file that does not open or sample too short for a clip
    (``VideoDecodeError``); a file that fails later raises from the loader. With
    ``on_error="skip"`` a bad sample is left out at construction, or replaced in
    its batch by another sample drawn from the same seeded generator; either way
    it is logged as a warning and listed in ``self.skipped`` (``path: reason``,
    the reason saying where the sample was listed; a segment too short is listed
    as ``path [start, end) s``, since the file's other segments may be fine), and
    every replaced clip is counted in ``self.replaced``. A file that fails to
    decode counts for all its samples: later attempts on it fail without a
    decode, exactly as if tried, so the batches do not depend on which thread
    found a file bad first. (One limit: a file that fails for some clips only,
    such as a truncated file whose header claims all its frames, gives the clips
    that decode until its first failure; which those are depends on the order the
    batches are made in. ``exact_counts=True`` finds such files at construction.)
    Loader threads add to ``skipped`` during an epoch, so read it between epochs
    or after the run.

    Args:
        samples: a ``SampleList``, or rows as ``sample_list`` takes them.
        batch_size: clips per batch.
        clip_len: frames per clip.
        stride: the step between a clip's frames (``sampling="clip"``).
        size: ``(height, width)`` of the output frames.
        train: augment and shuffle (training) or not (evaluation).
        seed: makes the augmentation and shuffling reproducible; ``None`` draws one.
        on_error: ``"raise"`` or ``"skip"``, see above.
        dtype: ``"float32"`` (values in [0, 1]) or ``"uint8"``.
        crop_fraction: the crop's share of the decoded frame's height and width.
        classes: class names in label order, for rows (see ``sample_list``); a
            ``SampleList`` has its own (its reader takes ``classes``).
        exact_counts: count each video's frames by decoding it at construction, instead of trusting
            its header until the file is read (see above).
        seek: passed to ``read_clip``: start at the keyframe before a clip (exact, the default) or, with
            ``False``, decode every frame from the first (each file's index is still made once, for its
            frame count).
        sampling: ``"clip"`` or ``"segments"``, see above.
        num_clips: clips per sample in evaluation; given, the batch has a views axis.
        num_crops: crops per clip in evaluation, 1 or 3; given, the batch has a views axis.

    Raises:
        ValueError: an argument is out of range, or no sample is usable.
        AnnotationError: a row is malformed or names an unknown class.
        FileNotFoundError: with ``on_error="raise"``, listed files are missing.
        VideoDecodeError: with ``on_error="raise"``, a file does not open or a sample is too short.
    """

    def __init__(
        self,
        samples: SampleList | Sequence[Sequence[object]],
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
        exact_counts: bool = False,
        seek: bool = True,
        sampling: Sampling = "clip",
        num_clips: int | None = None,
        num_crops: int | None = None,
    ) -> None:
        batch_size = check_int("batch_size", batch_size, minimum=1)
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
        train, exact_counts, seek = (
            check_bool("train", train),
            check_bool("exact_counts", exact_counts),
            check_bool("seek", seek),
        )
        if not isinstance(samples, SampleList):
            samples = sample_list(samples, classes)
        elif classes is not None:
            raise ValueError("a SampleList has its classes: pass classes to the reader that made it")
        self.batch_size = batch_size
        self.clip_len = clip_len
        self.stride = stride
        self.size = (int(size[0]), int(size[1]))
        self.train = train
        self.seed = seed if seed is not None else int(np.random.SeedSequence().entropy % 2**63)
        self.on_error = on_error
        self.dtype = dtype
        self.decode_size = (round(self.size[0] / crop_fraction), round(self.size[1] / crop_fraction))
        self.sampling = sampling
        self.span = frames_needed(sampling, clip_len, stride)  # the fewest frames a sample needs
        self.num_clips = num_clips
        self.num_crops = num_crops
        self.views = num_clips * num_crops if multi_view else None  # None: no views axis
        self.exact_counts = exact_counts
        self.seek = seek
        self.classes = list(samples.classes)
        # Written by loader threads, so only by list.append and dict item assignment,
        # which are atomic in CPython (see the Python FAQ on thread-safe mutations).
        self.skipped: dict[str, str] = {}
        self._error_sink: Callable[[int | None, BaseException, dict[str, Any]], None] | None = None
        self._replacements: list[tuple[int, int, str]] = []
        self._videos = self._open_all(samples.samples)
        self.samples: list[tuple[str, int, int]] = [(v.path, v.label, v.stop - v.first) for v in self._videos]
        # (epoch, sample order or None in evaluation): one attribute, so that a
        # reader never sees one epoch's number with another's order.
        self._state: tuple[int, np.ndarray | None] = (0, self._order(0))
        # get_batch's orders of other epochs: kept for the few whose calls may run at once.
        self._order_cached = functools.lru_cache(maxsize=4)(self._order)

    def __getstate__(self) -> dict[str, Any]:
        # Worker processes (DataLoader(processes=...)) get the dataset by pickle: the order cache
        # refers to this instance's method, and the error sink to the loader, so both stay behind.
        state = dict(self.__dict__)
        del state["_order_cached"]
        state["_error_sink"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._order_cached = functools.lru_cache(maxsize=4)(self._order)

    # The YieldFunction interface.

    def __len__(self) -> int:
        """Batches per epoch: every sample once, in ``ceil(samples / batch_size)`` batches."""
        return math.ceil(len(self._videos) / self.batch_size)

    def __call__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Make batch ``index`` of the current epoch (see ``set_epoch``). Safe to call from several threads at once."""
        epoch, order = self._state
        return self._batch(index, epoch, order)

    def get_batch(self, index: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Make batch ``index`` of ``epoch``, whatever the current epoch: what a ``DataLoader`` calls.

        A batch depends on its epoch through this argument alone, so the loader may
        make the next epoch's first batches while this epoch's last ones are used.
        """
        order = self._state[1] if epoch == self._state[0] else self._order_cached(epoch)
        return self._batch(index, epoch, order)

    def _batch(self, index: int, epoch: int, order: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= index < len(self):
            raise IndexError(f"batch index {index} out of range for {len(self)} batches")
        chosen = self._chosen(index, order)
        views = () if self.views is None else (self.views,)
        clips = np.empty((len(chosen), *views, self.clip_len, *self.size, 3), dtype=self.dtype)
        labels = np.empty(len(chosen), dtype=np.int64)
        for k, (position, sample) in enumerate(chosen):
            labels[k] = self._load(clips[k], epoch, position, sample)
        return clips, labels

    def on_epoch_begin(self, epoch: int) -> None:
        """Called by the DataLoader before the first call of ``epoch``: make that epoch's batches from now on."""
        self.set_epoch(epoch)

    def error_context(self, index: int) -> dict[str, Any]:
        """The files of batch ``index`` in the current epoch, for the loader's error records."""
        epoch, order = self._state
        return {"epoch": epoch, "paths": [self._videos[sample].path for _, sample in self._chosen(index, order)]}

    def set_error_sink(self, sink: Callable[[int | None, BaseException, dict[str, Any]], None] | None) -> None:
        """Report each file skipped while making batches to ``sink(index, exc, context)``.

        A ``DataLoader`` calls this with its own sink, so that with
        ``on_error="skip"`` a file that fails during an epoch is one record in the
        loader's ``errors`` and ``error_log`` (context: the path and the reason)
        and counts against its ``max_errors``, as a failed call does. Files left
        out at construction are in ``skipped`` and were logged then.
        """
        self._error_sink = sink

    # Public extras.

    @property
    def epoch(self) -> int:
        """The epoch whose batches ``__call__`` makes now."""
        return self._state[0]

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch whose batches ``__call__`` makes, for use without a ``DataLoader``.

        A loader sets the epoch itself through ``on_epoch_begin``. Call this only
        while no thread is calling the function.

        Raises:
            ValueError: ``epoch`` is not a non-negative int (numpy ints included).
        """
        epoch = check_int("epoch", epoch, minimum=0)
        self._state = (epoch, self._order(epoch))

    @property
    def replaced(self) -> int:
        """How many clips were replaced by another sample's because their file failed to decode."""
        return len(self._replacements)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._describe()}>"

    # Private helpers.

    def _describe(self) -> str:
        mode = "train" if self.train else "eval"
        return (
            f"{mode} videos={len(self._videos)} classes={len(self.classes)} "
            f"batch_size={self.batch_size} skipped={len(self.skipped)}"
        )

    def _open_all(self, samples: Sequence[VideoSample]) -> list[_Video]:
        """Read every sample's frame range from its file's header; raise for, or skip, the bad ones."""
        if self.on_error == "raise":
            missing = [s for s in samples if not os.path.exists(s.path)]
            if missing:
                listed = "; ".join(f"{s.path}{_listed(s.origin)}" for s in missing[:5])
                more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
                raise FileNotFoundError(
                    2,
                    f"{len(missing)} of {len(samples)} videos are missing: {listed}{more}; "
                    "on_error='skip' leaves them out",
                    missing[0].path,
                )
        videos: list[_Video] = []
        for sample in samples:
            try:
                frames, fps = self._header(sample)
            except (VideoDecodeError, FileNotFoundError) as exc:
                reason = exc.reason if isinstance(exc, VideoDecodeError) else "no such video file"
                self._reject(sample.path, reason + _listed(sample.origin), exc)
                continue
            first, stop = _frame_range(sample, frames, fps)
            if stop - first >= self.span:
                segment = "" if sample.start is None and sample.end is None else _times(sample)
                videos.append(_Video(sample.path, sample.label, first, stop, sample.origin, segment))
                continue
            if sample.start is None and sample.end is None:
                self._reject(sample.path, f"has {frames} frames, fewer than {self._needs()}" + _listed(sample.origin))
            else:  # the file's other segments may be long enough: reject this one only
                what = f"segment {_times(sample)} has {max(0, stop - first)} frames (of {frames} at {fps:g} fps)"
                reason = f"{what}, fewer than {self._needs()}{_listed(sample.origin)}"
                self._reject(sample.path, reason, key=f"{sample.path} {_times(sample)}")
        if not videos:
            raise ValueError(f"no usable video: all {len(samples)} samples were skipped, see .skipped")
        return videos

    def _header(self, sample: VideoSample) -> tuple[int, float]:
        """The frame count of a sample's file (counted, with ``exact_counts``) and, for a segment, its frame rate."""
        frames = frame_count(sample.path, exact=self.exact_counts)
        if sample.start is None and sample.end is None:
            return frames, 0.0
        fps = probe(sample.path).fps
        if not fps > 0:
            raise VideoDecodeError(sample.path, "its header gives no frame rate, so a segment's times name no frames")
        return frames, fps

    def _needs(self) -> str:
        if self.sampling == "clip":
            return f"a clip of {self.clip_len} frames at stride {self.stride} needs ({self.span})"
        return f"{self.clip_len} segments need ({self.span})"

    def _reject(self, path: str, reason: str, cause: BaseException | None = None, key: str | None = None) -> None:
        """Raise for a bad sample found at construction, or skip it (``key`` in ``skipped``, default its path)."""
        if self.on_error == "skip":
            self._skip(key or path, reason)
        elif isinstance(cause, FileNotFoundError):
            raise FileNotFoundError(2, reason, path) from cause
        else:
            raise VideoDecodeError(path, reason) from cause

    def _chosen(self, index: int, order: np.ndarray | None) -> list[tuple[int, int]]:
        """Batch ``index``'s ``(position, sample)`` pairs; a short last batch is topped up in training."""
        positions = range(index * self.batch_size, (index + 1) * self.batch_size)
        if order is not None:
            return [(p, int(order[p % len(order)])) for p in positions]
        return [(p, p) for p in positions if p < len(self._videos)]

    def _order(self, epoch: int) -> np.ndarray | None:
        """The samples in epoch ``epoch``'s order for training; ``None`` (listed order) for evaluation."""
        if not self.train:
            return None
        return np.random.default_rng([self.seed, _ORDER_KEY, epoch]).permutation(len(self._videos))

    def _load(self, out: np.ndarray, epoch: int, position: int, sample: int) -> int:
        """Decode sample ``sample`` into ``out``; return its label. Replaces a bad file's sample when skipping.

        Attempt ``k`` uses its own generator, and every attempt after the first
        draws its sample from all of them; a sample known to be bad (its file,
        or the segment itself) fails its attempt without a decode. So the outcome
        depends only on which files and samples are bad, not on what other calls
        found first.
        """
        bad: str | None = None  # the file whose sample this clip replaces
        cache = default_index_cache()  # one cache for the whole call: the frame counts and the reads
        for attempt in itertools.count():
            rng = np.random.default_rng([self.seed, _CLIP_KEY, epoch, position, attempt])
            if attempt > 0:
                if all(self._known_bad(v) for v in self._videos):
                    raise VideoDecodeError(bad, "no video left to replace it with: every video failed, see .skipped")
                sample = int(rng.integers(len(self._videos)))
            video = self._videos[sample]
            if not self._known_bad(video):  # only saves the decode: a known bad sample fails this attempt
                key = video.path  # a failure counts for the whole file, unless only this sample's range is at fault
                try:
                    first, stop = self._decoded_range(video, cache)
                    if stop - first < self.span:
                        key = video.key
                        raise VideoDecodeError(video.path, self._too_few(video, stop - first))
                    self._decode_into(out, rng if self.train else None, video, first, stop, cache)
                    if bad is not None:
                        self._replacements.append((epoch, position, bad))
                    return video.label
                except (VideoDecodeError, FileNotFoundError) as exc:  # the file may go away after construction
                    if self.on_error == "raise":
                        raise
                    reason = exc.reason if isinstance(exc, VideoDecodeError) else str(exc)
                    self._skip(key, reason + _listed(video.origin), exc, position // self.batch_size)
            bad = bad or video.path
        raise AssertionError("unreachable: itertools.count() never ends")

    def _known_bad(self, video: _Video) -> bool:
        """Whether a sample is known to fail: its file, or (for a segment) the sample itself, is in ``skipped``."""
        return video.path in self.skipped or video.key in self.skipped

    def _decoded_range(self, video: _Video, cache: IndexCache) -> tuple[int, int]:
        """The frames ``first`` to ``stop - 1`` that ``video``'s clips are drawn from.

        The sample's range by its file's header, cut to the frames that decode
        when the file's index (made now if it is not yet) knows fewer and the
        file is intact; see the class docstring.
        """
        index = cache.get(video.path)
        if index.frames >= video.stop or not index.intact:
            return video.first, video.stop
        return min(video.first, index.frames), index.frames

    def _too_few(self, video: _Video, frames: int) -> str:
        """Why a sample cut to the frames that decode has too few for a clip."""
        what = f"segment {video.segment}" if video.segment else "the file"
        return (
            f"has {frames} frames that decode in {what} (its header claims more: it counts timestamp gaps "
            f"as frames, or is wrong), fewer than {self._needs()}"
        )

    def _decode_into(
        self,
        out: np.ndarray,
        rng: np.random.Generator | None,
        video: _Video,
        first: int,
        stop: int,
        cache: IndexCache,
    ) -> None:
        """Decode the views of one sample's frames ``first`` to ``stop - 1`` into ``out``.

        One random view in training, ``self.views`` otherwise.
        """
        views = temporal_views(self.sampling, first, stop, self.clip_len, self.stride, rng, num_views=self.num_clips)
        read = functools.partial(read_clip, video.path, size=self.decode_size, seek=self.seek, index_cache=cache)
        try:
            if self.sampling == "clip":
                clips = [read(int(v[0]), self.clip_len, self.stride) for v in views]
            else:  # each frame read once, however many views share it
                wanted = np.unique(np.concatenate(views))
                frames = np.concatenate([read(int(i), 1, 1) for i in wanted])
                clips = [frames[np.searchsorted(wanted, v)] for v in views]
        except VideoDecodeError as exc:
            if self.exact_counts or "ends after" not in exc.reason:
                raise
            raise VideoDecodeError(video.path, exc.reason + _EXACT_HINT) from exc
        windows = crops(self.decode_size, self.size, rng, num_crops=self.num_crops)
        targets = iter(out if self.views is not None else [out])
        height, width = self.size
        for clip in clips:
            for top, left, flip in windows:
                view = clip[:, top : top + height, left : left + width]
                if flip:
                    view = view[:, :, ::-1]
                target = next(targets)
                if self.dtype == "uint8":
                    target[...] = view
                else:
                    np.multiply(view, np.float32(1 / 255), out=target)

    def _skip(self, key: str, reason: str, exc: BaseException | None = None, index: int | None = None) -> None:
        if key not in self.skipped:
            self.skipped[key] = reason
            log.warning("skipping video %s: %s", key, reason)
            sink = self._error_sink
            if sink is not None and exc is not None:
                sink(index, exc, {"path": key, "reason": reason})


_EXACT_HINT = "; exact_counts=True finds such files at construction (it counts every file's frames by decoding it)"


def _listed(origin: str) -> str:
    """`` (listed at <origin>)`` for a message, or nothing for a sample found by scanning."""
    return f" (listed at {origin})" if origin else ""


def _frame_range(sample: VideoSample, frames: int, fps: float) -> tuple[int, int]:
    """The frames ``first`` to ``stop - 1`` of a sample: all of them, or those whose times fall in its segment."""
    if sample.start is None and sample.end is None:
        return 0, frames
    # Frame i shows at i / fps: the segment holds the frames with start <= i / fps < end.
    # The slack keeps 0.1 s at 30 fps (3.0000000000000004 frames) at frame 3.
    first = 0 if sample.start is None else math.ceil(sample.start * fps - 1e-6)
    stop = frames if sample.end is None else min(frames, math.ceil(sample.end * fps - 1e-6))
    return min(first, frames), stop


def _times(sample: VideoSample) -> str:
    start = 0 if sample.start is None else sample.start
    end = "end" if sample.end is None else f"{sample.end:g}"
    return f"[{start:g}, {end}) s"
