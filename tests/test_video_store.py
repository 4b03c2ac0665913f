"""Indexes kept by default and shared: the store on disk (several writers, damaged and stale records), memory."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from benchmarks.store_faults import campaign
from benchmarks.store_scale import record_key, synthetic_record
from parallel_loader.video import IndexCache, VideoIndex, read_clip
from parallel_loader.video._base.facts import PACKETS, decode, encode
from parallel_loader.video._base.keys import SourceKey, local_key
from parallel_loader.video._indexes import cache as index_module
from parallel_loader.video._indexes import segments
from parallel_loader.video._indexes import store as store_module
from parallel_loader.video._indexes.packet_table import PacketTable
from parallel_loader.video._indexes.store import FILE_NAME, PACKET_TABLE, IndexStore, Record
from parallel_loader.video._indexes.writer import close_all

from .helpers import join_all
from .video_files import write_encoded_video, write_video

REPO = Path(__file__).resolve().parent.parent

MP4_TICK = Fraction(1, 15360)  # a common MP4 time base: every index keeps its own


@pytest.fixture
def counted(monkeypatch) -> list[str]:
    """The files whose index is made (not found), as they are made."""
    made: list[str] = []
    original = index_module.make_index

    def counting(path, *args):
        made.append(os.fspath(path))
        return original(path, *args)

    monkeypatch.setattr(index_module, "make_index", counting)
    return made


def test_indexes_are_kept_on_disk_by_default_and_a_second_process_finds_them(tmp_path, video_index_store, counted):
    """No setting: the default directory (here the tests' ``$PARALLEL_LOADER_VIDEO_INDEX``) keeps every index."""
    paths = [write_video(tmp_path / f"v{k}.avi", 12 + k, video_id=k) for k in range(3)]
    cache = IndexCache()
    assert cache.directory == video_index_store
    assert [cache.get(p).frames for p in paths] == [12, 13, 14]
    assert len(counted) == 3
    code = f"""
        import sys
        from parallel_loader.video import IndexCache
        from parallel_loader.video._indexes import cache as index
        def refuse(path, *args):
            sys.exit(f"{{path}} was indexed again")
        index._make = refuse
        print([IndexCache().get(p).frames for p in {[str(p) for p in paths]!r}])
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[12, 13, 14]"


def test_the_directory_comes_from_the_argument_or_the_environment_and_can_be_off(tmp_path, monkeypatch):
    assert IndexCache(tmp_path / "mine").directory == tmp_path / "mine"
    assert IndexCache(None).directory is None
    monkeypatch.setenv(index_module.ENVIRONMENT_VARIABLE, "off")
    assert IndexCache().directory is None
    monkeypatch.delenv(index_module.ENVIRONMENT_VARIABLE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert IndexCache().directory == tmp_path / "xdg" / "parallel_loader" / "video_index"


def test_a_changed_file_is_indexed_again(tmp_path, counted):
    path = write_video(tmp_path / "v.avi", 12)
    assert IndexCache(tmp_path / "store").get(path).frames == 12
    write_video(path, 20)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # however coarse the clock
    assert IndexCache(tmp_path / "store").get(path).frames == 20
    assert IndexCache(tmp_path / "store").get(path).frames == 20
    assert len(counted) == 2


def damage_entry(directory: Path, name: str) -> None:
    """Flip bytes in the middle of ``name``'s entry, where it lies in the database file (as a bad disk block would)."""
    close_all()  # what the caches' writers queued is in the store first
    store = IndexStore(directory)
    entry = store.get(name).entry
    store.close()
    with contextlib.closing(sqlite3.connect(directory / FILE_NAME)) as db:  # every page in the main file
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    path = directory / FILE_NAME
    data = bytearray(path.read_bytes())
    at = data.find(entry)
    assert at >= 0 and data.find(entry, at + 1) < 0
    data[at + len(entry) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_damaged_and_stale_records_are_never_trusted_and_are_written_over(tmp_path, counted, caplog):
    paths = [write_video(tmp_path / f"v{k}.avi", 10 + k) for k in range(3)]
    store = tmp_path / "store"
    cache = IndexCache(store, max_table_bytes=0)  # one record a file: no packet tables
    for p in paths:
        cache.get(p)
    cache.close()
    damage_entry(store, str(paths[1]))
    damage_entry(store, str(paths[2]))
    counted.clear()
    again = IndexCache(store)
    assert [again.get(p).frames for p in paths] == [10, 11, 12]
    assert counted == [str(paths[1]), str(paths[2])]  # the first record was whole: trusted
    assert len([r for r in caplog.records if "damaged video index store" in r.getMessage()]) == 1  # once
    again.close()
    counted.clear()
    assert [IndexCache(store).get(p).frames for p in paths] == [10, 11, 12]  # made again, and written over
    assert counted == []
    now = time.time_ns()
    stale = Record(str(paths[0]), Record.entry_of(SourceKey(str(paths[0]), 1, "m1"), now, b"\0"), now)
    IndexStore(store).write([stale])  # the newest record, but for another version of the file
    assert IndexCache(store).get(paths[0]).frames == 10
    assert counted == [str(paths[0])]


def test_the_newest_record_of_a_file_counts_and_each_file_has_one(tmp_path):
    paths = [write_video(tmp_path / f"v{k}.avi", 10 + k) for k in range(4)]
    store = tmp_path / "store"
    for p in paths:  # one writer per file, each closed
        cache = IndexCache(store)
        cache.get(p)
        cache.close()
    cache = IndexCache(store)
    cache.distrust(paths[0], "a test says so")  # a second record of the first file, from another writer
    old = Record(str(paths[0]), Record.entry_of(local_key(paths[0]), 1, encode(IndexCache(None).get(paths[0]))), 1)
    IndexStore(store).write([old])  # written last, but older: it does not replace the newer
    fresh = IndexCache(store)
    assert [fresh.get(p).frames for p in paths] == [10, 11, 12, 13]
    assert not fresh.get(paths[0]).seekable and fresh.get(paths[0]).reason == "a test says so"  # the newest
    names = IndexStore(store).names()
    assert sorted(n for n in names if not n.endswith(PACKET_TABLE)) == sorted(str(p) for p in paths)


def test_two_processes_indexing_the_same_files_at_once_end_with_one_valid_entry_per_file(tmp_path):
    original = write_encoded_video(tmp_path / "one.mp4", 8, codec="libx264", gop=4, b_frames=2, size=(16, 16))
    names = [tmp_path / "set" / f"v{k:03d}.mp4" for k in range(200)]
    names[0].parent.mkdir()
    for name in names:
        name.write_bytes(original.read_bytes())
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{n}\n" for n in names))
    store = tmp_path / "store"
    start = tmp_path / "start"
    code = f"""
        import os, random, sys, time
        from parallel_loader.video import IndexCache
        paths = open({str(listing)!r}).read().split()
        random.Random(int(sys.argv[1])).shuffle(paths)
        while not os.path.exists({str(start)!r}):
            time.sleep(0.001)
        cache = IndexCache({str(store)!r})
        print(sum(cache.get(p).frames for p in paths))
    """
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), str(seed)], cwd=REPO, stdout=subprocess.PIPE, text=True
        )
        for seed in (1, 2)
    ]
    time.sleep(0.5)  # both started, waiting for the file
    start.touch()
    outputs = [w.communicate(timeout=120)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0]
    assert [o.strip() for o in outputs] == ["1600", "1600"]
    store = IndexStore(store)
    records = [store.get(name) for name in store.names()]
    tables = [r for r in records if r.name.endswith(PACKET_TABLE)]  # each file's packet table, kept apart
    indexes = [r for r in records if r not in tables]
    assert sorted(r.name for r in indexes) == sorted(str(n) for n in names)  # one per file
    assert sorted(r.name for r in tables) == sorted(f"{n}\x00packets" for n in names)
    for record in indexes:
        size, version, _, offset = Record.parse_entry(record.entry)
        assert SourceKey(record.name, size, version) == local_key(record.name)
        index = decode(record.entry, offset)
        assert (index.frames, index.seekable) == (8, True)
    for record in tables:
        size, version, _, offset = Record.parse_entry(record.entry)
        assert len(PacketTable.decode(record.entry[offset:]).pos) == 8


def test_writers_killed_while_writing_lose_only_what_they_had_not_finished(tmp_path):
    """8 processes write 2,000 records each to one store; 3 are SIGKILLed at random moments (see the benchmark)."""
    result = campaign(tmp_path / "store", writers=8, records=2_000, killed=3, seed=1)
    assert result["killed"] == 3 and result["failed"] == 0
    assert 5 * 2_000 <= result["finished"] <= 8 * 2_000  # the 5 left finished; a killed one may have too
    assert result["lost"] == 0 and result["wrong"] == 0


def test_threads_share_the_store_and_a_forked_child_opens_its_own_connection(tmp_path):
    store = tmp_path / "store"
    IndexStore(store).write(synthetic_record(k) for k in range(200))
    cache = IndexCache(store)
    index = cache.lookup(record_key(0))  # the parent opens its connection
    found: dict[int, bool] = {}

    def look_up(first: int) -> None:
        for k in range(first, 200, 4):
            found[k] = cache.lookup(record_key(k)) is not None

    threads = [threading.Thread(target=look_up, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    join_all(threads)
    assert len(found) == 200 and all(found.values())
    child = os.fork()
    if child == 0:
        code = 1
        try:
            cache.put(record_key(500), index)
            assert cache.flush(timeout=30)  # os._exit runs no exit handler: what is queued is written first
            code = 0 if cache._store._pid == os.getpid() and cache._store.writable else 1
        finally:
            os._exit(code)
    assert os.waitpid(child, 0)[1] == 0
    assert IndexCache(store).lookup(record_key(500)) is not None
    assert cache.lookup(record_key(100)) is not None  # the parent's connection still works


def test_a_packet_table_that_left_memory_is_taken_from_the_store_again_unless_forgotten(tmp_path):
    one = write_encoded_video(tmp_path / "one.mp4", 8, codec="libx264", gop=4, b_frames=2, size=(16, 16))
    two = tmp_path / "two.mp4"
    two.write_bytes(one.read_bytes())
    writer = IndexCache(tmp_path / "store")
    assert writer.get_with_table(one)[1] is not None and writer.get_with_table(two)[1] is not None
    small = IndexCache(tmp_path / "store", max_table_bytes=writer.table_memory // 2)  # room for one table
    assert small.get_with_table(one)[1] is not None and small.get_with_table(two)[1] is not None
    assert len(small._tables) == 1  # the first table left memory
    assert small.get_with_table(one)[1] is not None  # from the store again
    small.forget_table(one)
    assert small.get_with_table(one)[1] is None  # forgotten: not taken from the store again
    assert IndexCache(tmp_path / "store").get_with_table(one)[1] is not None  # another cache still finds it


def test_a_million_entries_fit_the_documented_bound_without_eviction():
    """1,000,000 synthetic entries (Kinetics-like: 300 frames, 5 keyframes, a 63-character path), no video."""
    cache = IndexCache(None)
    index = VideoIndex(300, (0, 60, 120, 180, 240), True, "", 0, 512, intact=True, made_by=PACKETS, time_base=MP4_TICK)
    body = encode(index)
    count = 1_000_000
    with cache._lock:
        for k in range(count):
            name = f"/data/kinetics700/train/class_{k % 700:03d}/{k:011d}_000010_000020.mp4"
            cache._insert(name, Record.entry_of(SourceKey(name, 10**6 + k, f"m{k:x}"), k, body))
    assert len(cache) == count and cache.evicted == 0
    assert cache.memory <= 320 * count <= index_module.DEFAULT_MAX_BYTES  # the class docstring's ~310 bytes each
    k = 123_457
    name = f"/data/kinetics700/train/class_{k % 700:03d}/{k:011d}_000010_000020.mp4"
    found = cache.lookup(SourceKey(name, 10**6 + k, f"m{k:x}"))
    assert found is not None and found.keyframes == index.keyframes and found.pts(299) == 299 * 512
    assert cache.lookup(SourceKey(name, 10**6 + k + 1, f"m{k:x}")) is None  # another size: stale


def test_the_charge_is_what_python_allocates():
    """The charged bytes cover what the entries really take (measured by tracemalloc), on 20,000 entries."""
    import tracemalloc

    cache = IndexCache(None)
    body = encode(
        VideoIndex(300, (0, 60, 120, 180, 240), True, "", 0, 512, intact=True, made_by=PACKETS, time_base=MP4_TICK)
    )
    entries = []
    for k in range(20_000):
        name = f"/data/kinetics700/train/class_{k % 700:03d}/{k:011d}_000010_000020.mp4"
        entries.append((name, Record.entry_of(SourceKey(name, 10**6 + k, f"m{k:x}"), k, body)))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        with cache._lock:
            for name, entry in entries:
                cache._insert(name, entry)
        taken = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    held = sum(sys.getsizeof(n) + sys.getsizeof(e) for n, e in entries)  # made before: counted in both
    assert taken + held <= cache.memory


def test_the_memory_bound_evicts_least_recently_used_first(tmp_path):
    paths = [write_video(tmp_path / f"v{k}.avi", 10 + k) for k in range(3)]
    one = IndexCache(None)
    one.get(paths[0])
    cache = IndexCache(None, max_bytes=2 * one.memory + one.memory // 2)
    cache.get(paths[0])
    cache.get(paths[1])
    cache.get(paths[0])  # now the most recently used
    cache.get(paths[2])
    assert len(cache) == 2 and cache.evicted == 1
    assert cache.lookup(local_key(paths[1])) is None and cache.lookup(local_key(paths[0])) is not None


def test_read_clip_keeps_what_it_learns_in_the_default_store(tmp_path, video_index_store, counted):
    path = write_video(tmp_path / "v.avi", 20)
    clip = read_clip(path, 3, 4, 2)
    assert clip.shape[0] == 4 and counted == [str(path)]
    assert (video_index_store / FILE_NAME).is_file()
    counted.clear()
    np.testing.assert_array_equal(read_clip(path, 3, 4, 2, index_cache=IndexCache()), clip)
    assert counted == []


def test_an_earlier_layouts_segments_are_carried_over_once(tmp_path, counted, caplog):
    """``v2/*.seg`` records (one torn, one damaged) move into the database; the folder is renamed, not read again."""
    paths = [write_video(tmp_path / f"v{k}.avi", 10 + k) for k in range(4)]
    records = []
    for p in paths:
        entry = Record.entry_of(local_key(p), time.time_ns(), encode(IndexCache(None).get(p)))
        records.append((str(p), entry))
    store = tmp_path / "store"
    (store / "v2").mkdir(parents=True)
    (store / "v2" / "a.seg").write_bytes(segments.frame(records[:2]))
    damaged = bytearray(segments.frame(records[2:3]))
    damaged[-5] ^= 0xFF  # its checksum fails
    torn = segments.frame(records[3:])
    (store / "v2" / "b.seg").write_bytes(bytes(damaged) + torn[: len(torn) // 2])  # a writer killed mid-write
    counted.clear()
    with caplog.at_level(logging.INFO, logger=store_module.__name__):
        cache = IndexCache(store)
        assert [cache.get(p).frames for p in paths] == [10, 11, 12, 13]
    assert counted == [str(paths[2]), str(paths[3])]
    assert [r.getMessage().split(" from ")[0] for r in caplog.records] == ["carried 2 video indexes over"]
    assert not (store / "v2").exists() and (store / "v2.carried-over" / "a.seg").is_file()
    cache.close()
    counted.clear()
    caplog.clear()
    assert [IndexCache(store).get(p).frames for p in paths] == [10, 11, 12, 13]
    assert counted == [] and caplog.records == []


def test_a_file_that_is_no_database_leaves_indexes_in_memory_with_one_warning(tmp_path, counted, caplog):
    path = write_video(tmp_path / "v.avi", 10)
    store = tmp_path / "store"
    store.mkdir()
    (store / FILE_NAME).write_bytes(b"not a database" * 500)
    cache = IndexCache(store)
    assert cache.get(path).frames == 10 and cache.get(path).frames == 10
    assert counted == [str(path)]  # made once, then held in memory
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "cannot open the video index store" in warning and "kept in memory only" in warning
    assert (store / FILE_NAME).read_bytes() == b"not a database" * 500


def test_on_a_network_file_system_the_store_keeps_a_rollback_journal_not_wal(tmp_path, monkeypatch):
    """NFS gives no shared memory across hosts, which WAL needs; a rollback journal needs only file locks."""
    assert store_module.file_system(tmp_path) not in store_module.NETWORK_FILE_SYSTEMS  # this test's own disk
    monkeypatch.setattr(store_module, "file_system", lambda path: "nfs4")
    store = IndexStore(tmp_path / "store")
    store.write(synthetic_record(k) for k in range(10))
    assert store.get(record_key(3).slot) == store.get(record_key(3).slot) is not None
    with contextlib.closing(sqlite3.connect(tmp_path / "store" / FILE_NAME)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    store.close()
    assert sorted(os.listdir(tmp_path / "store")) == [FILE_NAME]  # no -wal, no -shm
    monkeypatch.setattr(store_module, "file_system", lambda path: "ext4")
    again = IndexStore(tmp_path / "store")  # a local disk again: WAL
    assert again.get(record_key(3).slot).entry == store.get(record_key(3).slot).entry
    with contextlib.closing(sqlite3.connect(tmp_path / "store" / FILE_NAME)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again.close()


def test_a_read_only_store_is_read_and_never_written(tmp_path, monkeypatch, counted):
    paths = [write_video(tmp_path / f"v{k}.avi", 10 + k) for k in range(2)]
    store = tmp_path / "store"
    made = IndexCache(store)
    made.get(paths[0])
    made.close()
    before = (store / FILE_NAME).read_bytes()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if mode & os.W_OK else real_access(path, mode))
    counted.clear()
    cache = IndexCache(store)
    assert [cache.get(p).frames for p in paths] == [10, 11]
    assert counted == [str(paths[1])] and cache._store.read_only  # the second is kept in memory only
    cache.close()
    assert (store / FILE_NAME).read_bytes() == before
    assert sorted(os.listdir(store)) == [FILE_NAME]


def test_the_command_line_indexes_a_tree_reports_what_does_not_seek_and_resumes(tmp_path, capsys, counted):
    from parallel_loader.video._commands.index import main

    root = tmp_path / "videos"
    good = [write_video(root / "a" / f"v{k}.avi", 10 + k) for k in range(3)]
    (root / "b" / "broken.mp4").parent.mkdir()
    (root / "b" / "broken.mp4").write_bytes(b"not a video")
    (root / "b" / "notes.txt").write_text("not a video extension: left out")
    store = tmp_path / "store"
    assert main([str(root), "--threads", "2", "--cache", str(store), "--quiet"]) == 1  # one file failed
    out = capsys.readouterr().out
    assert "4 videos" in out and "0 found, 3 made, 0 not seekable, 1 failed" in out
    assert f"{root / 'b' / 'broken.mp4'}: cannot be opened as a video" in out
    counted.clear()
    raw = write_encoded_video(tmp_path / "raw.h264", 12, codec="libx264", container="h264", gop=4)
    listing = tmp_path / "train.txt"
    listing.write_text(f"videos/a/v0.avi 1\n# a comment\n{good[2]} 3\nraw.h264 2\n")
    assert main([str(listing), "--cache", str(store), "--quiet"]) == 0  # resumed: two found, one made
    out = capsys.readouterr().out
    assert "2 found, 1 made, 1 not seekable, 0 failed" in out and counted == [str(raw)]
    assert f"{raw}: 12 of 12 frames have no timestamp" in out
    counted.clear()
    assert IndexCache(store).get(good[1]).frames == 11 and counted == []


def test_video_datasets_take_an_index_cache(tmp_path, counted):
    from parallel_loader.video import VideoDataset, VideoFolder

    root = tmp_path / "set"
    for k in range(2):
        write_video(root / "a" / f"v{k}.avi", 12, video_id=k)
    mine = IndexCache(tmp_path / "mine")
    folder = VideoFolder(root, batch_size=2, clip_len=2, size=(16, 16), index_cache=mine, exact_counts=True)
    folder(0)
    assert len(mine) == 2 and len(counted) == 2
    samples = [(str(root / "a" / f"v{k}.avi"), "a") for k in range(2)]
    again = IndexCache(tmp_path / "mine")
    VideoDataset(samples, batch_size=2, clip_len=2, size=(16, 16), index_cache=again)(0)
    assert len(again) == 2 and len(counted) == 2  # found in the store
    with pytest.raises(TypeError, match="index_cache"):
        VideoDataset(samples, batch_size=2, clip_len=2, index_cache=str(tmp_path))
