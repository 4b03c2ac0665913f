"""Video clips from files: exact frames decoded with OpenCV, and yield functions over them.

One concept per module:

* ``decode``: ``read_clip``, ``probe``, ``frame_count`` and ``VideoDecodeError``,
  which names the file that failed.
* ``folder``: ``VideoFolder``, a ``YieldFunction`` over a tree ``root/<class>/<video>``.

Every public name is re-exported here, so ``from parallel_loader.video import
VideoFolder, read_clip`` works whichever module defines it. Nothing here starts
or knows of threads.
"""

from .decode import VideoDecodeError, VideoInfo, frame_count, probe, read_clip
from .folder import VIDEO_EXTENSIONS, VideoFolder

__all__ = ["VIDEO_EXTENSIONS", "VideoDecodeError", "VideoFolder", "VideoInfo", "frame_count", "probe", "read_clip"]
