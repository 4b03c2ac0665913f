"""Video clips from files: exact frames decoded by seeking, and yield functions over them.

One concept per module:

* ``decode``: ``read_clip``, ``probe`` and ``frame_count``.
* ``index``: ``VideoIndex``, what one file's frames are (count, timestamps,
  keyframes, whether seeks are exact), and ``IndexCache``, which learns and keeps them.
* ``frames``: frames out of a file with PyAV (open, packets, decode, seek).
* ``errors``: ``VideoDecodeError``, which names the file that failed.
* ``folder``: ``VideoFolder``, a ``YieldFunction`` over a tree ``root/<class>/<video>``.

Every public name is re-exported here, so ``from parallel_loader.video import
VideoFolder, read_clip`` works whichever module defines it. Nothing here starts
or knows of threads.
"""

from .decode import VideoInfo, frame_count, probe, read_clip
from .errors import VideoDecodeError
from .folder import VIDEO_EXTENSIONS, VideoFolder
from .index import IndexCache, VideoIndex, default_index_cache, set_default_index_cache

__all__ = [
    "VIDEO_EXTENSIONS",
    "IndexCache",
    "VideoDecodeError",
    "VideoFolder",
    "VideoIndex",
    "VideoInfo",
    "default_index_cache",
    "frame_count",
    "probe",
    "read_clip",
    "set_default_index_cache",
]
