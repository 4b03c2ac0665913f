"""Which stream is read (``stream=``, FFmpeg's best by default) and frames by time (``read_frames_at``, ``fps=``).

The files are small and written here with PyAV, with timestamps set by hand;
the expected frames come from PyAV's own decode and the timestamps it reports.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np
import pytest

from parallel_loader.video import (
    IndexCache,
    VideoDecodeError,
    frame_count,
    probe,
    read_clip,
    read_frames_at,
)
from parallel_loader.video._media.streams import chosen_stream
from tests.video_files import indexed_frame

pytestmark = pytest.mark.timeout(60)

SIZE = (24, 32)  # height, width
MS = Fraction(1, 1000)


def _ms(fps: float, n: int) -> list[int]:
    return [round(i * 1000 / fps) for i in range(n)]


# name -> (frames' timestamps in ms, container, codec)
FILES = {
    "fps25": (_ms(25, 30), "matroska", "ffv1"),
    "fps30": (_ms(30, 36), "matroska", "ffv1"),
    "fps60": (_ms(60, 60), "matroska", "ffv1"),
    # Variable frame rate: gaps of 10 to 90 ms, as a phone writes when the light changes.
    "vfr": (
        [0, 10, 20, 110, 200, 210, 300, 330, 360, 450, 460, 470, 560, 650, 700, 790, 800, 850, 940, 1000],
        "matroska",
        "ffv1",
    ),
    "vfr_h264": ([0, 40, 50, 140, 150, 160, 250, 300, 310, 400, 420, 430, 520, 600, 610, 700], "mp4", "libx264"),
}


def _write(path: Path, streams: list[dict], container: str) -> Path:
    """Write video streams: each dict has ``pts`` (ms), ``codec``, ``video_id`` and ``default`` (its disposition)."""
    with av.open(str(path), "w", format=container) as output:
        made = []
        for spec in streams:
            stream = output.add_stream(spec["codec"], rate=25)
            stream.width, stream.height = SIZE[1], SIZE[0]
            stream.pix_fmt = "yuv420p" if spec["codec"] != "ffv1" else "yuv444p"
            stream.time_base = stream.codec_context.time_base = MS
            if spec["codec"] == "libx264":
                stream.options = {"g": "6", "keyint_min": "6", "sc_threshold": "0", "bf": "0", "crf": "10"}
            disposition = av.stream.Disposition
            stream.disposition = disposition.default if spec.get("default", True) else disposition(0)
            made.append(stream)
        for i in range(max(len(s["pts"]) for s in streams)):
            for spec, stream in zip(streams, made, strict=True):
                if i < len(spec["pts"]):
                    frame = av.VideoFrame.from_ndarray(indexed_frame(i, spec["video_id"], SIZE), format="rgb24")
                    frame.pts, frame.time_base = spec["pts"][i], MS
                    output.mux(stream.encode(frame))
        for stream in made:
            output.mux(stream.encode())
    return path


def _decoded(path: Path, stream: int) -> tuple[np.ndarray, np.ndarray]:
    """PyAV's frames of stream ``stream`` from the first, as RGB, and their display times in seconds."""
    frames, times = [], []
    with av.open(str(path)) as container:
        for frame in container.decode(container.streams[stream]):
            frames.append(frame.to_ndarray(format="rgb24"))
            times.append(float(frame.pts * frame.time_base))
    return np.stack(frames), np.asarray(times)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SimpleNamespace]:
    folder = tmp_path_factory.mktemp("streams_time")
    out = {}
    for name, (pts, container, codec) in FILES.items():
        ext = "mkv" if container == "matroska" else container
        path = _write(folder / f"{name}.{ext}", [dict(pts=pts, codec=codec, video_id=1)], container)
        frames, times = _decoded(path, 0)
        out[name] = SimpleNamespace(path=path, frames=frames, times=times)
    # Two camera angles: the first is not marked default, so FFmpeg's best is the second.
    two = [
        dict(pts=_ms(25, 12), codec="ffv1", video_id=2, default=False),
        dict(pts=_ms(25, 15), codec="ffv1", video_id=3),
    ]
    path = _write(folder / "two.mkv", two, "matroska")
    out["two"] = SimpleNamespace(path=path, streams=[_decoded(path, 0)[0], _decoded(path, 1)[0]])
    return out


@pytest.fixture()
def cache(tmp_path: Path) -> IndexCache:
    return IndexCache(tmp_path / "index")


# ---------------------------------------------------------------------------------------------- streams


def test_the_default_stream_is_ffmpegs_best_and_reads_bit_exact(files, cache):
    two = files["two"]
    with av.open(str(two.path)) as container:
        assert container.streams.best("video").index == 1  # the file is what the test needs
    np.testing.assert_array_equal(read_clip(two.path, 0, 15, index_cache=cache), two.streams[1])
    np.testing.assert_array_equal(read_clip(two.path, 4, 5, 2, index_cache=cache), two.streams[1][4:13:2])
    assert frame_count(two.path, index_cache=cache) == 15
    assert probe(two.path).frames in (0, 15) and (probe(two.path).height, probe(two.path).width) == SIZE


def test_stream_names_a_stream_and_each_streams_index_is_kept_apart(files, cache):
    two = files["two"]
    np.testing.assert_array_equal(read_clip(two.path, 0, 12, stream=0, index_cache=cache), two.streams[0])
    np.testing.assert_array_equal(read_clip(two.path, 3, 4, stream=1, index_cache=cache), two.streams[1][3:7])
    assert frame_count(two.path, index_cache=cache, stream=0) == 12
    assert frame_count(two.path, index_cache=cache, stream=1) == 15
    assert frame_count(two.path, exact=False, stream=0) in (0, 12)
    again = IndexCache(cache.directory)  # the store on disk keeps them apart too
    assert again.get(two.path, stream=0).frames == 12 and again.get(two.path).frames == 15
    with pytest.raises(VideoDecodeError, match=r"two\.mkv: ends after 12 decoded frames"):
        read_clip(two.path, 10, 3, stream=0, index_cache=cache)


@pytest.mark.parametrize("stream", [2, 7])
def test_a_stream_that_is_not_there_fails_naming_the_file_and_its_streams(files, cache, stream):
    two = files["two"]
    with pytest.raises(VideoDecodeError, match=r"two\.mkv: has no stream \d: it has stream 0 \(video, ffv1, 32x24\)"):
        read_clip(two.path, 0, 1, stream=stream, index_cache=cache)
    with pytest.raises(VideoDecodeError, match=r"has no stream"):
        probe(two.path, stream=stream)


@pytest.mark.parametrize(("stream", "error"), [(-1, ValueError), (1.0, TypeError), (True, TypeError)])
def test_a_bad_stream_argument_fails_before_any_file_is_opened(stream, error):
    with pytest.raises(error, match="stream"):
        read_clip("no/such/file.mp4", 0, 1, stream=stream)


def test_a_stream_that_is_not_video_fails_naming_its_kind(tmp_path, cache):
    path = tmp_path / "audio_first.mp4"
    with av.open(str(path), "w") as output:
        audio = output.add_stream("aac", rate=8000)
        video = output.add_stream("mpeg4", rate=25)
        video.width, video.height, video.pix_fmt = SIZE[1], SIZE[0], "yuv420p"
        for i in range(3):
            silence = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
            silence.sample_rate, silence.pts = 8000, 1024 * i
            output.mux(audio.encode(silence))
            output.mux(video.encode(av.VideoFrame.from_ndarray(indexed_frame(i, 0, SIZE), format="rgb24")))
        output.mux(audio.encode())
        output.mux(video.encode())
    with pytest.raises(VideoDecodeError, match=r"stream 0 is audio, not video: the file has stream 0 \(audio, aac\)"):
        read_clip(path, 0, 1, stream=0, index_cache=cache)
    assert read_clip(path, 0, 3, index_cache=cache).shape == (3, *SIZE, 3)  # the default skips the audio


class _Streams(list):
    """A container's streams as PyAV lists them, ``best`` ranking as FFmpeg would (a stand-in)."""

    def __init__(self, streams: list[SimpleNamespace], best: int) -> None:
        super().__init__(streams)
        self.video = [s for s in streams if s.type == "video"]
        self.best = lambda kind: streams[best]


def _fake(streams: list[SimpleNamespace], best: int) -> SimpleNamespace:
    return SimpleNamespace(streams=_Streams(streams, best))


def test_an_attached_picture_is_never_the_default_even_when_ffmpeg_ranks_it_best():
    """FFmpeg's ranking can pick a cover picture marked default: the first other video stream is read instead.

    PyAV 18 cannot write a stream that demuxes as an attached picture, so the container is a stand-in.
    """
    attached = av.stream.Disposition.attached_pic
    cover = SimpleNamespace(index=0, type="video", disposition=attached | av.stream.Disposition.default)
    video = SimpleNamespace(index=1, type="video", disposition=av.stream.Disposition(0))
    assert chosen_stream(_fake([cover, video], best=0), None, "f.mp4") is video
    assert chosen_stream(_fake([video, cover], best=1), None, "f.mp4") is video
    assert chosen_stream(_fake([cover, video], best=0), 0, "f.mp4") is cover  # asked for by number: given
    with pytest.raises(VideoDecodeError, match=r"f\.mp4: cannot be opened as a video \(the file has only attached"):
        chosen_stream(_fake([cover], best=0), None, "f.mp4")


# ---------------------------------------------------------------------------------------------- time


def _played(times: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """The rule, from PyAV's timestamps: the last frame shown at or before each time."""
    return np.searchsorted(times, seconds, side="right") - 1


@pytest.mark.parametrize("name", list(FILES))
def test_read_frames_at_gives_the_frame_played_at_each_time(files, cache, name):
    video = files[name]
    end = video.times[-1] + (video.times[-1] - video.times[-2])
    seconds = np.concatenate([video.times, video.times[1:] - 1e-4, np.linspace(video.times[0], end - 1e-3, 23)])
    seconds = np.random.default_rng(0).permutation(seconds)
    expected = video.frames[_played(video.times, seconds)]
    np.testing.assert_array_equal(read_frames_at(video.path, seconds, index_cache=cache), expected)
    # Both ways an index is made keep the timestamps: from an MP4's packets, and by decoding an MKV of FFV1.
    assert cache.get(video.path).made_by == ("packets" if name == "vfr_h264" else "decoding")


def test_read_frames_at_times_outside_the_video_fail_naming_the_range(files, cache):
    video = files["fps25"]
    with pytest.raises(ValueError, match=r"fps25\.mkv: no frame is played at 1\.2 s: .* from 0 s to before 1\.2 s"):
        read_frames_at(video.path, [0.5, 1.2], index_cache=cache)
    with pytest.raises(ValueError, match=r"no frame is played at -0\.01 s"):
        read_frames_at(video.path, [-0.01], index_cache=cache)
    with pytest.raises(ValueError, match="seconds is empty"):
        read_frames_at(video.path, [], index_cache=cache)
    with pytest.raises(ValueError, match="finite"):
        read_frames_at(video.path, [float("nan")], index_cache=cache)


def test_read_frames_at_takes_a_size_and_a_stream(files, cache):
    two = files["two"]
    got = read_frames_at(two.path, [0.0, 0.45], size=(12, 16), stream=0, index_cache=cache)
    assert got.shape == (2, 12, 16, 3)
    np.testing.assert_array_equal(read_frames_at(two.path, [0.13], stream=0, index_cache=cache)[0], two.streams[0][3])
