"""Videos read from servers the project did not write, started on 127.0.0.1, each behind a proxy adding 20 ms.

``http.server`` (no Range), RangeHTTPServer (400 for a suffix range), nginx
(where installed), rclone's S3 server (416 for a suffix range longer than a
small object) and moto's. Every clip must equal the local file's. A first touch
may cost one request more than where suffix ranges work, and no more.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import numpy as np
import pytest
from botocore.config import Config

from parallel_loader.video import VideoDecodeError, frame_count, read_clip
from parallel_loader.video._base.keys import shown_url, url_name
from parallel_loader.video._bytes import objects as remote
from parallel_loader.video._bytes import range_file as ranged
from parallel_loader.video._indexes.cache import IndexCache

from .remote_servers import (
    FaultProxy,
    nginx_binary,
    nginx_server,
    range_http_server,
    rclone_s3_server,
    s3_server,
    stdlib_server,
)
from .video_files import write_encoded_video, write_video

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("fsspec_event_loop")]

LATENCY_S = 0.02
CLIP_LEN, STEP = 8, 4
# Scaled down with the files, so that the first read holds a part of an object, as it does of a large file.
SMALL_TAIL, SMALL_HEAD = 8 << 10, 2 << 10
SERVERS = ("http.server", "RangeHTTPServer", "nginx", "rclone", "moto")
S3_SERVERS = ("rclone", "moto")
# Requests for a first touch and its first clip where suffix ranges work ("whole": the object in one read).
TODAY = {
    "whole": {"ffv1.avi": 1, "xvid.avi": 1, "short.mp4": 1, "long.mp4": 1},
    "ranged": {"ffv1.avi": 3, "xvid.avi": 3, "short.mp4": 1, "long.mp4": 4},  # short.mp4 fits the first read
}
# Servers that refuse a first touch's suffix range: always (RangeHTTPServer), or for an object shorter (rclone).
REFUSING = {"RangeHTTPServer", "rclone"}


FIVE_MINUTES = 5 * 60 * 25
# Requests for a 5-minute file's first touch where suffix ranges work: the tail, then the table's start (MP4) or
# the header and the index (AVI).
TODAY_LONG = {"5-min.mp4": 2, "5-min.avi": 3}


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> dict[str, Path]:
    """Every file the servers hold, in ``<root>/videos`` (the folder is the S3 servers' bucket)."""
    folder = tmp_path_factory.mktemp("served") / "videos"
    with ThreadPoolExecutor(2) as pool:  # the encoders release the GIL: the two long files take one's time
        mp4 = pool.submit(write_encoded_video, folder / "5-min.mp4", FIVE_MINUTES, "libx264", gop=50, b_frames=2)
        avi = pool.submit(
            write_encoded_video, folder / "5-min.avi", FIVE_MINUTES, "mpeg4", gop=50, b_frames=2, codec_tag="XVID"
        )
        return {
            "ffv1.avi": write_video(folder / "ffv1.avi", 40),
            "xvid.avi": write_encoded_video(folder / "xvid.avi", 60, "mpeg4", gop=12, b_frames=2, codec_tag="XVID"),
            "short.mp4": write_encoded_video(folder / "short.mp4", 48, "libx264", gop=12, b_frames=2),
            "long.mp4": write_encoded_video(folder / "long.mp4", 120, "libx264", gop=12, b_frames=2, size=(96, 112)),
            "5-min.mp4": mp4.result(),
            "5-min.avi": avi.result(),
        }


@pytest.fixture(scope="module")
def videos(served) -> dict[str, Path]:
    """The small AVIs and MP4s, read whole and in ranges, at every fourth start."""
    return {name: path for name, path in served.items() if not name.startswith("5-min")}


@pytest.fixture(scope="module")
def clips(videos) -> dict[tuple[str, int, int], np.ndarray]:
    """The local files' clips: ``(name, start, stride)`` -> frames; every ``STEP``-th start, strides 1 and 2."""
    cache = IndexCache(None)
    expected = {}
    for name, path in videos.items():
        frames = frame_count(path, index_cache=cache)
        for start in range(0, frames - CLIP_LEN + 1, STEP):
            for stride in (1, 2):
                if start + (CLIP_LEN - 1) * stride < frames:
                    expected[name, start, stride] = read_clip(path, start, CLIP_LEN, stride, index_cache=cache)
    return expected


@pytest.fixture(scope="module", params=SERVERS)
def server(request, served, tmp_path_factory):
    """``(name, proxy, url of a file name)``: one server, its files behind a proxy adding 20 ms a request."""
    name, root = request.param, next(iter(served.values())).parent.parent
    if name == "nginx" and nginx_binary() is None:
        pytest.skip("nginx is not installed: make servers (or apt-get install nginx) installs it")
    with contextlib.ExitStack() as stack:
        if name == "moto":
            upstream = stack.enter_context(s3_server())
            client = boto3.client("s3", endpoint_url=upstream, region_name="us-east-1")
            client.create_bucket(Bucket="videos")
            for file, path in served.items():
                client.upload_file(str(path), "videos", file)
            client.close()
        else:
            start = {"http.server": stdlib_server, "RangeHTTPServer": range_http_server, "rclone": rclone_s3_server}
            if name == "nginx":
                upstream = stack.enter_context(nginx_server(root, tmp_path_factory.mktemp("nginx")))
            else:
                upstream = stack.enter_context(start[name](root))
        proxy = stack.enter_context(FaultProxy(upstream, latency_s=LATENCY_S))
        if name in S3_SERVERS:
            yield name, proxy, lambda file: f"s3://videos/{file}"
        else:
            yield name, proxy, lambda file: f"{proxy.url}/videos/{file}"


def s3_options(proxy: FaultProxy) -> dict:
    return {"endpoint_url": proxy.url, "key": "test", "secret": "test", "client_kwargs": {"region_name": "us-east-1"}}


@pytest.fixture(autouse=True)
def connections(request):
    """Each test ends with every connection closed and the servers' threads for them ended."""
    before = set(threading.enumerate())
    yield
    remote.forget_settings()
    deadline = time.monotonic() + 10
    for thread in set(threading.enumerate()) - before:
        thread.join(max(0.0, deadline - time.monotonic()))


@pytest.mark.parametrize("mode", ["whole", "ranged"])
def test_every_clip_equals_the_local_files_in_few_requests(server, videos, clips, mode, monkeypatch):
    name, proxy, url_of = server
    if name in S3_SERVERS:
        remote.configure("s3://", s3_options(proxy))
    if mode == "ranged":
        monkeypatch.setattr(ranged, "TAIL_BYTES", SMALL_TAIL)
        monkeypatch.setattr(ranged, "HEAD_BYTES", SMALL_HEAD)
    extra = 1 if name in REFUSING else 0  # once a server: its refusal is remembered
    firsts = []
    for file in videos:
        cache = IndexCache(None)
        url = url_of(file)
        proxy.reset()
        np.testing.assert_array_equal(read_clip(url, 0, CLIP_LEN, index_cache=cache), clips[file, 0, 1])
        firsts.append(proxy.requests)
        wanted = [(start, stride) for (f, start, stride) in clips if f == file]
        proxy.reset()
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda c, u=url, k=cache: read_clip(u, c[0], CLIP_LEN, c[1], index_cache=k), wanted))
        for (start, stride), clip in zip(wanted, got, strict=True):
            np.testing.assert_array_equal(clip, clips[file, start, stride], f"{name} {file} {start} {stride}")
        print(
            f"{name} {mode} {file}: first touch and clip {firsts[-1]} requests, {len(wanted)} clips in {proxy.requests}"
        )
        assert firsts[-1] <= TODAY[mode][file] + extra, (name, mode, file)
        assert proxy.requests == len(wanted)  # one read a clip
    assert sum(firsts) <= sum(TODAY[mode].values()) + extra


@pytest.mark.parametrize("file", ["5-min.mp4", "5-min.avi"])
def test_clips_of_a_five_minute_file_equal_the_local_files(server, served, file):
    """The first read holds a part of the object (its real size); every later clip is one read."""
    name, proxy, url_of = server
    if name in S3_SERVERS:
        remote.configure("s3://", s3_options(proxy))
    local = IndexCache(None)
    frames = frame_count(served[file], index_cache=local)
    assert frames == FIVE_MINUTES
    wanted = [(0, 2), (1234, 2), (frames // 2 + 7, 1), (frames - 100, 1), (frames - CLIP_LEN, 1)]
    cache, url = IndexCache(None), url_of(file)
    proxy.reset()
    assert frame_count(url, index_cache=cache) == frames
    first = proxy.requests
    proxy.reset()
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda c: read_clip(url, c[0], CLIP_LEN, c[1], index_cache=cache), wanted))
    for (start, stride), clip in zip(wanted, got, strict=True):
        expected = read_clip(served[file], start, CLIP_LEN, stride, index_cache=local)
        np.testing.assert_array_equal(clip, expected, f"{name} {file} {start} {stride}")
    print(f"{name} {file}: first touch {first} requests ({proxy.bytes / 1e6:.2f} MB for {len(wanted)} clips)")
    if name != "http.server":  # no Range: each clip reads the whole object
        assert first <= TODAY_LONG[file] + (name in REFUSING), (name, file, first)
        assert proxy.requests == len(wanted)


@pytest.fixture(scope="module")
def rclone(videos):
    """rclone's S3 server (which checks signatures and expiry) behind a proxy adding 20 ms; yields the proxy."""
    root = next(iter(videos.values())).parent.parent
    with rclone_s3_server(root) as upstream, FaultProxy(upstream, latency_s=LATENCY_S) as proxy:
        yield proxy


def presigned(proxy: FaultProxy, key: str, expires_s: int) -> str:
    config = Config(signature_version="s3v4")
    client = boto3.client("s3", config=config, **_boto_options(proxy))
    url = client.generate_presigned_url("get_object", Params={"Bucket": "videos", "Key": key}, ExpiresIn=expires_s)
    client.close()
    return url


def _boto_options(proxy: FaultProxy) -> dict:
    return {
        "endpoint_url": proxy.url,
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
        "region_name": "us-east-1",
    }


def test_a_presigned_url_signed_again_in_another_process_reuses_the_kept_index(rclone, clips, tmp_path, monkeypatch):
    monkeypatch.setattr(ranged, "TAIL_BYTES", SMALL_TAIL)
    monkeypatch.setattr(ranged, "HEAD_BYTES", SMALL_HEAD)
    directory = tmp_path / "index"
    first = presigned(rclone, "long.mp4", 600)
    np.testing.assert_array_equal(
        read_clip(first, 0, CLIP_LEN, index_cache=IndexCache(directory)), clips["long.mp4", 0, 1]
    )
    again = presigned(rclone, "long.mp4", 900)
    assert again != first
    starts = (4, 40, 100, 60)
    script = (
        "import sys\n"
        "import numpy as np\n"
        "from parallel_loader.video import read_clip\n"
        f"for start in {starts}:\n"
        f"    np.save(f'out{{start}}.npy', read_clip(sys.argv[1], start, {CLIP_LEN}))\n"
    )
    environment = dict(os.environ, PARALLEL_LOADER_VIDEO_INDEX=str(directory))
    rclone.reset()
    subprocess.run([sys.executable, "-c", script, again], cwd=tmp_path, env=environment, check=True, timeout=60)
    assert rclone.requests == len(starts)  # one read a clip: the kept index, found without the signature
    for start in starts:
        np.testing.assert_array_equal(np.load(tmp_path / f"out{start}.npy"), clips["long.mp4", start, 1])


def test_an_expired_presigned_url_fails_at_once_naming_it_without_its_signature(rclone, tmp_path, caplog):
    url = presigned(rclone, "xvid.avi", 1)
    time.sleep(2.1)
    rclone.reset()
    with caplog.at_level(logging.DEBUG, logger="parallel_loader"), pytest.raises(VideoDecodeError) as raised:
        read_clip(url, 0, 4, index_cache=IndexCache(tmp_path))
    message = str(raised.value)
    assert f"{rclone.url}/videos/xvid.avi: access denied" in message
    assert "signature may have expired" in message
    assert "?" not in message and "X-Amz" not in caplog.text
    assert rclone.requests == 1


def test_a_url_is_kept_without_its_signature_and_shown_without_its_query():
    signed = "https://host/v/a.mp4?X-Amz-Signature=ab&X-Amz-Expires=60&id=3&sig=x&se=2030"
    assert url_name(signed) == "https://host/v/a.mp4?id=3"  # another query parameter may choose the object
    assert shown_url(signed) == "https://host/v/a.mp4"
    assert url_name("s3://bucket/a.mp4") == shown_url("s3://bucket/a.mp4") == "s3://bucket/a.mp4"
