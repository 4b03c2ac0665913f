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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..._core.checks import check_bool, check_int
from ..._data.yield_function import YieldFunction
from ..._faults.quarantine import Quarantine, lasting
from .._base.errors import VideoDecodeError
from .._base.file_pass import each_file
from .._indexes.cache import IndexCache, default_index_cache
from .._read.local import VideoInfo, _check_clip_args, probe, read_clip
from .._samples.annotations import Exclude, excluding, sample_list
from .._samples.sample_list import SampleList, missing_files
from .._samples.sampling import CROP_COUNTS, SAMPLINGS, Sampling, crops, frames_needed, temporal_views

__all__ = ["VideoDataset"]

log = logging.getLogger(__name__)

# Tag words of the random keys. numpy's SeedSequence ignores trailing zero words,
# so keys of different lengths can collide ([s, e] == [s, e, 0]); every key here
# has a fixed length and its own tag, distinct from each other and from the
# DataLoader's shuffle tag (0x5348554646, "SHUFF").
_ORDER_KEY = 0x4F52444552  # "ORDER": the epoch's sample order, [seed, ORDER_KEY, epoch]
_CLIP_KEY = 0x434C4950  # "CLIP": one clip, [seed, CLIP_KEY, epoch, position, attempt]
# Samples tried for one clip before its batch is given up: failures that may pass are not quarantined,
# so with every file failing for now (storage gone) nothing else would end the attempts.
_MAX_ATTEMPTS = 64
# Attempts after which a replacement checks whether every sample is known bad (a pass over the list).
_ALL_BAD_CHECK = 8
# Headers read (a segment's frame rate, a damaged file's claimed count) kept per dataset, most recent last.
_HEADERS_KEPT = 4096


@dataclass(frozen=True)
class _Video:
    """One sample, as a read needs it: its file, label, segment times (``None`` for an end) and where it was listed."""

    path: str
    label: int
    start: float | None
    end: float | None
    origin: str

    @property
    def whole(self) -> bool:
        return self.start is None and self.end is None

    @property
    def segment(self) -> str:
        """Its times, ``"[start, end) s"``, or "" for a whole file."""
        return "" if self.whole else _times(self.start, self.end)

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

    Construction costs the list alone: no video file is opened (only each
    listed folder is listed once, to name missing files, see ``find_missing``),
    so a million samples make a dataset in seconds, in every worker, and a
    sharded run opens only its own shard's files. ``len`` counts samples.

    Frame counts. What a sample needs from its file is learnt when a loader
    thread first reads it: its frame count from the file's index (see
    ``index``: made from its packets on the first read, or by decoding it where
    they cannot tell, and kept by ``index_cache`` in memory and on disk, so a
    later run or another worker finds it made), and, for a segment, the frame
    rate in its header. A clip's start is drawn from ``(seed, epoch, position,
    attempt)`` once those are known, so a batch is the same whichever thread
    reads the file first; once the index is made, asking costs a lookup. The
    frames that decode are all an intact file holds, whatever its header
    claims (it may count timestamp gaps as frames, or be wrong). A file that
    is not intact (truncated, damaged) keeps its header's count, since the
    header may be right about what is missing: a clip past what decodes raises
    a ``VideoDecodeError`` that names the file, says it is truncated or corrupt
    and suggests ``exact_counts=True``, which indexes every file at
    construction (on threads, with a progress display) and counts what
    decodes. ``self.samples`` gives the frames the headers claim, reading a
    header per entry read.

    Bad samples: files a pre-flight check found broken (``python -m
    parallel_loader.video.check``, see ``check``) can be left out with
    ``exclude``. Missing files are named at construction (``find_missing``):
    with ``on_error="raise"`` a ``FileNotFoundError`` lists them all and where
    they were listed, with ``on_error="skip"`` they are left out. Any other bad
    sample (a file that does not open, a sample too short for a clip, a file
    gone since construction) is found at its first read: with
    ``on_error="raise"`` the call raises (``VideoDecodeError``, naming the file
    and where it was listed); with ``on_error="skip"`` it is replaced in its
    batch by another sample drawn from the same seeded generator, logged as a
    warning and listed in ``self.skipped`` (``path: reason``, the reason saying
    where the sample was listed; a segment too short is listed as ``path
    [start, end) s``, since the file's other segments may be fine), and every
    replaced clip is counted in ``self.replaced``. With ``exact_counts=True``
    such samples are found at construction instead, and raise there or are
    left out. A file that fails to decode counts for all its samples: later
    attempts on it fail without a decode, exactly as if tried, so the batches
    do not depend on which thread found a file bad first. (One limit: a file
    that fails for some clips only, such as a truncated file whose header
    claims all its frames, gives the clips that decode until its first
    failure; which those are depends on the order the batches are made in.
    ``exact_counts=True`` finds such files at construction.) Loader threads
    add to ``skipped`` during an epoch, so read it between epochs or after the
    run. ``skipped`` is the dataset's ``quarantine`` (see
    ``parallel_loader.quarantine``): a file in it is not opened again in the
    run, and its memory, given ``quarantine=Quarantine(memory)``, can keep bad
    files across runs while their size and modification time are unchanged
    (the default memory lasts as long as the process). A failure that may
    pass (a ``TimeoutError``, an ``OSError`` other than a missing file)
    replaces the clip but not the file: it is tried again at its next draw.

    Pickling (a worker process receives the dataset so): the arguments, the
    compact sample list and the quarantine travel; the epoch's order is made
    again, and an ``index_cache`` travels as its directory (a new cache over
    the same store). About 60 bytes a sample for Kinetics-style names.

    In a ``DataLoader`` with ``on_error="skip"``, bad samples are replaced as
    with ``on_error="skip"`` here, whatever this setting (the loader says so
    through its error sink), and each bad file is one record in the loader's
    ``errors`` and ``error_log``, with the count of its draws replaced.

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
        exact_counts: index every video at construction (on threads, with progress) and count the
            frames that decode, finding bad files there; by default each file is learnt at its first read.
        seek: passed to ``read_clip``: start at the keyframe before a clip (exact, the default) or, with
            ``False``, decode every frame from the first (each file's index is still made once, for its
            frame count).
        sampling: ``"clip"`` or ``"segments"``, see above.
        num_clips: clips per sample in evaluation; given, the batch has a views axis.
        num_crops: crops per clip in evaluation, 1 or 3; given, the batch has a views axis.
        exclude: files to leave out: paths, or the JSON-lines file the check
            command writes (see ``annotations.excluding``).
        quarantine: where bad samples are kept (``skipped``); one with a
            persistent memory keeps bad files across runs. Default: a new one.
        index_cache: where the files' indexes are kept; default: ``default_index_cache()``
            (kept on disk in the per-user cache directory, see ``IndexCache``).
        find_missing: name missing files at construction by listing each folder
            of the list once (no file is opened or stat'ed); ``False`` skips it
            (a network file system where listing is slow): a missing file is
            then found at its first read, as any bad file.

    Raises:
        ValueError: an argument is out of range, or no sample is left (all missing or excluded).
        AnnotationError: a row is malformed or names an unknown class.
        FileNotFoundError: with ``on_error="raise"``, listed files are missing.
        VideoDecodeError: with ``on_error="raise"`` and ``exact_counts=True``, a
            file does not open or a sample is too short (without ``exact_counts``,
            the call that first reads it raises).
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
        exclude: Exclude = None,
        quarantine: Quarantine | None = None,
        index_cache: IndexCache | None = None,
        find_missing: bool = True,
    ) -> None:
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
        train, exact_counts, seek, find_missing = (
            check_bool("train", train),
            check_bool("exact_counts", exact_counts),
            check_bool("seek", seek),
            check_bool("find_missing", find_missing),
        )
        if not isinstance(samples, SampleList):
            samples = sample_list(samples, classes, exclude=exclude)
        elif classes is not None:
            raise ValueError("a SampleList has its classes: pass classes to the reader that made it")
        else:
            samples = excluding(samples, exclude)
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
        self.index_cache = index_cache
        self.classes = list(samples.classes)
        # Written by loader threads, so only by list.append and dict item assignment,
        # which are atomic in CPython (see the Python FAQ on thread-safe mutations).
        self.quarantine = Quarantine() if quarantine is None else quarantine
        self.skipped: dict[str, str] = self.quarantine.reasons  # the bad samples: key -> reason
        self._failures: dict[str, BaseException] = {}  # why each file in quarantine failed, for its later reports
        self._error_sink: Any = None
        self._replacements: list[tuple[int, int, str]] = []
        self._headers: dict[str, VideoInfo] = {}  # headers read, see _header
        self._list = self._usable(samples, find_missing)
        self._start(0)

    def _start(self, epoch: int) -> None:
        """Set the per-process state that is not pickled: the epoch's order and the cache of other epochs'."""
        # (epoch, sample order or None in evaluation): one attribute, so that a
        # reader never sees one epoch's number with another's order.
        self._state: tuple[int, np.ndarray | None] = (epoch, self._order(epoch))
        # get_batch's orders of other epochs: kept for the few whose calls may run at once.
        self._order_cached = functools.lru_cache(maxsize=4)(self._order)

    def __getstate__(self) -> dict[str, Any]:
        """What pickling keeps: the arguments, the sample list's arrays and the quarantine; not the caches.

        The epoch's order is made again where the dataset is unpickled, the
        error sink is the loader's to set there, and an ``index_cache`` is
        passed as its directory and size (a new cache over the same store).
        """
        state = self.__dict__.copy()
        for name in ("_state", "_order_cached", "_error_sink"):
            state.pop(name, None)
        state["_epoch"] = self._state[0]
        state["_headers"] = {}
        state["_failures"] = {}
        cache = self.index_cache
        if cache is not None:
            state["index_cache"] = ("IndexCache", cache.directory, cache.max_bytes)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        epoch = state.pop("_epoch")
        cache = state.get("index_cache")
        if isinstance(cache, tuple):
            state["index_cache"] = IndexCache(cache[1], cache[2])
        self.__dict__.update(state)
        self.skipped = self.quarantine.reasons
        self._error_sink = None
        self._start(epoch)

    @property
    def samples(self) -> Sequence[tuple[str, int, int]]:
        """The samples as ``(path, label, frames)``, ``frames`` being those the file's header claims for it.

        A view: reading an entry reads its file's header (and 0 frames for a
        file whose header cannot be read); ``len`` and the paths cost nothing.
        """
        return _SampleView(self)

    # The YieldFunction interface.

    def __len__(self) -> int:
        """Batches per epoch: every sample once, in ``ceil(samples / batch_size)`` batches."""
        return math.ceil(len(self._list) / self.batch_size)

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
        return {"epoch": epoch, "paths": [self._list.path(sample) for _, sample in self._chosen(index, order)]}

    def set_error_sink(self, sink: Callable[[int | None, BaseException, dict[str, Any]], None] | None) -> None:
        """Report each draw of a bad file replaced while making batches to ``sink(index, exc, context)``.

        A ``DataLoader`` calls this with its own sink (see
        ``parallel_loader.error_sink``), whose ``skip`` says whether the loader
        skips failures: bad samples are then replaced whatever ``on_error``
        says here. A file that fails during the run is one record in the
        loader's ``errors`` and ``error_log`` (context: the path and the
        reason), with the count of its draws replaced, and counts against its
        ``max_errors``. Files left out at construction are in ``skipped`` and
        were logged then.
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
            f"{mode} videos={len(self._list)} classes={len(self.classes)} "
            f"batch_size={self.batch_size} skipped={len(self.skipped)}"
        )

    def _usable(self, samples: SampleList, find_missing: bool) -> SampleList:
        """The samples to draw from: without the missing files (``find_missing``) and, with ``exact_counts``,
        without the files that do not decode or are too short; raise for them instead with ``on_error="raise"``.

        No file is opened unless ``exact_counts`` asks for a pass over them all.
        """
        keep = np.ones(len(samples), dtype=bool)
        if find_missing:
            missing = missing_files(samples.paths())
            if missing and self.on_error == "raise":
                listed = "; ".join(f"{samples.path(i)}{_listed(samples.origin(i))}" for i in missing[:5])
                more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
                raise FileNotFoundError(
                    2,
                    f"{len(missing)} of {len(samples)} videos are missing: {listed}{more}; "
                    "on_error='skip' leaves them out",
                    samples.path(missing[0]),
                )
            for i in missing:
                self._reject(samples.path(i), "no such video file" + _listed(samples.origin(i)), FileNotFoundError())
            keep[missing] = False
        if self.exact_counts:
            self._count_exactly(samples, keep)
        if not keep.any():
            raise ValueError(f"no usable video: all {len(samples)} samples were skipped, see .skipped")
        return samples if keep.all() else samples.keep(keep)

    def _count_exactly(self, samples: SampleList, keep: np.ndarray) -> None:
        """Index every file now, on threads with a progress display; reject the samples that cannot give a clip."""
        cache = default_index_cache() if self.index_cache is None else self.index_cache
        paths = sorted({p for i, p in enumerate(samples.paths()) if keep[i]})
        failures = {
            path: exc
            for path, _, exc in each_file(paths, cache.get, what="counting frames (exact_counts=True)")
            if exc is not None
        }
        for i in np.flatnonzero(keep).tolist():
            video = self._video(samples, i)
            exc = failures.get(video.path)
            try:
                if exc is not None:
                    raise exc
                first, stop = self._range(video, cache)
                if stop - first < self.span:
                    raise VideoDecodeError(video.path, self._too_few(video, first, stop))
            except (VideoDecodeError, OSError) as exc:
                keep[i] = False
                reason = exc.reason if isinstance(exc, VideoDecodeError) else str(exc)
                key = video.key if video.path not in failures and not video.whole else video.path
                self._reject(video.path, reason + _listed(video.origin), exc, key=key)

    def _video(self, samples: SampleList, i: int) -> _Video:
        return _Video(samples.path(i), samples.label(i), *samples.segment(i), samples.origin(i))

    def _header(self, path: str) -> VideoInfo:
        """What ``path``'s header says (read once per dataset, for the last few thousand files asked)."""
        info = self._headers.get(path)
        if info is None:
            info = probe(path)
            if len(self._headers) >= _HEADERS_KEPT:
                self._headers.clear()  # a dict written by several threads: only whole-dict operations
            self._headers[path] = info
        return info

    def _needs(self) -> str:
        if self.sampling == "clip":
            return f"a clip of {self.clip_len} frames at stride {self.stride} needs ({self.span})"
        return f"{self.clip_len} segments need ({self.span})"

    def _reject(self, path: str, reason: str, cause: BaseException | None = None, key: str | None = None) -> None:
        """Raise for a bad sample found at construction, or skip it (``key`` in ``skipped``, default its path)."""
        if self.on_error == "skip":
            self._skip(key or path, reason, cause, path)
        elif isinstance(cause, FileNotFoundError):
            raise FileNotFoundError(2, reason, path) from cause
        else:
            raise VideoDecodeError(path, reason) from cause

    def _chosen(self, index: int, order: np.ndarray | None) -> list[tuple[int, int]]:
        """Batch ``index``'s ``(position, sample)`` pairs; a short last batch is topped up in training."""
        positions = range(index * self.batch_size, (index + 1) * self.batch_size)
        if order is not None:
            return [(p, int(order[p % len(order)])) for p in positions]
        return [(p, p) for p in positions if p < len(self._list)]

    def _order(self, epoch: int) -> np.ndarray | None:
        """The samples in epoch ``epoch``'s order for training; ``None`` (listed order) for evaluation."""
        if not self.train:
            return None
        return np.random.default_rng([self.seed, _ORDER_KEY, epoch]).permutation(len(self._list))

    def _load(self, out: np.ndarray, epoch: int, position: int, sample: int) -> int:
        """Decode sample ``sample`` into ``out``; return its label. Replaces a bad file's sample when skipping.

        Attempt ``k`` uses its own generator, and every attempt after the first
        draws its sample from all of them; a sample known to be bad (its file,
        or the segment itself, in quarantine) fails its attempt without a
        decode. So the outcome depends only on which files and samples are bad,
        not on what other calls found first. Every attempt that fails is one
        draw replaced, reported to the error sink; a failure that may pass (see
        ``quarantine.lasting``) is replaced too, but the file is tried again at
        its next draw.
        """
        bad: str | None = None  # the file whose sample this clip replaces
        failure: BaseException | None = None  # the last attempt's
        # One cache for the whole call: the frame counts and the reads.
        cache = default_index_cache() if self.index_cache is None else self.index_cache
        index = position // self.batch_size
        samples = self._list
        count = len(samples)
        for attempt in itertools.count():
            rng = np.random.default_rng([self.seed, _CLIP_KEY, epoch, position, attempt])
            if attempt > 0:
                if (count <= _ALL_BAD_CHECK or attempt % _ALL_BAD_CHECK == 0) and self._all_bad():
                    raise VideoDecodeError(bad, "no video left to replace it with: every video failed, see .skipped")
                if attempt >= _MAX_ATTEMPTS:
                    raise VideoDecodeError(
                        bad, f"no clip decoded in {attempt} attempts of other videos to replace it; the last failed"
                    ) from failure
                sample = int(rng.integers(count))
                if count > 1 and samples.path(sample) == bad:
                    # Not the file that just failed: one failing for now would be read again at once.
                    sample = (sample + 1 + int(rng.integers(count - 1))) % count
            video = self._video(samples, sample)
            known = self._known_bad(video)
            if known is not None:  # only saves the decode: a known bad sample fails this attempt
                key, reason = known
                self._report(index, self._failures.get(key) or VideoDecodeError(video.path, reason), key, reason)
            else:
                key = video.path  # a failure counts for the whole file, unless only this sample's range is at fault
                try:
                    first, stop = self._range(video, cache)
                    if stop - first < self.span:
                        key = video.key
                        raise VideoDecodeError(video.path, self._too_few(video, first, stop))
                    self._decode_into(out, rng if self.train else None, video, first, stop, cache)
                    if bad is not None:
                        self._replacements.append((epoch, position, bad))
                    return video.label
                except (VideoDecodeError, OSError) as exc:  # the file may go away after construction
                    if not self._skipping():
                        if isinstance(exc, VideoDecodeError) and video.origin:
                            raise VideoDecodeError(video.path, exc.reason + _listed(video.origin)) from exc
                        raise
                    failure = exc
                    reason = exc.reason if isinstance(exc, VideoDecodeError) else str(exc)
                    reason += _listed(video.origin)
                    if lasting(exc):
                        self._skip(key, reason, exc, video.path)
                    else:
                        log.warning("replacing a clip of %s, which failed for now (tried again later): %s", key, reason)
                    self._report(index, exc, key, reason)
            bad = bad or video.path
        raise AssertionError("unreachable: itertools.count() never ends")

    def _skipping(self) -> bool:
        """Whether a bad sample is replaced: ``on_error="skip"``, or a loader that skips (told by its error sink)."""
        return self.on_error == "skip" or getattr(self._error_sink, "skip", False)

    def _known_bad(self, video: _Video) -> tuple[str, str] | None:
        """``(key, reason)`` when a sample is known to fail: its file, or (for a segment) the sample, in quarantine."""
        reason = self.quarantine.reason(video.path, video.path)
        if reason is not None:
            return video.path, reason
        reason = self.quarantine.reason(video.key)
        return None if reason is None else (video.key, reason)

    def _report(self, index: int, exc: BaseException, key: str, reason: str) -> None:
        """Report one draw of ``key`` replaced to the loader's error sink, if there is one."""
        sink = self._error_sink
        if sink is not None:
            sink(index, exc, {"path": key, "reason": reason})

    def _all_bad(self) -> bool:
        """Whether every sample is known to fail (a pass over the list: asked rarely)."""
        return len(self.quarantine) > 0 and all(
            self._known_bad(self._video(self._list, i)) for i in range(len(self._list))
        )

    def _range(self, video: _Video, cache: IndexCache) -> tuple[int, int]:
        """The frames ``first`` to ``stop - 1`` that ``video``'s clips are drawn from, learnt from its file now.

        The file's frames are those its index (made now if it is not yet) says
        decode; a file that is not intact (truncated, damaged) keeps its
        header's count (unless ``exact_counts``), since the header may be right
        about what is missing. A segment's times become frames at the frame rate
        in the file's header. See the class docstring.
        """
        index = cache.get(video.path)
        frames = index.frames if index.intact or self.exact_counts else self._header(video.path).frames
        if video.whole:
            return 0, frames
        fps = self._header(video.path).fps
        if not fps > 0:
            raise VideoDecodeError(video.path, "its header gives no frame rate, so a segment's times name no frames")
        return _frame_range(video.start, video.end, frames, fps)

    def _too_few(self, video: _Video, first: int, stop: int) -> str:
        """Why a sample has too few frames for a clip: the frames that decode, or those its header claims."""
        frames = max(0, stop - first)
        header: VideoInfo | None = None
        claimed = (first, stop)
        try:
            header = self._header(video.path)
            claimed = _frame_range(video.start, video.end, header.frames, header.fps or 1.0)
        except (VideoDecodeError, OSError):
            pass
        what = f"segment {video.segment}" if video.segment else "the file"
        if claimed[1] - claimed[0] > frames:
            return (
                f"has {frames} frames that decode in {what} (its header claims more: it counts timestamp gaps "
                f"as frames, or is wrong), fewer than {self._needs()}"
            )
        if video.whole:
            return f"has {frames} frames, fewer than {self._needs()}"
        of = "" if header is None else f" (of {header.frames} at {header.fps:g} fps)"
        return f"segment {video.segment} has {frames} frames{of}, fewer than {self._needs()}"

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

    def _skip(self, key: str, reason: str, exc: BaseException | None = None, path: str | None = None) -> None:
        """Put ``key`` in quarantine (``skipped``) for ``reason``, logging it once; ``path`` is its file."""
        if self.quarantine.add(key, reason, path or key):
            if exc is not None:
                self._failures[key] = exc
            log.warning("skipping video %s: %s", key, reason)


_EXACT_HINT = "; exact_counts=True finds such files at construction (it counts every file's frames by decoding it)"


def _listed(origin: str) -> str:
    """`` (listed at <origin>)`` for a message, or nothing for a sample found by scanning."""
    return f" (listed at {origin})" if origin else ""


def _frame_range(start: float | None, end: float | None, frames: int, fps: float) -> tuple[int, int]:
    """The frames ``first`` to ``stop - 1`` of a sample: all of them, or those whose times fall in its segment."""
    if start is None and end is None:
        return 0, frames
    # Frame i shows at i / fps: the segment holds the frames with start <= i / fps < end.
    # The slack keeps 0.1 s at 30 fps (3.0000000000000004 frames) at frame 3.
    first = 0 if start is None else math.ceil(start * fps - 1e-6)
    stop = frames if end is None else min(frames, math.ceil(end * fps - 1e-6))
    return min(first, frames), stop


def _times(start: float | None, end: float | None) -> str:
    end_text = "end" if end is None else f"{end:g}"
    return f"[{0 if start is None else start:g}, {end_text}) s"


class _SampleView(Sequence[tuple[str, int, int]]):
    """``VideoDataset.samples``: ``(path, label, frames by the header)`` per sample, read on access."""

    def __init__(self, dataset: VideoDataset) -> None:
        self._dataset = dataset

    def __len__(self) -> int:
        return len(self._dataset._list)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        data = self._dataset
        video = data._video(data._list, range(len(self))[i])
        try:
            header = data._header(video.path)
            first, stop = _frame_range(video.start, video.end, header.frames, header.fps or 1.0)
        except (VideoDecodeError, OSError):
            first = stop = 0
        return video.path, video.label, max(0, stop - first)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<samples of {self._dataset!r}>"
