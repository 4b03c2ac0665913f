"""Start-up at scale: construction opens no video file, compact sample lists, pickling, shards open their own files."""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from parallel_loader import DataLoader
from parallel_loader._faults.quarantine import Quarantine
from parallel_loader.video import (
    IndexCache,
    SampleList,
    VideoDataset,
    VideoFolder,
    VideoSample,
    kinetics_samples,
    sample_list,
    ucf101_samples,
)
from parallel_loader.video._base import file_pass
from parallel_loader.video._base.file_pass import FileProgress, each_file

from .video_files import video_id, write_video

_VIDEO_SUFFIXES = (".avi", ".mp4")
_opened: list[str] | None = None  # the files the audit hook records, while a test traces


def _audit(event: str, args: tuple) -> None:
    if _opened is not None and event == "open" and isinstance(args[0], str) and args[0].endswith(_VIDEO_SUFFIXES):
        _opened.append(args[0])


sys.addaudithook(_audit)  # hooks cannot be removed: it records only while ``_opened`` is a list


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """Every video file opened while the test runs: by PyAV, by OpenCV, or by Python's ``open``."""
    global _opened
    found: list[str] = []
    real_open, real_capture = av.open, cv2.VideoCapture

    def traced_open(file, *args, **kwargs):
        found.append(os.fspath(file))
        return real_open(file, *args, **kwargs)

    def traced_capture(file, *args, **kwargs):
        found.append(os.fspath(file))
        return real_capture(file, *args, **kwargs)

    monkeypatch.setattr(av, "open", traced_open)
    monkeypatch.setattr(cv2, "VideoCapture", traced_capture)
    _opened = found
    yield found
    _opened = None


@pytest.fixture(scope="module")
def kinetics(tmp_path_factory) -> tuple[Path, Path]:
    """Eight trimmed clips in two classes and their Kinetics-style CSV: (csv, root)."""
    root = tmp_path_factory.mktemp("kinetics")
    rows = ["label,youtube_id,time_start,time_end,split"]
    for k in range(8):
        label = "ab"[k % 2]
        write_video(root / label / f"id{k}_000010_000020.avi", 14 + k, video_id=k)
        rows.append(f"{label},id{k},10,20,train")
    csv_file = root / "train.csv"
    csv_file.write_text("\n".join(rows) + "\n")
    return csv_file, root


def kinetics_data(kinetics, **kwargs) -> VideoDataset:
    csv_file, root = kinetics
    samples = kinetics_samples(csv_file, root, pattern="{label}/{youtube_id}_{time_start:06d}_{time_end:06d}.avi")
    args = dict(batch_size=2, clip_len=4, stride=2, size=(16, 20), seed=3, dtype="uint8") | kwargs
    return VideoDataset(samples, **args)


def test_construction_opens_no_video_file(kinetics, opened, tmp_path):
    data = kinetics_data(kinetics, index_cache=IndexCache(None))
    folder = VideoFolder(kinetics[1], batch_size=2, clip_len=4, size=(16, 20))
    rows = VideoDataset([(str(kinetics[1] / "a/id0_000010_000020.avi"), 0, 0.1, 0.5)], 1, 2)  # a segment
    assert opened == []
    assert len(data) == 4 and len(folder) == 4 and len(rows) == 1  # batches: samples alone tell
    data(0)  # the first read learns the files of its batch
    assert opened and {Path(p).name for p in opened} <= {Path(p).name for p in data.error_context(0)["paths"]}


def test_a_dataset_pickles_small_and_makes_the_same_batches(kinetics):
    data = kinetics_data(kinetics, on_error="skip", quarantine=Quarantine(), index_cache=IndexCache(None))
    data.set_epoch(2)
    first = data(1)
    data.quarantine.add("/nowhere/x.avi", "found bad")
    blob = pickle.dumps(data)
    copy = pickle.loads(blob)
    assert (
        copy.epoch == 2 and copy.skipped == {"/nowhere/x.avi": "found bad"} and copy.skipped is copy.quarantine.reasons
    )
    assert isinstance(copy.index_cache, IndexCache) and copy.index_cache is not data.index_cache
    np.testing.assert_array_equal(copy(1)[0], first[0])
    np.testing.assert_array_equal(copy.get_batch(0, 5)[0], data.get_batch(0, 5)[0])
    assert len(blob) < 4096  # arrays and a few strings: no per-sample objects, no epoch order


def test_a_dataset_unpickled_in_a_fresh_process_makes_the_same_batch(kinetics, tmp_path):
    """What a spawned worker process gets: the pickle alone, no state of this process."""
    data = kinetics_data(kinetics)
    data.set_epoch(3)
    clips, labels = data.get_batch(1, 3)
    script = (
        "import pickle, sys, numpy as np; data = pickle.load(sys.stdin.buffer); "
        "clips, labels = data.get_batch(1, 3); np.save(sys.argv[1], clips); print(labels.tolist(), data.epoch)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "clips.npy")],
        input=pickle.dumps(data), capture_output=True, timeout=120, check=False,
        env=os.environ | {"PARALLEL_LOADER_VIDEO_INDEX": "off"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == [*str(labels.tolist()).split(), "3"]
    np.testing.assert_array_equal(np.load(tmp_path / "clips.npy"), clips)


def test_sample_lists_are_compact_and_index_and_slice_like_tuples(tmp_path):
    rows = [(f"v{k:06d}.mp4", k % 7, float(k % 5), float(k % 5 + 3)) for k in range(20_000)]
    samples = sample_list(rows, root=str(tmp_path))
    columns = samples._columns
    held = sum(
        a.nbytes
        for a in (columns.offsets, columns.labels, columns.starts, columns.ends, columns.kinds, columns.numbers)
    )
    assert (held + len(columns.names)) / len(
        samples
    ) < 60  # about 11 bytes of name, 8 offset, 4 label, 16 times, 8 origin
    assert samples[3] == VideoSample(str(tmp_path / "v000003.mp4"), 3, 3.0, 6.0, "sample 3")
    assert samples[-1].path.endswith("v019999.mp4") and samples[-1].origin == "sample 19999"
    part = samples[100:103]
    assert isinstance(part, SampleList) and len(part) == 3 and part.classes == samples.classes
    assert [s.label for s in part] == [100 % 7, 101 % 7, 102 % 7] and part[0] == samples[100]
    assert [s.path for s in samples[10:4:-3]] == [samples[10].path, samples[7].path]
    with pytest.raises(IndexError, match="out of range"):
        samples[20_000]
    again = pickle.loads(pickle.dumps(samples))
    assert again == samples and len(pickle.dumps(samples)) < 60 * len(samples)
    assert SampleList(("a",), [VideoSample("x.avi", 0, origin="list.txt, line 07")])[0].origin == "list.txt, line 07"


def test_missing_files_are_named_at_construction_by_listing_folders_or_found_at_their_first_read(kinetics, opened):
    root = kinetics[1]
    gone = root / "b" / "id9_000010_000020.avi"
    rows = [(str(root / "a/id0_000010_000020.avi"), 0), (str(gone), 1), (str(root / "nofolder/x.avi"), 1)]
    with pytest.raises(FileNotFoundError, match=r"2 of 3 videos are missing: .*id9.*sample 1.*nofolder"):
        VideoDataset(rows, 1, 4, size=(16, 20))
    data = VideoDataset(rows, 1, 4, size=(16, 20), on_error="skip")
    assert len(data) == 1 and set(data.skipped) == {str(gone), str(root / "nofolder/x.avi")}
    assert opened == []
    data = VideoDataset(rows, 3, 4, size=(16, 20), on_error="skip", train=False, find_missing=False)
    assert len(data) == 1 and not data.skipped and opened == []  # nothing looked at: found when read
    clips, _ = data(0)  # evaluation: the two missing files are left out
    assert len(clips) == 1 and set(data.skipped) == {str(gone), str(root / "nofolder/x.avi")}
    assert data.skipped[str(gone)].endswith("(listed at sample 1)")


def test_a_sharded_two_worker_run_opens_only_its_shards_files(tmp_path, opened):
    for k in range(16):
        write_video(tmp_path / "ab"[k % 2] / f"v{k:02d}.avi", 12, video_id=k)
    names = {k: str(tmp_path / "ab"[k % 2] / f"v{k:02d}.avi") for k in range(16)}
    seen: list[set[str]] = []
    for shard in (0, 1):
        data = VideoFolder(tmp_path, 2, 4, size=(16, 20), seed=1, dtype="uint8", index_cache=IndexCache(None))
        opened.clear()
        shards = dict(num_shards=2, shard_index=shard, shuffle=True, seed=5, overlap_epochs=False)  # one epoch
        with DataLoader(data, num_threads=2, **shards) as loader:
            ids = {video_id(clip) for clips, _ in loader for clip in clips}
        assert len(ids) == 8  # half the samples, each once
        assert set(opened) == {names[k] for k in ids}  # its own samples' files, and no other
        seen.append(set(opened))
    assert not seen[0] & seen[1]


def test_ucf_and_folder_readers_open_no_video(tmp_path, opened):
    for name in ("A", "B"):
        write_video(tmp_path / "videos" / name / f"v_{name}_g01_c01.avi", 8)
    (tmp_path / "classInd.txt").write_text("1 A\n2 B\n")
    (tmp_path / "trainlist01.txt").write_text("A/v_A_g01_c01.avi 1\nB/v_B_g01_c01.avi 2\n")
    samples = ucf101_samples(tmp_path / "videos", tmp_path, split=1, subset="train")
    assert len(VideoDataset(samples, 1, 4)) == 2 and opened == []


def test_exact_counts_index_every_file_on_threads_with_progress_in_the_log(kinetics, caplog, monkeypatch):
    monkeypatch.setattr(file_pass, "_is_terminal", lambda stream: False)  # as in a job's log, even under pytest -s
    with caplog.at_level(logging.INFO, logger="parallel_loader.video._base.file_pass"):
        data = kinetics_data(kinetics, exact_counts=True, index_cache=IndexCache(None))
    assert len(data.index_cache) == 8
    assert "counting frames (exact_counts=True): 8 of 8 files (100%)" in caplog.text


def test_file_progress_logs_a_line_every_few_percent_without_a_terminal(caplog):
    with (
        caplog.at_level(logging.INFO, logger="parallel_loader.video._base.file_pass"),
        FileProgress(200, "checking", bar=False) as p,
    ):
        for _ in range(200):
            p.update({"broken": 0})
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 20 and lines[0].startswith("checking: 10 of 200 files (5%)") and "(100%)" in lines[-1]
    assert lines[-1].endswith("0 broken")


def test_each_file_gives_each_outcome_and_raises_none():
    def work(path: str) -> int:
        if path == "bad":
            raise ValueError("no")
        return len(path)

    outcomes = {
        p: (r, type(e).__name__ if e else None) for p, r, e in each_file(["a", "bb", "bad"], work, "x", 2, False)
    }
    assert outcomes == {"a": (1, None), "bb": (2, None), "bad": (None, "ValueError")}
