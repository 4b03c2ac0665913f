"""Video clips from files: exact frames decoded by seeking, and yield functions over them.

One concept per module:

* ``decode``: ``read_clip``, ``probe`` and ``frame_count``.
* ``source``: where a video's bytes come from: a file's key (name, size,
  version) and opening it.
* ``remote``: a video at a URL (``s3://``, ``gs://``, ``az://``, ``http(s)://``,
  ``file://``) through fsspec: its size and ETag, ranged reads with retries
  within a time budget, ``configure`` for credentials and the network, and
  ``RemotePath`` for listing a data set's prefix.
* ``ranged``: a remote video read in few requests: its index from its header,
  its packet table kept with it, and each clip from one ranged read.
* ``facts``: ``VideoIndex``, what one file's frames are (count, timestamps,
  keyframes, whether seeks are exact), and its compact binary form.
* ``packet_index``: a file's index from its container's packets, without
  decoding, where they tell (per container family and codec).
* ``scan``: a file's index by decoding every frame once, where they do not.
* ``store``: indexes on disk, append-only segments shared by processes and hosts.
* ``index``: ``IndexCache``, which makes indexes on first use and keeps them in
  memory and in the store; ``python -m parallel_loader.video.index`` makes a
  data set's indexes ahead of time.
* ``frames``: frames out of a file with PyAV (open, packets, decode, seek).
* ``pixels``: decoded frames to RGB arrays: any pixel format and size, turned as
  the display matrix says.
* ``errors``: ``VideoDecodeError``, which names the file that failed.
* ``samples``: ``SampleList``, which videos (or segments of videos) a data
  set holds and their labels, kept in compact columns (a million samples in
  tens of megabytes, cheap to slice and pickle).
* ``annotations``: readers of sample lists for folder trees, UCF101 and HMDB51
  split files, Kinetics-style CSVs and explicit lists.
* ``sampling``: which frames and which pixels make a clip (random clip,
  TSN-style segments, crops, multi-view evaluation).
* ``dataset``: ``VideoDataset``, a ``YieldFunction`` over a sample list.
* ``folder``: ``VideoFolder``, the ``VideoDataset`` of a tree ``root/<class>/<video>``.
* ``file_pass``: a pass over every file (``exact_counts``, the check and index
  commands) on threads, with a progress bar on a terminal and log lines elsewhere.
* ``check``: ``python -m parallel_loader.video.check``, the pre-flight check that lists
  broken files (not imported here: it runs them through a ``DataLoader``).

Every public name is re-exported here, so ``from parallel_loader.video import
VideoFolder, read_clip`` works whichever module defines it. Nothing here starts
or knows of threads but ``file_pass`` (and ``check``, through a loader).
"""

from ._base.errors import VideoDecodeError
from ._base.facts import VideoIndex
from ._datasets.dataset import VideoDataset
from ._datasets.folder import VideoFolder
from ._indexes.cache import IndexCache, default_index_cache, set_default_index_cache
from ._read.local import VideoInfo, frame_count, probe, read_clip
from ._samples.annotations import (
    KINETICS_PATTERN,
    VIDEO_EXTENSIONS,
    AnnotationError,
    SampleList,
    VideoSample,
    excluded_paths,
    excluding,
    folder_samples,
    hmdb51_samples,
    kinetics_samples,
    sample_list,
    ucf101_samples,
)
from ._samples.sampling import SAMPLINGS

__all__ = [
    "KINETICS_PATTERN",
    "SAMPLINGS",
    "VIDEO_EXTENSIONS",
    "AnnotationError",
    "IndexCache",
    "SampleList",
    "VideoDataset",
    "VideoDecodeError",
    "VideoFolder",
    "VideoIndex",
    "VideoInfo",
    "VideoSample",
    "default_index_cache",
    "excluded_paths",
    "excluding",
    "folder_samples",
    "frame_count",
    "hmdb51_samples",
    "kinetics_samples",
    "probe",
    "read_clip",
    "sample_list",
    "set_default_index_cache",
    "ucf101_samples",
]
