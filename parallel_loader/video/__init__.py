"""Video clips from files: exact frames decoded with OpenCV, and yield functions over them.

One concept per module:

* ``decode``: ``read_clip``, ``probe``, ``frame_count`` and ``VideoDecodeError``,
  which names the file that failed.
* ``annotations``: ``SampleList``, which videos (or segments of videos) a data
  set holds and their labels, and readers for folder trees, UCF101 and HMDB51
  split files, Kinetics-style CSVs and explicit lists.
* ``sampling``: which frames and which pixels make a clip (random clip,
  TSN-style segments, crops, multi-view evaluation).
* ``dataset``: ``VideoDataset``, a ``YieldFunction`` over a sample list.
* ``folder``: ``VideoFolder``, the ``VideoDataset`` of a tree ``root/<class>/<video>``.

Every public name is re-exported here, so ``from parallel_loader.video import
VideoFolder, read_clip`` works whichever module defines it. Nothing here starts
or knows of threads.
"""

from .annotations import (
    KINETICS_PATTERN,
    VIDEO_EXTENSIONS,
    AnnotationError,
    SampleList,
    VideoSample,
    folder_samples,
    hmdb51_samples,
    kinetics_samples,
    sample_list,
    ucf101_samples,
)
from .dataset import VideoDataset
from .decode import VideoDecodeError, VideoInfo, frame_count, probe, read_clip
from .folder import VideoFolder
from .sampling import SAMPLINGS

__all__ = [
    "KINETICS_PATTERN",
    "SAMPLINGS",
    "VIDEO_EXTENSIONS",
    "AnnotationError",
    "SampleList",
    "VideoDataset",
    "VideoDecodeError",
    "VideoFolder",
    "VideoInfo",
    "VideoSample",
    "folder_samples",
    "frame_count",
    "hmdb51_samples",
    "kinetics_samples",
    "probe",
    "read_clip",
    "sample_list",
    "ucf101_samples",
]
