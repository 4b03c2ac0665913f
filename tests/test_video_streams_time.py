"""Which stream is read (``stream=``, FFmpeg's best by default) and frames by time (``read_frames_at``, ``fps=``).

The files are small and written here with PyAV, with timestamps set by hand;
the expected frames come from PyAV's own decode and the timestamps it reports.
"""

from __future__ import annotations

import threading
import time
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np
import pytest

from parallel_loader import DataLoader
from parallel_loader.video import (
    IndexCache,
    VideoDataset,
    VideoDecodeError,
    frame_count,
    probe,
    read_clip,
    read_frames_at,
)
from parallel_loader.video._bytes import range_file
from parallel_loader.video._media.streams import chosen_stream
from tests.remote_servers import RangeServer
from tests.video_files import frame_indices, indexed_frame, video_id

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
    for spec in two:
        spec["codec"] = "libx264"
    path = _write(folder / "two.mp4", two, "mp4")  # an MP4 is indexed remotely from its header
    out["two_mp4"] = SimpleNamespace(path=path, streams=[_decoded(path, 0)[0], _decoded(path, 1)[0]])
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


def test_probe_reads_the_header_of_the_stream_read(files):
    """OpenCV reads the first video stream's header: probe of another, the default here, must not take it."""
    two = files["two_mp4"]  # an MP4's header counts each stream's frames: 12 in the first, 15 in FFmpeg's best
    assert (probe(two.path).frames, probe(two.path, stream=1).frames, probe(two.path, stream=0).frames) == (15, 15, 12)
    assert frame_count(two.path, exact=False) == 15


@pytest.mark.parametrize("stream", [2, 7])
def test_a_stream_that_is_not_there_fails_naming_the_file_and_its_streams(files, cache, stream):
    two = files["two"]
    with pytest.raises(VideoDecodeError, match=r"two\.mkv: has no stream \d: it has stream 0 \(video, ffv1, 32x24\)"):
        read_clip(two.path, 0, 1, stream=stream, index_cache=cache)
    with pytest.raises(VideoDecodeError, match=r"has no stream"):
        probe(two.path, stream=stream)


@pytest.fixture(scope="module")
def http(files):
    """The files over HTTP with Range. fsspec's event loop lives as long as the process: started before the tests."""
    with RangeServer(files["two"].path.parent) as server:
        read_clip(f"{server.url}/{files['fps25'].path.name}", 0, 1, index_cache=IndexCache(None))
        yield server


@pytest.fixture()
def served_threads_end(http):
    """The server's threads for the test's connections end with it (each within the test's time)."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 10
    for thread in set(threading.enumerate()) - before:
        thread.join(max(0.0, deadline - time.monotonic()))


@pytest.mark.parametrize("name", ["two", "two_mp4"])
def test_a_url_reads_the_stream_asked_for(files, http, served_threads_end, monkeypatch, name):
    """Over HTTP: an MKV is fetched whole to be indexed, an MP4's index comes from its header (read in small parts)."""
    monkeypatch.setattr(range_file, "TAIL_BYTES", 1 << 10)
    monkeypatch.setattr(range_file, "HEAD_BYTES", 1 << 9)
    video = files[name]
    cache = IndexCache(None)
    url = f"{http.url}/{video.path.name}"
    for stream, expected in [(None, video.streams[1]), (0, video.streams[0]), (1, video.streams[1])]:
        got = read_clip(url, 2, 5, 2, stream=stream, index_cache=cache)
        np.testing.assert_array_equal(got, expected[2:11:2], err_msg=f"stream {stream}")
    assert frame_count(url, index_cache=cache, stream=0) == 12 and frame_count(url, index_cache=cache) == 15
    counts = (probe(url, stream=0).frames, probe(url).frames)
    assert counts == ((12, 15) if name == "two_mp4" else (0, 0))  # an MKV's header counts no frames
    assert cache.latest(url, 0)[2] and cache.latest(url)[2]  # each stream's packet table kept with its index
    at = read_frames_at(url, [0.05, 0.0, 0.45], stream=0, index_cache=cache)  # 25 fps: frames 1, 0 and 11
    np.testing.assert_array_equal(at, video.streams[0][[1, 0, 11]])
    with pytest.raises(VideoDecodeError, match=r"has no stream 5: it has stream 0 \(video, (ffv1|h264)"):
        read_clip(url, 0, 1, stream=5, index_cache=cache)


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


def _cover(output: av.container.OutputContainer) -> list[av.Packet]:
    """Add a cover picture to ``output``: a PNG stream marked as an attached picture; return its packets."""
    cover = output.add_stream("png", rate=1)
    cover.width, cover.height, cover.pix_fmt = 16, 16, "rgb24"
    cover.disposition = av.stream.Disposition.attached_pic
    return (
        cover.encode(av.VideoFrame.from_ndarray(np.full((16, 16, 3), 200, np.uint8), format="rgb24")) + cover.encode()
    )


@pytest.fixture(scope="module")
def covered(tmp_path_factory) -> SimpleNamespace:
    """An MP4 with a cover picture (stream 1), and an MP3 whose only video stream is its cover."""
    folder = tmp_path_factory.mktemp("covers")
    video_path, song_path = folder / "cover.mp4", folder / "song.mp3"
    with av.open(str(video_path), "w") as output:
        video = output.add_stream("libx264", rate=25)
        video.width, video.height, video.pix_fmt = SIZE[1], SIZE[0], "yuv420p"
        video.options = {"g": "4", "bf": "0", "crf": "10"}
        cover = _cover(output)
        for i in range(10):
            frame = av.VideoFrame.from_ndarray(indexed_frame(i, 4, SIZE), format="rgb24")
            frame.pts = i
            output.mux(video.encode(frame) + (cover if i == 0 else []))
        output.mux(video.encode())
    with av.open(str(song_path), "w") as output:
        audio = output.add_stream("mp3", rate=8000)
        output.mux(_cover(output))
        for i in range(3):
            frame = av.AudioFrame.from_ndarray(np.zeros((1, 1152), np.float32), format="fltp", layout="mono")
            frame.sample_rate, frame.pts = 8000, 1152 * i
            output.mux(audio.encode(frame))
        output.mux(audio.encode())
    return SimpleNamespace(video=video_path, frames=_decoded(video_path, 0)[0], song=song_path)


def test_a_cover_picture_is_read_only_when_asked_for(covered, cache):
    with av.open(str(covered.video)) as container:  # the file is what the test needs
        assert container.streams[1].disposition & av.stream.Disposition.attached_pic
    np.testing.assert_array_equal(read_clip(covered.video, 0, 10, index_cache=cache), covered.frames)
    cover = read_clip(covered.video, 0, 1, stream=1, index_cache=cache)
    assert cover.shape == (1, 16, 16, 3) and (cover == 200).all()
    with pytest.raises(VideoDecodeError, match=r"stream 1 \(video, png, 16x16, attached picture\)"):
        read_clip(covered.video, 0, 1, stream=3, index_cache=cache)


def test_a_file_whose_only_video_is_a_cover_picture_is_no_video(covered, cache):
    with av.open(str(covered.song)) as container:  # FFmpeg ranks the cover best
        assert container.streams.best("video").disposition & av.stream.Disposition.attached_pic
    with pytest.raises(VideoDecodeError, match=r"song\.mp3: cannot be opened as a video \(the file has only attached"):
        read_clip(covered.song, 0, 1, index_cache=cache)
    assert (read_clip(covered.song, 0, 1, stream=1, index_cache=cache) == 200).all()  # asked for: given


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

    FFmpeg's muxers store covers after the video streams, and PyAV 18 could not write one that ranks best
    beside a video (marked default, the cover was written as a plain track): the container is a stand-in.
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
    with av.open(str(video.path)) as container:  # the time base is kept, on disk too
        assert IndexCache(cache.directory).get(video.path).time_base == container.streams.video[0].time_base


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


# ---------------------------------------------------------------------------------------------- datasets

CLIP = 8
FPS = 30.0


def _dataset(rows, cache, **kwargs) -> VideoDataset:
    options = dict(batch_size=1, clip_len=CLIP, size=SIZE, crop_fraction=1.0, dtype="uint8", index_cache=cache)
    return VideoDataset(rows, **{**options, **kwargs})


def _with_end(times: np.ndarray) -> np.ndarray:
    return np.append(times, times[-1] + (times[-1] - times[-2]))


@pytest.mark.parametrize("name", list(FILES))
def test_fps_clips_in_evaluation_are_the_frames_played_at_their_times(files, cache, name):
    """Three clips spread evenly: clip j starts at the first frame's time plus (2j + 1) / 6 of the room left."""
    video = files[name]
    data = _dataset([(video.path, 0)], cache, fps=FPS, train=False, num_clips=3)
    clips, _ = data(0)
    times = _with_end(video.times)
    room = times[-1] - times[0] - (CLIP - 1) / FPS
    for j in range(3):
        t0 = times[0] + room * (2 * j + 1) / 6
        expected = _played(times, t0 + np.arange(CLIP) / FPS)
        assert frame_indices(clips[0, j]) == expected.tolist(), f"clip {j}"


@pytest.mark.parametrize("name", list(FILES))
def test_fps_clips_in_training_are_the_frames_played_at_some_start(files, cache, name):
    """Whatever start is drawn, each frame k is the one played at start + k / fps: their intervals meet."""
    video = files[name]
    times = _with_end(video.times)
    data = _dataset([(video.path, 0)], cache, fps=FPS, train=True, seed=3)
    steps = np.arange(CLIP) / FPS
    starts = set()
    for epoch in range(6):
        got = np.asarray(frame_indices(data.get_batch(0, epoch)[0][0]))
        latest, earliest = (times[got] - steps).max(), (times[got + 1] - steps).min()
        assert latest < earliest, f"epoch {epoch}: frames {got.tolist()} are no clip at {FPS} fps"
        starts.add(int(got[0]))
        np.testing.assert_array_equal(data.get_batch(0, epoch)[0], data.get_batch(0, epoch)[0])  # seeded
    assert len(starts) > 1  # the start is drawn


def test_fps_clips_last_the_same_time_whatever_the_files_rate(files, cache):
    spans = {}
    for name in ("fps25", "fps30", "fps60"):
        video = files[name]
        got = frame_indices(_dataset([(video.path, 0)], cache, fps=FPS, train=False)(0)[0][0])
        spans[name] = video.times[got[-1]] - video.times[got[0]]
    assert all(abs(span - (CLIP - 1) / FPS) < 0.041 for span in spans.values()), spans


@pytest.mark.parametrize(("name", "start", "end"), [("vfr", 0.3, 0.7), ("vfr_h264", 0.14, 0.52), ("fps60", 0.25, 0.5)])
def test_segments_map_to_frames_by_timestamps(files, cache, name, start, end):
    """A segment [start, end) holds the frames whose times, from the first frame's, fall in it."""
    video = files[name]
    relative = video.times - video.times[0]
    first, stop = np.searchsorted(relative, [start - 1e-9, end - 1e-9])
    data = _dataset([(video.path, 0, start, end)], cache, clip_len=int(stop - first), train=False)
    assert frame_indices(data(0)[0][0]) == list(range(first, stop))


def test_a_dataset_reads_the_stream_it_is_given(files, cache):
    two = files["two"]
    assert video_id(_dataset([(two.path, 0)], cache, train=False)(0)[0][0]) == 3  # FFmpeg's best
    assert video_id(_dataset([(two.path, 0)], cache, train=False, stream=0)(0)[0][0]) == 2
    clips, _ = _dataset([(two.path, 0)], cache, train=False, stream=0, fps=10.0, clip_len=4)(0)
    # 12 frames at 25 fps last 0.48 s; 4 frames at 10 fps span 0.3 s; the centred clip starts at 0.09 s.
    assert frame_indices(clips[0]) == _played(_with_end(np.arange(12) / 25), 0.09 + np.arange(4) / 10).tolist()


def test_a_clip_longer_than_the_video_at_fps_fails_naming_the_file(files, cache):
    data = _dataset([(files["fps25"].path, 0)], cache, clip_len=40, fps=FPS, train=False, short_clips="error")
    with pytest.raises(VideoDecodeError, match=r"fps25\.mkv: frames 0 to 29 last 1\.2 s, too short for 40 frames"):
        data(0)


def test_a_segment_too_short_at_fps_is_skipped_alone(files, cache):
    """The file's other segment is fine: only the short segment is listed, and exact_counts finds it at construction."""
    path = files["fps60"].path
    rows = [(path, 0, 0.0, 0.5), (path, 0, 0.5, 0.6)]  # 8 frames at 30 fps span 0.23 s: the second lasts 0.1 s
    for exact in (False, True):
        data = _dataset(
            rows,
            cache,
            fps=FPS,
            train=True,
            on_error="skip",
            exact_counts=exact,
            batch_size=2,
            seed=1,
            short_clips="error",
        )
        clips, _ = data(0)
        assert len(clips) == 2 and all(max(frame_indices(c)) < 30 for c in clips)  # the short one replaced
        assert list(data.skipped) == [f"{path} [0.5, 0.6) s"], exact
        assert data.skipped[f"{path} [0.5, 0.6) s"].startswith("frames 30 to 35 last 0.1 s, too short for 8 frames")


def test_fps_clips_are_the_same_whatever_the_thread_count(files, cache):
    rows = [(files[name].path, k) for k, name in enumerate(FILES)] * 2
    batches = {}
    for threads in (1, 3):
        data = _dataset(rows, cache, fps=FPS, train=True, seed=5, batch_size=2)
        with DataLoader(data, num_threads=threads, seed=5, ordered=True) as loader:
            batches[threads] = [clips for clips, _ in loader]
    assert len(batches[1]) == len(rows) // 2
    for one, three in zip(batches[1], batches[3], strict=True):
        np.testing.assert_array_equal(one, three)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(fps=0), ValueError, "fps must be positive"),
        (dict(fps=float("inf")), ValueError, "fps must be positive"),
        (dict(fps="30"), TypeError, "fps must be a number"),
        (dict(fps=30, stride=2), ValueError, "pass stride=1"),
        (dict(fps=30, sampling="segments"), ValueError, "fps applies to sampling='clip' only"),
        (dict(stream=-1), ValueError, "stream"),
        (dict(stream="0"), TypeError, "stream"),
    ],
)
def test_bad_stream_or_fps_arguments_fail_at_construction(files, cache, kwargs, error, match):
    with pytest.raises(error, match=match):
        _dataset([(files["fps25"].path, 0)], cache, **kwargs)
