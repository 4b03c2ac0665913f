"""The store's writer thread: records seen at once, written once in batches, a bounded queue, closed clean."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from parallel_loader.video import IndexCache
from parallel_loader.video._base.keys import local_key
from parallel_loader.video._indexes import writer as writer_module
from parallel_loader.video._indexes.store import IndexStore, Record
from parallel_loader.video._indexes.writer import StoreWriter, writer_for

from .helpers import assert_blocks_until
from .video_files import write_video

pytestmark = pytest.mark.timeout(120)


class FakeStore:
    """Keeps each batch written; a write waits while ``gate`` is clear."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.batches: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.writing = threading.Event()  # set when a write starts

    def write(self, records: list[Record]) -> None:
        self.writing.set()
        assert self.gate.wait(30)
        self.batches.append([r.name for r in records])

    def close(self) -> None:
        self.closed = getattr(self, "closed", 0) + 1


def record(name: str, written_ns: int = 1) -> Record:
    return Record(name, name.encode(), written_ns)


def writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "video-index-writer"]


def test_records_are_seen_at_once_and_written_once_in_one_batch(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "GATHER_S", 60.0)  # the batch waits for the flush
    store = FakeStore(tmp_path / "store")
    writer = StoreWriter(store)
    for k in range(5):
        writer.submit([record(f"v{k}"), record(f"v{k}\x00packets")])
    writer.submit([record("v0", written_ns=2)])  # a newer record of v0 replaces the queued one
    assert writer.pending("v0").written_ns == 2 and writer.pending("v3\x00packets") is not None
    assert writer.flush(timeout=30)
    assert writer.pending("v0") is None
    written = [name for batch in store.batches for name in batch]
    assert sorted(written) == sorted([f"v{k}" for k in range(5)] + [f"v{k}\x00packets" for k in range(5)])
    assert len(store.batches) == 1  # one transaction for all six submits
    writer.close()
    assert writer_threads() == []


def test_a_submit_waits_while_the_queue_is_full(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "MAX_QUEUED", 4)
    store = FakeStore(tmp_path / "store")
    writer = StoreWriter(store)
    store.gate.clear()
    writer.submit([record("first")])
    assert store.writing.wait(30)  # the thread holds "first", stuck in its write
    for k in range(4):
        writer.submit([record(f"queued {k}")])
    assert_blocks_until(lambda: writer.submit([record("one more")]), store.gate.set)
    writer.close()
    assert sorted(n for batch in store.batches for n in batch) == sorted(
        ["first", "one more", *(f"queued {k}" for k in range(4))]
    )
    assert writer_threads() == []


def test_the_thread_ends_when_idle_and_a_later_submit_starts_another(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "IDLE_S", 0.05)
    store = FakeStore(tmp_path / "store")
    writer = StoreWriter(store)
    writer.submit([record("a")])
    assert writer.flush(timeout=30)
    threads = writer_threads()
    for thread in threads:
        thread.join(30)
    assert writer_threads() == [] and store.closed == 1  # an idle writer holds no connection
    writer.submit([record("b")])
    writer.close()
    assert [n for batch in store.batches for n in batch] == ["a", "b"]
    assert writer_threads() == []


def test_every_cache_on_a_store_shares_its_writer_and_finds_what_is_queued(tmp_path):
    path = write_video(tmp_path / "v.avi", 12)
    first = IndexCache(tmp_path / "store")
    assert first.get(path).frames == 12
    assert writer_for(first._store) is writer_for(IndexStore(tmp_path / "store"))
    assert IndexCache(tmp_path / "store").lookup(local_key(path)).frames == 12  # queued or written: found
    first.close()
    assert writer_threads() == []
    assert IndexStore(tmp_path / "store").get(str(path)) is not None


def test_put_many_is_one_batch(tmp_path, monkeypatch):
    paths = [write_video(tmp_path / f"v{k}.avi", 10 + k, video_id=k) for k in range(3)]
    made = IndexCache(None)
    cache = IndexCache(tmp_path / "store")
    store = FakeStore(tmp_path / "store")
    cache._writer = StoreWriter(store)
    monkeypatch.setattr(writer_module, "GATHER_S", 60.0)
    cache.put_many([(local_key(p), made.get(p), b"") for p in paths])
    assert cache.flush(timeout=30)
    assert store.batches == [[str(p) for p in paths]]
    assert [cache.lookup(local_key(p)).frames for p in paths] == [10, 11, 12]
    cache.close()


def test_a_forked_child_starts_with_an_empty_queue(tmp_path):
    store = FakeStore(tmp_path / "store")
    writer = writer_for(store)
    store.gate.clear()
    writer.submit([record("parent's")])
    assert store.writing.wait(30)
    child = os.fork()
    if child == 0:
        code = 1
        try:  # os.register_at_fork has emptied the child's writers: the parent writes what it queued
            code = 0 if writer.pending("parent's") is None and writer.flush(timeout=5) else 1
        finally:
            os._exit(code)
    assert writer.pending("parent's") is not None
    assert os.waitpid(child, 0)[1] == 0
    store.gate.set()
    writer.close()
    assert store.batches == [["parent's"]]


def _gather_long(thread_number: int) -> None:
    """A worker thread's start: its store writer holds records until flushed or closed."""
    writer_module.GATHER_S = 600.0


def test_a_worker_process_writes_its_waiting_records_before_it_ends(tmp_path, monkeypatch):
    """A worker ends at the loader's close; the indexes it made reach the store then, not lost with it."""
    from parallel_loader import DataLoader
    from parallel_loader.video import VideoDataset
    from parallel_loader.video._indexes import cache as index_module

    paths = [write_video(tmp_path / f"v{k}.avi", 12, video_id=k) for k in range(4)]
    store = tmp_path / "store"
    data = VideoDataset([(str(p), 0) for p in paths], batch_size=2, clip_len=2, size=(16, 16),
                        index_cache=IndexCache(store))  # fmt: skip
    with DataLoader(data, num_threads=1, processes=1, thread_init=_gather_long) as loader:
        assert sum(len(clips) for clips, _ in loader) == 4

    def refuse(path, *args):
        raise AssertionError(f"{path} was indexed again: its worker's record was lost")

    monkeypatch.setattr(index_module, "make_index", refuse)
    found = IndexCache(store)
    assert [found.get(p).frames for p in paths] == [12] * 4


def test_an_older_record_submitted_late_never_replaces_a_newer_one(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "GATHER_S", 60.0)
    store = FakeStore(tmp_path / "store")
    writer = StoreWriter(store)
    writer.submit([record("v", written_ns=2)])
    writer.submit([record("v", written_ns=1)])  # made before the newer one, submitted after it
    assert writer.pending("v").written_ns == 2
    writer.close()
    assert store.batches == [["v"]]


class FailingOnceStore(FakeStore):
    """Its first write fails with an error the store does not expect."""

    def write(self, records: list[Record]) -> None:
        if not self.batches and not getattr(self, "failed", False):
            self.failed = True
            raise ValueError("an unexpected failure")
        super().write(records)


def test_a_writer_thread_that_fails_ends_and_the_next_submit_starts_another(tmp_path, caplog):
    store = FailingOnceStore(tmp_path / "store")
    writer = StoreWriter(store)
    writer.submit([record("lost")])
    assert writer.flush(timeout=30)  # the failed batch counts as done: nothing waits for it forever
    for thread in writer_threads():
        thread.join(30)
    assert not writer_threads() and "failed; its batch is lost" in caplog.text
    writer.submit([record("kept")])
    assert writer.flush(timeout=30)
    assert store.batches == [["kept"]]
    writer.close()
    assert not writer_threads()
