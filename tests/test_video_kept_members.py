"""Small members of remote shards kept in the index store: read once, found by their key, never of another version."""

from __future__ import annotations

import pytest

from parallel_loader.video._base.keys import SourceKey
from parallel_loader.video._bytes.remote_shards import member_key
from parallel_loader.video._bytes.tar_members import MemberTable
from parallel_loader.video._indexes.member_bytes import KEPT_MEMBER_BYTES, keep_members, read_kept
from parallel_loader.video._indexes.store import MEMBER_BYTES, IndexStore
from parallel_loader.video._indexes.writer import close_all

pytestmark = pytest.mark.timeout(60)

SHARD = "s3://bucket/train-00000.tar"
MEMBERS = {"0.mp4": (512, KEPT_MEMBER_BYTES + 1), "0.txt": (66560, 9), "0.json": (67584, 2)}


def table(version: str = "e1", members: dict[str, tuple[int, int]] = MEMBERS) -> MemberTable:
    return MemberTable.of(SourceKey(SHARD, 100_000, version), members, "headers")


class Shard:
    """Reads members as a shard would, each read counted; ``contents`` are their bytes."""

    def __init__(self, contents: dict[str, bytes]) -> None:
        self.contents, self.reads = contents, []

    def __call__(self, names: list[str]) -> dict[str, bytes]:
        self.reads.append(sorted(names))
        return {n: self.contents[n] for n in names}


def test_a_member_is_read_once_then_found_by_any_process_using_the_store(tmp_path):
    shard = Shard({"0.txt": b"a caption", "0.json": b"{}"})
    assert read_kept(IndexStore(tmp_path), table(), ["0.txt", "0.json"], shard) == shard.contents
    assert read_kept(IndexStore(tmp_path), table(), ["0.txt", "0.json"], shard) == shard.contents  # queued
    close_all()  # written, as at this process's exit
    assert read_kept(IndexStore(tmp_path), table(), ["0.txt", "0.json"], shard) == shard.contents  # in the store
    assert shard.reads == [["0.json", "0.txt"]]
    names = IndexStore(tmp_path).names()
    assert sorted(n for n in names if n.endswith(MEMBER_BYTES)) == [
        f"tar://0.json::{SHARD}{MEMBER_BYTES}",
        f"tar://0.txt::{SHARD}{MEMBER_BYTES}",
    ]


def test_another_version_of_the_shard_reads_its_members_again_and_replaces_them(tmp_path):
    store, old, new = IndexStore(tmp_path), Shard({"0.txt": b"a caption"}), Shard({"0.txt": b"new words"})
    read_kept(store, table("e1"), ["0.txt"], old)
    assert read_kept(store, table("e2"), ["0.txt"], new) == {"0.txt": b"new words"}
    assert read_kept(store, table("e2"), ["0.txt"], new) == {"0.txt": b"new words"}
    assert new.reads == [["0.txt"]]
    assert read_kept(store, table("e1"), ["0.txt"], old) == {"0.txt": b"a caption"}  # the older one was replaced
    assert old.reads == [["0.txt"], ["0.txt"]]
    moved = {**MEMBERS, "0.txt": (70656, 9)}  # the same version and size, another offset: another key
    assert member_key(table("e1", moved), "0.txt") != member_key(table("e1"), "0.txt")
    assert read_kept(store, table("e1", moved), ["0.txt"], old) == {"0.txt": b"a caption"}
    assert old.reads == [["0.txt"], ["0.txt"], ["0.txt"]]


def test_a_member_over_the_bound_is_read_each_time_and_none_without_a_store(tmp_path):
    store, video = IndexStore(tmp_path), Shard({"0.mp4": bytes(KEPT_MEMBER_BYTES + 1), "0.txt": b"a caption"})
    for _ in range(2):
        assert read_kept(store, table(), ["0.mp4"], video) == {"0.mp4": video.contents["0.mp4"]}
        read_kept(None, table(), ["0.txt"], video)
    assert video.reads == [["0.mp4"], ["0.txt"], ["0.mp4"], ["0.txt"]]
    close_all()
    assert not [n for n in store.names() if n.endswith(MEMBER_BYTES)]


def test_bytes_that_are_not_the_members_size_are_not_kept(tmp_path):
    store = IndexStore(tmp_path)
    keep_members(store, [(member_key(table(), "0.txt"), b"short")])  # the member has 9 bytes
    caption = Shard({"0.txt": b"a caption"})
    assert read_kept(store, table(), ["0.txt"], caption) == {"0.txt": b"a caption"}
    assert caption.reads == [["0.txt"]]


def test_a_member_the_shard_lacks_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_kept(IndexStore(tmp_path), table(), ["1.txt"], Shard({}))
