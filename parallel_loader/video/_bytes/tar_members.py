"""Videos inside tar shards (WebDataset), read in place: a member is a byte range of its shard.

Words used here:

* a *shard*: an uncompressed tar file on local disk, as WebDataset and
  video2dataset write them.
* a *member*: one file in it, named ``tar://MEMBER::SHARD`` (fsspec's chained
  form, ``SHARD`` an absolute path). A tar member's data is one byte range of
  the shard, found from the headers alone.
* the *member table*: each member's name, data offset and size. It comes from
  an index file beside the shard, when there is one and it is newer than the
  shard. That is DALI's ``wds2idx`` index (``SHARD-STEM.idx``, version 1.2) or
  a ``wids`` index (``SHARD.index``). Otherwise the tar headers are read once.
  A process holds the tables of the shards it used last, up to ``TABLE_BYTES``.

A ``TarMember`` is a byte source like a local file. Its key is its URL, its
size, and a version made of the shard's modification time and the member's
offset. FFmpeg and OpenCV open it natively as a ``subfile`` of the shard; a
clip's span is one read at its offset. Nothing here decodes.
See :doc:`/video/in_memory`.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import tarfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO, ClassVar

import numpy as np

from .._base.errors import VideoDecodeError
from .._base.keys import SourceKey, is_url, local_key

__all__ = [
    "MEMBER_PREFIX",
    "TABLE_BYTES",
    "MemberTable",
    "SmallMembers",
    "TarMember",
    "container_path",
    "forget_table",
    "headers_members",
    "hold_table",
    "held_table",
    "index_files",
    "index_members",
    "member_table",
    "member_url",
    "split_member_url",
    "tar_member",
]

log = logging.getLogger(__name__)

MEMBER_PREFIX = "tar://"
TABLE_BYTES = 256 << 20  # member tables a process holds: about 8 million members of 15-character names
_BLOCK = 512  # a tar header, and the unit the data is padded to

_tables_lock = threading.Lock()  # held while reading or changing _tables, never while reading a shard
_tables: OrderedDict[str, MemberTable] = OrderedDict()  # shard path -> its table, least recently used first
_held = [0]  # the bytes of the tables in _tables


@dataclass(frozen=True, eq=False)
class MemberTable:
    """A shard's regular files: each one's name, data offset and size, in arrays sorted by name.

    A table takes the longest name's bytes plus 16 bytes a member. For 15-character
    names that is 31 bytes, against about 200 in a ``dict`` of tuples (``tracemalloc``).

    Attributes:
        key: the shard's key when the table was made (path, size, modification time).
        names: the members' names, UTF-8 (a numpy bytes array), sorted.
        offsets: where each one's data starts in the shard (``int64``).
        sizes: each one's size (``int64``).
        source: where the table came from: ``"headers"``, ``"DALI index"`` or ``"wids index"``.
    """

    key: SourceKey
    names: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    source: str

    @classmethod
    def of(cls, key: SourceKey, members: dict[str, tuple[int, int]], source: str) -> MemberTable:
        """The table of ``members`` (name -> ``(offset, size)``)."""
        names = np.array([n.encode("utf-8", "surrogateescape") for n in members], dtype=bytes)
        spans = np.array(list(members.values()), dtype=np.int64).reshape(-1, 2)
        order = np.argsort(names, kind="stable")
        return cls(key, names[order], spans[order, 0].copy(), spans[order, 1].copy(), source)

    def encode(self) -> bytes:
        """The table as bytes, for the index store (its key is kept apart): ``decode`` reads them back."""
        head = f"{len(self.names)} {self.source}\n".encode()
        offsets, sizes = self.offsets.astype("<i8").tobytes(), self.sizes.astype("<i8").tobytes()
        return head + offsets + sizes + b"\x00".join(self.names.tolist())

    @classmethod
    def decode(cls, key: SourceKey, data: bytes) -> MemberTable:
        """The table ``encode`` gave ``data`` for, made from the shard of ``key``.

        Raises:
            ValueError: ``data`` is not such a table.
        """
        line, sep, rest = data.partition(b"\n")
        count, _, source = line.decode("utf-8", "replace").partition(" ")
        if not sep or not count.isdigit():
            raise ValueError("not a member table")
        n = int(count)
        names = rest[16 * n :].split(b"\x00") if n else []
        if len(names) != n or len(rest) < 16 * n:
            raise ValueError(f"a member table of {n} members cut short")
        offsets = np.frombuffer(rest, "<i8", n).astype(np.int64)
        sizes = np.frombuffer(rest, "<i8", n, 8 * n).astype(np.int64)
        return cls(key, np.array(names, dtype=bytes), offsets, sizes, source)

    @property
    def members(self) -> dict[str, tuple[int, int]]:
        """Name -> ``(offset, size)``, in the shard's order (made on each access)."""
        order = np.argsort(self.offsets, kind="stable").tolist()
        names, offsets, sizes = self.names.tolist(), self.offsets.tolist(), self.sizes.tolist()
        return {names[i].decode("utf-8", "surrogateescape"): (offsets[i], sizes[i]) for i in order}

    @property
    def nbytes(self) -> int:
        """The bytes its arrays take."""
        return self.names.nbytes + self.offsets.nbytes + self.sizes.nbytes

    def read(self, name: str) -> bytes:
        """Member ``name``'s bytes (one read).

        Raises:
            FileNotFoundError: the shard has no member of that name.
        """
        offset, size = self.find(name)
        with open(self.key.name, "rb") as file:
            return os.pread(file.fileno(), size, offset)

    def find(self, name: str) -> tuple[int, int]:
        """``(offset, size)`` of member ``name``'s data.

        Raises:
            FileNotFoundError: the shard has no member of that name.
        """
        wanted = name.encode("utf-8", "surrogateescape")
        i = int(np.searchsorted(self.names, wanted))
        if i == len(self.names) or self.names[i] != wanted or b"\x00" in wanted:
            raise FileNotFoundError(2, "no such member in the shard", member_url(self.key.name, name))
        return int(self.offsets[i]), int(self.sizes[i])


@dataclass
class SmallMembers:
    """Members whose bytes a pass over a shard's headers keeps as it goes, when it holds them anyway.

    Attributes:
        wanted: whether to keep member ``name`` of ``size`` bytes.
        limit: the bytes kept at most, all members together; members past it are left.
        found: member name -> its bytes, filled by the pass.
        kept_bytes: the bytes in ``found``.
    """

    wanted: Callable[[str, int], bool]
    limit: int = 64 << 20
    found: dict[str, bytes] = field(default_factory=dict)
    kept_bytes: int = field(default=0, init=False)


class TarMember(os.PathLike):
    """One member of a local tar shard, as a byte source (see the module docstring).

    Attributes:
        shard: the shard's absolute path.
        name: the member's name in the shard.
        offset: where its data starts in the shard.
        size: its size in bytes.
        key: its key: its URL, its size, and the shard's version with the offset.
    """

    __slots__ = ("key", "name", "offset", "shard", "size")

    def __init__(self, shard_key: SourceKey, name: str, offset: int, size: int) -> None:
        self.shard, self.name, self.offset, self.size = shard_key.name, name, offset, size
        self.key = SourceKey(member_url(self.shard, name), size, f"t{shard_key.version[1:]}.{offset:x}")

    def __fspath__(self) -> str:
        return self.key.name

    def __repr__(self) -> str:
        return f"TarMember({self.key.name!r}, {self.size} bytes at {self.offset})"

    def open(self) -> io.BufferedReader:
        """The member's bytes as a seekable binary file (reads are ``pread`` calls on the shard)."""
        return io.BufferedReader(_Window(self.shard, self.offset, self.size))

    def ffmpeg_url(self) -> str:
        """What FFmpeg (and OpenCV through it) opens for the member: a ``subfile`` of the shard."""
        return f"subfile,,start,{self.offset},end,{self.offset + self.size},,:{self.shard}"


def member_url(shard: str, name: str) -> str:
    """The URL of member ``name`` of the shard at ``shard``: ``tar://NAME::SHARD``."""
    return f"{MEMBER_PREFIX}{name}::{shard}"


def split_member_url(url: str) -> tuple[str, str] | None:
    """``(member name, shard)`` of a ``tar://NAME::SHARD`` URL, or None for anything else."""
    if not url.startswith(MEMBER_PREFIX):
        return None
    name, sep, shard = url[len(MEMBER_PREFIX) :].partition("::")
    return (name, shard) if sep and name and shard else None


def container_path(path: str) -> str:
    """The file that holds ``path``: the shard of a member URL, else ``path`` itself."""
    split = split_member_url(path)
    return path if split is None else split[1]


def tar_member(url: str) -> TarMember:
    """The member a ``tar://NAME::SHARD`` URL names, found in the shard's member table.

    Raises:
        TypeError: ``url`` is not a member URL, or names a shard at a URL (``remote_shards`` reads those it can).
        FileNotFoundError: there is no shard at ``SHARD``, or no member ``NAME`` in it.
        VideoDecodeError: the shard is not an uncompressed tar file.
    """
    split = split_member_url(url)
    if split is None:
        raise TypeError(f"{url}: a tar member is named tar://MEMBER::SHARD, such as tar://000001.mp4::/data/a.tar")
    name, shard = split
    if is_url(shard) or "://" in shard:  # those of known schemes are read as URLs (``remote_shards``)
        raise TypeError(f"{url}: shards at {shard.partition('://')[0]}:// URLs cannot be read")
    table = member_table(shard)
    return TarMember(table.key, name, *table.find(name))


def member_table(shard: str | os.PathLike[str]) -> MemberTable:
    """The member table of the shard at ``shard`` now: held, from an index file beside it, or from its headers.

    Raises:
        FileNotFoundError: there is no file at ``shard``.
        VideoDecodeError: ``shard`` is not a file, or not an uncompressed tar file.
    """
    key = local_key(shard)
    held = held_table(key.name)
    if held is not None and held.key == key:
        return held
    table = _from_index_file(key)
    if table is None:
        with open(key.name, "rb") as file:
            table = MemberTable.of(key, headers_members(file, key.name), "headers")
    hold_table(table)
    return table


def held_table(name: str) -> MemberTable | None:
    """The member table this process holds for the shard ``name`` (a path or URL), whatever its version, or None."""
    with _tables_lock:
        held = _tables.get(name)
        if held is not None:
            _tables.move_to_end(name)
        return held


def hold_table(table: MemberTable) -> None:
    """Hold ``table`` in this process, in place of any older one of its shard (within ``TABLE_BYTES``)."""
    with _tables_lock:
        old = _tables.pop(table.key.name, None)
        _held[0] += table.nbytes - (0 if old is None else old.nbytes)
        _tables[table.key.name] = table
        while len(_tables) > 1 and _held[0] > TABLE_BYTES:
            _held[0] -= _tables.popitem(last=False)[1].nbytes


def forget_table(name: str) -> None:
    """Drop the member table held for the shard ``name``, if any (a later read makes it again)."""
    with _tables_lock:
        old = _tables.pop(name, None)
        if old is not None:
            _held[0] -= old.nbytes


def forget_tables() -> None:
    """Drop every member table held (a later read makes them again)."""
    with _tables_lock:
        _tables.clear()
        _held[0] = 0


def headers_members(file: BinaryIO, shown: str, small: SmallMembers | None = None) -> dict[str, tuple[int, int]]:
    """Every regular file's ``(offset, size)``, from the tar headers of the shard open as ``file``.

    Pax and GNU long names are read too. The members' data is sought over, never
    read, except that of members ``small`` wants: those are read as the pass meets them.

    Raises:
        VideoDecodeError: the shard is not an uncompressed tar file (``shown`` names it).
    """
    members: dict[str, tuple[int, int]] = {}
    try:
        with tarfile.open(fileobj=file, mode="r:") as tar:  # "r:": uncompressed; it seeks over each member's data
            for info in tar:
                if info.isreg():
                    members[info.name] = (info.offset_data, info.size)
                    if small and small.kept_bytes + info.size <= small.limit and small.wanted(info.name, info.size):
                        small.found[info.name] = tar.extractfile(info).read()  # type: ignore[union-attr]
                        small.kept_bytes += info.size
    except tarfile.TarError as exc:
        raise VideoDecodeError(
            shown, f"is not an uncompressed tar file, so its members cannot be read in place ({exc})"
        ) from None
    return members


def index_files(shard: str) -> list[tuple[str, str]]:
    """``(name, kind)`` of the index files that may sit beside ``shard`` (a path or URL), in the order tried."""
    folder, sep, file = shard.rpartition("/")
    stem = file[: file.find(".", 1)] if file.find(".", 1) > 0 else file
    return [
        (folder + sep + stem + ".idx", "DALI index"),
        (shard + ".idx", "DALI index"),
        (shard + ".index", "wids index"),
    ]


def index_members(kind: str, data: bytes, shard_size: int) -> dict[str, tuple[int, int]]:
    """The members an index file of ``kind`` (see ``index_files``) holds, checked against the shard's size.

    Raises:
        ValueError: the file is not such an index, or places a member outside the shard.
    """
    try:
        members = (_dali_members if kind == "DALI index" else _wids_members)(data)
    except (pickle.UnpicklingError, EOFError, TypeError) as exc:
        raise ValueError(str(exc)) from None
    bad = next((n for n, (o, s) in members.items() if o < _BLOCK or o % _BLOCK or o + s > shard_size), None)
    if bad is not None:
        raise ValueError(f"it places {bad} outside the shard")
    return members


def _from_index_file(key: SourceKey) -> MemberTable | None:
    """The table from a DALI or ``wids`` index beside the shard, or None where none is there or it cannot be used."""
    for path, kind in index_files(key.name):
        try:
            if os.stat(path).st_mtime_ns < int(key.version[1:], 16):
                log.info("%s is older than %s: reading the shard's headers instead", path, key.name)
                continue
            with open(path, "rb") as index:
                members = index_members(kind, index.read(), key.size)
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            log.info("%s cannot be used (%s): reading the shard's headers instead", path, exc)
            continue
        return MemberTable.of(key, members, kind)
    return None


def _dali_members(data: bytes) -> dict[str, tuple[int, int]]:
    """Members of a DALI ``wds2idx`` index, version 1.2: ``v1.2 N``, then per sample ``EXT OFFSET SIZE NAME ...``."""
    lines = data.decode("utf-8").splitlines()
    head = lines[0].split() if lines else []
    if len(head) != 2 or head[0] != "v1.2":
        raise ValueError(f"not a version 1.2 DALI index (it starts {lines[0][:20]!r})" if lines else "empty")
    members = {}
    for line in lines[1:]:
        fields = line.split()
        if len(fields) % 4:
            raise ValueError(f"a line of {len(fields)} fields, not groups of EXT OFFSET SIZE NAME")
        for i in range(0, len(fields), 4):
            members[fields[i + 3]] = (int(fields[i + 1]), int(fields[i + 2]))
    return members


def _wids_members(data: bytes) -> dict[str, tuple[int, int]]:
    """Members of a ``wids`` index: a pickle of ``(names, [[offset, size], ...])``, unpickled with numpy arrays only."""
    names, rows = _NumpyOnly(io.BytesIO(data)).load()
    return {str(name): (int(offset), int(size)) for name, (offset, size) in zip(names, rows, strict=True)}


class _NumpyOnly(pickle.Unpickler):
    """An unpickler that makes lists, strings, numbers and numpy arrays, and refuses every other class.

    An index file comes with the data: unpickling it as Python's unpickler does could run any code.
    """

    _ALLOWED: ClassVar[frozenset[tuple[str, str]]] = frozenset(
        {
            ("numpy._core.multiarray", "_reconstruct"),
            ("numpy.core.multiarray", "_reconstruct"),
            ("numpy", "ndarray"),
            ("numpy", "dtype"),
        }
    )

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"a wids index holds no {module}.{name}")
        return super().find_class(module, name)


class _Window(io.RawIOBase):
    """Bytes ``[offset, offset + size)`` of a file as a seekable file of their own, read with ``pread``."""

    def __init__(self, path: str, offset: int, size: int) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_RDONLY)
        self._offset, self._size, self._position = offset, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = min(len(buffer), self._size - self._position)
        if count <= 0:
            return 0
        got = os.preadv(self._fd, [memoryview(buffer)[:count]], self._offset + self._position)
        self._position += got
        return got

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()
