"""A yield function over a list of samples: batches of clips and labels.

``VideoDataset`` turns a ``SampleList`` into batches of clips and labels. It
keeps its state in local variables and derives every random choice from the
seed. So ``__call__`` is safe to call from several loader threads at once.
Nothing here starts or knows of threads. See :doc:`/video/datasets`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from ..._core.checks import check_int
from ..._data.yield_function import YieldFunction
from ..._faults.quarantine import Quarantine
from .._bytes.tar_members import container_path
from .._indexes.cache import IndexCache, default_index_cache
from .._samples.augment import Augment, Resize, augment_of
from .._samples.exclude import Exclude
from .._samples.sample_list import SampleList
from .._samples.sampling import Sampling
from .checks import check_arguments, class_names, sample_list_of, usable
from .draws import EpochDraws, Weights, check_order, check_weights
from .fields import BatchFields
from .outputs import BatchTransform, Labels, Outputs, Transform
from .reader import SampleReader, SampleView
from .replacing import BadSamples, load
from .short_clips import ShortClips, check_short_clips
from .timing import check_timing

__all__ = ["VideoDataset"]


class VideoDataset(YieldFunction):
    """Batches of clips and labels from a list of samples: whole videos or segments of them.

    A batch is ``(clips, labels)``, then ``indices`` with ``return_index``, then a dict of ``fields`` if any. Clips
    have shape ``(batch, clip_len, height, width, 3)``; labels are ``int64`` of shape ``(batch,)``, or one-hot.
    With several labels a sample, ``labels`` is a tuple of such arrays, one a head. With ``num_clips`` or
    ``num_crops``, clips gain a views axis after the batch axis. Training shuffles the samples each epoch
    and augments each clip at random. Evaluation takes each sample once, in order, with centred clips and
    crops. Every random choice comes from ``seed``, the epoch and the sample's place, never from a thread.
    Construction opens no video file, unless ``exact_counts`` asks it to.

    Args:
        samples: a ``SampleList``, or rows ``(path, label)`` or ``(path, label,
            start_seconds, end_seconds)`` as ``sample_list`` takes them; ``label`` may be a tuple, one a head.
        batch_size: clips per batch.
        clip_len: frames per clip.
        stride: the step between a clip's frames (``sampling="clip"``).
        size: ``(height, width)`` of the output frames.
        train: augment and shuffle (training) or not (evaluation).
        seed: makes the augmentation and shuffling reproducible; ``None`` draws one.
        on_error: ``"raise"`` raises for a bad sample. ``"skip"`` replaces it in
            training and leaves it out of its batch in evaluation. It lists it in ``skipped``.
        dtype: ``"float32"`` (values in [0, 1]) or ``"uint8"``.
        crop_fraction: the crop's share of the box ``size / crop_fraction`` that each frame is fitted to.
        classes: class names in label order, for rows, or one list of them a head; a ``SampleList`` has its own.
        exact_counts: index every video at construction and count the frames
            that decode, finding bad files there.
        seek: passed to ``read_clip``: ``False`` decodes every frame from the first.
        sampling: ``"clip"`` (``clip_len`` frames ``stride`` apart) or
            ``"segments"`` (one frame from each of ``clip_len`` segments).
        num_clips: clips per sample in evaluation; given, the batch has a views axis.
        num_crops: crops per clip in evaluation, 1 or 3; given, the batch has a views axis.
        exclude: files to leave out: paths, or the JSON-lines file the check
            command writes (see ``excluding``).
        quarantine: where bad samples are kept (``skipped``); default: a new one.
        index_cache: where the files' indexes are kept; default: ``default_index_cache()``.
        find_missing: name missing files at construction (``False``: at their first read).
        augment: the spatial augmentation (scale jitter, random resized crop, flip), see ``Augment``.
        scale: ``(min, max)`` short side for scale jitter, short for ``augment=Augment(scale=...)``.
        transform: ``transform(clip, rng) -> clip`` for each clip, ``rng`` drawn from (seed, epoch, position).
        batch_transform: ``batch_transform(clips, labels, rng) -> (clips, labels)``
            for each batch, ``rng`` drawn from (seed, epoch, batch index); e.g. ``Mixup``.
        labels: ``"int"`` or ``"one_hot"`` (``float32`` of shape ``(batch, classes)``).
        label_smoothing: with one-hot labels, the share of each label spread over all classes.
        return_index: add each clip's index in ``samples`` to the batch, for per-video metrics.
        stream: the stream read from each file, by its number; ``None`` takes
            the video stream FFmpeg picks as best (see ``read_clip``).
        fps: sample each clip at this many frames a second, by the files'
            timestamps, instead of ``stride`` frames apart. A clip's first and
            last frames are then ``(clip_len - 1) / fps`` seconds apart, whatever each file's frame rate.
        weights: training draws samples by weight, with replacement: ``"balanced"`` (1 / class
            count) or one number per sample. ``None`` takes each once an epoch.
        samples_per_epoch: the samples an epoch draws in training; default: as many as listed.
        resize: how a frame fits ``size / crop_fraction`` before the crop: ``"short_side"``
            (aspect kept, covering it), ``"stretch"`` or ``"pad"`` (aspect kept, letterboxed).
        short_clips: a sample too short for a clip: ``"loop"``, ``"repeat_last"``, ``"pad"``
            (black frames) or ``"error"`` (a bad sample); lengthened clips count in ``stats()``.
        order: ``"global"`` shuffles all samples each epoch; ``"shards"`` shuffles the tar shards,
            then each shard's samples within ``shard_window`` positions.
        shard_window: positions shuffled together with ``order="shards"``.
        fields: members of each WebDataset sample that its batch carries (``{"txt": array}``). ``None`` takes
            the list's (``webdataset_samples(fields=...)``); ``()`` none. See :doc:`/video/in_memory`.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument is out of range, or no sample is left. Or ``weights`` are
            not one finite number >= 0 per sample, not all 0, or come with ``order="shards"``.
        AnnotationError: a row is malformed or names an unknown class.
        FileNotFoundError: with ``on_error="raise"``, listed files are missing; or
            ``exclude`` names a file that does not exist.
        VideoDecodeError: with ``on_error="raise"`` and ``exact_counts=True``, a
            file does not open or a sample is too short.

    See :doc:`/video/datasets` and :doc:`/video/augmentation`.
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
        classes: Sequence[str] | Sequence[Sequence[str]] | None = None,
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
        order: Literal["global", "shards"] = "global",
        shard_window: int = 64,
        fields: Sequence[str] | None = None,
    ) -> None:
        self.stream, self.fps = check_timing(stream, fps, sampling, stride)
        self.resize, self.short_clips = resize, check_short_clips(short_clips)
        args = check_arguments(
            batch_size=batch_size, clip_len=clip_len, stride=stride, size=size, train=train, seed=seed,
            on_error=on_error, dtype=dtype, crop_fraction=crop_fraction, sampling=sampling, num_clips=num_clips,
            num_crops=num_crops, exact_counts=exact_counts, seek=seek, index_cache=index_cache,
            find_missing=find_missing,
        )  # fmt: skip
        weights, samples_per_epoch = check_weights(weights, samples_per_epoch, len(samples), args.train)
        order = check_order(order, shard_window, weights, samples_per_epoch)
        augment = augment_of(augment, scale, args.size, resize)
        samples, listed = sample_list_of(samples, classes, exclude)
        self._fields = BatchFields(fields, samples)  # what each clip's sample gives beside it: captions, JSON
        self.batch_size = args.batch_size
        self.clip_len = args.clip_len
        self.stride = args.stride
        self.size = args.size
        self.train = args.train
        self.seed = args.seed
        self.on_error = args.on_error
        self.dtype = args.dtype
        self.decode_size = args.decode_size
        self.sampling = args.sampling
        self.num_clips = args.num_clips
        self.num_crops = args.num_crops
        self.views = args.views  # None: no views axis
        self.exact_counts = args.exact_counts
        self.seek = args.seek
        self.index_cache = args.index_cache
        self.classes = class_names(samples)  # a list, or a tuple of one list a head
        self.heads = samples.heads  # labels a sample: batches carry a tuple of label arrays when several
        self.augment = augment
        self._outputs = Outputs(
            transform=transform,
            batch_transform=batch_transform,
            labels=labels,
            label_smoothing=label_smoothing,
            return_index=return_index,
            classes=self.classes,
            seed=self.seed,
        )
        self._reader = SampleReader(
            clip_len=self.clip_len,
            stride=self.stride,
            sampling=self.sampling,
            size=self.size,
            decode_size=self.decode_size,
            dtype=self.dtype,
            seek=self.seek,
            exact_counts=self.exact_counts,
            num_clips=self.num_clips,
            num_crops=self.num_crops,
            views=self.views,
            train=self.train,
            augment=augment,
            stream=self.stream,
            fps=self.fps,
            resize=self.resize,
            short_clips=self.short_clips,
        )
        self.span = self._reader.span  # the frames a clip spans; a shorter sample is lengthened (short_clips)
        self.quarantine = Quarantine() if quarantine is None else quarantine
        self.skipped: dict[str, str] = self.quarantine.reasons  # the bad samples: key -> reason
        self._bad = BadSamples(self.quarantine, self.on_error)
        self._list, left = usable(
            samples, self._reader, self._bad, find_missing=args.find_missing, index_cache=index_cache
        )
        self._draws = EpochDraws.of(weights, samples_per_epoch, self._list.labels, listed[left])
        if order == "shards":  # each path's container: its shard, or the file itself
            shards = np.unique([container_path(p) for p in self._list.paths()], return_inverse=True)[1]
            self._draws = EpochDraws(len(self._list), shards=shards.astype(np.int64), window=shard_window)
        self._start(0)

    def _start(self, epoch: int) -> None:
        """Set the per-process state that is not pickled: the epoch's order and the cache of other epochs'."""
        # (epoch, sample order or None in evaluation): one attribute, so that a
        # reader never sees one epoch's number with another's order.
        self._state: tuple[int, np.ndarray | None] = (epoch, self._order(epoch))
        # get_batch's orders of other epochs: kept for the few whose calls may run at once.
        self._order_cached = functools.lru_cache(maxsize=4)(self._order)

    def __getstate__(self) -> dict[str, Any]:
        """Return what pickling keeps: the arguments, the sample list's arrays and the quarantine; not the caches.

        The epoch's order is made again where the dataset is unpickled. An
        ``index_cache`` travels as its directory and sizes.
        """
        state = self.__dict__.copy()
        for name in ("_state", "_order_cached"):
            state.pop(name, None)
        state["_epoch"] = self._state[0]
        cache = self.index_cache
        if cache is not None:
            state["index_cache"] = ("IndexCache", cache.directory, cache.max_bytes, cache.max_table_bytes)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        epoch = state.pop("_epoch")
        cache = state.get("index_cache")
        if isinstance(cache, tuple):
            state["index_cache"] = IndexCache(*cache[1:])
        self.__dict__.update(state)
        self.skipped = self.quarantine.reasons
        self._start(epoch)

    @property
    def samples(self) -> Sequence[tuple[str, int, int]]:
        """The samples as ``(path, label, frames)``, ``frames`` being those the file's header claims for it.

        A view: reading an entry reads its file's header (0 frames if it cannot
        be read). ``len`` and the paths cost nothing.
        """
        return SampleView(self._reader, self._list, self)

    # The YieldFunction interface.

    def __len__(self) -> int:
        """Return the batches per epoch: ``ceil(samples / batch_size)``, or ``ceil(samples_per_epoch / batch_size)``."""
        return math.ceil(self._draws.length / self.batch_size)

    def __call__(self, index: int) -> tuple[np.ndarray, ...]:
        """Make batch ``index`` of the current epoch (see ``set_epoch``). Safe to call from several threads at once."""
        epoch, order = self._state
        return self._batch(index, epoch, order)

    def get_batch(self, index: int, epoch: int) -> tuple[np.ndarray, ...]:
        """Make batch ``index`` of ``epoch``, whatever the current epoch: what a ``DataLoader`` calls.

        A batch depends on its epoch through this argument alone. So the loader
        may make the next epoch's first batches while this epoch's last ones are used.
        """
        order = self._state[1] if epoch == self._state[0] else self._order_cached(epoch)
        return self._batch(index, epoch, order)

    def _batch(self, index: int, epoch: int, order: np.ndarray | None) -> tuple[np.ndarray, ...]:
        if not 0 <= index < len(self):
            raise IndexError(f"batch index {index} out of range for {len(self)} batches")
        chosen = _places(index, self.batch_size, order, len(self._list))
        views = () if self.views is None else (self.views,)
        clips = np.empty((len(chosen), *views, self.clip_len, *self.size, 3), dtype=self.dtype)
        decoded = np.empty(len(chosen), dtype=np.int64)  # the sample decoded for each place, or -1
        values = []  # the fields of each sample decoded
        for k, (position, sample) in enumerate(chosen):
            got = load(
                clips[k],
                sample,
                samples=self._list,
                reader=self._reader,
                bad=self._bad,
                cache=default_index_cache() if self.index_cache is None else self.index_cache,
                seed=self.seed,
                epoch=epoch,
                position=position,
                index=position // self.batch_size,
                replace=self.train,
                fields=self._fields,
            )
            decoded[k] = -1 if got is None else got[0]
            values += [] if got is None else [got[1]]
        kept = decoded >= 0
        if not kept.all():  # evaluation: a bad sample is left out, never another counted twice
            clips, decoded = clips[kept], decoded[kept]
        labels = self._list.labels_at(decoded).astype(np.int64)
        positions = [p for (p, _), k in zip(chosen, kept, strict=True) if k]
        fields = self._fields.stacked(values) if self._fields else None
        return self._outputs.finish(clips, decoded, labels, positions, epoch, index, fields)

    def on_epoch_begin(self, epoch: int) -> None:
        """Called by the DataLoader before the first call of ``epoch``: make that epoch's batches from now on."""
        self.set_epoch(epoch)

    def error_context(self, index: int) -> dict[str, Any]:
        """Return the files of batch ``index`` in the current epoch, for the loader's error records."""
        epoch, order = self._state
        chosen = _places(index, self.batch_size, order, len(self._list))
        return {"epoch": epoch, "paths": [self._list.path(sample) for _, sample in chosen]}

    def set_error_sink(self, sink: Callable[[int | None, BaseException, dict[str, Any]], None] | None) -> None:
        """Report each draw of a bad file replaced while making batches to ``sink(index, exc, context)``.

        A ``DataLoader`` calls this with its own sink. When its ``skip`` is true,
        bad samples are replaced whatever ``on_error`` says here.
        """
        self._bad.sink = sink

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
        return len(self._bad.replacements)

    def stats(self) -> dict[str, int]:
        """Return the counts of ``skipped`` samples, ``replaced`` clips and clips ``lengthened`` (``short_clips``).

        Counted in this process: a worker process counts its own.
        """
        return {"skipped": len(self.skipped), "replaced": self.replaced, "lengthened": self._reader.lengthened.count}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._describe()}>"

    # Private helpers.

    def _describe(self) -> str:
        mode = "train" if self.train else "eval"
        return (
            f"{mode} videos={len(self._list)} classes={self._outputs.num_classes} "
            f"batch_size={self.batch_size} skipped={len(self.skipped)}"
        )

    def _order(self, epoch: int) -> np.ndarray | None:
        """Return the sample at each position of training epoch ``epoch``; ``None`` (listed order) for evaluation."""
        if not self.train:
            return None
        return self._draws.order(self.seed, epoch)


def _places(index: int, batch_size: int, order: np.ndarray | None, count: int) -> list[tuple[int, int]]:
    """Return batch ``index``'s ``(position, sample)`` pairs of ``count`` samples; training tops up a short last one."""
    positions = range(index * batch_size, (index + 1) * batch_size)
    if order is not None:
        return [(p, int(order[p % len(order)])) for p in positions]
    return [(p, p) for p in positions if p < count]
