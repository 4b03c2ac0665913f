"""Videos read at URLs, against real servers on 127.0.0.1: moto's S3 server (behind a proxy that adds 20 ms
to every request and counts them) and an HTTP server with Range; clips checked against the local files'."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import av
import boto3
import numpy as np
import pytest
from av.sidedata.sidedata import Type

from parallel_loader import DataLoader
from parallel_loader.video import (
    VideoDataset,
    VideoDecodeError,
    VideoFolder,
    frame_count,
    kinetics_samples,
    probe,
    read_clip,
)
from parallel_loader.video._base.facts import put_varint
from parallel_loader.video._bytes import objects as remote
from parallel_loader.video._bytes import range_file as ranged
from parallel_loader.video._commands.check import find_videos
from parallel_loader.video._commands.index import main as index_command
from parallel_loader.video._indexes.cache import IndexCache
from parallel_loader.video._indexes.packet_table import PacketTable, kept_table

from .remote_servers import FaultProxy, RangeServer, s3_server
from .video_files import with_display_matrix, write_encoded_video, write_video

pytestmark = pytest.mark.timeout(120)

LATENCY_S = 0.02
# Files of a few tens of KB stand for large ones: the first reads are scaled down with them, so that
# an object is not fetched whole by the first read and its header is read as a large file's is.
SMALL_TAIL, SMALL_HEAD = 8 << 10, 2 << 10
ROTATIONS = {"rot90.mp4": (90, False), "rot270.mov": (270, False), "rot180.mp4": (180, False), "hflip.mov": (0, True)}


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("remote_videos")
    return {
        # H.264 with B-frames, moov at the end (as PyAV writes it), 12-frame groups.
        "long.mp4": write_encoded_video(folder / "long.mp4", 240, "libx264", gop=12, b_frames=2, size=(96, 112)),
        "short.mp4": write_encoded_video(folder / "short.mp4", 48, "libx264", gop=12, b_frames=2),
        "ffv1.avi": write_video(folder / "ffv1.avi", 40),  # every frame a keyframe
        "xvid.avi": write_encoded_video(folder / "xvid.avi", 60, "mpeg4", gop=12, b_frames=2, codec_tag="XVID"),
    }


@pytest.fixture(scope="module")
def servers(videos, tmp_path_factory):
    """(s3 proxy, http server): moto behind a 20 ms proxy holding ``videos`` in bucket ``videos``."""
    with s3_server() as endpoint, FaultProxy(endpoint, latency_s=LATENCY_S) as proxy:
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket="videos")
        for name, path in videos.items():
            client.upload_file(str(path), "videos", f"train/{name}")
        with RangeServer(next(iter(videos.values())).parent) as http:
            # fsspec's event loop and its executor live as long as the process: start them before any test.
            remote.configure("s3://", {"endpoint_url": proxy.url})
            read_clip("s3://videos/train/ffv1.avi", 0, 1, index_cache=IndexCache(None))
            read_clip(f"{http.url}/ffv1.avi", 0, 1, index_cache=IndexCache(None))
            remote.forget_settings()
            yield proxy, http
        client.close()


@pytest.fixture(scope="module")
def rotated(servers, videos, tmp_path_factory) -> dict[str, Path]:
    """``long.mp4``'s packets with a display matrix (as a phone's video), uploaded as ``rotated/NAME``."""
    proxy, _ = servers
    folder = tmp_path_factory.mktemp("rotated")
    client = boto3.client("s3", endpoint_url=proxy.url)
    made = {}
    for name, (degrees, hflip) in ROTATIONS.items():
        made[name] = with_display_matrix(videos["long.mp4"], folder / name, degrees, hflip)
        client.upload_file(str(made[name]), "videos", f"rotated/{name}")
    client.close()
    return made


@pytest.fixture(autouse=True)
def connections(servers):
    """Every test starts with the S3 proxy as endpoint and ends with its connections closed and served."""
    proxy, _ = servers
    remote.configure("s3://", {"endpoint_url": proxy.url})
    before = set(threading.enumerate())
    yield
    remote.forget_settings()
    deadline = time.monotonic() + 10
    for thread in set(threading.enumerate()) - before:  # the servers' threads for the closed connections
        thread.join(max(0.0, deadline - time.monotonic()))


def scaled_down(monkeypatch) -> None:
    monkeypatch.setattr(ranged, "TAIL_BYTES", SMALL_TAIL)
    monkeypatch.setattr(ranged, "HEAD_BYTES", SMALL_HEAD)


def local(path: Path, start: int, clip_len: int, **kwargs) -> np.ndarray:
    return read_clip(path, start, clip_len, index_cache=IndexCache(None), **kwargs)


@pytest.mark.parametrize(("name", "first_most"), [("long.mp4", 4), ("xvid.avi", 5), ("ffv1.avi", 5)])
def test_every_clip_equals_the_local_files_in_few_requests(servers, videos, name, first_most, monkeypatch, tmp_path):
    scaled_down(monkeypatch)
    proxy, _ = servers
    path, url = videos[name], f"s3://videos/train/{name}"
    cache = IndexCache(tmp_path / "index")
    frames = frame_count(path, index_cache=IndexCache(None))
    proxy.reset()
    first = read_clip(url, 5, 8, index_cache=cache)
    np.testing.assert_array_equal(first, local(path, 5, 8))
    assert proxy.requests <= first_most
    made, expected = cache.latest(url)[1], IndexCache(None).get(path)
    assert (made.frames, made.keyframes, made.seekable) == (expected.frames, expected.keyframes, True)
    if name == "long.mp4":
        # The header's reads and the clip's packets: two of the file's 20 groups of pictures at most.
        assert proxy.bytes <= SMALL_TAIL + SMALL_HEAD + 2 * path.stat().st_size / 20
    proxy.reset()
    starts = [0, 13, frames - 16, 7, 24, 1, 19]
    for start in starts:
        for stride, size in ((1, None), (2, (16, 20))):
            got = read_clip(url, start, 8, stride, size, index_cache=cache)
            np.testing.assert_array_equal(got, local(path, start, 8, stride=stride, size=size), f"{name} {start}")
    assert proxy.requests / (2 * len(starts)) <= 1.1
    if name == "long.mp4":
        # A clip of up to 15 frames spans at most 3 of the file's 20 groups of 12 pictures.
        assert proxy.bytes / (2 * len(starts)) <= 3 * path.stat().st_size / 20
    proxy.reset()
    assert probe(url) == probe(path)
    if name == "long.mp4":
        assert proxy.requests == 2  # the tail (moov) and the head


def first_frame_matrix(path: Path) -> bytes | None:
    with av.open(str(path)) as container:
        matrix = next(container.decode(video=0)).side_data.get(Type.DISPLAYMATRIX)
    return None if matrix is None else bytes(matrix)


@pytest.mark.parametrize("name", list(ROTATIONS))
def test_a_rotated_mp4_indexed_from_its_header_reads_as_the_local_file(servers, rotated, name, monkeypatch, tmp_path):
    """Nothing decodes at indexing: the display matrix comes from the header's ``tkhd``, and each ranged read
    turns its frames by it, as a read of the file turns them."""
    scaled_down(monkeypatch)
    proxy, _ = servers
    url, cache = f"s3://videos/rotated/{name}", IndexCache(tmp_path)
    proxy.reset()
    np.testing.assert_array_equal(read_clip(url, 5, 8, index_cache=cache), local(rotated[name], 5, 8))
    assert proxy.requests <= 3  # the tail (moov), the head and the clip: the matrix costs no request
    assert proxy.bytes <= SMALL_TAIL + SMALL_HEAD + 2 * rotated[name].stat().st_size / 20  # not fetched whole
    table = kept_table(cache.latest(url)[2])
    assert table is not None and table.display_matrix == first_frame_matrix(rotated[name]) is not None
    proxy.reset()
    for rotate in (True, False):
        for start in (0, 13, 100, 232):
            got = read_clip(url, start, 8, index_cache=cache, rotate=rotate)
            np.testing.assert_array_equal(got, local(rotated[name], start, 8, rotate=rotate), f"{start} {rotate}")
    assert proxy.requests <= 1.1 * 8  # one ranged read a clip


def _zigzag(value: int) -> int:
    return value * 2 if value >= 0 else -value * 2 - 1


def _previous_format(table: PacketTable) -> bytes:
    """A table as an earlier version kept it: varints a packet, no display matrix."""
    out = bytearray()
    for field in (table.codec.encode(), table.codec_tag.encode()):
        put_varint(out, len(field))
        out += field
    for value in (table.width, table.height, len(table.extradata)):
        put_varint(out, value)
    out += table.extradata
    put_varint(out, len(table.pos))
    previous_pos = previous_pts = 0
    columns = (table.pos.tolist(), table.size.tolist(), table.pts.tolist(), table.key.tolist())
    for pos, size, pts, key in zip(*columns, strict=True):
        put_varint(out, _zigzag(pos - previous_pos))
        put_varint(out, size * 2 + key)
        put_varint(out, _zigzag(pts - previous_pts))
        previous_pos, previous_pts = pos + size, pts
    return bytes(out)


def test_an_index_kept_with_the_previous_table_format_is_made_again(servers, videos, rotated, monkeypatch, tmp_path):
    """A packet table of the previous format says nothing of the display matrix: the next read indexes the object
    again, once, and keeps the new table, so the clips after it are ranged reads again."""
    scaled_down(monkeypatch)
    proxy, _ = servers
    directory = tmp_path / "index"
    for name, path in (("train/long.mp4", videos["long.mp4"]), ("rotated/rot90.mp4", rotated["rot90.mp4"])):
        url = f"s3://videos/{name}"
        cache = IndexCache(directory)
        read_clip(url, 0, 4, index_cache=cache)
        key, index, extra = cache.latest(url)
        table = kept_table(extra)
        assert table is not None and table.display_matrix == first_frame_matrix(path)
        previous = _previous_format(table)
        with pytest.raises(ValueError, match="older version"):
            PacketTable.decode(previous)
        cache.put(key, index, previous)
        proxy.reset()
        later = IndexCache(directory)  # a later run, which finds the previous format's table on disk
        np.testing.assert_array_equal(read_clip(url, 50, 8, index_cache=later), local(path, 50, 8))
        assert proxy.requests <= 3  # indexed again as at a first touch: the tail, the head and the clip
        healed = kept_table(IndexCache(directory).latest(url)[2])
        assert healed is not None and healed.display_matrix == first_frame_matrix(path)
        proxy.reset()
        np.testing.assert_array_equal(read_clip(url, 100, 8, index_cache=IndexCache(directory)), local(path, 100, 8))
        assert proxy.requests == 1


def test_a_small_object_is_fetched_whole_in_one_request(servers, videos, tmp_path):
    proxy, _ = servers
    proxy.reset()
    clip = read_clip("s3://videos/train/short.mp4", 20, 8, index_cache=IndexCache(tmp_path))
    np.testing.assert_array_equal(clip, local(videos["short.mp4"], 20, 8))
    assert proxy.requests == 1


def test_a_second_process_finds_the_kept_index(servers, videos, tmp_path, monkeypatch):
    scaled_down(monkeypatch)
    proxy, _ = servers
    directory = tmp_path / "index"
    read_clip("s3://videos/train/long.mp4", 0, 4, index_cache=IndexCache(directory))
    script = (
        "import numpy as np\n"
        "from parallel_loader.video import read_clip\n"
        "for start in (3, 40, 100, 200, 17):\n"
        "    np.save(f'out{start}.npy', read_clip('s3://videos/train/long.mp4', start, 8))\n"
    )
    environment = dict(os.environ, AWS_ENDPOINT_URL=proxy.url, PARALLEL_LOADER_VIDEO_INDEX=str(directory))
    proxy.reset()
    subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=environment, check=True, timeout=60)
    assert proxy.requests <= 1.1 * 5  # the kept index, from the store: no request to index the object
    for start in (3, 40, 100, 200, 17):
        np.testing.assert_array_equal(np.load(tmp_path / f"out{start}.npy"), local(videos["long.mp4"], start, 8))


def index_then_replace(proxy: FaultProxy, name: str, first: Path, then: Path, cache: IndexCache) -> str:
    """Upload ``first`` as ``name``, index it in ``cache``, then replace the object by ``then``; its URL."""
    client = boto3.client("s3", endpoint_url=proxy.url)
    client.upload_file(str(first), "videos", name)
    url = f"s3://videos/{name}"
    frame_count(url, index_cache=cache)
    client.upload_file(str(then), "videos", name)
    client.close()
    return url


def test_a_changed_object_is_caught_by_its_read_and_indexed_again(servers, videos, tmp_path, monkeypatch):
    scaled_down(monkeypatch)
    proxy, _ = servers
    cache = IndexCache(tmp_path)
    replacement = write_encoded_video(tmp_path / "other.mp4", 120, "libx264", gop=6, b_frames=1, size=(64, 80))
    url = index_then_replace(proxy, "changing.mp4", videos["long.mp4"], replacement, cache)
    proxy.reset()
    clip = read_clip(url, 50, 8, index_cache=cache)
    np.testing.assert_array_equal(clip, local(replacement, 50, 8))
    assert proxy.requests <= 1 + 4  # the read that finds the change (412), then as a first touch
    assert cache.latest(url)[1].keyframes == tuple(range(0, 120, 6))


def test_a_clip_past_the_end_of_an_outdated_index_reads_the_new_object(servers, videos, tmp_path, monkeypatch):
    scaled_down(monkeypatch)
    proxy, _ = servers
    cache = IndexCache(tmp_path)
    url = index_then_replace(proxy, "growing.mp4", videos["short.mp4"], videos["long.mp4"], cache)
    assert cache.latest(url)[1].frames == 48
    clip = read_clip(url, 200, 8, index_cache=cache)  # past the 48 frames once indexed
    np.testing.assert_array_equal(clip, local(videos["long.mp4"], 200, 8))
    assert cache.latest(url)[1].frames == 240


def test_http_urls_read_with_range_requests(servers, videos, tmp_path, monkeypatch):
    scaled_down(monkeypatch)
    _, http = servers
    cache = IndexCache(tmp_path)
    for name in ("long.mp4", "xvid.avi"):
        url = f"{http.url}/{name}"
        assert frame_count(url, index_cache=cache) == frame_count(videos[name], index_cache=IndexCache(None))
        http.reset()
        for start in (0, 9, 33):
            np.testing.assert_array_equal(read_clip(url, start, 6, index_cache=cache), local(videos[name], start, 6))
        assert http.requests == 3
        np.testing.assert_array_equal(read_clip(url, 2, 5, seek=False), local(videos[name], 2, 5))


def test_missing_and_forbidden_objects_fail_at_once_naming_the_url(servers, tmp_path):
    proxy, http = servers
    proxy.reset()
    with pytest.raises(FileNotFoundError, match=re.escape("s3://videos/train/nothing.mp4")):
        read_clip("s3://videos/train/nothing.mp4", 0, 4, index_cache=IndexCache(tmp_path))
    assert proxy.requests == 1
    http.forbidden.add("ffv1.avi")
    try:
        http.reset()
        with pytest.raises(VideoDecodeError, match=r"ffv1\.avi: access denied \(HTTP 403"):
            read_clip(f"{http.url}/ffv1.avi", 0, 4, index_cache=IndexCache(tmp_path))
        assert http.requests == 1
    finally:
        http.forbidden.clear()


def test_a_read_gives_up_within_its_budget_naming_the_url(servers, tmp_path):
    proxy, _ = servers
    with FaultProxy(proxy.url, p503=1.0) as failing:
        # A budget of 2 s leaves room for a retry even when the first request is slow (a loaded machine).
        remote.configure("s3://", {"endpoint_url": failing.url}, remote.Network(timeout_s=1, budget_s=2))
        started = time.monotonic()
        with pytest.raises(VideoDecodeError, match=r"s3://videos/train/ffv1\.avi: cannot be read: \d+ tries"):
            read_clip("s3://videos/train/ffv1.avi", 0, 4, index_cache=IndexCache(tmp_path))
        assert time.monotonic() - started < 8
        assert failing.requests >= 2  # retried
        remote.forget_settings()


def loader_batches(paths: list[str], cache_dir: Path) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    samples = [(path, i % 4) for i, path in enumerate(paths)]
    data = VideoDataset(samples, 5, 4, stride=2, size=(16, 20), seed=1, index_cache=IndexCache(cache_dir))
    with DataLoader(data, num_threads=4, max_len=2, shuffle=True, seed=3, ordered=True) as loader:
        return [list(loader) for _ in range(2)]


def test_a_loader_over_a_faulty_network_gives_the_batches_of_the_local_files(servers, tmp_path):
    """5% of requests answered 503, 2% reset, 1% stalled 3 s: the local files' batches, no hang, no thread left."""
    proxy, _ = servers
    endpoint = f"http://{proxy.upstream_host}:{proxy.upstream_port}"  # moto itself: the faults are the test
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket="many")
    paths = []
    for v in range(40):
        paths.append(str(write_video(tmp_path / f"v{v:02d}.avi", 12 + v % 5, video_id=v % 20)))
        client.upload_file(paths[-1], "many", f"v{v:02d}.avi")
    client.close()
    expected = loader_batches(paths, tmp_path / "local")
    with FaultProxy(endpoint, p503=0.05, preset=0.02, pstall=0.01, stall_s=3, seed=5) as faulty:
        remote.configure("s3://", {"endpoint_url": faulty.url}, remote.Network(timeout_s=1, budget_s=30))
        faulted = loader_batches([f"s3://many/v{v:02d}.avi" for v in range(40)], tmp_path / "remote")
        remote.forget_settings()
    assert min(faulty.faults.values()) > 0  # each kind of fault happened
    for epoch_expected, epoch_faulted in zip(expected, faulted, strict=True):
        assert len(epoch_expected) == 8
        for (x, y), (xf, yf) in zip(epoch_expected, epoch_faulted, strict=True):
            np.testing.assert_array_equal(x, xf)
            np.testing.assert_array_equal(y, yf)


def test_a_video_folder_at_a_url_lists_its_classes_and_gives_the_local_batches(servers, tmp_path):
    proxy, _ = servers
    root = tmp_path / "tree"
    client = boto3.client("s3", endpoint_url=proxy.url)
    client.create_bucket(Bucket="tree")
    for c, name in enumerate(("walk", "run")):
        for k in range(3):
            path = write_video(root / name / f"v{k}.avi", 14 + k, video_id=3 * c + k)
            client.upload_file(str(path), "tree", f"train/{name}/v{k}.avi")
    (root / "run" / "notes.txt").write_text("not a video")
    client.upload_file(str(root / "run" / "notes.txt"), "tree", "train/run/notes.txt")
    client.close()
    args = dict(batch_size=2, clip_len=4, stride=2, size=(16, 20), seed=4)
    remote_folder = VideoFolder("s3://tree/train", index_cache=IndexCache(tmp_path / "remote"), **args)
    local_folder = VideoFolder(root, index_cache=IndexCache(tmp_path / "local"), **args)
    assert list(remote_folder.classes) == list(local_folder.classes) == ["run", "walk"]
    assert [s[0] for s in remote_folder.samples] == [
        f"s3://tree/train/{s[0][len(str(root)) + 1 :]}" for s in local_folder.samples
    ]
    for i in range(len(local_folder)):
        for got, expected in zip(remote_folder(i), local_folder(i), strict=True):
            np.testing.assert_array_equal(got, expected)
    with pytest.raises(FileNotFoundError, match="video root folder not found"):
        VideoFolder("s3://tree/nothing", **args)


def test_a_kinetics_csv_over_a_bucket_finds_every_rows_file_whatever_its_extension(servers, videos, tmp_path):
    proxy, _ = servers
    client = boto3.client("s3", endpoint_url=proxy.url)
    client.create_bucket(Bucket="kinetics")
    rows = [("run", "a", ".mp4"), ("run", "b", ".mkv"), ("jump", "c", ".webm"), ("jump", "d", ".mp4")]
    for label, yid, extension in rows:
        client.upload_file(str(videos["short.mp4"]), "kinetics", f"train/{label}/{yid}_000000_000010{extension}")
    client.close()
    lines = ["label,youtube_id,time_start,time_end,split", *(f"{r[0]},{r[1]},0,10,train" for r in rows)]
    (tmp_path / "k.csv").write_text("\n".join(lines) + "\n")
    proxy.reset()
    samples = kinetics_samples(tmp_path / "k.csv", "s3://kinetics/train")
    assert proxy.requests <= 2  # one listing per class folder
    assert [s.path for s in samples] == [f"s3://kinetics/train/{r[0]}/{r[1]}_000000_000010{r[2]}" for r in rows]
    assert list(samples.classes) == ["jump", "run"] and [s.label for s in samples] == [1, 1, 0, 0]
    data = VideoDataset(samples, batch_size=4, clip_len=4, size=(16, 20), train=False, index_cache=IndexCache(None))
    clips, labels = data(0)
    assert clips.shape[0] == 4 and list(labels) == [1, 1, 0, 0]


def test_the_index_and_check_commands_take_a_url_prefix(servers, videos, tmp_path, capsys):
    directory = tmp_path / "index"
    assert index_command(["s3://videos/train", "--cache", str(directory), "--quiet"]) == 0
    assert "4 videos from s3://videos/train" in capsys.readouterr().out
    cache = IndexCache(directory)
    for name, path in videos.items():
        _, index, extra = cache.latest(f"s3://videos/train/{name}")
        assert index.frames == frame_count(path, index_cache=IndexCache(None))
        assert extra  # the packet table that plans each clip's one read
    assert find_videos("s3://videos/train") == sorted(f"s3://videos/train/{name}" for name in videos)


def test_the_remote_benchmark_runs(capsys):
    from benchmarks import video_remote

    report = video_remote.main(["--threads", "2", "--clips", "3", "--short", "1", "--long", "1", "--long-seconds", "2"])
    readers = {row[1] for row in report["rows"]}
    assert readers == {"local", "parallel_loader", "fsspec+PyAV"}
    requests = video_remote.HEADERS.index("requests/clip")
    assert all(row[requests] == 1.0 for row in report["rows"] if row[1] == "parallel_loader")  # one request a clip
    assert "remote / fsspec+PyAV" in capsys.readouterr().out


@pytest.mark.parametrize("server", ["moto", "rclone", "nginx"])
def test_the_shards_benchmark_runs(capsys, server):
    from benchmarks import video_shards

    argv = ["--threads", "2", "--videos", "2", "--shards", "2", "--seconds", "2", "--clips", "4", "--rounds", "1"]
    report = video_shards.main([*argv, "--server", server])
    assert report["same"] == "4/4"  # every way's clips equal the loose files'
    first, later = report["requests"][1][2], report["requests"][2][2]
    assert first <= 3 and later <= 1.1
    assert {row[1] for row in report["throughput"]} == set(video_shards.WAYS)
    assert f"server: {server}" in capsys.readouterr().out


def test_file_urls_read_through_fsspec(videos, tmp_path):
    cache = IndexCache(tmp_path)
    url = videos["long.mp4"].as_uri()
    for start in (0, 50, 200):
        np.testing.assert_array_equal(read_clip(url, start, 8, index_cache=cache), local(videos["long.mp4"], start, 8))
    key, index, extra = cache.latest(url)
    assert (key.size, index.frames) == (videos["long.mp4"].stat().st_size, 240)
    assert extra
