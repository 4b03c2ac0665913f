"""4 WebDataset shards of 20 videos each (H.264 MP4 and XviD AVI), on local disk and on servers, read in place.

The servers are moto's and rclone's S3 servers and nginx, each behind a proxy
adding 20 ms a request and counting requests. Through ``webdataset_samples``
and ``VideoDataset``, every clip must equal the loose file's clip at the start
its pixels show. Every member must come once an epoch, and the batches must
equal the local shards'. ``read_clip`` on each member's bytes must equal the
loose file's too. The first epoch costs at most 3 requests a member, the
listing included; a later one, in this process or a new one, at most 1.1 a clip.
With captions in its batches it costs the same: the listing kept them in the store.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import numpy as np
import pytest

from parallel_loader import DataLoader
from parallel_loader.video import (
    IndexCache,
    SampleList,
    VideoDataset,
    frame_count,
    read_clip,
    set_default_index_cache,
    webdataset_fields,
    webdataset_samples,
)
from parallel_loader.video._bytes import tar_members
from parallel_loader.video._bytes.tar_members import split_member_url

from .remote_servers import FaultProxy, nginx_binary, nginx_server, rclone_s3_server, remote_reads, s3_server
from .video_files import FRAME_STEP, video_id, write_encoded_video

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("fsspec_event_loop")]

SHARDS, PER_SHARD = 4, 20
VIDEOS = SHARDS * PER_SHARD
SIZE = (48, 64)  # (height, width) of every video
CLIP_LEN, STRIDE, BATCH = 4, 2, 5
SERVERS = ("local", "moto", "rclone", "nginx")
LATENCY_S = 0.02
NUMBERS = f"{{00000..{SHARDS - 1:05d}}}"  # every shard's number, in braces
# Equal clips to the loose files' need the frames at their size: no crop, no scaling.
OPTIONS = dict(size=SIZE, crop_fraction=1.0, dtype="uint8", seed=5, return_index=True, order="shards", shard_window=8)


def kind_of(v: int) -> str:
    return "mp4" if v % 2 == 0 else "avi"


def frames_of(v: int) -> int:
    """Video ``v``'s length: its shard's, so that with its number in its pixels (``v % 20``) each video differs."""
    return 24 + 4 * (v // PER_SHARD)


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """``(root, loose)``: 4 shards in ``<root>/shards``, each of 20 samples (a video, a caption, a class); the files.

    Even samples hold an H.264 MP4, odd ones an XviD AVI, both with B-frames.
    """
    root = tmp_path_factory.mktemp("shard-servers")
    (root / "shards").mkdir()
    loose_folder = root / "loose"

    def write(v: int) -> Path:
        codec, tag = ("libx264", None) if kind_of(v) == "mp4" else ("mpeg4", "XVID")
        path = loose_folder / f"{v:06d}.{kind_of(v)}"
        return write_encoded_video(path, frames_of(v), codec, gop=8, b_frames=2, codec_tag=tag, video_id=v % PER_SHARD)

    with ThreadPoolExecutor(2) as pool:  # the encoders release the GIL
        files = list(pool.map(write, range(VIDEOS)))
    for s in range(SHARDS):
        with tarfile.open(root / "shards" / f"train-{s:05d}.tar", "w", format=tarfile.GNU_FORMAT) as tar:
            for v in range(s * PER_SHARD, (s + 1) * PER_SHARD):
                tar.add(files[v], arcname=files[v].name)
                for ext, text in (("txt", f"a caption of video {v}"), ("cls", str(v % 3))):
                    info = tarfile.TarInfo(f"{v:06d}.{ext}")
                    info.size = len(text.encode())
                    tar.addfile(info, io.BytesIO(text.encode()))
    return root, {f.name: f for f in files}


@pytest.fixture(scope="module")
def loose_clip(shards):
    """``loose_clip(member, start)``: the loose file's clip at ``start`` (``CLIP_LEN`` frames, ``STRIDE`` apart)."""
    _, loose = shards
    cache, clips = IndexCache(None), {}

    def clip(member: str, start: int) -> np.ndarray:
        if (member, start) not in clips:
            clips[member, start] = read_clip(loose[member], start, CLIP_LEN, STRIDE, SIZE, index_cache=cache)
        return clips[member, start]

    return clip


@pytest.fixture(scope="module", params=SERVERS)
def server(request, shards, tmp_path_factory):
    """``(name, proxy, pattern of the shards)``: local disk (no proxy), or a server behind a proxy adding 20 ms."""
    name, (root, _) = request.param, shards
    if name == "local":
        yield name, None, str(root / "shards" / f"train-{NUMBERS}.tar")
        return
    if name == "nginx" and nginx_binary() is None:
        pytest.skip("nginx is not installed: make servers (or apt-get install nginx) installs it")
    with contextlib.ExitStack() as stack:
        if name == "moto":
            upstream = stack.enter_context(s3_server())
            client = boto3.client("s3", endpoint_url=upstream, region_name="us-east-1")
            stack.callback(client.close)
            client.create_bucket(Bucket="shards")
            for path in sorted((root / "shards").iterdir()):
                client.upload_file(str(path), "shards", path.name)
        elif name == "rclone":  # each folder of the root a bucket
            upstream = stack.enter_context(rclone_s3_server(root))
        else:
            upstream = stack.enter_context(nginx_server(root, tmp_path_factory.mktemp("nginx")))
        proxy = stack.enter_context(FaultProxy(upstream, latency_s=LATENCY_S))
        where = f"{proxy.url}/shards" if name == "nginx" else "s3://shards"
        yield name, proxy, f"{where}/train-{NUMBERS}.tar"


@pytest.fixture(autouse=True)
def connections(server):
    """The S3 servers' settings; each test ends with every connection closed and their threads ended."""
    name, proxy, _ = server
    with remote_reads(proxy.url if name in ("moto", "rclone") else None):
        yield


def requests(proxy: FaultProxy | None) -> int:
    """The requests the proxy counted since its last reset, and a reset; 0 for local disk."""
    if proxy is None:
        return 0
    count = proxy.requests
    proxy.reset()
    return count


def member_of(path: str) -> str:
    return split_member_url(path)[0]


def samples_of(pattern: str, caplog: pytest.LogCaptureFixture | None = None) -> SampleList:
    """Every shard's videos, MP4 and AVI, in shard order: a list of each kind, each leaving out the other's 40.

    With ``caplog``, each list's warning that names those left out is checked.
    """
    lists = []
    for kind in ("mp4", "avi"):
        with contextlib.nullcontext() if caplog is None else caplog.at_level(logging.WARNING):
            if caplog is not None:
                caplog.clear()
            lists.append(webdataset_samples(pattern, kind, "cls", fields=["txt"]))
        if caplog is not None:
            assert f"{VIDEOS // 2} samples of {pattern} have no member of {[kind]}" in caplog.text
    assert lists[0].classes == lists[1].classes == ("0", "1", "2")
    samples = sorted([*lists[0], *lists[1]], key=lambda s: (split_member_url(s.path)[1], member_of(s.path)))
    return SampleList(lists[0].classes, samples)


def epochs(data: VideoDataset, epochs: range, threads: int, after_each=None) -> list[list[tuple[np.ndarray, ...]]]:
    """The batches of ``data``'s ``epochs`` from one loader; ``after_each(epoch)`` runs as each ends.

    No epoch's batches are made before the one before it ends, so that each epoch's requests can be counted.
    """
    got = []
    with DataLoader(
        data, num_threads=threads, seed=2, ordered=True, first_epoch=epochs.start, overlap_epochs=False
    ) as loader:
        for epoch in epochs:
            got.append(list(loader))
            if after_each is not None:
                after_each(epoch)
    return got


def check_epoch(batches, samples: SampleList, loose_clip) -> None:
    """Every member once; each clip the loose file's at the start its pixels show (flipped or not); its label."""
    indices = np.concatenate([index for _, _, index in batches])
    assert sorted(indices.tolist()) == list(range(VIDEOS))
    for clips, labels, index in batches:
        for clip, label, i in zip(clips, labels.tolist(), index.tolist(), strict=True):
            member = member_of(samples[i].path)
            v = int(member[:6])
            assert video_id(clip) == v % PER_SHARD and label == v % 3
            shown = round(float(np.median(clip[0, ..., 0])) / FRAME_STEP)  # lossy codecs: near the first frame's
            starts = [s for s in (shown - 1, shown, shown + 1) if 0 <= s <= frames_of(v) - 1 - (CLIP_LEN - 1) * STRIDE]
            same = [s for s in starts if any(np.array_equal(clip, c) for c in flips(loose_clip(member, s)))]
            assert len(same) == 1, (member, shown, same)


def flips(clip: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A clip and its mirror image: a training clip is flipped or not."""
    return clip, clip[:, :, ::-1]


@pytest.fixture(scope="module")
def local_batches(shards) -> list[list[tuple[np.ndarray, ...]]]:
    """Two epochs of the dataset over the local shards, with 2 threads: what every server's must equal."""
    root, _ = shards
    samples = samples_of(str(root / "shards" / "train-*.tar"))
    data = VideoDataset(samples, BATCH, CLIP_LEN, STRIDE, **OPTIONS, index_cache=IndexCache(None))
    return epochs(data, range(2), threads=2)


def test_every_clip_of_a_dataset_over_the_shards_equals_the_loose_files_in_few_requests(
    server, loose_clip, local_batches, tmp_path, caplog
):
    name, proxy, pattern = server
    store = tmp_path / "store"
    cache = IndexCache(store)
    set_default_index_cache(cache)  # where webdataset_samples keeps remote member tables
    requests(proxy)
    samples = samples_of(pattern, caplog)
    assert len(samples) == VIDEOS
    listing = requests(proxy)
    data = VideoDataset(samples, BATCH, CLIP_LEN, STRIDE, **OPTIONS, index_cache=cache)
    counts = [listing]
    got = epochs(data, range(2), threads=4, after_each=lambda epoch: counts.append(requests(proxy)))
    for epoch, batches in enumerate(got):
        check_epoch(batches, samples, loose_clip)
        assert len(batches) == len(local_batches[epoch]) == VIDEOS // BATCH
        for ours, local in zip(batches, local_batches[epoch], strict=True):
            assert all(np.array_equal(a, b) for a, b in zip(ours, local, strict=True)), (name, epoch)

    tar_members.forget_tables()  # as a new process finds it: the indexes and member tables in the store alone
    later = IndexCache(store)
    set_default_index_cache(later)
    data = VideoDataset(samples, BATCH, CLIP_LEN, STRIDE, **OPTIONS, index_cache=later)
    (again,) = epochs(data, range(1, 2), threads=4)  # a run going on with its second epoch
    new_process = requests(proxy)
    check_epoch(again, samples, loose_clip)
    for ours, local in zip(again, local_batches[1], strict=True):
        assert all(np.array_equal(a, b) for a, b in zip(ours, local, strict=True)), name

    captioned = VideoDataset(samples, BATCH, CLIP_LEN, STRIDE, **OPTIONS, fields=["txt"], index_cache=later)
    (batches,) = epochs(captioned, range(1, 2), threads=4)
    with_captions = requests(proxy)
    check_epoch([batch[:3] for batch in batches], samples, loose_clip)
    for (clips, labels, index, fields), local in zip(batches, local_batches[1], strict=True):
        assert all(np.array_equal(a, b) for a, b in zip((clips, labels, index), local, strict=True)), name
        assert fields["txt"].tolist() == [f"a caption of video {int(member_of(samples[i].path)[:6])}" for i in index]
    listing, first, second = counts
    print(
        f"{name}: listing {listing} requests, first epoch {first} more, later epoch {second}, "
        f"a new process's epoch {new_process}, one with captions {with_captions}, for {VIDEOS} members"
    )
    if proxy is not None:
        assert listing + first <= 3 * VIDEOS  # the member tables and labels included
        assert second <= 1.1 * VIDEOS and new_process <= 1.1 * VIDEOS
        assert with_captions <= 1.1 * VIDEOS  # the captions came with the listing's reads


def test_read_clip_on_each_members_bytes_equals_the_loose_files(server, shards, loose_clip, tmp_path, caplog):
    name, proxy, pattern = server
    _, loose = shards
    set_default_index_cache(IndexCache(tmp_path / "store"))
    samples = samples_of(pattern, caplog)
    cache = IndexCache(None)

    def check(path: str) -> None:
        member = member_of(path)
        kind, v = member[7:], int(member[:6])
        fields = webdataset_fields(path, [kind, "txt", "cls"])  # one read: neighbours come together
        data = fields[kind]
        assert data == loose[member].read_bytes(), member
        assert fields["txt"] == f"a caption of video {v}" and fields["cls"] == v % 3
        assert frame_count(data, index_cache=cache) == frames_of(v)
        for start in (0, 7, frames_of(v) - 1 - (CLIP_LEN - 1) * STRIDE):
            expected = loose_clip(member, start)
            for source in (data, memoryview(data), path):
                clip = read_clip(source, start, CLIP_LEN, STRIDE, SIZE, index_cache=cache)
                np.testing.assert_array_equal(clip, expected, f"{member} at {start} from {type(source).__name__}")

    requests(proxy)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(check, [s.path for s in samples]))
    reads = requests(proxy)
    print(f"{name}: {reads} requests for {VIDEOS} members' bytes and fields, and 3 clips each")
    if proxy is not None:  # a read for the fields; the first clip from the member read whole, then a read a clip
        assert reads <= VIDEOS + 3 * VIDEOS
