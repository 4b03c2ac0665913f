"""The video code's one error, ``VideoDecodeError``, and the check every open starts with."""

from __future__ import annotations

import os

from ..._core.exceptions import PicklesAsItself

__all__ = ["VideoDecodeError", "require_file"]


class VideoDecodeError(PicklesAsItself, Exception):
    """A video could not be decoded as asked: not a video, truncated or corrupt, or too short for the clip.

    Attributes:
        path: the file, as given.
    """

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


def require_file(path: str | os.PathLike[str]) -> None:
    """Raise ``FileNotFoundError`` (nothing there) or ``VideoDecodeError`` (not a file) unless ``path`` is a file."""
    if not os.path.isfile(path):
        if os.path.exists(path):
            raise VideoDecodeError(path, "is not a file")
        raise FileNotFoundError(2, "no such video file", os.fspath(path))
