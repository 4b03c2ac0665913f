"""A WebDataset sample's other members (captions, JSON, bytes, numbers) arrive in its batch beside its clip."""

from __future__ import annotations

import json
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

from parallel_loader import DataLoader
from parallel_loader.video import IndexCache, Mixup, VideoDataset, VideoDecodeError, webdataset_samples

from .test_video_webdataset import add_member, fresh_tables, video_id  # noqa: F401 (fresh_tables: an autouse fixture)
from .video_files import write_encoded_video

pytestmark = pytest.mark.timeout(120)

SHARDS, PER_SHARD, FRAMES = 3, 4, 12
BROKEN = 5  # the sample whose video is not a video, in the shards of ``broken_pattern``
FIELDS = ("txt", "json", "cls", "bin")


def members_of(v: int) -> dict[str, bytes]:
    """The members of sample ``v`` beside its video: a caption, JSON, a class number and bytes ending in NULs."""
    return {
        "txt": f"a caption of video {v}, naïve".encode(),
        "json": json.dumps({"id": v, "words": ["a", "b"][: v % 3]}).encode(),
        "cls": str(v % 3).encode(),
        "bin": bytes([v, 0, 255, 0, 0]),
    }


def write_shards(folder: Path, broken: int | None = None) -> str:
    """``SHARDS`` shards of ``PER_SHARD`` samples (an MP4 and ``members_of``); return their pattern."""
    folder.mkdir(exist_ok=True)
    for s in range(SHARDS):
        with tarfile.open(folder / f"train-{s:05d}.tar", "w") as tar:
            for k in range(PER_SHARD):
                v = s * PER_SHARD + k
                if v == broken:
                    add_member(tar, f"{v:06d}.mp4", b"not a video at all" * 50)
                else:
                    video = write_encoded_video(folder / f"{v}.mp4", FRAMES, "libx264", gop=4, video_id=v)
                    tar.add(video, arcname=f"{v:06d}.mp4")
                for ext, data in members_of(v).items():
                    add_member(tar, f"{v:06d}.{ext}", data)
    return str(folder / f"train-{{00000..{SHARDS - 1:05d}}}.tar")


@pytest.fixture(scope="module")
def pattern(tmp_path_factory) -> str:
    return write_shards(tmp_path_factory.mktemp("fields"))


@pytest.fixture(scope="module")
def broken_pattern(tmp_path_factory) -> str:
    return write_shards(tmp_path_factory.mktemp("broken"), broken=BROKEN)


def sample_number(path: str) -> int:
    """The sample number a member URL names: ``tar://000007.mp4::...`` is 7."""
    return int(path.removeprefix("tar://")[:6])


def tar_member(path: str, ext: str) -> bytes:
    """Member ``ext`` of the sample at ``path``, read with ``tarfile`` (not the package's reader)."""
    name, shard = path.removeprefix("tar://").split("::")
    with tarfile.open(shard) as tar:
        return tar.extractfile(name.replace(".mp4", f".{ext}")).read()


def check_batch(data: VideoDataset, batch: tuple) -> int:
    """Assert that each clip's fields are its own sample's members, as the tar holds them; return the clips."""
    clips, labels, indices, fields = batch
    assert list(fields) == list(FIELDS) and all(len(a) == len(clips) for a in fields.values())
    for k, i in enumerate(indices.tolist()):
        path = data.samples[i][0]
        views = clips[k] if clips.ndim == 6 else [clips[k]]
        assert {video_id(view) for view in views} == {sample_number(path)}
        for ext, values in fields.items():
            member = tar_member(path, ext)
            if ext == "cls":
                assert values.dtype == np.int64 and values[k] == int(member) == labels[k]
            elif ext == "bin":
                assert values.dtype == object and values[k] == member  # trailing NULs kept
            else:  # text, and JSON as its text
                assert values.dtype == object and values[k] == member.decode("utf-8")
    return len(clips)


OPTIONS = dict(clip_len=3, batch_size=4, size=(16, 16), seed=3, return_index=True)


@pytest.mark.parametrize(
    ("loader", "order"),
    [(dict(num_threads=3), "global"), (dict(num_threads=2, processes=1), "shards")],
    ids=["threads", "a-worker-process"],
)
def test_each_clip_carries_its_own_samples_members(pattern, tmp_path, loader, order):
    samples = webdataset_samples(pattern, label="cls", fields=FIELDS)
    assert samples.fields == FIELDS and samples[2:].fields == FIELDS
    data = VideoDataset(samples, **OPTIONS, order=order, index_cache=IndexCache(tmp_path))
    with DataLoader(data, **loader, shuffle=True, seed=1) as run:
        for _ in range(2):
            assert sum(check_batch(data, batch) for batch in run) == SHARDS * PER_SHARD


def test_fields_can_be_asked_for_or_left_out_by_the_dataset(pattern, tmp_path):
    cache = IndexCache(tmp_path)
    plain = webdataset_samples(pattern, label="cls")
    assert plain.fields == () and len(VideoDataset(plain, **OPTIONS, index_cache=cache)(0)) == 3
    asked = VideoDataset(plain, **OPTIONS, fields=["txt"], index_cache=cache)(0)
    assert list(asked[3]) == ["txt"] and asked[3]["txt"][0] == members_of(int(asked[2][0]))["txt"].decode()
    listed = webdataset_samples(pattern, label="cls", fields=["txt", "json"])
    clips, _, fields = VideoDataset(listed, **{**OPTIONS, "return_index": False}, index_cache=cache)(0)
    assert list(fields) == ["txt", "json"] and len(fields["json"]) == len(clips)
    assert len(VideoDataset(listed, **OPTIONS, fields=(), index_cache=cache)(0)) == 3
    with pytest.raises(ValueError, match="not in a shard: list the samples with webdataset_samples"):
        VideoDataset([("clip.mp4", 0)], 2, 2, fields=["txt"], find_missing=False, index_cache=cache)
    with pytest.raises(TypeError, match="fields must be a list of extensions"):
        VideoDataset(listed, 2, 2, fields="txt", index_cache=cache)


def test_views_and_mixup_keep_each_clips_fields(pattern, tmp_path):
    samples = webdataset_samples(pattern, label="cls", fields=FIELDS)
    cache = IndexCache(tmp_path)
    views = VideoDataset(samples, **OPTIONS, train=False, num_clips=2, num_crops=3, index_cache=cache)
    assert sum(check_batch(views, views(i)) for i in range(len(views))) == SHARDS * PER_SHARD
    mixed = VideoDataset(samples, **OPTIONS, labels="one_hot", batch_transform=Mixup(0.4), index_cache=cache)
    for i in range(len(mixed)):
        _, _, indices, fields = mixed(i)  # the clips are mixed; each keeps its own sample's members
        expected = [members_of(sample_number(mixed.samples[j][0]))["txt"].decode() for j in indices.tolist()]
        assert fields["txt"].tolist() == expected


def test_a_broken_video_is_replaced_or_left_out_with_its_fields(broken_pattern, tmp_path):
    samples = webdataset_samples(broken_pattern, label="cls", fields=FIELDS)
    cache = IndexCache(tmp_path)
    train = VideoDataset(samples, **OPTIONS, on_error="skip", index_cache=cache)
    with DataLoader(train, num_threads=2, shuffle=True, seed=0) as loader:
        assert sum(check_batch(train, batch) for batch in loader) == SHARDS * PER_SHARD  # the replacement's fields
    assert train.replaced >= 1 and any(f"{BROKEN:06d}.mp4" in key for key in train.skipped)
    evaluation = VideoDataset(samples, **OPTIONS, train=False, on_error="skip", index_cache=cache)
    batches = [evaluation(i) for i in range(len(evaluation))]
    assert sum(check_batch(evaluation, batch) for batch in batches) == SHARDS * PER_SHARD - 1
    assert BROKEN not in np.concatenate([b[2] for b in batches]).tolist()


def test_a_member_that_does_not_hold_its_kind_makes_a_bad_sample(tmp_path, caplog):
    folder = tmp_path / "shards"
    write_shards(folder)
    with tarfile.open(folder / "train-00000.tar") as tar:
        kept = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    kept["000002.txt"] = b"\xff\xfe not UTF-8"
    with tarfile.open(folder / "train-00000.tar", "w") as tar:
        for name, data in kept.items():
            add_member(tar, name, data)
    samples = webdataset_samples(str(folder / "train-00000.tar"), fields=["txt"])
    strict = VideoDataset(samples, **{**OPTIONS, "train": False}, index_cache=IndexCache(None))
    with pytest.raises(VideoDecodeError, match=r"000002.mp4.*its txt member is not UTF-8 text"):
        strict(0)
    skipping = VideoDataset(samples, **{**OPTIONS, "train": False}, on_error="skip", index_cache=IndexCache(None))
    clips, _, indices, fields = skipping(0)
    assert indices.tolist() == [0, 1, 3] and len(fields["txt"]) == len(clips) == 3
    assert "its txt member is not UTF-8 text" in next(iter(skipping.skipped.values()))


def test_a_resumed_epoch_gives_the_rest_with_its_fields(pattern, tmp_path):
    samples = webdataset_samples(pattern, label="cls", fields=["txt"])
    data = VideoDataset(samples, **OPTIONS, order="shards", shard_window=2, index_cache=IndexCache(tmp_path))

    def rows(loader: DataLoader) -> list[tuple[list[int], list[str]]]:
        return [(b[2].tolist(), b[3]["txt"].tolist()) for b in loader]

    with DataLoader(data, num_threads=2, seed=1, ordered=True, name="whole") as loader:
        whole = rows(loader)
    with DataLoader(data, num_threads=2, seed=1, ordered=True, name="cut") as loader:
        next(iter(loader))
        state = loader.state_dict(batches=1)
    resumed = DataLoader(pickle.loads(pickle.dumps(data)), num_threads=3, seed=1, ordered=True, name="resumed")
    resumed.load_state_dict(state)
    with resumed:
        assert rows(resumed) == whole[1:]
    for indices, captions in whole:
        assert captions == [members_of(sample_number(data.samples[i][0]))["txt"].decode() for i in indices]


def test_as_tf_dataset_carries_text_and_bytes_as_strings(pattern, tmp_path):
    tf = pytest.importorskip("tensorflow")
    from parallel_loader import as_tf_dataset

    samples = webdataset_samples(pattern, label="cls", fields=FIELDS)
    data = VideoDataset(samples, **OPTIONS, index_cache=IndexCache(tmp_path))
    with as_tf_dataset(data, num_threads=2, shuffle=True, seed=0) as dataset:
        fields_spec = dataset.element_spec[3]
        assert {ext: spec.dtype for ext, spec in fields_spec.items()} == {
            "txt": tf.string, "json": tf.string, "cls": tf.int64, "bin": tf.string
        }  # fmt: skip
        assert all(spec.shape.as_list() == [None] for spec in fields_spec.values())
        seen = 0
        for clips, labels, indices, fields in dataset:
            for k, i in enumerate(indices.numpy().tolist()):
                path = data.samples[i][0]
                assert video_id(clips[k].numpy()) == sample_number(path)
                assert fields["txt"][k].numpy().decode("utf-8") == tar_member(path, "txt").decode("utf-8")
                assert json.loads(fields["json"][k].numpy()) == json.loads(tar_member(path, "json"))
                assert fields["bin"][k].numpy() == tar_member(path, "bin")
                assert int(fields["cls"][k]) == int(labels[k]) == int(tar_member(path, "cls"))
                seen += 1
    assert seen == SHARDS * PER_SHARD
