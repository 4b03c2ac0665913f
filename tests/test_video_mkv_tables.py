"""A first touch of a Matroska/WebM file from its clusters' block headers, read as arrays: no demuxing.

Each file is small and generated. The block headers must give every packet
demuxing gives (offset, size, timestamp, keyframe flag, and the bytes there),
whatever the codec. For H.264, the codec Matroska's packet index covers, they
must give the index. Anything unusual is refused with a reason.
"""

from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np
import pytest

from parallel_loader.video import IndexCache, frame_count, read_clip
from parallel_loader.video._indexes import make as make_module
from parallel_loader.video._indexes import mkv_tables
from parallel_loader.video._indexes import packets as packets_module
from parallel_loader.video._indexes.mkv_tables import track_packets
from parallel_loader.video._indexes.tables import TableIndex, from_tables
from parallel_loader.video._indexes.track_packets import TrackPackets
from parallel_loader.video._media.frames import open_video

from .video_files import write_encoded_video

N = 30
GOP = 10
H264 = dict(codec="libx264", gop=GOP)

# name -> writer arguments: H.264 files whose block headers must give the index.
INDEXED = {
    "b_frames.mkv": dict(H264, b_frames=2),
    "no_b_frames.mkv": dict(H264),
    "pyramid.mkv": dict(H264, b_frames=3, options={"b-pyramid": "normal"}),
    "audio_first.mkv": dict(H264, b_frames=2, audio_first=True),  # the video is the second track
    "clusters.mkv": dict(H264, b_frames=2, container_options={"cluster_time_limit": "100"}),  # 8 clusters
}
# name -> writer arguments: files of codecs indexed by decoding, whose block headers must still be read right.
OTHERS = {
    "vp9.webm": dict(codec="libvpx-vp9", gop=GOP),
    "vp8.webm": dict(codec="libvpx", gop=GOP),
    "ffv1.mkv": dict(codec="ffv1", gop=GOP),
}
if "libsvtav1" in av.codecs_available:
    OTHERS["av1.mkv"] = dict(codec="libsvtav1", gop=GOP, size=(128, 128))  # SVT-AV1 refuses smaller frames


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mkv_tables")
    made = {name: write_encoded_video(root / name, N, **kwargs) for name, kwargs in (INDEXED | OTHERS).items()}
    made["live.mkv"] = _written_as_a_stream(made["b_frames.mkv"], root / "live.mkv")
    return made


def _written_as_a_stream(source: Path, path: Path) -> Path:
    """``source``'s packets muxed to an output that cannot seek: a segment of unknown size, and no Cues."""

    class Pipe(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, data) -> int:
            out.extend(data)
            return len(data)

    out = bytearray()
    with av.open(str(source)) as given, av.open(Pipe(), "w", format="matroska") as output:
        stream = output.add_stream_from_template(given.streams.video[0])
        for packet in given.demux(given.streams.video[0]):
            if packet.size:
                packet.stream = stream
                output.mux(packet)
    path.write_bytes(bytes(out))
    segment = out.index(b"\x18\x53\x80\x67") + 4
    assert out[segment : segment + 8] == b"\x01" + b"\xff" * 7  # the segment's size: unknown
    assert b"\x1c\x53\xbb\x6b" not in out  # no Cues
    return path


def packets_of(path: Path, number: int | None = None) -> TrackPackets | str:
    if number is None:
        with open_video(path) as (_, stream):
            number = stream.index
    with open(path, "rb") as file:
        return track_packets(file, path.stat().st_size, number)


@pytest.mark.parametrize("name", [*INDEXED, *OTHERS, "live.mkv"])
def test_the_block_headers_give_every_packet_demuxing_gives(files, name):
    path = files[name]
    ours = packets_of(path)
    assert isinstance(ours, TrackPackets), ours
    with open_video(path) as (container, stream):
        theirs = [(p.pos, p.size, p.pts, p.is_keyframe, bytes(p)) for p in container.demux(stream) if p.size]
    columns = list(zip(*theirs, strict=True))
    assert (ours.pos - ours.packet_header).tolist() == list(columns[0])
    assert (ours.size.tolist(), ours.dts.tolist(), ours.key.tolist()) == (
        list(columns[1]),
        list(columns[2]),
        list(columns[3]),
    )
    data = path.read_bytes()
    assert [data[p : p + s] for p, s in zip(ours.pos.tolist(), ours.size.tolist(), strict=True)] == list(columns[4])


@pytest.mark.parametrize("name", [*INDEXED, "live.mkv"])
def test_an_h264_matroska_files_tables_give_the_index_demuxing_gives(files, name):
    path = files[name]
    with open_video(path) as (container, stream), open(path, "rb") as file:
        made = from_tables(container, stream, file, path.stat().st_size)
    assert isinstance(made, TableIndex), made
    with open_video(path) as (container, stream):
        index = packets_module.from_packets(container, stream, path.stat().st_size)
    ours = made.index
    assert (ours.frames, ours.keyframes, ours.made_by) == (index.frames, index.keyframes, "packets")
    assert [ours.pts(i) for i in range(N)] == [index.pts(i) for i in range(N)]


def test_a_first_touch_of_matroska_demuxes_no_packet_loop_and_every_clip_is_exact(files, monkeypatch):
    path = files["clusters.mkv"]
    truth = read_clip(path, 0, frame_count(path), seek=False)

    def refuse(*args, **kwargs):
        raise AssertionError("demuxed every packet")

    monkeypatch.setattr(make_module, "from_packets", refuse)
    cache = IndexCache(None)
    for start in (0, GOP - 1, GOP, 17, N - 3):
        np.testing.assert_array_equal(read_clip(path, start, 3, index_cache=cache), truth[start : start + 3])
    assert cache.get(path).made_by == "packets"


def _patched(path: Path, out: Path, at: int, new: bytes) -> Path:
    data = bytearray(path.read_bytes())
    data[at : at + len(new)] = new
    out.write_bytes(bytes(data))
    return out


def test_unusual_blocks_clusters_and_cues_are_refused_with_the_reason(files, tmp_path):
    """Laced or invisible blocks, a cluster of unknown size, a cue naming no keyframe, and a file cut short."""
    path = files["clusters.mkv"]
    packets = packets_of(path)
    assert isinstance(packets, TrackPackets) and packets.index_pos is not None
    data = path.read_bytes()
    flags = int(packets.pos[1]) - 1  # the second block's flags byte
    cluster = int(packets.index_pos[0]) + 4  # the first cluster's size, after its 4-byte ID
    width = 9 - data[cluster].bit_length()
    cue = data.rindex(b"\xb3\x82\x01\x90")  # the cue at time 400 ms, the second keyframe
    cases = {
        "laced blocks": (flags, bytes([data[flags] | 0x02])),
        "an invisible block": (flags, bytes([data[flags] | 0x08])),
        "an element of unknown size (a live stream's cluster)": (
            cluster,
            bytes([0xFF >> (width - 1)]) + b"\xff" * (width - 1),
        ),
        "a cue names no keyframe (time 401)": (cue, b"\xb3\x82\x01\x91"),
    }
    for i, (reason, (at, new)) in enumerate(cases.items()):
        assert packets_of(_patched(path, tmp_path / f"{i}.mkv", at, new), 0) == reason
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(data[: int(packets.pos[N // 2])])  # ends inside a cluster
    assert packets_of(cut, 0) == "the file ends inside an element"


def _element(kind: bytes, body: bytes) -> bytes:
    """An EBML element with a 1-byte size."""
    assert len(body) < 0x7F
    return kind + bytes([0x80 | len(body)]) + body


def test_a_block_in_a_group_is_a_keyframe_when_it_refers_to_no_other_block():
    """No encoder here writes block groups: a cluster made by hand. A block's flags in a group do not count."""
    track = bytes([0x81])  # track 1

    def block(time: int, flags: int, payload: bytes) -> bytes:
        return track + time.to_bytes(2, "big", signed=True) + bytes([flags]) + payload

    body = (
        _element(b"\xe7", b"\x64")  # the cluster's time: 100
        + _element(b"\xa0", _element(b"\xa1", block(0, 0, b"key")))
        + _element(b"\xa3", block(-20, 0, b"simple"))  # a simple block without its keyframe flag
        + _element(b"\xa0", _element(b"\xa1", block(20, 0x80, b"refers")) + _element(b"\xfb", b"\xec"))
    )
    blocks = mkv_tables._Blocks()
    blocks.add(body, 1000, 990)
    packets = mkv_tables._packets(blocks, 1, ([], [], []))
    assert isinstance(packets, TrackPackets), packets
    assert packets.key.tolist() == [True, False, False]
    assert packets.dts.tolist() == [100, 80, 120]
    assert packets.size.tolist() == [3, 6, 6]
    places = zip(packets.pos.tolist(), packets.size.tolist(), strict=True)
    assert [body[p - 1000 : p - 1000 + s] for p, s in places] == [b"key", b"simple", b"refers"]
    assert packets.index_pos.tolist() == [990] * 3
