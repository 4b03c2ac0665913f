"""Short clips: samples with fewer frames than a clip spans, made up to the clip's length.

Words used here:

* a clip's *offsets* are its frames' places from the sample's first frame:
  ``0, stride, 2 * stride, ...`` in frames, or ``0, 1 / fps, ...`` in seconds.
* a sample is *short* when its last offset falls past its end. Its clip then
  starts at the sample's first frame and is *lengthened* by a policy:

  - ``"error"``: not lengthened; the sample is bad (skipped or raised for);
  - ``"loop"``: the offsets wrap around to the sample's start (mmaction2's ``loop``);
  - ``"repeat_last"``: past the end, the clip's last frame that exists is repeated;
  - ``"pad"``: past the end, black frames.

``Lengthened`` counts the clips lengthened and logs each file once. Nothing
here decodes. See :doc:`/video/datasets`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Literal

import numpy as np

__all__ = ["BLACK", "SHORT_CLIPS", "Lengthened", "ShortClips", "check_short_clips", "lengthen"]

log = logging.getLogger(__name__)

ShortClips = Literal["error", "loop", "repeat_last", "pad"]
SHORT_CLIPS: tuple[ShortClips, ...] = ("error", "loop", "repeat_last", "pad")
BLACK = -1  # a frame index that stands for a black frame


def check_short_clips(short_clips: object) -> ShortClips:
    """Return ``short_clips`` checked.

    Raises:
        ValueError: it is not one of ``SHORT_CLIPS``.
    """
    if short_clips not in SHORT_CLIPS:
        raise ValueError(f"short_clips must be one of {SHORT_CLIPS}, got {short_clips!r}")
    return short_clips  # type: ignore[return-value]


def lengthen(offsets: np.ndarray, length: float, policy: ShortClips) -> tuple[np.ndarray, np.ndarray]:
    """A short clip's offsets made to fit a sample of ``length``, and which of them are frames (not black).

    Args:
        offsets: the clip's offsets, ascending, from 0 (frames or seconds).
        length: the sample's length in the same unit; more than 0.
        policy: ``"loop"``, ``"repeat_last"`` or ``"pad"``.

    Returns:
        ``(offsets, kept)``: each offset in ``[0, length)``, and ``False`` where
        ``"pad"`` puts a black frame.
    """
    inside = offsets < length
    if policy == "loop":
        return np.mod(offsets, length), np.ones(len(offsets), dtype=bool)
    if policy == "repeat_last":
        return np.where(inside, offsets, offsets[inside][-1]), np.ones(len(offsets), dtype=bool)
    if policy == "pad":
        return np.where(inside, offsets, 0), inside
    raise ValueError(f"no clip is lengthened with short_clips={policy!r}")


class Lengthened:
    """The clips a dataset lengthened: counted, with each file logged once.

    Safe to call from several threads at once. Pickled, it starts again from
    nothing: each worker process counts its own.

    Args:
        policy: the dataset's ``short_clips``.
    """

    def __init__(self, policy: ShortClips) -> None:
        self.policy = policy
        self.count = 0  # clips lengthened
        self._files: set[str] = set()  # the files logged
        self._lock = threading.Lock()  # guards count and _files

    def __getstate__(self) -> dict[str, Any]:
        return {"policy": self.policy}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["policy"])  # type: ignore[misc]

    def add(self, key: str, path: str, why: str) -> None:
        """Count one clip of ``key`` (its file or segment) lengthened because ``why``; log ``path`` the first time."""
        with self._lock:
            self.count += 1
            first = path not in self._files
            self._files.add(path)
        if first:
            log.info("lengthening clips of %s by short_clips=%r: %s", key, self.policy, why)
