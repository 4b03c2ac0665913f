"""A yield function over a folder tree ``root/<class>/<video>``, as UCF101 is laid out.

``VideoFolder`` is a ``YieldFunction`` that turns the tree into batches of clips
and labels, with seeded augmentation for training.

Nothing here starts or knows of threads. ``VideoFolder.__call__`` is safe to
call from several loader threads at once because it keeps its state in local
variables and derives every random choice from ``(seed, epoch, position, attempt)``.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from .._checks import check_int
from ..yield_function import YieldFunction
from .decode import VideoDecodeError, _check_clip_args, frame_count, read_clip

__all__ = ["VIDEO_EXTENSIONS", "VideoFolder"]

log = logging.getLogger(__name__)

VIDEO_EXTENSIONS = frozenset({".avi", ".mp4", ".mkv", ".mov", ".webm", ".mpg", ".mpeg", ".m4v", ".wmv", ".flv"})

# Tag words of VideoFolder's random keys. numpy's SeedSequence ignores trailing
# zero words, so keys of different lengths can collide ([s, e] == [s, e, 0]);
# every key here has a fixed length and its own tag, distinct from each other and
# from the DataLoader's shuffle tag (0x5348554646, "SHUFF").
_ORDER_KEY = 0x4F52444552  # "ORDER": the epoch's sample order, [seed, ORDER_KEY, epoch]
_CLIP_KEY = 0x434C4950  # "CLIP": one clip, [seed, CLIP_KEY, epoch, position, attempt]


class VideoFolder(YieldFunction):
    """Batches of clips and labels from a tree ``root/<class>/<video>``, as UCF101 is laid out.

    The labels are the indices of the class folders' names in sorted order
    (``self.classes``). A batch is ``(clips, labels)``: clips of shape
    ``(batch, clip_len, height, width, 3)``, RGB, ``float32`` in [0, 1] or
    ``uint8``; labels ``int64`` of shape ``(batch,)``.

    Each video yields one clip per epoch: ``clip_len`` frames ``stride`` apart.
    Frames are decoded at ``size / crop_fraction`` and cropped to ``size``.

    * Training (``train=True``): the videos are shuffled each epoch and cut into
      batches; every batch is full, the last one topped up from the start of the
      epoch's order. Each clip has a random start frame, a random crop and a
      horizontal flip with probability 1/2.
    * Evaluation (``train=False``): the videos in sorted order, each once, so the
      last batch may be smaller; the clip is the centre one, centre-cropped.

    Randomness: the epoch's sample order comes from
    ``np.random.default_rng([seed, ORDER, epoch])`` and each clip's choices from
    ``np.random.default_rng([seed, CLIP, epoch, position, attempt])``, where
    ``position`` is the sample's place in the epoch, ``attempt`` counts the
    videos tried for it (0 unless a bad one is replaced), and ``ORDER`` and
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

    Frame counts come from each file's header (read at construction, cheap) unless
    ``exact_counts=True`` counts them by decoding every file (slow, reliable). A
    header that overstates the frames shows as a short read: a ``VideoDecodeError``
    that names the file and suggests ``exact_counts=True``.

    Bad videos: with ``on_error="raise"`` the first bad video raises
    ``VideoDecodeError`` (at construction for a file that does not open or is too
    short for a clip, otherwise from the loader). With ``on_error="skip"`` a bad
    video is left out at construction, or replaced in its batch by another video
    drawn from the same seeded generator and not tried again; either way it is
    logged as a warning, listed in ``self.skipped`` (path: reason), and every
    replaced clip is counted in ``self.replaced``. A replacement is drawn from all
    the videos with the next attempt's generator; a video already in ``skipped``
    counts as a failed attempt without being decoded again, exactly as if it had
    been tried, so the batches do not depend on which thread found a video bad
    first. (One limit: a video that fails for some clips only, such as a truncated
    file whose header claims all its frames, gives the clips that decode until its
    first failure; which those are depends on the order the batches are made in.
    ``exact_counts=True`` finds such files at construction.) A ``FileNotFoundError``
    for a video removed after construction is handled the same way. Loader threads
    add to ``skipped`` during an epoch, so read it between epochs or after the run.

    Files and folders whose names start with ``.`` (such as macOS's ``._clip.avi``)
    are ignored.

    Args:
        root: the folder whose subfolders are the classes.
        batch_size: clips per batch.
        clip_len: frames per clip.
        stride: the step between a clip's frames.
        size: ``(height, width)`` of the output frames.
        train: augment and shuffle (training) or not (evaluation).
        seed: makes the augmentation and shuffling reproducible; ``None`` draws one.
        on_error: ``"raise"`` or ``"skip"``, see above.
        dtype: ``"float32"`` (values in [0, 1]) or ``"uint8"``.
        crop_fraction: the crop's share of the decoded frame's height and width.
        classes: class folder names to use, in label order (e.g. the training set's
            ``classes`` for a validation set); default: every subfolder, sorted.
        extensions: the file name endings that count as videos; other files are ignored.
        exact_counts: count each video's frames by decoding it, instead of trusting its header.
        seek: passed to ``read_clip``: start at the keyframe before a clip (exact, the default) or, with
            ``False``, decode every frame from the first.

    Raises:
        ValueError: an argument is out of range, or ``root`` has no class folder
            or no video (the message says where it looked).
        FileNotFoundError: ``root`` or a named class folder does not exist.
        VideoDecodeError: with ``on_error="raise"``, a video does not open or is too short.
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
    ) -> None:
        batch_size = check_int("batch_size", batch_size, minimum=1)
        clip_len = check_int("clip_len", clip_len, minimum=1)
        stride = check_int("stride", stride, minimum=1)
        _check_clip_args(0, clip_len, stride, size)
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if dtype not in ("float32", "uint8"):
            raise ValueError(f"dtype must be 'float32' or 'uint8', got {dtype!r}")
        if not 0 < crop_fraction <= 1:
            raise ValueError(f"crop_fraction must be in (0, 1], got {crop_fraction!r}")
        if seed is not None:
            seed = check_int("seed", seed, minimum=0)
        self.root = Path(root)
        self.batch_size = batch_size
        self.clip_len = clip_len
        self.stride = stride
        self.size = (int(size[0]), int(size[1]))
        self.train = train
        self.seed = seed if seed is not None else int(np.random.SeedSequence().entropy % 2**63)
        self.on_error = on_error
        self.dtype = dtype
        self.decode_size = (round(self.size[0] / crop_fraction), round(self.size[1] / crop_fraction))
        self.span = (clip_len - 1) * stride + 1  # frames a clip covers
        self.exact_counts = exact_counts
        self.seek = seek
        # Written by loader threads, so only by list.append and dict item assignment,
        # which are atomic in CPython (see the Python FAQ on thread-safe mutations).
        self.skipped: dict[str, str] = {}
        self._replacements: list[tuple[int, int, str]] = []

        self.classes, found = _scan(self.root, classes, {e.lower() for e in extensions})
        self.samples: list[tuple[str, int, int]] = []  # (path, label, frames)
        for path, label in found:
            try:
                frames = frame_count(path, exact=exact_counts)
                if frames < self.span:
                    raise VideoDecodeError(
                        path,
                        f"has {frames} frames, fewer than a clip of {clip_len} frames at stride {stride} "
                        f"needs ({self.span})",
                    )
            except (VideoDecodeError, FileNotFoundError) as exc:
                if on_error == "raise":
                    raise
                self._skip(path, exc.reason if isinstance(exc, VideoDecodeError) else str(exc))
                continue
            self.samples.append((path, label, frames))
        if not self.samples:
            raise ValueError(f"no usable video under {self.root}: all {len(found)} were skipped, see .skipped")
        # (epoch, sample order or None in evaluation): one attribute, so that a
        # reader never sees one epoch's number with another's order.
        self._state: tuple[int, np.ndarray | None] = (0, self._order(0))

    # The YieldFunction interface.

    def __len__(self) -> int:
        """Batches per epoch: every video once, in ``ceil(videos / batch_size)`` batches."""
        return math.ceil(len(self.samples) / self.batch_size)

    def __call__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Make batch ``index`` of the current epoch. Safe to call from several threads at once."""
        if not 0 <= index < len(self):
            raise IndexError(f"batch index {index} out of range for {len(self)} batches")
        epoch, order = self._state
        positions = range(index * self.batch_size, (index + 1) * self.batch_size)
        if order is not None:
            chosen = [(p, int(order[p % len(order)])) for p in positions]
        else:
            chosen = [(p, p) for p in positions if p < len(self.samples)]
        clips = np.empty((len(chosen), self.clip_len, *self.size, 3), dtype=self.dtype)
        labels = np.empty(len(chosen), dtype=np.int64)
        for k, (position, sample) in enumerate(chosen):
            labels[k] = self._load(clips[k], epoch, position, sample)
        return clips, labels

    def on_epoch_begin(self, epoch: int) -> None:
        """Called by the DataLoader before the first call of ``epoch``: make that epoch's batches from now on."""
        self.set_epoch(epoch)

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
        """How many clips were replaced by another video's because their video failed to decode."""
        return len(self._replacements)

    def __repr__(self) -> str:
        mode = "train" if self.train else "eval"
        return (
            f"<VideoFolder {str(self.root)!r} {mode} videos={len(self.samples)} classes={len(self.classes)} "
            f"batch_size={self.batch_size} skipped={len(self.skipped)}>"
        )

    # Private helpers.

    def _order(self, epoch: int) -> np.ndarray | None:
        """The samples in epoch ``epoch``'s order for training; ``None`` (sorted order) for evaluation."""
        if not self.train:
            return None
        return np.random.default_rng([self.seed, _ORDER_KEY, epoch]).permutation(len(self.samples))

    def _load(self, out: np.ndarray, epoch: int, position: int, sample: int) -> int:
        """Decode sample ``sample`` into ``out``; return its label. Replaces a bad video when skipping.

        Attempt ``k`` uses its own generator, and every attempt after the first
        draws its video from all the samples; a video known to be bad fails its
        attempt without a decode. So the outcome depends only on which videos are
        bad, not on what other calls found first.
        """
        bad: str | None = None  # the video this clip replaces
        for attempt in itertools.count():
            rng = np.random.default_rng([self.seed, _CLIP_KEY, epoch, position, attempt])
            if attempt > 0:
                if all(p in self.skipped for p, _, _ in self.samples):
                    raise VideoDecodeError(bad, "no video left to replace it with: every video failed, see .skipped")
                sample = int(rng.integers(len(self.samples)))
            path, label, frames = self.samples[sample]
            if path not in self.skipped:  # only saves the decode: a known bad video fails this attempt
                try:
                    self._decode_into(out, rng, path, frames)
                    if bad is not None:
                        self._replacements.append((epoch, position, bad))
                    return label
                except (VideoDecodeError, FileNotFoundError) as exc:  # the file may go away after construction
                    if self.on_error == "raise":
                        raise
                    self._skip(path, exc.reason if isinstance(exc, VideoDecodeError) else str(exc))
            bad = bad or path
        raise AssertionError("unreachable: itertools.count() never ends")

    def _decode_into(self, out: np.ndarray, rng: np.random.Generator, path: str, frames: int) -> None:
        room = frames - self.span
        start = int(rng.integers(room + 1)) if self.train else room // 2
        try:
            clip = read_clip(path, start, self.clip_len, self.stride, self.decode_size, seek=self.seek)
        except VideoDecodeError as exc:
            if self.exact_counts or "ends after" not in exc.reason:
                raise
            raise VideoDecodeError(path, exc.reason + _EXACT_HINT) from exc
        spare_h = self.decode_size[0] - self.size[0]
        spare_w = self.decode_size[1] - self.size[1]
        if self.train:
            top, left = int(rng.integers(spare_h + 1)), int(rng.integers(spare_w + 1))
            flip = bool(rng.integers(2))
        else:
            top, left, flip = spare_h // 2, spare_w // 2, False
        clip = clip[:, top : top + self.size[0], left : left + self.size[1]]
        if flip:
            clip = clip[:, :, ::-1]
        if self.dtype == "uint8":
            out[...] = clip
        else:
            np.multiply(clip, np.float32(1 / 255), out=out)

    def _skip(self, path: str, reason: str) -> None:
        if path not in self.skipped:
            self.skipped[path] = reason
            log.warning("skipping video %s: %s", path, reason)


_EXACT_HINT = "; if its header overstates the frame count, pass exact_counts=True to count frames by decoding"


def _scan(root: Path, classes: Sequence[str] | None, extensions: set[str]) -> tuple[list[str], list[tuple[str, int]]]:
    """Find the class folders and their videos; raise a clear error for an empty or missing tree."""
    if not root.exists():
        raise FileNotFoundError(2, "video root folder not found", str(root))
    if not root.is_dir():
        raise ValueError(f"{root}: the video root must be a folder of class folders")
    if classes is None:
        classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not classes:
            raise ValueError(f"{root} has no class folders: expected {root}/<class>/<video files>")
    else:
        classes = list(classes)
        missing = [c for c in classes if not (root / c).is_dir()]
        if missing:
            raise FileNotFoundError(2, f"class folders {missing} not found", str(root))
    found: list[tuple[str, int]] = []
    for label, name in enumerate(classes):
        files = sorted(
            p
            for p in (root / name).iterdir()
            if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in extensions
        )
        if not files:
            raise ValueError(
                f"{root / name} has no video files (looked for {', '.join(sorted(extensions))}); "
                "every class folder needs at least one"
            )
        found.extend((str(p), label) for p in files)
    return list(classes), found
