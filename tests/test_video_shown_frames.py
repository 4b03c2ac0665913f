"""VP8, VP9 and AV1 in Matroska/WebM indexed from their packets: hidden frames and superframes read, nothing decoded.

Each file is small and generated, and holds what real ones do: VP9 superframes
(an alternate reference packed with the next frame), AV1 temporal units with
hidden frames and frames shown again, and VP8 packets whose frame is hidden.
Every clip must equal decoding from the first frame, from the packet table and
through FFmpeg. A file whose frame headers cannot be vouched for is indexed by decoding.
"""

from __future__ import annotations

import logging
from pathlib import Path

import av
import numpy as np
import pytest

from parallel_loader.video import IndexCache, read_clip
from parallel_loader.video._indexes import make as make_module
from parallel_loader.video._indexes.shown_frames import ShownFrames, shown_frames
from parallel_loader.video._indexes.tables import Refused, TableIndex, from_tables
from parallel_loader.video._media.frames import open_video

from .video_files import write_encoded_video

N = 30
GOP = 15
CLIP = 3
# libvpx makes alternate reference frames in one pass only in its real-time mode, with a look-ahead.
ALT_REF = {"deadline": "realtime", "cpu-used": "5", "lag-in-frames": "25", "auto-alt-ref": "1"}
HIDDEN_VP8 = (4, 13)  # packets whose frames the VP8 file hides

FILES = {
    "vp9_superframes.webm": dict(codec="libvpx-vp9", gop=GOP, options=ALT_REF),
    "vp9.webm": dict(codec="libvpx-vp9", gop=10, size=(57, 83)),
    "vp8.webm": dict(codec="libvpx", gop=10),
}
if "libsvtav1" in av.codecs_available:  # its hidden frames are shown again later (show_existing_frame)
    FILES["av1.mkv"] = dict(codec="libsvtav1", gop=GOP, size=(64, 64))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("shown_frames")
    made = {name: write_encoded_video(root / name, N, **kwargs) for name, kwargs in FILES.items()}
    made["vp8_hidden.webm"] = _hidden(made["vp8.webm"], root / "vp8_hidden.webm", HIDDEN_VP8)
    return made


def _packets(path: Path) -> list[tuple[int, bytes, bool]]:
    """Each packet's data offset, bytes and keyframe flag, as FFmpeg demuxes them."""
    with open_video(path) as (container, stream):
        return [(p.pos + 4, bytes(p), p.is_keyframe) for p in container.demux(stream) if p.size]


def _hidden(source: Path, path: Path, packets: tuple[int, ...]) -> Path:
    """``source`` with the frames of ``packets`` hidden: their frame tag's ``show_frame`` bit cleared."""
    data = bytearray(source.read_bytes())
    found = _packets(source)
    for k in packets:
        assert not found[k][2]
        data[found[k][0]] &= ~0x10  # the tag's first byte: bit 4 is show_frame
    path.write_bytes(bytes(data))
    return path


def _decoded(path: Path) -> list[int]:
    with open_video(path) as (container, stream):
        return [frame.pts for frame in container.decode(stream)]


def _superframes(path: Path) -> int:
    """Packets ending in a VP9 superframe index of more than one frame (the VP9 bitstream's Annex B)."""
    count = 0
    for _, data, _ in _packets(path):
        marker = data[-1]
        size = 2 + (1 + (marker >> 3 & 3)) * (1 + (marker & 7))
        count += marker & 0xE0 == 0xC0 and marker & 7 > 0 and len(data) >= size and data[-size] == marker
    return count


def test_the_files_hold_hidden_frames_as_real_ones_do(files):
    """Checked apart from the code under test: the frames hide in superframes or packets that decode to none."""
    assert _superframes(files["vp9_superframes.webm"]) >= 1
    assert len(_decoded(files["vp8_hidden.webm"])) == N - len(HIDDEN_VP8)
    if "av1.mkv" in files:
        units = [data for _, data, _ in _packets(files["av1.mkv"])]
        # A shown-again frame is a temporal unit of one frame header OBU (type 3) with show_existing_frame set.
        assert any(unit[0] >> 3 & 15 == 3 and unit[2] & 0x80 for unit in units)
        assert len(_decoded(files["av1.mkv"])) == len(units) == N


@pytest.mark.parametrize("name", [*FILES, "vp8_hidden.webm"])
def test_a_first_touch_reads_the_frame_headers_and_every_clip_is_exact(files, name, monkeypatch):
    path = files[name]
    truth = read_clip(path, 0, len(_decoded(path)), seek=False)

    def refuse(*args, **kwargs):
        raise AssertionError("decoded or demuxed every packet to index the file")

    monkeypatch.setattr(make_module, "scan", refuse)
    monkeypatch.setattr(make_module, "from_packets", refuse)
    for cache in (IndexCache(None), IndexCache(None, max_table_bytes=0)):  # from the table; through FFmpeg
        index = cache.get(path)
        assert (index.made_by, index.frames, index.seekable) == ("packets", len(truth), True)
        assert len(index.keyframes) >= 2
        starts = {0, len(truth) // 2, len(truth) - CLIP}
        starts |= {k + d for k in index.keyframes for d in (-1, 0, 1) if 0 <= k + d <= len(truth) - CLIP}
        for start in sorted(starts):
            clip = read_clip(path, start, CLIP, index_cache=cache)
            np.testing.assert_array_equal(clip, truth[start : start + CLIP], err_msg=f"{name} from frame {start}")


@pytest.mark.parametrize("name", ["vp9_superframes.webm", "vp8_hidden.webm"])
def test_a_url_is_indexed_from_its_frame_headers_too(files, name, monkeypatch):
    """A small object is fetched whole, then indexed as a local file is; its packet table found in its bytes."""
    path = files[name]
    truth = read_clip(path, 0, len(_decoded(path)), seek=False)
    monkeypatch.setattr(make_module, "scan", lambda *args, **kwargs: pytest.fail("decoded every frame"))
    cache = IndexCache(None)
    for start in (0, 9, 10, 11, len(truth) - CLIP):
        clip = read_clip(path.as_uri(), start, CLIP, index_cache=cache)
        np.testing.assert_array_equal(clip, truth[start : start + CLIP], err_msg=f"{name} from frame {start}")
    assert cache.get(path.as_uri()).made_by == "packets"


def test_the_index_is_the_one_decoding_gives(files):
    """The same frames, timestamps and keyframes as the index made by decoding every frame."""
    for name, path in files.items():
        with open_video(path) as (container, stream), open(path, "rb") as file:
            made = from_tables(container, stream, file, path.stat().st_size)
        assert isinstance(made, TableIndex), (name, made)
        decoded = _decoded(path)
        assert [made.index.pts(i) for i in range(made.index.frames)] == decoded, name
        assert len(made.pts) == len(_packets(path))  # the table keeps the hidden frames' packets


def test_a_keyframe_flag_the_frame_header_denies_is_indexed_by_decoding(files, tmp_path, caplog):
    """The block's keyframe flag set on a VP9 inter frame: the headers do not vouch, and decoding indexes it."""
    source = files["vp9_superframes.webm"]
    data = bytearray(source.read_bytes())
    at = _packets(source)[5][0]
    data[at - 1] |= 0x80  # the SimpleBlock's flags byte, just before the frame
    path = tmp_path / "flagged.webm"
    path.write_bytes(bytes(data))
    with open_video(path) as (container, stream), open(path, "rb") as file:
        made = from_tables(container, stream, file, path.stat().st_size)
    assert made == Refused("packet 5's keyframe flag is not its frame header's")
    truth = read_clip(path, 0, N, seek=False)
    cache = IndexCache(None)
    with caplog.at_level(logging.DEBUG, logger=make_module.__name__):
        assert cache.get(path).made_by == "decoding"
    assert any("keyframe flag is not its frame header's" in r.getMessage() for r in caplog.records)
    for start in (0, 4, 5, N - CLIP):
        np.testing.assert_array_equal(read_clip(path, start, CLIP, index_cache=cache), truth[start : start + CLIP])


def _one(codec: str, *packets: bytes) -> ShownFrames | str:
    data = np.frombuffer(b"".join(packets), dtype=np.uint8)
    size = np.array([len(p) for p in packets], dtype=np.int64)
    return shown_frames(codec, data, np.concatenate(([0], np.cumsum(size)[:-1])), size)


def _obu(kind: int, body: bytes, extension: bool = False) -> bytes:
    return bytes([kind << 3 | extension << 2 | 2]) + (b"\0" if extension else b"") + bytes([len(body)]) + body


def test_the_frame_headers_are_read_as_the_specifications_write_them():
    """Hand-made headers: shown or hidden frames, key frames, superframes, profile 3, temporal units."""
    key9, inter9, hidden9, existing9 = b"\x82\0", b"\x86\0", b"\x84\0", b"\x88"
    superframe = hidden9 + inter9 + bytes([0xC1, 2, 2, 0xC1])  # two frames of 2 bytes, then the index
    profile3 = bytes([0xB0 | 0x03]) + b"\0"  # marker, profile 3, reserved 0, shown inter frame
    found = _one("vp9", key9, superframe, existing9, hidden9, profile3)
    assert isinstance(found, ShownFrames), found
    assert found.shown.tolist() == [True, True, True, False, True]
    assert found.key.tolist() == [True, False, False, False, False]
    assert _one("vp9", inter9 + inter9 + bytes([0xC1, 2, 2, 0xC1])) == "a VP9 packet shows 2 frames"
    assert _one("vp9", inter9 + bytes([0xC1, 2, 3, 0xC1])).startswith("a VP9 superframe whose index")
    assert _one("vp9", b"\x42\0") == "a VP9 frame without its frame marker"

    vp8_key = b"\x10\0\0\x9d\x01\x2a" + b"\0" * 4
    found = _one("vp8", vp8_key, b"\x11\0\0", b"\x01\0\0")
    assert isinstance(found, ShownFrames)
    assert (found.shown.tolist(), found.key.tolist()) == ([True, True, False], [True, False, False])
    assert _one("vp8", b"\x10\0\0\0\0\0" + b"\0" * 4) == "a VP8 key frame without its start code"
    assert _one("vp8", b"\x19\0\0") == "a VP8 frame of an unknown version"

    sequence = _obu(1, b"\x00\x00")
    key1, hidden1, shown1, existing1 = _obu(6, b"\x10x"), _obu(6, b"\x20x"), _obu(6, b"\x30x"), _obu(3, b"\x80")
    found = _one("av1", sequence + key1, hidden1 + shown1, existing1, hidden1)
    assert isinstance(found, ShownFrames)
    assert (found.shown.tolist(), found.key.tolist()) == ([True, True, True, False], [True, False, False, False])
    assert _one("av1", shown1 + existing1) == "an AV1 temporal unit shows 2 frames"
    assert _one("av1", _obu(6, b"\x30x", extension=True)) == "an AV1 OBU with an extension (scalable layers)"
    assert _one("av1", _obu(6, b"\x30x") + _obu(4, b"x")) == "AV1 tile groups in OBUs of their own"
    assert _one("av1", _obu(3, b"\x30")) == "an AV1 frame header whose tiles are in OBUs of their own"
    assert _one("av1", _obu(1, b"\x08\x00") + key1).startswith("an AV1 still picture")
    assert _one("av1", shown1[:-1]) == "an AV1 OBU reaches past its packet"
