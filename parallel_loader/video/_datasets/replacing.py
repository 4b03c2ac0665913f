"""Bad samples of a ``VideoDataset``: kept in quarantine, reported, and replaced in their batch.

``BadSamples`` holds what the dataset knows of its bad samples. ``load`` reads
one sample into a batch: its clips, then its fields (``fields``). With
``on_error="skip"``, or in a loader that skips, it replaces a bad sample by
another one drawn from the clip's seed. In
evaluation it leaves the sample out instead, so that no video counts twice. The outcome
depends only on which samples are bad, not on which thread found them first.
See :doc:`/video/datasets`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from ..._faults.quarantine import Quarantine, lasting
from .._base.errors import VideoDecodeError
from .._indexes.cache import IndexCache
from .._samples.sample_list import SampleList
from .fields import BatchFields
from .reader import SampleReader, Video, listed
from .seeds import clip_rng

__all__ = ["BadSamples", "load"]

log = logging.getLogger(__name__)

# Samples tried for one clip before its batch is given up: failures that may pass are not quarantined,
# so with every file failing for now (storage gone) nothing else would end the attempts.
_MAX_ATTEMPTS = 64
# Attempts after which a replacement checks whether every sample is known bad (a pass over the list).
_ALL_BAD_CHECK = 8

ErrorSink = Callable[[int | None, BaseException, dict[str, Any]], None]


class BadSamples:
    """What a dataset knows of its bad samples: the quarantine, why each failed, and the clips replaced.

    Loader threads write here, only by ``list.append`` and dict item assignment.
    Those are atomic in CPython.

    Args:
        quarantine: where bad samples are kept; its ``reasons`` are the dataset's ``skipped``.
        on_error: ``"raise"`` or ``"skip"``.
    """

    def __init__(self, quarantine: Quarantine, on_error: str) -> None:
        self.quarantine = quarantine
        self.on_error = on_error
        self.failures: dict[str, BaseException] = {}  # why each file in quarantine failed, for its later reports
        self.replacements: list[tuple[int, int, str]] = []  # (epoch, position, bad file) per clip replaced
        self.sink: ErrorSink | None = None  # the loader's error sink, see VideoDataset.set_error_sink

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the quarantine and the replacements; not the failures or the loader's sink."""
        return {**self.__dict__, "failures": {}, "sink": None}

    def skipping(self) -> bool:
        """Return whether a bad sample is replaced: ``on_error="skip"``, or a loader that skips (told by its sink)."""
        return self.on_error == "skip" or getattr(self.sink, "skip", False)

    def known_bad(self, video: Video) -> tuple[str, str] | None:
        """Return ``(key, reason)`` when ``video`` is known to fail: its file, or its segment, in quarantine."""
        reason = self.quarantine.reason(video.path, video.path)
        if reason is not None:
            return video.path, reason
        reason = self.quarantine.reason(video.key)
        return None if reason is None else (video.key, reason)

    def all_bad(self, samples: SampleList) -> bool:
        """Return whether every sample is known to fail (a pass over the list: asked rarely)."""
        return len(self.quarantine) > 0 and all(self.known_bad(Video.at(samples, i)) for i in range(len(samples)))

    def report(self, index: int, exc: BaseException, key: str, reason: str) -> None:
        """Report one draw of ``key`` replaced to the loader's error sink, if there is one."""
        sink = self.sink
        if sink is not None:
            sink(index, exc, {"path": key, "reason": reason})

    def skip(self, key: str, reason: str, exc: BaseException | None = None, path: str | None = None) -> None:
        """Put ``key`` in quarantine for ``reason``, logging it once; ``path`` is its file (default ``key``)."""
        if self.quarantine.add(key, reason, path or key):
            if exc is not None:
                self.failures[key] = exc
            log.warning("skipping video %s: %s", key, reason)

    def reject(self, path: str, reason: str, cause: BaseException | None = None, key: str | None = None) -> None:
        """Skip a bad sample found at construction (as ``key``, default its path), or raise for it.

        Raises:
            FileNotFoundError: with ``on_error="raise"``, ``cause`` is one.
            VideoDecodeError: with ``on_error="raise"``, for any other ``cause``.
        """
        if self.on_error == "skip":
            self.skip(key or path, reason, cause, path)
        elif isinstance(cause, FileNotFoundError):
            raise FileNotFoundError(2, reason, path) from cause
        else:
            raise VideoDecodeError(path, reason) from cause


def load(
    out: np.ndarray,
    sample: int,
    *,
    samples: SampleList,
    reader: SampleReader,
    bad: BadSamples,
    cache: IndexCache,
    seed: int,
    epoch: int,
    position: int,
    index: int,
    replace: bool = True,
    fields: BatchFields | None = None,
) -> tuple[int, tuple[object, ...]] | None:
    """Decode sample ``sample`` into ``out``, or a replacement for it when it is bad and ``bad`` skips.

    Attempt ``k`` draws from ``clip_rng(seed, epoch, position, k)``; each attempt
    after the first draws its sample too. A sample known to be bad fails its
    attempt without a decode. A failure that may pass is replaced, but not quarantined.
    The sample decoded gives its ``fields`` too: one whose members cannot be read is bad.

    Args:
        out: where the sample's clips go.
        sample: the sample drawn for this place.
        samples: the samples to draw replacements from.
        reader: reads the sample.
        bad: the bad samples: checked, added to and reported.
        cache: where the files' indexes are kept.
        seed: the dataset's seed.
        epoch: the epoch.
        position: the sample's place in the epoch.
        index: the batch's index, for the reports.
        replace: draw a replacement for a bad sample (training), or leave it out (evaluation).
        fields: the members read with each clip, or ``None``.

    Returns:
        The index of the sample decoded (a replacement's if it was replaced) and its fields' values;
        ``None`` for a bad sample left out (``replace=False``).

    Raises:
        VideoDecodeError: the sample is bad and ``bad`` does not skip, or no replacement decodes.
        OSError: the file cannot be read and ``bad`` does not skip.
    """
    replaced: str | None = None  # the file whose sample this clip replaces
    failure: BaseException | None = None  # the last attempt's
    count = len(samples)
    for attempt in itertools.count():
        rng = clip_rng(seed, epoch, position, attempt)
        if attempt > 0:
            if (count <= _ALL_BAD_CHECK or attempt % _ALL_BAD_CHECK == 0) and bad.all_bad(samples):
                raise VideoDecodeError(replaced, "no video left to replace it with: every video failed, see .skipped")
            if attempt >= _MAX_ATTEMPTS:
                raise VideoDecodeError(
                    replaced, f"no clip decoded in {attempt} attempts of other videos to replace it; the last failed"
                ) from failure
            sample = int(rng.integers(count))
            if count > 1 and samples.path(sample) == replaced:
                # Not the file that just failed: one failing for now would be read again at once.
                sample = (sample + 1 + int(rng.integers(count - 1))) % count
        video = Video.at(samples, sample)
        known = bad.known_bad(video)
        if known is not None:  # only saves the decode: a known bad sample fails this attempt
            key, reason = known
            bad.report(index, bad.failures.get(key) or VideoDecodeError(video.path, reason), key, reason)
            if not replace:
                return None
        else:
            key = video.path  # a failure counts for the whole file, unless only this sample's range is at fault
            try:
                first, stop = reader.range(video, cache)
                lacking = reader.lacking(video, first, stop, cache)
                if lacking:
                    key = video.key
                    raise VideoDecodeError(video.path, lacking)
                reader.decode_into(out, rng, video, first, stop, cache)
                values = fields.read(video.path, cache) if fields else ()
                if replaced is not None:
                    bad.replacements.append((epoch, position, replaced))
                return sample, values
            except (VideoDecodeError, OSError) as exc:  # the file may go away after construction
                if not bad.skipping():
                    if isinstance(exc, VideoDecodeError) and video.origin:
                        raise VideoDecodeError(video.path, exc.reason + listed(video.origin)) from exc
                    raise
                failure = exc
                reason = exc.reason if isinstance(exc, VideoDecodeError) else str(exc)
                reason += listed(video.origin)
                if lasting(exc):
                    bad.skip(key, reason, exc, video.path)
                else:
                    what = "replacing a clip of" if replace else "leaving out"
                    log.warning("%s %s, which failed for now (tried again later): %s", what, key, reason)
                bad.report(index, exc, key, reason)
                if not replace:
                    return None
        replaced = replaced or video.path
    raise AssertionError("unreachable: itertools.count() never ends")
