"""The members of a WebDataset sample that a ``VideoDataset`` batch carries beside its clip: captions, JSON, bytes.

Words used here (see ``_samples.webdataset`` for shards, samples and members):

* the *fields*: the extensions of the members that come with each clip, such
  as ``("txt", "json")``. A list from ``webdataset_samples(..., fields=...)``
  names them; ``VideoDataset(fields=...)`` may name others, or none.
* a sample's *values*: its fields' members, read in one read of its shard
  right after its clip (``replacing.load``). So a clip that replaced a bad
  sample carries its own sample's values. A sample whose members cannot be
  read is a bad sample, as a broken video is. A remote shard's small members
  are kept in the index store after their first read (``_indexes.member_bytes``).
  The clip's read has just checked the shard's version, so later epochs take them from there.

A batch carries its values as a dict, one array of length ``batch`` an
extension. Text and JSON members are ``str``: JSON as its text, since a tensor
holds text but not a dict. Number members (``cls``, ``id``...) are ``int64``,
any other ``bytes``. See :doc:`/video/in_memory`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._base.errors import VideoDecodeError
from .._bytes.tar_members import split_member_url
from .._indexes.cache import IndexCache
from .._samples.sample_list import SampleList
from .._samples.webdataset import batch_value, check_fields, sample_members

__all__ = ["BatchFields"]


class BatchFields:
    """Reads each sample's fields and makes a batch's dict of them; false when there are none.

    Args:
        fields: the extensions, or ``None`` for the sample list's own ``fields``.
        samples: the data set's samples.

    Raises:
        TypeError: ``fields`` is not a list of extensions.
        ValueError: ``fields`` are asked of samples that are not members of tar shards.
    """

    def __init__(self, fields: Sequence[str] | None, samples: SampleList) -> None:
        self.fields = samples.fields if fields is None else check_fields(fields)
        if self.fields and len(samples) and split_member_url(samples.path(0)) is None:
            raise ValueError(
                f"fields {list(self.fields)} are members of WebDataset samples, but {samples.path(0)} is not in a "
                "shard: list the samples with webdataset_samples, or pass fields=()"
            )
        # A number member (``cls``...) gives an int for b"0"; every other kind a str or bytes.
        self._numbers = tuple(isinstance(batch_value(ext, b"0"), int) for ext in self.fields)

    def __bool__(self) -> bool:
        return bool(self.fields)

    def read(self, path: str, cache: IndexCache) -> tuple[str | int | bytes, ...]:
        """Return the values of the sample at ``path``, in the order of ``fields``: one read of its shard.

        Raises:
            VideoDecodeError: ``path`` is not a member of a shard, or a member does not hold what its extension says.
            FileNotFoundError: the sample has no member of one of ``fields``, or its shard is gone.
            OSError: the shard cannot be read.
        """
        try:
            members = sample_members(path, self.fields, cache, kept=True)  # the clip's read just checked the shard
            return tuple(batch_value(ext, members[ext]) for ext in self.fields)
        except ValueError as exc:
            raise VideoDecodeError(path, str(exc).removeprefix(f"{path}: ")) from None

    def stacked(self, values: list[tuple[str | int | bytes, ...]]) -> dict[str, np.ndarray]:
        """Return a batch's dict: each extension's values (one tuple a clip) as an array, ``int64`` or of objects."""
        batch: dict[str, np.ndarray] = {}
        for k, ext in enumerate(self.fields):
            if self._numbers[k]:
                batch[ext] = np.array([v[k] for v in values], dtype=np.int64)
            else:
                batch[ext] = np.empty(len(values), dtype=object)  # filled by item: never an array of arrays
                batch[ext][:] = [v[k] for v in values]
        return batch

    def __repr__(self) -> str:
        return f"BatchFields({list(self.fields)})"
