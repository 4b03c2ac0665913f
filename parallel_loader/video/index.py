"""What a video file's frames are, learnt once by decoding it: the per-file index behind exact seeking.

A container's header and timestamps can be wrong (a frame count that is not
what decodes, timestamp gaps, timestamps missing, seeks that land elsewhere), so
``read_clip`` does not trust them. It asks an ``IndexCache`` for the file's
``VideoIndex``, which ``scan`` makes by decoding every frame once, in order:

* the frame count, as decoding from the first frame counts;
* whether the file is intact: every packet read whole, to the end of the file,
  and decoded. A header may claim more frames than an intact file decodes (it
  counts timestamp gaps as frames, or is simply wrong); a file that is not
  intact (cut short by an interrupted copy, damaged) is missing data, and then
  the header may be right about what the file should hold;
* each frame's presentation timestamp, when every frame has one and they rise
  in decoding order (then a timestamp names exactly one frame: frame ``i`` is
  the ``i``-th decoded, whatever gaps or variable rate the timestamps have);
* the keyframes a seek can start at: frames the container marks as seek points
  and the decoder decodes as keyframes;
* whether seeks are exact: a few keyframes are sought and the first frames
  decoded after each must have the timestamps and the pixels (a checksum) that
  decoding from the start gave them.

A file that fails any of these is indexed with ``seekable=False`` and a reason;
its clips are decoded from the first frame, which is exact for every file. Only
evidence about the file counts against it: a read error during those seeks
(``VideoDecodeError``) is raised, and nothing is stored, since it may not happen again.

``IndexCache`` keeps indexes in memory (thread-safe: one lock around its table)
and, given a directory, on disk, one small JSON file per video keyed by the
video's absolute path, size and modification time, so that a second run does
not decode every file again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import zlib
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import av
import numpy as np

from .errors import VideoDecodeError
from .frames import SeekMismatch, decode, frames_from, open_video, packets

__all__ = ["IndexCache", "VideoIndex", "default_index_cache", "scan", "set_default_index_cache"]

log = logging.getLogger(__name__)

# Bump when the meaning of a stored index changes: older files are then rebuilt.
# 2: ``intact``.
_FORMAT = 2
_SEEK_CHECKS = 3  # keyframes sought when a file is indexed
_CHECKED_FRAMES = 3  # frames compared after each of those seeks


@dataclass(frozen=True, eq=False)
class VideoIndex:
    """The facts about one video file that exact seeking needs.

    Attributes:
        frames: how many frames decode, counting from the first.
        keyframes: frame indices a seek can start at, ascending, always starting with 0.
        seekable: whether seeking to those keyframes is exact for this file.
        reason: why not, when ``seekable`` is False ("" otherwise).
        intact: whether every packet was read whole, to the end of the file,
            and decoded. Then ``frames`` is all the file holds, whatever its
            header claims; without it (a truncated or damaged file) ``frames``
            counts what decodes of what is left.
    """

    frames: int
    keyframes: tuple[int, ...] = (0,)
    seekable: bool = False
    reason: str = ""
    # Presentation timestamps of frames 0, 1, ..., in the stream's time base: either
    # ``pts_start + i * pts_step`` (most files; nothing stored per frame) or, for
    # irregular ones (gaps, variable frame rate), the table ``pts_table``.
    pts_start: int = 0
    pts_step: int = 0
    pts_table: np.ndarray | None = field(default=None, repr=False)
    intact: bool = False  # the safe claim for an index made by hand: not known to be whole

    def pts(self, frame: int) -> int:
        """The presentation timestamp of ``frame`` (0 <= frame < frames)."""
        if self.pts_table is not None:
            return int(self.pts_table[frame])
        return self.pts_start + frame * self.pts_step

    def frame_at(self, pts: int | None) -> int | None:
        """The frame whose presentation timestamp is ``pts``, or None when none is."""
        if pts is None:
            return None
        if self.pts_table is not None:
            i = int(np.searchsorted(self.pts_table, pts))
            return i if i < self.frames and self.pts_table[i] == pts else None
        i, rest = divmod(pts - self.pts_start, self.pts_step or 1)
        return i if rest == 0 and 0 <= i < self.frames else None

    def keyframe_before(self, frame: int) -> int:
        """The last keyframe at or before ``frame``: where decoding must start to reach it exactly."""
        return self.keyframes[bisect_right(self.keyframes, frame) - 1]

    def to_json(self) -> dict:
        data = {"frames": self.frames, "keyframes": list(self.keyframes), "seekable": self.seekable}
        data["reason"], data["intact"] = self.reason, self.intact
        if self.pts_table is not None:
            data["pts_table"] = self.pts_table.tolist()
        else:
            data["pts_start"], data["pts_step"] = self.pts_start, self.pts_step
        return data

    @classmethod
    def from_json(cls, data: dict) -> VideoIndex:
        table = data.get("pts_table")
        return cls(
            frames=int(data["frames"]),
            keyframes=tuple(int(k) for k in data["keyframes"]),
            seekable=bool(data["seekable"]),
            reason=str(data["reason"]),
            pts_start=int(data.get("pts_start", 0)),
            pts_step=int(data.get("pts_step", 0)),
            pts_table=None if table is None else np.asarray(table, dtype=np.int64),
            intact=bool(data["intact"]),
        )


class IndexCache:
    """Video indexes by file, made on first use and kept in memory and, optionally, on disk.

    Safe to use from several threads at once: one lock guards the table, and two
    threads asking for the same new file may both scan it (the results agree).
    An entry is valid while the file keeps its size and modification time; a
    changed file is scanned again. A file whose seeks are not exact is named in
    one warning, the first time this cache meets it.

    Args:
        directory: where to keep indexes between runs (created when needed), or
            ``None`` to keep them in memory only. Files there are small JSON
            documents named by a hash of the video's absolute path.
        max_entries: how many indexes to keep in memory; the least recently
            used are dropped beyond that (and read again from ``directory``).
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, max_entries: int = 100_000) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries!r}")
        self.directory = None if directory is None else Path(directory).expanduser()
        self.max_entries = max_entries
        # Held while reading or changing the two tables below, never while decoding.
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[tuple[int, int], VideoIndex]] = OrderedDict()
        self._reported: set[str] = set()  # files already named in a log line as not seekable

    def get(self, path: str | os.PathLike[str]) -> VideoIndex:
        """The index of the video at ``path``: from memory, from disk, or made by ``scan``.

        Raises:
            FileNotFoundError: there is no file at ``path``.
            VideoDecodeError: the file cannot be opened as a video.
        """
        key = os.path.abspath(path)
        stamp = _stamp(key)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] == stamp:
                self._entries.move_to_end(key)
                return entry[1]
        index = self._load(key, stamp)
        if index is None:
            index = scan(path)
            self._store(key, stamp, index)
        self._remember(key, stamp, index)
        return index

    def distrust(self, path: str | os.PathLike[str], reason: str) -> None:
        """Mark a file's seeks as not exact (a read found its timestamps wrong), here and on disk."""
        key = os.path.abspath(path)
        stamp = _stamp(key)
        index = self.get(path)
        index = VideoIndex(frames=index.frames, seekable=False, reason=reason, intact=index.intact)
        self._store(key, stamp, index)
        self._remember(key, stamp, index)

    def clear(self) -> None:
        """Forget every index held in memory (those on disk stay)."""
        with self._lock:
            self._entries.clear()
            self._reported.clear()

    def __len__(self) -> int:
        """How many indexes are held in memory."""
        with self._lock:
            return len(self._entries)

    def __repr__(self) -> str:
        return f"<IndexCache directory={self.directory} entries={len(self)}>"

    def _remember(self, key: str, stamp: tuple[int, int], index: VideoIndex) -> None:
        with self._lock:
            self._entries[key] = (stamp, index)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
            report = not index.seekable and key not in self._reported
            if report:
                self._reported.add(key)
        if report:
            log.warning(
                "video %s: seeking is not exact (%s); its clips are decoded from the first frame", key, index.reason
            )

    def _file(self, key: str) -> Path | None:
        if self.directory is None:
            return None
        name = hashlib.sha1(key.encode("utf-8", "surrogateescape")).hexdigest()
        return self.directory / name[:2] / f"{name}.json"

    def _load(self, key: str, stamp: tuple[int, int]) -> VideoIndex | None:
        file = self._file(key)
        if file is None:
            return None
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
            if data["format"] != _FORMAT or data["path"] != key or (data["size"], data["mtime_ns"]) != stamp:
                return None
            return VideoIndex.from_json(data["index"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.debug("ignoring the unreadable video index %s: %s", file, exc)
            return None

    def _store(self, key: str, stamp: tuple[int, int], index: VideoIndex) -> None:
        file = self._file(key)
        if file is None:
            return
        data = {"format": _FORMAT, "path": key, "size": stamp[0], "mtime_ns": stamp[1], "index": index.to_json()}
        # Written whole under a name of its own, then renamed: a reader in another
        # thread or process sees the old file or the new one, never half of one.
        temporary = file.with_name(f"{file.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps(data), encoding="utf-8")
            os.replace(temporary, file)
        except OSError as exc:
            log.warning("cannot write the video index %s: %s", file, exc)
            temporary.unlink(missing_ok=True)


def default_index_cache() -> IndexCache:
    """The cache ``read_clip`` and ``frame_count`` use unless given another: in memory only at first."""
    return _default[0]


def set_default_index_cache(cache: IndexCache) -> None:
    """Replace the process-wide default cache, e.g. with ``IndexCache(directory)`` to keep indexes on disk.

    Call it before loading starts; reads already under way finish with the old cache.
    """
    if not isinstance(cache, IndexCache):
        raise TypeError(f"expected an IndexCache, got {type(cache).__name__}")
    _default[0] = cache


_default = [IndexCache()]  # one slot, so that replacing it is one atomic store


def scan(path: str | os.PathLike[str]) -> VideoIndex:
    """Decode every frame of a video once and learn its index (see the module docstring).

    Raises:
        FileNotFoundError: there is no file at ``path``.
        VideoDecodeError: the file cannot be opened as a video, no frame decodes,
            or it cannot be read after one of the checking seeks.
    """
    with open_video(path) as (container, stream):
        seek_points: set[int] = set()  # timestamps of the packets the container marks as keyframes
        stamps: list[int | None] = []
        intra: list[int] = []  # frames the decoder calls keyframes
        checksums: dict[int, int] = {}  # frame -> checksum, for the first frames of each group
        problem = ""
        intact = True
        for packet in packets(container, stream):
            frames = None if packet is None else decode(packet)
            if frames is None:
                problem = "a packet fails to decode, or the file cannot be read to its end"
                intact = False
                continue
            if packet.is_corrupt:  # FFmpeg's mark for a packet the file ends inside (cut short) or a damaged one
                intact = False
            if packet.is_keyframe and packet.pts is not None:
                seek_points.add(packet.pts)
            for frame in frames:
                i = len(stamps)
                stamps.append(frame.pts)
                if frame.key_frame:
                    intra.append(i)
                if intra and i - intra[-1] < _CHECKED_FRAMES:
                    checksums[i] = _checksum(frame)
    frames = len(stamps)
    if frames == 0:
        raise VideoDecodeError(path, "no frame decodes (empty, corrupt, or not a video)")
    if not problem:
        problem = _timestamp_problem(stamps)
    if problem:
        return VideoIndex(frames=frames, reason=problem, intact=intact)
    pts = np.asarray(stamps, dtype=np.int64)
    keyframes = tuple(sorted({0, *(i for i in intra if int(pts[i]) in seek_points)}))
    index = _compact(frames, keyframes, pts, intact)
    problem = _seek_problem(path, index, checksums)
    if problem:
        return VideoIndex(frames=frames, reason=problem, intact=intact)
    return index


def _stamp(key: str) -> tuple[int, int]:
    info = os.stat(key)
    return info.st_size, info.st_mtime_ns


def _checksum(frame: av.VideoFrame) -> int:
    """A checksum of a decoded frame's pixels (in its own pixel format where numpy can hold it)."""
    try:
        pixels = frame.to_ndarray()
    except ValueError:  # a pixel format to_ndarray does not hold: convert it
        pixels = frame.to_ndarray(format="rgb24")
    checksum = 0
    for part in pixels if isinstance(pixels, tuple) else (pixels,):  # paletted formats give (image, palette)
        checksum = zlib.crc32(np.ascontiguousarray(part), checksum)
    return checksum


def _timestamp_problem(stamps: list[int | None]) -> str:
    """Why the timestamps cannot name the frames, or "" when they can."""
    missing = sum(s is None for s in stamps)
    if missing:
        return f"{missing} of {len(stamps)} frames have no timestamp"
    for i in range(1, len(stamps)):
        if stamps[i] <= stamps[i - 1]:
            return f"timestamps do not rise in decoding order (frame {i}: {stamps[i]} after {stamps[i - 1]})"
    return ""


def _compact(frames: int, keyframes: tuple[int, ...], pts: np.ndarray, intact: bool) -> VideoIndex:
    """The index, with its timestamps as start and step when they are evenly spaced."""
    step = int(pts[1] - pts[0]) if frames > 1 else 1
    if np.array_equal(pts, pts[0] + step * np.arange(frames, dtype=np.int64)):
        return VideoIndex(frames, keyframes, seekable=True, pts_start=int(pts[0]), pts_step=step, intact=intact)
    return VideoIndex(frames, keyframes, seekable=True, pts_table=pts, intact=intact)


def _seek_problem(path: str | os.PathLike[str], index: VideoIndex, checksums: dict[int, int]) -> str:
    """Seek to a few keyframes; say what went wrong if the frames decoded there differ, "" if none did.

    Raises:
        VideoDecodeError: the file cannot be read or decoded after a seek: no
            verdict on its seeks, so the caller stores none.
    """
    later = index.keyframes[1:]
    if not later:
        return ""
    picks = sorted({later[0], later[len(later) // 2], later[-1]})[:_SEEK_CHECKS]
    with open_video(path) as (container, stream):
        for key in picks:
            expected = key
            try:
                for i, frame in frames_from(container, stream, index, key):
                    if i != expected:
                        return f"a seek to frame {key} decodes frame {i}, not {expected}"
                    if i in checksums and checksums[i] != _checksum(frame):
                        return f"frame {i} decoded after a seek to frame {key} differs from frame {i} decoded in order"
                    expected += 1
                    if expected >= min(key + _CHECKED_FRAMES, index.frames):
                        break
                else:
                    return f"a seek to frame {key} ends the file before frame {expected}"
            except SeekMismatch as exc:
                return str(exc)
    return ""
