"""``VideoInfo``: what a video file's header says (frame count, frame rate, size)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["VideoInfo"]


@dataclass(frozen=True)
class VideoInfo:
    """What a video file's header says. ``frames`` may be wrong: see ``frame_count``."""

    frames: int
    fps: float
    width: int
    height: int
