"""Video clips from files and URLs: exact frames decoded by seeking, and datasets over them.

Every public name is re-exported here, so ``from parallel_loader.video import
VideoFolder, read_clip`` works. The code lives in private layers, each importing
only those below it:

* ``_base``: what a file's frames are (``VideoIndex``), a source's key and URL rules.
* ``_bytes``: where bytes come from: a local file, an object in a store, ranged reads, memory, a tar member.
* ``_media``: which stream is read, frames out of a container, pixels to RGB, one clip being read.
* ``_indexes``: indexes from packets, by scanning, from a remote header; the store and the cache.
* ``_read``: ``read_clip``, ``read_frames_at``, ``probe`` and ``frame_count``: files, URLs, memory.
* ``_samples``: sample lists, annotation readers, WebDataset shards, sampling and spatial augmentation.
* ``_datasets``: ``VideoDataset`` and ``VideoFolder``, their transforms and ``Mixup`` and ``CutMix``.
* ``_commands``: ``python -m parallel_loader.video.check`` and ``python -m parallel_loader.video.index``.

Public modules beside this one: ``remote`` (credentials, the network, listing),
``index`` (``IndexCache`` and its command) and ``check`` (the pre-flight check).
Nothing here starts threads, except a pass over every file and the check.
See :doc:`/video/decoding` and :doc:`/video/datasets`.
"""

from ._base.errors import VideoDecodeError
from ._base.facts import VideoIndex
from ._datasets.dataset import VideoDataset
from ._datasets.folder import VideoFolder
from ._datasets.mixing import CutMix, Mixup
from ._indexes.cache import IndexCache, default_index_cache, set_default_index_cache
from ._read.clips import VideoInfo, frame_count, probe, read_clip
from ._read.times import read_frames_at
from ._samples.annotations import (
    KINETICS_PATTERN,
    VIDEO_EXTENSIONS,
    folder_samples,
    hmdb51_samples,
    kinetics_samples,
    sample_list,
    ucf101_samples,
)
from ._samples.augment import Augment
from ._samples.epic_kitchens import epic_kitchens_samples
from ._samples.exclude import excluded_paths, excluding
from ._samples.parsing import AnnotationError
from ._samples.sample_list import SampleList, VideoSample
from ._samples.sampling import SAMPLINGS
from ._samples.ssv2 import ssv2_samples
from ._samples.tables import table_samples
from ._samples.webdataset import webdataset_fields, webdataset_samples

__all__ = [
    "KINETICS_PATTERN",
    "SAMPLINGS",
    "VIDEO_EXTENSIONS",
    "AnnotationError",
    "Augment",
    "CutMix",
    "IndexCache",
    "Mixup",
    "SampleList",
    "VideoDataset",
    "VideoDecodeError",
    "VideoFolder",
    "VideoIndex",
    "VideoInfo",
    "VideoSample",
    "default_index_cache",
    "epic_kitchens_samples",
    "excluded_paths",
    "excluding",
    "folder_samples",
    "frame_count",
    "hmdb51_samples",
    "kinetics_samples",
    "probe",
    "read_clip",
    "read_frames_at",
    "sample_list",
    "set_default_index_cache",
    "ssv2_samples",
    "table_samples",
    "ucf101_samples",
    "webdataset_fields",
    "webdataset_samples",
]
