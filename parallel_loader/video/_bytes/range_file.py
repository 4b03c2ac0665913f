"""A remote object read in ranges: as a seekable file for FFmpeg (``RangeFile``), or fetched whole.

``RangeFile.open`` reads the object's tail first: one suffix read gives its size
and version, and the whole object when it is small. A file whose first bytes
may hold its header (MP4/MOV) gets its head read too. Every later read that the
blocks do not hold fetches ``BLOCK_BYTES`` from where it starts.
"""

from __future__ import annotations

import io

from .._base.keys import Fetched, SourceKey
from .objects import RemoteObject, remote_object

__all__ = ["BLOCK_BYTES", "HEAD_BYTES", "TAIL_BYTES", "RangeFile", "fetch_whole"]

TAIL_BYTES = 256 << 10  # the first read (a 5-minute MP4's moov is ~120 KB); a smaller object comes whole
HEAD_BYTES = 64 << 10  # the second, for a file whose first bytes say MP4/MOV
BLOCK_BYTES = 1 << 20  # what a RangeFile fetches for a read it does not hold


def fetch_whole(remote: RemoteObject, key: SourceKey) -> Fetched:
    """The whole object, in one read of the version ``key`` names."""
    return Fetched(key, remote.read(key, 0, key.size))


class RangeFile(io.RawIOBase):
    """A remote object as a seekable file for FFmpeg: reads served from blocks fetched with ranged reads.

    A read the blocks do not hold fetches ``BLOCK_BYTES`` from where it starts.
    With ``zero_fill`` it is answered with zeros instead. That serves demuxing an
    MP4 for its packet table, whose data is not needed.
    """

    def __init__(self, remote: RemoteObject, key: SourceKey, blocks: dict[int, bytes] | None = None) -> None:
        super().__init__()
        self.remote, self.key = remote, key
        self.blocks = {} if blocks is None else blocks  # start -> bytes; shared with the caller
        self.position = 0
        self.zero_fill = False

    @classmethod
    def open(cls, url: str) -> RangeFile:
        """A file over the object at ``url`` with its tail (which gives its size and version) and head read."""
        remote = remote_object(url)
        key, start, tail = remote.tail(TAIL_BYTES)
        blocks = {start: tail}
        if start > 0:
            blocks[0] = remote.read(key, 0, min(HEAD_BYTES, start))
        return cls(remote, key, blocks)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.key.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def tell(self) -> int:
        return self.position

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = min(len(buffer), self.key.size - self.position)
        if count <= 0:
            return 0
        for start, block in self.blocks.items():
            if start <= self.position < start + len(block):
                count = min(count, start + len(block) - self.position)
                buffer[:count] = block[self.position - start : self.position - start + count]
                break
        else:
            following = min([s for s in self.blocks if s > self.position], default=self.key.size)
            count = min(count, following - self.position)
            if self.zero_fill:
                buffer[:count] = bytes(count)
            else:
                end = min(self.key.size, self.position + BLOCK_BYTES, following)
                self.blocks[self.position] = self.remote.read(self.key, self.position, end)
                return self.readinto(buffer)
        self.position += count
        return count
