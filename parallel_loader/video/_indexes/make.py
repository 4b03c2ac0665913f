"""Making one file's index: from its packets where they tell, else by decoding every frame once."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import av
from av.container import InputContainer
from av.video.stream import VideoStream

from .._base.facts import VideoIndex
from .._base.keys import SourceKey
from .._media.frames import open_video
from .packets import from_packets
from .scan import scan

__all__ = ["make_index"]

log = logging.getLogger(__name__)


def make_index(
    path: str | os.PathLike[str],
    key: SourceKey,
    on_frame: Callable[[int, av.VideoFrame], None] | None = None,
    on_index: Callable[[InputContainer, VideoStream, VideoIndex], None] | None = None,
) -> VideoIndex:
    """A new index: from the packets where they tell (then ``on_index``), else by decoding (feeding ``on_frame``).

    The index is of the stream ``key.stream`` names (None: the best video stream, see ``_media.streams``).
    """
    with open_video(path, key.stream) as (container, video):
        found = from_packets(container, video, key.size)
        if isinstance(found, VideoIndex):
            if on_index is not None:
                on_index(container, video, found)
            return found
    log.debug("video %s is indexed by decoding: %s", key.name, found)
    return scan(path, on_frame, key.stream)
