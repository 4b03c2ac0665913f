"""A first touch from the container's tables: MP4/MOV sample tables and AVI indexes read as arrays, no demuxing.

Each file is small and generated. The tables must give what demuxing every
packet gives (the index, and each packet's offset, size, timestamp and
keyframe flag), or refuse with a reason; then the file is indexed as before.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from parallel_loader.video import IndexCache, frame_count, read_clip
from parallel_loader.video._base.facts import encode
from parallel_loader.video._base.keys import Fetched, local_key
from parallel_loader.video._indexes import make as make_module
from parallel_loader.video._indexes import packets as packets_module
from parallel_loader.video._indexes import tables as tables_module
from parallel_loader.video._indexes.mov_tables import read_moov, track_packets
from parallel_loader.video._indexes.packet_table import table_in_memory
from parallel_loader.video._indexes.tables import Refused, TableIndex, from_tables
from parallel_loader.video._indexes.track_packets import read_at
from parallel_loader.video._media.frames import open_video

from .video_files import cut_with_edit_list, pack_b_frames, with_display_matrix, write_encoded_video

N = 30
GOP = 10
H264 = dict(codec="libx264", gop=GOP)

# name -> writer arguments: files whose tables must give the index.
READ = {
    "b_frames.mp4": dict(H264, b_frames=2),
    "pyramid.mp4": dict(H264, b_frames=3, options={"b-pyramid": "normal"}),
    "no_b_frames.mov": dict(H264),
    "audio_first.mp4": dict(H264, b_frames=2, audio_first=True),  # the video is the second track
    "faststart.mp4": dict(H264, b_frames=2, container_options={"movflags": "faststart"}),
    "xvid.avi": dict(codec="mpeg4", codec_tag="XVID", gop=GOP),
    "xvid_audio_first.avi": dict(codec="mpeg4", codec_tag="XVID", gop=GOP, audio_first=True),  # empty chunks too
    "mjpeg.avi": dict(codec="mjpeg"),
    "ffv1.avi": dict(codec="ffv1", gop=GOP),
}
# name -> writer arguments, and the start of the reason the tables give to refuse it.
REFUSED = {
    "fragmented.mp4": (dict(H264, b_frames=2, container_options={"movflags": "frag_keyframe+empty_moov"}), "a frag"),
    "hevc.mp4": (dict(codec="libx265", gop=GOP, b_frames=2), "hevc in mov is indexed by decoding"),
    # FFmpeg times these packets from the decoder's reordering, which the index cannot tell.
    "xvid_b_frames.avi": (dict(codec="mpeg4", codec_tag="XVID", gop=GOP, b_frames=2), "packet 0 is not where"),
    "h264_b_frames.avi": (dict(H264, b_frames=2), "h264 in avi is indexed by decoding"),
    "ffv1.mkv": (dict(codec="ffv1", gop=GOP), "ffv1 in matroska is indexed by decoding"),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tables")
    made = {name: write_encoded_video(root / name, N, **kwargs) for name, kwargs in READ.items()}
    made |= {name: write_encoded_video(root / name, N, **kwargs) for name, (kwargs, _) in REFUSED.items()}
    made["cut.mp4"] = cut_with_edit_list(made["b_frames.mp4"], root / "cut.mp4", 12)  # frames 10, 11 discarded
    made["rotated.mp4"] = with_display_matrix(made["b_frames.mp4"], root / "rotated.mp4", 90)
    made["packed.avi"] = pack_b_frames(made["xvid_b_frames.avi"], root / "packed.avi")
    return made


def tables_of(path: Path) -> TableIndex | Refused:
    with open_video(path) as (container, stream), open(path, "rb") as file:
        return from_tables(container, stream, file, path.stat().st_size)


def demuxed(path: Path) -> tuple[object, list[tuple[int, int, int, bool]]]:
    """The index from every packet demuxed, and the packets ``(pos, size, pts, keyframe)``."""
    with open_video(path) as (container, stream):
        index = packets_module.from_packets(container, stream, path.stat().st_size)
    with open_video(path) as (container, stream):
        packets = [(p.pos, p.size, p.pts, p.is_keyframe) for p in container.demux(stream) if p.size]
    return index, packets


def ground_truth(path: Path) -> np.ndarray:
    return read_clip(path, 0, frame_count(path), seek=False)


@pytest.mark.parametrize("name", [*READ, "rotated.mp4"])
def test_the_tables_give_what_demuxing_every_packet_gives(files, name):
    made = tables_of(files[name])
    assert isinstance(made, TableIndex), made
    index, packets = demuxed(files[name])
    ours = made.index
    assert (ours.frames, ours.keyframes, ours.seekable, ours.intact, ours.made_by) == (
        index.frames,
        index.keyframes,
        True,
        True,
        "packets",
    )
    assert [ours.pts(i) for i in range(N)] == [index.pts(i) for i in range(N)]
    columns = list(zip(*packets, strict=True))
    for ours_column, theirs in zip((made.pos, made.size, made.pts, made.key), columns, strict=True):
        assert ours_column.tolist() == list(theirs)


def test_a_remote_files_packet_table_from_the_tables_equals_the_one_found_in_its_bytes(files):
    """The remote path keeps the table the tables give; it must be where each packet's bytes are."""
    path = files["audio_first.mp4"]
    made = tables_of(path)
    assert isinstance(made, TableIndex)
    found = table_in_memory(Fetched(local_key(path), path.read_bytes()))
    assert found is not None
    ours = (made.pos, made.size, made.pts, made.key)
    for column, theirs in zip(ours, (found.pos, found.size, found.pts, found.key), strict=True):
        np.testing.assert_array_equal(column, theirs)


@pytest.mark.parametrize("name", [*REFUSED, "cut.mp4", "packed.avi"])
def test_a_file_the_tables_cannot_vouch_for_is_indexed_as_before_and_every_clip_is_exact(files, name):
    path = files[name]
    made = tables_of(path)
    assert isinstance(made, Refused)
    if name in REFUSED:
        assert made.reason.startswith(REFUSED[name][1]), made.reason
    cache = IndexCache(None)
    truth = ground_truth(path)
    frames = len(truth)
    for start in (0, GOP - 1, GOP, frames - 3):
        np.testing.assert_array_equal(read_clip(path, start, 3, index_cache=cache), truth[start : start + 3])


@pytest.mark.parametrize("name", ["pyramid.mp4", "xvid.avi"])
def test_a_first_touch_demuxes_no_packet_loop(files, monkeypatch, name):
    """The tables make the index: the loop over every packet (``from_packets``) is never entered."""

    def refuse(*args, **kwargs):
        raise AssertionError("demuxed every packet")

    monkeypatch.setattr(make_module, "from_packets", refuse)
    path = files[name]
    truth = ground_truth(path)
    cache = IndexCache(None)
    for start in (0, 9, 10, 17, N - 3):
        np.testing.assert_array_equal(read_clip(path, start, 3, index_cache=cache), truth[start : start + 3])
    assert cache.get(path).made_by == "packets"


def test_tables_a_check_read_a_packet_from_are_retried_by_demuxing_from_the_start(files, monkeypatch):
    """A refusal after the first packet was demuxed opens the file again, so no packet is missed."""
    path = files["b_frames.mp4"]
    monkeypatch.setattr(make_module, "from_tables", lambda *args: Refused("made up", demuxed=True))
    index, table = make_module.make_index(path, local_key(path))
    assert table is None
    assert (index.frames, index.made_by, index.seekable) == (N, "packets", True)


def test_damaged_tables_are_refused_with_the_reason(files, tmp_path):
    """A sample table without its sync samples, and one whose size table is cut short."""
    data = files["b_frames.mp4"].read_bytes()
    no_sync = tmp_path / "no_sync.mp4"
    no_sync.write_bytes(data.replace(b"stss", b"free", 1))
    made = tables_of(no_sync)
    assert isinstance(made, Refused) and made.reason == "no stss box"
    with open(files["b_frames.mp4"], "rb") as file:
        moov = read_moov(file, len(data))
    assert isinstance(moov, bytes)
    at = moov.index(b"stsz") + 4
    count = struct.unpack_from(">I", moov, at + 8)[0]
    damaged = moov[: at + 8] + struct.pack(">I", count + 1000) + moov[at + 12 :]
    reason = track_packets(damaged, 1)
    assert isinstance(reason, str) and "reaches past its box" in reason
    assert track_packets(moov, 7) == "no track 7"


def test_an_avi_with_an_open_dml_index_or_packed_b_frames_is_refused(files, tmp_path):
    """FFmpeg prefers an OpenDML index to ``idx1``: no reader yet. Packed B-frames fail the codec's array check."""
    data = files["xvid.avi"].read_bytes()
    strl = data.index(b"strl")
    reserved = data.index(b"JUNK", strl)  # the space the muxer keeps for an OpenDML super index
    open_dml = tmp_path / "open_dml.avi"
    open_dml.write_bytes(data[:reserved] + b"indx" + data[reserved + 4 :])
    made = tables_of(open_dml)
    assert isinstance(made, Refused) and made.reason == "an OpenDML index (no reader yet)"
    made = tables_of(files["packed.avi"])
    assert isinstance(made, Refused) and ("N-VOP" in made.reason or "packed B-frames" in made.reason)


def test_the_mpeg4_check_reads_the_packets_in_bounded_runs_and_gives_what_one_read_gives(files, monkeypatch):
    """Runs of packets about ``_CHECK_BYTES`` long: the same tables, the same refusal, no read much longer."""
    whole = {name: tables_of(files[name]) for name in ("xvid.avi", "xvid_audio_first.avi", "packed.avi")}
    reads: list[int] = []

    def recorded(file, start, count):
        reads.append(count)
        return read_at(file, start, count)

    monkeypatch.setattr(tables_module, "_CHECK_BYTES", 1024)
    monkeypatch.setattr(tables_module, "read_at", recorded)
    for name, before in whole.items():
        reads.clear()
        after = tables_of(files[name])
        if isinstance(before, Refused):
            # Refused too; the first run to fail may name another packet's problem than one read's.
            assert isinstance(after, Refused) and ("N-VOP" in after.reason or "packed B-frames" in after.reason)
            continue
        assert isinstance(after, TableIndex) and encode(after.index) == encode(before.index)
        assert len(reads) > 2 and max(reads) <= 1024 + int(after.size.max())
        for ours, theirs in zip(
            (after.pos, after.size, after.pts, after.key),
            (before.pos, before.size, before.pts, before.key),
            strict=True,
        ):
            assert ours.tolist() == theirs.tolist()
