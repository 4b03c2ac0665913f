"""WebDataset shards at URLs (moto's and rclone's S3 servers, nginx), read in place, each behind a proxy adding 20 ms.

Every clip must equal the loose file's, and the captions arrive. The first
epoch costs at most 3 requests a member, the member tables included; a later
epoch, in a fresh process's state, at most 1.1 a clip, captions included: they
are kept in the index store after their first read, or with the member table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import tarfile
from pathlib import Path

import boto3
import numpy as np
import pytest

from parallel_loader import DataLoader
from parallel_loader.video import VideoDataset, read_clip, webdataset_fields, webdataset_samples
from parallel_loader.video._bytes import objects as remote
from parallel_loader.video._bytes import range_file, remote_shards, tar_members
from parallel_loader.video._indexes import member_bytes
from parallel_loader.video._indexes.cache import IndexCache, default_index_cache, set_default_index_cache

from .remote_servers import FaultProxy, nginx_binary, nginx_server, rclone_s3_server, remote_reads, s3_server
from .video_files import write_encoded_video

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("fsspec_event_loop")]

SHARDS, PER_SHARD, FRAMES, CLIP_LEN = 3, 4, 24, 4
SERVERS = ("moto", "rclone", "nginx")
NUMBERS = f"{{00000..{SHARDS - 1:05d}}}"  # every shard's number, in braces


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """3 shards of 4 samples (an MP4, an XviD AVI, a caption and a class each) in ``<root>/shards``; the loose files."""
    root = tmp_path_factory.mktemp("remote-shards")
    folder, loose_folder = root / "shards", root / "loose"
    folder.mkdir()
    loose: dict[str, Path] = {}
    for s in range(SHARDS):
        with tarfile.open(folder / f"train-{s:05d}.tar", "w", format=tarfile.GNU_FORMAT) as tar:
            for k in range(PER_SHARD):
                v = s * PER_SHARD + k
                for ext, codec, tag in (("mp4", "libx264", None), ("avi", "mpeg4", "XVID")):
                    path = loose_folder / f"{v:06d}.{ext}"
                    write_encoded_video(path, FRAMES, codec, gop=8, b_frames=2, codec_tag=tag, video_id=v)
                    tar.add(path, arcname=f"{v:06d}.{ext}")
                    loose[f"{v:06d}.{ext}"] = path
                for ext, data in (("txt", f"a caption of video {v}"), ("cls", str(v % 2))):
                    info = tarfile.TarInfo(f"{v:06d}.{ext}")
                    info.size = len(data.encode())
                    tar.addfile(info, io.BytesIO(data.encode()))
    return root, loose


@pytest.fixture(scope="module", params=SERVERS)
def server(request, shards, tmp_path_factory):
    """``(name, proxy, pattern of the shards' URLs, put)``: one server behind a proxy adding 20 ms a request.

    ``put(path)`` serves the file at ``path`` as the shard of its name, in place of the one served.
    """
    name, (root, _) = request.param, shards
    if name == "nginx" and nginx_binary() is None:
        pytest.skip("nginx is not installed: make servers (or apt-get install nginx) installs it")
    with contextlib.ExitStack() as stack:

        def put(path: Path) -> None:  # rclone and nginx serve the folder
            if path.parent != root / "shards":
                (root / "shards" / path.name).write_bytes(path.read_bytes())

        if name == "moto":
            upstream = stack.enter_context(s3_server())
            client = boto3.client("s3", endpoint_url=upstream, region_name="us-east-1")
            stack.callback(client.close)
            client.create_bucket(Bucket="shards")

            def put(path: Path) -> None:
                client.upload_file(str(path), "shards", path.name)

            for path in sorted((root / "shards").iterdir()):
                put(path)
        elif name == "rclone":
            upstream = stack.enter_context(rclone_s3_server(root))
        else:
            upstream = stack.enter_context(nginx_server(root, tmp_path_factory.mktemp("nginx")))
        proxy = stack.enter_context(FaultProxy(upstream, latency_s=0.02))
        pattern = f"train-{NUMBERS}.tar"
        if name == "nginx":
            yield name, proxy, f"{proxy.url}/shards/{pattern}", put
        else:
            yield name, proxy, f"s3://shards/{pattern}", put


@pytest.fixture(scope="module", autouse=True)
def default_store(tmp_path_factory):
    """The default index cache (where ``webdataset_samples`` keeps member tables) in a store of this module's own."""
    before = default_index_cache()
    set_default_index_cache(IndexCache(tmp_path_factory.mktemp("default-store")))
    yield
    set_default_index_cache(before)


@pytest.fixture(autouse=True)
def connections(server):
    """Settings for the server's store; each test ends with every connection closed and their threads ended."""
    name, proxy, *_ = server
    remote_shards._changed.clear()  # the shards restored are versions seen before (moto's ETag is the MD5)
    with remote_reads(None if name == "nginx" else proxy.url):
        yield
    remote_shards._changed.clear()


@pytest.mark.parametrize(("video", "first_read"), [("mp4", "whole"), ("avi", "whole"), ("mp4", "ranged")])
def test_every_clip_equals_the_loose_files_in_few_requests(server, shards, video, first_read, tmp_path, monkeypatch):
    """``ranged``: a member's first touch reads its tail and head, as a loose object's (scaled down with the files)."""
    name, proxy, pattern, _ = server
    _, loose = shards
    if first_read == "ranged":
        monkeypatch.setattr(remote_shards, "WHOLE_BYTES", 0)
        monkeypatch.setattr(range_file, "TAIL_BYTES", 2 << 10)  # members here are 5-10 KB
        monkeypatch.setattr(range_file, "HEAD_BYTES", 1 << 10)
    cache = IndexCache(tmp_path / "index")
    proxy.reset()
    samples = webdataset_samples(pattern, video, "cls", fields=["txt"])
    assert len(samples) == SHARDS * PER_SHARD
    listing = proxy.requests
    if first_read == "ranged":  # every video larger than the first read
        members = [tar_members.split_member_url(s.path) for s in samples]
        assert all(tar_members.held_table(shard).find(name)[1] > 2 << 10 for name, shard in members)
    for sample in samples:
        member = sample.path.partition("::")[0].rpartition("/")[2]
        expected = read_clip(loose[member], 0, CLIP_LEN, 2, index_cache=IndexCache(None))
        np.testing.assert_array_equal(read_clip(sample.path, 0, CLIP_LEN, 2, index_cache=cache), expected, member)
        assert sample.label == int(member[:6]) % 2
    first_epoch = proxy.requests
    print(f"{name} {video} {first_read}: listing {listing} requests, first epoch {first_epoch} for {len(samples)}")
    if first_read == "whole":
        assert first_epoch <= 3 * len(samples)  # the member tables included
    else:  # the tail, the head, the rest of the table, the span: as a loose MP4 read so (test_video_servers' TODAY)
        assert first_epoch - listing <= 4 * len(samples) + (name == "rclone")  # rclone refuses a first suffix range

    proxy.reset()
    captions = [webdataset_fields(s.path, ["txt"])["txt"] for s in samples]
    assert captions == [f"a caption of video {int(s.path[6:12])}" for s in samples]
    assert proxy.requests == len(samples)  # one read a caption; the member tables are held

    tar_members.forget_tables()  # as a fresh process finds it: the indexes and member tables in the store alone
    later, proxy_reads = IndexCache(tmp_path / "index"), []
    proxy.reset()
    for sample in samples:
        member = sample.path.partition("::")[0].rpartition("/")[2]
        for start in (3, FRAMES - CLIP_LEN):
            expected = read_clip(loose[member], start, CLIP_LEN, index_cache=IndexCache(None))
            np.testing.assert_array_equal(read_clip(sample.path, start, CLIP_LEN, index_cache=later), expected)
            proxy_reads.append(start)
    print(f"{name} {video}: later epoch {proxy.requests} requests for {len(proxy_reads)} clips")
    assert proxy.requests <= 1.1 * len(proxy_reads)


def test_a_dataset_over_remote_shards_gives_the_loose_files_batches(server, shards, tmp_path):
    pattern = server[2]
    _, loose = shards
    samples = webdataset_samples(pattern, "mp4", "cls")
    rows = [(str(loose[s.path.partition("::")[0].rpartition("/")[2]]), samples.classes[s.label]) for s in samples]
    options = dict(clip_len=4, batch_size=3, stride=2, size=(24, 32), seed=5, return_index=True)

    def batches(source, folder):
        data = VideoDataset(source, **options, index_cache=IndexCache(tmp_path / folder))
        with DataLoader(data, num_threads=4, shuffle=True, seed=2, ordered=True) as loader:
            return list(loader)

    ours, theirs = batches(samples, "remote"), batches(rows, "loose")
    assert len(ours) == len(theirs) == SHARDS * PER_SHARD // 3
    for a, b in zip(ours, theirs, strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


CAPTIONED = dict(clip_len=CLIP_LEN, batch_size=3, size=(24, 32), train=False, return_index=True)


def epoch(proxy: FaultProxy, data: VideoDataset) -> tuple[list[tuple], int, int]:
    """Every batch of ``data`` in order, and the requests and bytes the proxy passed for them."""
    proxy.reset()
    return [data(i) for i in range(len(data))], proxy.requests, proxy.bytes


def caption_of(v: int, shard: str = "") -> str:
    """Sample ``v``'s caption: ``shard`` is ``"rewritten"`` for the shards ``rewrite`` writes."""
    return f"a caption of video {v}" if not shard else f"a longer, rewritten caption of video {v}"


def captions_in(data: VideoDataset, batches: list[tuple], shard: str = "") -> list[str]:
    """The batches' captions, each checked against its clip's own sample's member; return them all."""
    captions = []
    for _, _, indices, fields in batches:
        numbers = [int(data.samples[i][0][6:12]) for i in indices.tolist()]
        assert fields["txt"].tolist() == [caption_of(v, shard) for v in numbers]
        captions += fields["txt"].tolist()
    assert len(captions) == len(data.samples)
    return captions


def test_captions_arrive_with_their_clips_read_once_then_kept_in_the_store(server, tmp_path):
    """The first read of a caption is one ranged read of it alone; later epochs find it in the store, no request."""
    proxy, pattern = server[1], server[2]
    samples = webdataset_samples(pattern, "mp4", "cls", fields=["txt"])
    plain = VideoDataset(samples, **CAPTIONED, fields=(), index_cache=IndexCache(tmp_path))
    captioned = VideoDataset(samples, **CAPTIONED, index_cache=IndexCache(tmp_path))
    epoch(proxy, plain)  # every member indexed
    plain_batches, plain_requests, plain_bytes = epoch(proxy, plain)
    batches, requests, sent = epoch(proxy, captioned)
    tar_members.forget_tables()  # a new process's state: the store alone holds the tables and captions
    kept_batches, kept_requests, kept_sent = epoch(
        proxy, VideoDataset(samples, **CAPTIONED, index_cache=IndexCache(tmp_path))
    )
    print(
        f"{server[0]}: a warm epoch of {len(samples)} clips, {plain_requests} requests; with captions "
        f"{requests} read, {kept_requests} kept"
    )
    for captioned_batches in (batches, kept_batches):
        for got, plain_batch in zip(captioned_batches, plain_batches, strict=True):
            assert all(np.array_equal(a, b) for a, b in zip(got[:3], plain_batch, strict=True))
    captions = captions_in(captioned, batches)
    assert captions_in(captioned, kept_batches) == captions
    assert requests - plain_requests == len(samples)
    assert sent - plain_bytes == sum(len(c.encode()) for c in captions)
    assert kept_requests == plain_requests <= 1.1 * len(samples)
    assert kept_sent == plain_bytes


def test_a_first_epoch_gets_its_captions_with_the_member_tables(server, tmp_path):
    """Where the listing makes the member tables from the headers, the captions come in the same reads."""
    name, proxy, pattern, _ = server
    counts, before = {}, default_index_cache()
    try:
        for fields in ((), ("txt",)):
            set_default_index_cache(IndexCache(tmp_path / f"store-{len(fields)}"))  # nothing kept yet
            tar_members.forget_tables()
            proxy.reset()
            samples = webdataset_samples(pattern, "mp4", "cls", fields=fields)
            listing = proxy.requests
            data = VideoDataset(samples, **CAPTIONED, fields=fields, index_cache=default_index_cache())
            batches, requests, _ = epoch(proxy, data)
            counts[fields] = (listing, requests)
        tar_members.forget_tables()  # a later epoch, in a new process's state
        later, later_requests, _ = epoch(proxy, VideoDataset(samples, **CAPTIONED, index_cache=default_index_cache()))
    finally:
        set_default_index_cache(before)
    listing, requests = counts[("txt",)]
    print(
        f"{name}: a first epoch of {len(samples)} samples with captions, {listing} requests listing and "
        f"{requests} reading ({counts[()][0]} and {counts[()][1]} without captions); a later epoch {later_requests}"
    )
    assert requests == counts[()][1] and listing <= counts[()][0]  # the captions cost no request
    assert listing + requests <= 3 * len(samples)  # the member tables included
    assert later_requests <= 1.1 * len(samples)
    assert captions_in(data, batches) == captions_in(data, later)


def test_a_worker_process_shares_the_captions_kept_in_the_store(server, tmp_path, monkeypatch):
    """Captions kept by this process are found by a worker process (``processes=1``) in the store, and the other way."""
    name, proxy, pattern, _ = server
    for variable, value in (("ENDPOINT_URL", proxy.url), ("ACCESS_KEY_ID", "test"), ("SECRET_ACCESS_KEY", "test")):
        monkeypatch.setenv(f"AWS_{variable}", value)  # the worker's settings: it runs nothing of this process
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    samples = webdataset_samples(pattern, "mp4", "cls", fields=["txt"])

    def worker_epoch(data: VideoDataset) -> tuple[list[tuple], int]:
        proxy.reset()
        with DataLoader(data, num_threads=2, processes=1, overlap_epochs=False) as loader:
            return list(loader), proxy.requests

    here = VideoDataset(samples, **CAPTIONED, index_cache=IndexCache(tmp_path / "here"))
    expected = sorted(captions_in(here, epoch(proxy, here)[0]))
    assert here.index_cache.flush(30)  # the indexes and captions in the store before the worker starts
    batches, requests = worker_epoch(VideoDataset(samples, **CAPTIONED, index_cache=IndexCache(tmp_path / "here")))
    assert sorted(captions_in(here, batches)) == expected
    there = VideoDataset(samples, **CAPTIONED, index_cache=IndexCache(tmp_path / "there"))
    assert sorted(captions_in(there, worker_epoch(there)[0])) == expected
    tar_members.forget_tables()  # this process as a new one: the tables and captions the worker kept
    later, later_requests, _ = epoch(
        proxy, VideoDataset(samples, **CAPTIONED, index_cache=IndexCache(tmp_path / "there"))
    )
    print(
        f"{name}: an epoch of {len(samples)} clips with captions, {requests} requests in a worker process after "
        f"this one's; {later_requests} here after a worker's"
    )
    assert sorted(captions_in(there, later)) == expected
    assert requests <= 1.1 * len(samples)  # the clips' spans alone: tables, indexes and captions from the store
    assert later_requests <= 1.1 * len(samples)


def test_a_table_older_than_the_clips_read_is_let_go_before_the_captions(server, tmp_path):
    """Another process made the shard's new table: this one's clip read succeeds, so its older table and captions go."""
    proxy, pattern = server[1], server[2]
    samples = webdataset_samples(pattern.replace(NUMBERS, "00000"), "mp4", "cls", fields=["txt"])
    cache = IndexCache(tmp_path)
    data = VideoDataset(samples, **CAPTIONED, index_cache=cache)
    epoch(proxy, data)  # the indexes, table and captions kept
    table = tar_members.held_table(tar_members.split_member_url(samples[0].path)[1])
    old = dataclasses.replace(table, key=table.key._replace(version="e-an-older-version"))
    tar_members.hold_table(old)  # as if this process held the table of a version since rewritten
    keys = [remote_shards.member_key(old, f"{v:06d}.txt") for v in range(PER_SHARD)]
    member_bytes.keep_members(cache.shard_tables, [(key, b"?" * key.size) for key in keys])  # its kept captions
    captions_in(data, epoch(proxy, data)[0])
    assert tar_members.held_table(table.key.name).key == table.key


def rewrite(shards: tuple[Path, dict[str, Path]], folder: Path, number: int) -> Path:
    """Shard ``number`` written again in ``folder`` with longer captions: its members move; its size and ETag change."""
    _, loose = shards
    path = folder / f"train-{number:05d}.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for v in range(number * PER_SHARD, (number + 1) * PER_SHARD):
            for ext in ("mp4", "avi"):
                tar.add(loose[f"{v:06d}.{ext}"], arcname=f"{v:06d}.{ext}")
            for ext, data in (("txt", caption_of(v, "rewritten")), ("cls", str(v % 2))):
                info = tarfile.TarInfo(f"{v:06d}.{ext}")
                info.size = len(data.encode())
                tar.addfile(info, io.BytesIO(data.encode()))
    return path


def test_a_shard_rewritten_with_other_captions_gives_its_new_captions(server, shards, tmp_path):
    """The kept captions name the old shard's version: the clip's read finds it changed, and the new captions come."""
    name, proxy, pattern, put = server
    root, _ = shards
    shard = pattern.replace(NUMBERS, "00002")
    samples = webdataset_samples(shard, "mp4", "cls", fields=["txt"])
    held, fresh = (VideoDataset(samples, **CAPTIONED, index_cache=IndexCache(tmp_path / n)) for n in ("held", "fresh"))
    for data in (held, fresh):
        epoch(proxy, data)
        captions_in(data, epoch(proxy, data)[0])  # the old captions, kept in the store
    original = tmp_path / "original" / "train-00002.tar"
    original.parent.mkdir()
    original.write_bytes((root / "shards" / "train-00002.tar").read_bytes())
    put(rewrite(shards, tmp_path, 2))
    try:
        captions_in(held, epoch(proxy, held)[0], "rewritten")  # this process: the old table held, old indexes
        tar_members.forget_tables()  # a new process: the stores hold the old tables, indexes and captions
        remote_shards._changed.clear()
        listed = webdataset_samples(shard, "mp4", "cls", fields=["txt"])  # the old table fails the labels' read
        assert [s.path for s in listed] == [s.path for s in samples] and [s.label for s in listed] == [0, 1, 0, 1]
        tar_members.forget_tables()
        remote_shards._changed.clear()
        again = VideoDataset(samples, **CAPTIONED, index_cache=IndexCache(tmp_path / "fresh"))
        captions_in(again, epoch(proxy, again)[0], "rewritten")
        batches, requests, _ = epoch(proxy, again)
        print(f"{name}: a rewritten shard's new captions; a later epoch of {len(samples)} clips, {requests} requests")
        captions_in(again, batches, "rewritten")
        assert requests <= 1.1 * len(samples)
    finally:
        put(original)


def test_a_member_table_is_made_in_few_reads_and_kept_in_the_store(server, tmp_path, monkeypatch):
    """With blocks of 64 KiB, a shard's headers take a few reads, far fewer than its members; the store keeps it."""
    name, proxy, pattern, _ = server
    monkeypatch.setattr(remote_shards, "TABLE_BLOCK_BYTES", 64 << 10)
    shard = pattern.replace(NUMBERS, "00001")
    cache = IndexCache(tmp_path / "index")
    proxy.reset()
    table = remote_shards.remote_member_table(remote.remote_object(shard), cache.shard_tables)
    members = len(table.names)
    assert members == 4 * PER_SHARD
    made = proxy.requests
    print(f"{name}: a member table of {members} members in {made} requests")
    assert made <= 3 + table.offsets.max() // (64 << 10) + 2  # the tail, the index files tried, the blocks
    tar_members.forget_tables()
    proxy.reset()
    kept = remote_shards.remote_member_table(remote.remote_object(shard), IndexCache(tmp_path / "index").shard_tables)
    assert proxy.requests == 0
    assert kept.members == table.members and kept.key == table.key
    listed = webdataset_samples([shard, pattern.replace(NUMBERS, "00002")], "avi")  # a list of URLs
    assert len(listed) == 2 * PER_SHARD and listed[0].path.endswith(f"::{shard}")


@pytest.mark.parametrize("block", [64 << 10, 8 << 10, 3 << 10])
def test_the_reads_of_a_member_table_give_its_small_members(server, shards, block, monkeypatch):
    """Blocks smaller than the shard: the captions and classes come from the headers' reads, in as many reads."""
    name, proxy, pattern, _ = server
    root, _ = shards
    monkeypatch.setattr(remote_shards, "TABLE_BLOCK_BYTES", block)
    shard = pattern.replace(NUMBERS, "00001")
    requests = []
    for small in (None, tar_members.SmallMembers(lambda member, size: member.endswith((".txt", ".cls")))):
        tar_members.forget_tables()
        proxy.reset()
        remote_shards.remote_member_table(remote.remote_object(shard), None, small)
        requests.append(proxy.requests)
    with tarfile.open(root / "shards" / "train-00001.tar") as tar:
        expected = {m.name: tar.extractfile(m).read() for m in tar if m.name.endswith((".txt", ".cls"))}
    print(
        f"{name}: a member table in blocks of {block} bytes, {requests[0]} requests; with small members {requests[1]}"
    )
    assert small.found == expected and len(expected) == 2 * PER_SHARD
    assert requests[1] == requests[0]


def test_a_clip_of_a_shard_changed_since_it_was_indexed_comes_from_the_new_shard(server, shards, tmp_path):
    """The kept index and table name the old shard: its ETag fails the read, and the table is made again."""
    _, _, pattern, put = server
    root, loose = shards
    cache = IndexCache(tmp_path / "index")
    path = webdataset_samples(pattern.replace(NUMBERS, "00002"), "mp4")[0].path
    assert path.startswith("tar://000008.mp4::")
    read_clip(path, 0, CLIP_LEN, index_cache=cache)
    original, changed = tmp_path / "original" / "train-00002.tar", tmp_path / "train-00002.tar"
    original.parent.mkdir()
    original.write_bytes((root / "shards" / "train-00002.tar").read_bytes())
    with tarfile.open(changed, "w", format=tarfile.GNU_FORMAT) as tar:  # the member at another offset
        tar.add(loose["000009.avi"], arcname="000009.avi")
        tar.add(loose["000008.mp4"], arcname="000008.mp4")
    put(changed)
    expected = read_clip(loose["000008.mp4"], 4, CLIP_LEN, index_cache=IndexCache(None))
    try:
        tar_members.forget_tables()  # a new process: the store's table is of the old shard, and no index is kept
        np.testing.assert_array_equal(read_clip(path, 4, CLIP_LEN, index_cache=default_index_cache()), expected)
        tar_members.forget_tables()  # the kept index and table are of the old shard
        np.testing.assert_array_equal(
            read_clip(path, 4, CLIP_LEN, index_cache=cache),
            read_clip(loose["000008.mp4"], 4, CLIP_LEN, index_cache=IndexCache(None)),
        )
    finally:
        put(original)
