"""A remote object read in ranges: as a seekable file for FFmpeg (``RangeFile``), or fetched whole.

``read_ends`` is an object's first touch. It reads the tail first: one suffix
read gives its size and version, and the whole object when it is small. The
head is read next. A server that refuses suffix ranges gives the head first; the
tail is then read when FFmpeg asks for it. Every later read that the blocks
do not hold fetches ``BLOCK_BYTES`` from where it starts.
"""

from __future__ import annotations

import io

from .._base.keys import Fetched, SourceKey
from .objects import RemoteObject

__all__ = ["BLOCK_BYTES", "HEAD_BYTES", "TAIL_BYTES", "RangeFile", "fetch_whole", "read_ends"]

TAIL_BYTES = 256 << 10  # the first read (a 5-minute MP4's moov is ~120 KB); a smaller object comes whole
HEAD_BYTES = 64 << 10  # the second, for a file whose first bytes say MP4/MOV
BLOCK_BYTES = 1 << 20  # what a RangeFile fetches for a read it does not hold


def fetch_whole(remote: RemoteObject, key: SourceKey, blocks: dict[int, bytes] | None = None) -> Fetched:
    """The whole object, in one read of the version ``key`` names; ``blocks`` already read are not read again.

    ``blocks`` may hold a head at 0 and a tail (``read_ends``): then only the bytes between them are read.
    """
    blocks = blocks or {}
    head = blocks.get(0, b"")
    tail_start = min((s for s, b in blocks.items() if s > 0 and s + len(b) == key.size), default=key.size)
    tail = blocks.get(tail_start, b"")
    if len(head) > tail_start:  # the head overlaps the tail: the object is in hand
        return Fetched(key, head[:tail_start] + tail)
    return Fetched(key, head + remote.read(key, len(head), tail_start) + tail)


def read_ends(remote: RemoteObject) -> tuple[SourceKey, dict[int, bytes]]:
    """An object's first touch: its key and ``{start: bytes}``, whole (``{0: all}``) or its head and tail.

    Where suffix ranges work, the tail (``TAIL_BYTES``) then the head (``HEAD_BYTES``).
    Where the server refuses them, the first ``TAIL_BYTES`` alone: a ``RangeFile`` reads the tail when asked.
    """
    key, start, first = remote.first_read(TAIL_BYTES)
    blocks = {start: first}
    if start > 0:
        blocks[0] = remote.read(key, 0, min(HEAD_BYTES, start))
    return key, blocks


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
        self.block_bytes = BLOCK_BYTES  # what a read the blocks do not hold fetches

    @classmethod
    def open(cls, remote: RemoteObject) -> RangeFile:
        """A file over the object ``remote`` (``remote_shards.remote_source``) with its ends read (``read_ends``)."""
        return cls(remote, *read_ends(remote))

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
                end = min(self.key.size, self.position + self.block_bytes, following)
                self.blocks[self.position] = self.remote.read(self.key, self.position, end)
                return self.readinto(buffer)
        self.position += count
        return count
