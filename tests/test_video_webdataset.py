"""WebDataset tar shards read in place: member tables, webdataset_samples, and clips equal to the loose files'."""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

from parallel_loader import DataLoader
from parallel_loader.video import (
    AnnotationError,
    Augment,
    IndexCache,
    VideoDataset,
    VideoDecodeError,
    frame_count,
    probe,
    read_clip,
    webdataset_fields,
    webdataset_samples,
)
from parallel_loader.video._bytes import tar_members
from parallel_loader.video._bytes.source import source_key
from parallel_loader.video._bytes.tar_members import member_table, member_url
from parallel_loader.video._commands.index import main as index_main
from parallel_loader.video._samples.webdataset import expand_braces

from .video_files import VIDEO_OFFSET, VIDEO_STEP, write_encoded_video

pytestmark = pytest.mark.timeout(120)

SHARDS, PER_SHARD, FRAMES = 4, 5, 24
CLASSES = ("run", "walk", "jump")


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> tuple[Path, dict[int, dict[str, Path]]]:
    """4 shards of 5 samples (H.264 MP4, XviD AVI, class number, caption, JSON each), and the loose files."""
    folder = tmp_path_factory.mktemp("shards")
    loose: dict[int, dict[str, Path]] = {}
    for s in range(SHARDS):
        with tarfile.open(folder / f"train-{s:05d}.tar", "w", format=tarfile.GNU_FORMAT) as tar:
            for k in range(PER_SHARD):
                v = s * PER_SHARD + k
                key = f"{v:06d}" if v % 7 else f"deep/folder/{'long' * 30}_{v:06d}"  # some names need long headers
                files = {
                    "mp4": write_encoded_video(folder / f"{v}.mp4", FRAMES, "libx264", gop=8, b_frames=2, video_id=v),
                    "avi": write_encoded_video(
                        folder / f"{v}.avi", FRAMES, "mpeg4", gop=8, b_frames=2, codec_tag="XVID", video_id=v
                    ),
                }
                loose[v] = files
                for ext, path in files.items():
                    tar.add(path, arcname=f"{key}.{ext}")
                add_member(tar, f"{key}.cls", str(v % 3).encode())
                add_member(tar, f"{key}.txt", f"a caption of video {v}".encode())
                add_member(tar, f"{key}.json", json.dumps({"label": CLASSES[v % 3], "id": v}).encode())
    return folder, loose


@pytest.fixture(autouse=True)
def fresh_tables():
    tar_members.forget_tables()
    yield
    tar_members.forget_tables()


def video_id(clip: np.ndarray) -> int:
    """The video number in a clip's pixels: the median green, which the moving block does not move."""
    green = clip[..., 1] * 255 if clip.dtype.kind == "f" else clip[..., 1]
    return round((float(np.median(green)) - VIDEO_OFFSET) / VIDEO_STEP)


def video_of(path: str) -> int:
    """The video number a member URL names (the digits before its extension)."""
    return int(path.split("::")[0].rsplit("_", 1)[-1].rsplit("/", 1)[-1].split(".")[0])


def test_every_member_is_a_sample_with_its_label_and_caption(shards):
    folder, _ = shards
    samples = webdataset_samples(str(folder / "train-{00000..00003}.tar"), label="cls", fields=["txt"])
    assert len(samples) == SHARDS * PER_SHARD
    assert samples.classes == ("0", "1", "2")
    numbers = [video_of(s.path) for s in samples]
    assert numbers == list(range(SHARDS * PER_SHARD))  # shard order, then member order
    assert [s.label for s in samples] == [v % 3 for v in numbers]
    assert samples[0].origin == "train-00000.tar, member deep/folder/" + "long" * 30 + "_000000.mp4"
    for s in samples:
        v = video_of(s.path)
        got = webdataset_fields(s.path, ["txt", "json", "cls"])
        assert got == {"txt": f"a caption of video {v}", "json": {"label": CLASSES[v % 3], "id": v}, "cls": v % 3}


def test_braces_globs_and_lists_name_the_same_shards(shards):
    folder, _ = shards
    by_braces = webdataset_samples(str(folder / "train-{00000..00003}.tar"))
    assert webdataset_samples(str(folder / "train-*.tar")) == by_braces
    assert webdataset_samples([folder / f"train-{s:05d}.tar" for s in range(SHARDS)]) == by_braces
    assert webdataset_samples(str(folder / "train-{00002,00000}.tar"))[0].path.endswith("train-00002.tar")
    assert by_braces.classes == ("",) and set(by_braces.labels.tolist()) == {0}
    assert expand_braces("a{08..10}b{x,y}") == ["a08bx", "a08by", "a09bx", "a09by", "a10bx", "a10by"]


def test_labels_from_a_json_field_and_given_classes(shards):
    folder, _ = shards
    samples = webdataset_samples(str(folder / "train-*.tar"), "avi", "json:label")
    assert samples.classes == tuple(sorted(CLASSES))
    assert [samples.classes[s.label] for s in samples] == [CLASSES[video_of(s.path) % 3] for s in samples]
    given = webdataset_samples(str(folder / "train-*.tar"), "avi", "json:label", classes=CLASSES)
    assert [s.label for s in given] == [video_of(s.path) % 3 for s in given]
    with pytest.raises(AnnotationError, match=r"class 'jump' is not one of the classes given"):
        webdataset_samples(str(folder / "train-*.tar"), "avi", "json:label", classes=["run", "walk"])
    with pytest.raises(AnnotationError, match=r"train-00000.tar, sample .*: .* no JSON object with a field 'nope'"):
        webdataset_samples(str(folder / "train-*.tar"), "avi", "json:nope")
    with pytest.raises(AnnotationError, match=r"has no 'label' member"):
        webdataset_samples(str(folder / "train-*.tar"), "avi", "label")
    with pytest.raises(AnnotationError, match=r"class number 2 is not one of the 2 classes"):
        webdataset_samples(str(folder / "train-*.tar"), "avi", "cls", classes=["a", "b"])


@pytest.mark.parametrize("kind", ["mp4", "avi"])
def test_every_clip_from_a_shard_equals_the_loose_files(shards, kind):
    folder, loose = shards
    samples = webdataset_samples(str(folder / "train-*.tar"), kind)
    cache = IndexCache(None)
    for s in samples:
        v = video_of(s.path)
        data = member_table(s.path.split("::")[1]).read(s.path.split("::")[0][len("tar://") :])
        for start, clip_len, stride in ((0, 3, 1), (9, 4, 2), (FRAMES - 2, 2, 1)):
            expected = read_clip(loose[v][kind], start, clip_len, stride, index_cache=cache)
            assert video_id(expected) == v
            assert np.array_equal(read_clip(s.path, start, clip_len, stride, index_cache=cache), expected)
            assert np.array_equal(read_clip(data, start, clip_len, stride, index_cache=cache), expected)
        assert probe(s.path) == probe(loose[v][kind])
        assert frame_count(s.path, exact=False) == frame_count(loose[v][kind], exact=False)


def test_a_dataset_over_shards_gives_the_loose_files_batches_with_their_captions(shards, tmp_path):
    folder, loose = shards
    samples = webdataset_samples(str(folder / "train-*.tar"), label="cls", fields=["txt"])
    rows = [(str(loose[video_of(s.path)]["mp4"]), s.label) for s in samples]
    options = dict(clip_len=4, batch_size=3, stride=2, size=(24, 32), seed=5, return_index=True)

    def batches(source, name):
        data = VideoDataset(source, **options, index_cache=IndexCache(tmp_path / name))
        with DataLoader(data, num_threads=3, shuffle=True, seed=2, ordered=True) as loader:
            return data, list(loader)

    from_shards, shard_batches = batches(samples, "shards")
    _, loose_batches = batches(rows, "loose")
    assert len(shard_batches) == len(loose_batches) == 7
    for (clips, labels, index, fields), loose_batch in zip(shard_batches, loose_batches, strict=True):
        assert np.array_equal(clips, loose_batch[0])
        assert np.array_equal(labels, loose_batch[1]) and np.array_equal(index, loose_batch[2])
        for clip, i, caption in zip(clips, index.tolist(), fields["txt"], strict=True):  # in the batch
            assert caption == webdataset_fields(from_shards.samples[i][0], ["txt"])["txt"]
            assert caption == f"a caption of video {video_id(clip)}"


@pytest.mark.parametrize(
    "options",
    [
        dict(augment=Augment(crop="resized"), fps=10.0, exact_counts=True),
        dict(train=False, num_clips=2, num_crops=3, dtype="uint8"),
    ],
    ids=["augment-fps", "views"],
)
def test_dataset_options_give_the_loose_files_batches_from_shards(shards, tmp_path, options):
    folder, loose = shards
    samples = webdataset_samples(str(folder / "train-{00001..00002}.tar"), "avi", "json:label")
    rows = [(str(loose[video_of(s.path)]["avi"]), samples.classes[s.label]) for s in samples]

    def batches(source, name):
        data = VideoDataset(source, 4, 3, size=(24, 32), seed=7, index_cache=IndexCache(tmp_path / name), **options)
        with DataLoader(data, num_threads=2, shuffle=True, seed=4, ordered=True) as loader:
            return list(loader)

    for ours, theirs in zip(batches(samples, "shards"), batches(rows, "loose"), strict=True):
        assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))


def test_a_warm_clip_is_one_read_of_the_shard(shards, monkeypatch):
    folder, loose = shards
    path = webdataset_samples(str(folder / "train-00001.tar"))[2].path
    cache = IndexCache(None)
    read_clip(path, 0, 2, index_cache=cache)  # the first touch indexes the member
    reads = []
    real = os.preadv
    monkeypatch.setattr(tar_members.os, "preadv", lambda fd, buffers, at: reads.append(at) or real(fd, buffers, at))
    clip = read_clip(path, 12, 4, 2, index_cache=cache)
    assert len(reads) == 1
    assert np.array_equal(clip, read_clip(loose[video_of(path)]["mp4"], 12, 4, 2, index_cache=cache))


def test_samples_without_a_field_or_a_video_are_left_out_and_counted(shards, tmp_path, caplog):
    folder, _ = shards
    shard = tmp_path / "partial.tar"
    with tarfile.open(shard, "w") as tar, tarfile.open(folder / "train-00001.tar") as source:
        for info in source:
            if info.name not in ("000006.txt", "000008.mp4"):
                add_member(tar, info.name, source.extractfile(info).read())
    with caplog.at_level(logging.WARNING):
        samples = webdataset_samples(str(shard), fields=["txt"])
    assert [video_of(s.path) for s in samples] == [5, 7, 9]
    assert "1 samples of" in caplog.text and "have no member of ['mp4']" in caplog.text
    assert "lack a member of ['txt']" in caplog.text
    mixed = webdataset_samples(str(shard), ["mp4", "avi"], fields=["txt"])  # shards that mix kinds: the first found
    assert [(video_of(s.path), s.path.partition("::")[0][-3:]) for s in mixed] == [
        (5, "mp4"), (7, "mp4"), (8, "avi"), (9, "mp4")
    ]  # fmt: skip
    with pytest.raises(TypeError, match="list of them"):
        webdataset_samples(str(shard), ["mp4", ""])


def test_an_index_beside_the_shard_is_used_when_it_is_newer_and_fits(shards, tmp_path):
    folder, _ = shards
    shard = tmp_path / "copy-000.tar"
    shard.write_bytes((folder / "train-00002.tar").read_bytes())
    members = member_table(shard).members
    lines = [f"{name.split('.', 1)[1]} {offset} {size} {name}" for name, (offset, size) in members.items()]
    dali = tmp_path / "copy-000.idx"
    dali.write_text(f"v1.2 {len(lines)}\n" + "\n".join(lines) + "\n")
    tar_members.forget_tables()
    assert member_table(shard).source == "DALI index"
    assert member_table(shard).members == members
    samples = webdataset_samples(str(shard))
    assert video_id(read_clip(samples[1].path, 3, 2, index_cache=IndexCache(None))) == 11

    os.utime(dali, ns=(0, 0))  # older than the shard: not trusted
    tar_members.forget_tables()
    assert member_table(shard).source == "headers"
    dali.unlink()

    wids = tmp_path / "copy-000.tar.index"
    names = list(members)
    wids.write_bytes(pickle.dumps((names, np.array([members[n] for n in names]))))
    tar_members.forget_tables()
    assert member_table(shard).source == "wids index" and member_table(shard).members == members

    wids.write_bytes(pickle.dumps((names, [os.getcwd for _ in names])))  # a class no index holds: never called
    tar_members.forget_tables()
    assert member_table(shard).source == "headers"

    wids.write_bytes(pickle.dumps((names, np.array([(o + 1, s) for o, s in members.values()]))))  # off the blocks
    tar_members.forget_tables()
    assert member_table(shard).source == "headers"


def test_member_tables_are_held_within_their_bytes(shards, monkeypatch):
    folder, _ = shards
    first, second = folder / "train-00000.tar", folder / "train-00001.tar"
    table = member_table(first)
    assert member_table(first) is table  # held
    assert table.nbytes == table.names.nbytes + 16 * len(table.names)
    monkeypatch.setattr(tar_members, "TABLE_BYTES", table.nbytes + 1)
    member_table(second)  # past the bound: the least recently used table leaves
    assert member_table(first) is not table
    assert member_table(first).members == table.members


def test_a_rewritten_shard_is_read_as_it_is_now(shards, tmp_path):
    folder, loose = shards
    shard = tmp_path / "moving.tar"
    shard.write_bytes((folder / "train-00000.tar").read_bytes())
    cache = IndexCache(None)
    url = member_url(str(shard), "000003.mp4")
    assert video_id(read_clip(url, 0, 2, index_cache=cache)) == 3
    with tarfile.open(shard, "w") as tar:  # the same name, another video, at another offset
        add_member(tar, "padding.bin", bytes(5000))
        tar.add(loose[11]["mp4"], arcname="000003.mp4")
    stat = shard.stat()
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert video_id(read_clip(url, 0, 2, index_cache=cache)) == 11


def test_what_cannot_be_read_in_place_fails_clearly(shards, tmp_path):
    folder, _ = shards
    with pytest.raises(FileNotFoundError, match="no such member in the shard"):
        read_clip(member_url(str(folder / "train-00000.tar"), "nope.mp4"), 0, 1)
    with pytest.raises(FileNotFoundError, match="no such video file"):
        read_clip(member_url(str(tmp_path / "none.tar"), "000001.mp4"), 0, 1)
    with pytest.raises(ValueError, match="not a glob"):
        webdataset_samples("s3://bucket/train-*.tar")
    with pytest.raises(FileNotFoundError, match="no such shard"):
        webdataset_samples(str(tmp_path / "train-00000.tar"))
    with pytest.raises(ValueError, match="no shard matches"):
        webdataset_samples(str(tmp_path / "train-*.tar"))
    with pytest.raises(ValueError, match=r"has a member with an extension of \['webm'\]"):
        webdataset_samples(str(folder / "train-00000.tar"), "webm")
    with pytest.raises(TypeError, match="fields must be a list of extensions"):
        webdataset_samples(str(folder / "train-00000.tar"), fields="txt")
    packed = tmp_path / "packed.tar.gz"
    with tarfile.open(packed, "w:gz") as tar:
        tar.add(folder / "train-00000.tar", arcname="inner.tar")
    with pytest.raises(VideoDecodeError, match="not an uncompressed tar file"):
        webdataset_samples(str(packed))
    with pytest.raises(ValueError, match="not a member of a shard"):
        webdataset_fields(str(folder / "train-00000.tar"), ["txt"])


def test_the_index_command_writes_a_dali_index_beside_a_shard_and_indexes_its_videos(shards, tmp_path, capsys):
    folder, _ = shards
    shard = tmp_path / "copy-00000.tar"
    shard.write_bytes((folder / "train-00001.tar").read_bytes())
    from_headers = member_table(shard).members
    tar_members.forget_tables()
    assert index_main([str(tmp_path / "copy-{00000..00000}.tar"), "--cache", str(tmp_path / "store"), "--quiet"]) == 0
    assert "10 made" in capsys.readouterr().out  # 5 samples: an MP4 and an AVI each
    lines = (tmp_path / "copy-00000.idx").read_text().splitlines()
    assert lines[0] == f"v1.2 {PER_SHARD}"
    assert all(len(line.split()) == 4 * 5 for line in lines[1:])  # mp4, avi, cls, txt, json
    tar_members.forget_tables()
    table = member_table(shard)
    assert table.source == "DALI index" and table.members == from_headers
    cache = IndexCache(tmp_path / "store")
    for sample in webdataset_samples(str(shard), "avi"):
        assert cache.lookup(source_key(sample.path)) is not None


def one_epoch(data: VideoDataset, threads: int, epoch: int = 0) -> np.ndarray:
    """The sample indices of epoch ``epoch``'s batches, in order."""
    with DataLoader(data, num_threads=threads, seed=1, ordered=True) as loader:
        for _ in range(epoch):
            list(loader)
        return np.concatenate([batch[2] for batch in loader])


@pytest.mark.parametrize("window", [1, 3])
def test_a_shard_local_order_takes_every_member_once_shard_by_shard_whatever_the_threads(shards, tmp_path, window):
    folder, _ = shards
    samples = webdataset_samples(str(folder / "train-*.tar"))
    options = dict(clip_len=2, batch_size=4, size=(16, 16), seed=3, return_index=True, order="shards")
    data = VideoDataset(samples, **options, shard_window=window, index_cache=IndexCache(tmp_path))
    order = one_epoch(data, threads=1)
    assert sorted(order.tolist()) == list(range(SHARDS * PER_SHARD))  # each member once
    np.testing.assert_array_equal(one_epoch(data, threads=3), order)
    shard_of = np.array([int(samples[i].path.rpartition("-")[2][:5]) for i in order])
    if window == 1:  # the shards one after another, each one's members in listed order
        assert (np.diff(shard_of) != 0).sum() == SHARDS - 1
        assert all(np.all(np.diff(order[shard_of == s]) > 0) for s in range(SHARDS))
    else:  # a shard's members shuffled with their neighbours: no further than a window from the shard's run
        for s in range(SHARDS):
            places = np.flatnonzero(shard_of == s)
            assert places.max() - places.min() < PER_SHARD + 2 * (window - 1)
        assert not all(np.all(np.diff(order[shard_of == s]) > 0) for s in range(SHARDS))
    later = one_epoch(data, threads=2, epoch=1)
    assert sorted(later.tolist()) == list(range(SHARDS * PER_SHARD)) and not np.array_equal(later, order)


@pytest.mark.parametrize("order", ["global", "shards"])
def test_either_order_resumes_mid_epoch_with_another_thread_count(shards, tmp_path, order):
    folder, _ = shards
    samples = webdataset_samples(str(folder / "train-{00000..00003}.tar"))
    options = dict(clip_len=2, batch_size=4, size=(16, 16), seed=3, return_index=True, order=order)
    data = VideoDataset(samples, **options, index_cache=IndexCache(tmp_path))
    whole = one_epoch(data, threads=2)
    assert sorted(whole.tolist()) == list(range(SHARDS * PER_SHARD))
    with DataLoader(data, num_threads=2, seed=1, ordered=True, name="cut") as loader:
        batches = iter(loader)
        next(batches), next(batches)
        state = loader.state_dict(batches=2)
    resumed = DataLoader(pickle.loads(pickle.dumps(data)), num_threads=3, seed=1, ordered=True, name="resumed")
    resumed.load_state_dict(state)
    with resumed:
        rest = np.concatenate([batch[2] for batch in resumed])
    np.testing.assert_array_equal(rest, whole[8:])


def test_a_shard_local_order_refuses_weights_and_unknown_orders(shards, tmp_path):
    folder, _ = shards
    samples = webdataset_samples(str(folder / "train-00000.tar"))
    with pytest.raises(ValueError, match="without weights or samples_per_epoch"):
        VideoDataset(samples, 2, 2, order="shards", weights="balanced", index_cache=IndexCache(None))
    with pytest.raises(ValueError, match="order must be 'global' or 'shards'"):
        VideoDataset(samples, 2, 2, order="shard", index_cache=IndexCache(None))
    with pytest.raises(ValueError, match="shard_window"):
        VideoDataset(samples, 2, 2, order="shards", shard_window=0, index_cache=IndexCache(None))
