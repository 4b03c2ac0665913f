"""Bad data at dataset scale: under a skipping loader one bad sample costs one sample, its file is tried once,
the manifest holds one record per bad file with its count of draws replaced, and the budget counts samples."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from parallel_loader import DataLoader, Train
from parallel_loader._faults.errors import ErrorBudgetExceeded
from parallel_loader._faults.quarantine import InProcessMemory, Quarantine, lasting
from parallel_loader.video import VideoDataset, VideoDecodeError, VideoFolder
from parallel_loader.video._samples.annotations import folder_samples, sample_list

from .process_data import BadSamples
from .video_files import truncate, video_id, write_video

EPOCHS = 5
CLIP_LEN = 8


def write_forty(root: Path) -> list[str]:
    """40 short videos in two classes under ``root``; two truncated so that they open but no clip of CLIP_LEN
    frames decodes (6 of their 30 frames do; the header still claims 30). Returns those two."""
    bad = []
    for v in range(40):
        path = write_video(root / "ab"[v % 2] / f"v{v:02d}.avi", 30, video_id=v % 19, fourcc="MJPG")
        if v in (7, 26):
            bad.append(str(truncate(path, 0.5)))
    return bad


@pytest.fixture(scope="module")
def forty(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("forty")
    return root, write_forty(root)


def manifest_records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def check_full_epochs_and_one_record_per_bad_file(data, bad: list[str], manifest: Path, processes: int = 0) -> None:
    options = {"num_threads": 1, "processes": processes} if processes else {"num_threads": 2}
    with DataLoader(data, max_len=2, on_error="skip", error_log=manifest, **options) as loader:
        for _ in range(EPOCHS):
            batches = list(loader)
            assert len(batches) == len(loader) == 10
            assert all(clips.shape[0] == 4 and len(labels) == 4 for clips, labels in batches)
    records = manifest_records(manifest)
    assert sorted(r["context"]["path"] for r in records) == sorted(bad)
    # Each bad file is drawn once an epoch (and maybe as another's replacement, or in the epoch made ahead).
    assert all(r["replaced"] >= EPOCHS and r["type"] == "VideoDecodeError" for r in records)
    counts = {r.context["path"]: r.replaced for r in loader.errors}
    assert counts == {r["context"]["path"]: r["replaced"] for r in records}  # the file's counts are up to date


def test_a_skipping_loader_over_a_video_folder_replaces_clips_and_keeps_one_record_per_bad_file(forty, tmp_path):
    root, bad = forty
    data = VideoFolder(root, batch_size=4, clip_len=CLIP_LEN, size=(16, 20), seed=1, dtype="uint8")
    assert data.on_error == "raise"  # the loader's option alone makes it replace
    check_full_epochs_and_one_record_per_bad_file(data, bad, tmp_path / "bad.jsonl")
    assert set(data.skipped) == set(bad)
    assert "ends after" in data.skipped[bad[0]] or "truncated" in data.skipped[bad[0]]


def test_the_same_for_a_video_dataset_over_a_path_label_list(forty, tmp_path):
    root, bad = forty
    rows = [(s.path, s.label) for s in folder_samples(root)]
    data = VideoDataset(rows, batch_size=4, clip_len=CLIP_LEN, size=(16, 20), seed=2, dtype="uint8")
    check_full_epochs_and_one_record_per_bad_file(data, bad, tmp_path / "bad.jsonl")


def test_in_worker_processes_a_bad_sample_is_replaced_as_in_threads(forty, tmp_path):
    root, bad = forty
    rows = [(s.path, s.label) for s in folder_samples(root)]
    data = VideoDataset(rows, batch_size=4, clip_len=CLIP_LEN, size=(16, 20), seed=2, dtype="uint8")
    check_full_epochs_and_one_record_per_bad_file(data, bad, tmp_path / "bad.jsonl", processes=2)


def test_in_worker_processes_a_truncated_video_raises_the_video_decode_error_naming_it(forty):
    _, bad = forty
    data = VideoDataset([(bad[0], 0)] * 4, batch_size=4, clip_len=CLIP_LEN, size=(16, 20))
    with DataLoader(data, num_threads=1, processes=2) as loader, pytest.raises(VideoDecodeError) as raised:
        list(loader)
    assert raised.value.path == bad[0] and bad[0] in str(raised.value)
    assert any("worker process" in note for note in raised.value.__notes__)


def test_a_quarantined_file_is_not_opened_again_in_the_run(tmp_path):
    for v in range(8):
        write_video(tmp_path / "a" / f"v{v}.avi", 12, video_id=v)
    gone = tmp_path / "a" / "v3.avi"
    data = VideoFolder(tmp_path, batch_size=4, clip_len=4, size=(16, 20), seed=0, dtype="uint8")
    with DataLoader(data, num_threads=2, on_error="skip") as loader:
        gone.rename(tmp_path / "v3.moved")
        first = [video_id(c) for clips, _ in loader for c in clips]
        (tmp_path / "v3.moved").rename(gone)  # back, whole: a run that opened it again would deliver its clips
        later = [video_id(c) for _ in range(3) for clips, _ in loader for c in clips]
    assert 3 not in first and 3 not in later and len(first) == 8 and len(later) == 24
    (record,) = loader.errors
    assert record.type == "FileNotFoundError" and record.context["path"] == str(gone) and record.replaced >= 4


class Samples:
    """A sample dataset of ``length`` numbers; ``lasting`` samples always raise, ``passing`` ones once each."""

    def __init__(self, length: int, lasting=(), passing=()) -> None:
        self.length = length
        self.lasting = set(lasting)
        self.passing = set(passing)
        self.calls: dict[int, int] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> int:
        with self._lock:
            self.calls[i] = self.calls.get(i, 0) + 1
            first = self.calls[i] == 1
        if i in self.lasting:
            raise ValueError(f"sample {i} is corrupt")
        if i in self.passing and first:
            raise TimeoutError(f"sample {i}: read timed out")
        return i


def test_sample_batches_replace_a_failing_sample_and_quarantine_only_lasting_failures():
    samples = Samples(40, lasting=[5], passing=[9])
    with DataLoader(samples, batch_size=4, num_threads=2, on_error="skip", shuffle=True, seed=3) as loader:
        epochs = [[list(b) for b in loader] for _ in range(3)]
    for batches in epochs:
        assert len(batches) == 10 and all(len(b) == 4 for b in batches)
        assert 5 not in [x for b in batches for x in b]
    assert samples.calls[5] == 1  # in quarantine after its first failure
    assert samples.calls[9] >= 3 and 9 in [x for b in epochs[1] for x in b]  # tried again, and came
    records = {r.context["key"]: r for r in loader.errors}
    assert set(records) == {"sample 5", "sample 9"}
    assert records["sample 5"].replaced >= 3 and records["sample 9"].replaced == 1
    assert records["sample 9"].type == "TimeoutError"


@pytest.mark.parametrize("threads", [1, 3])
def test_replaced_samples_are_the_same_whatever_the_threads(threads):
    def run(n):
        samples = Samples(30, lasting=[2, 17])
        with DataLoader(
            samples, batch_size=4, num_threads=n, on_error="skip", shuffle=True, seed=5, ordered=True
        ) as loader:
            return [[list(b) for b in loader] for _ in range(2)]

    assert run(threads) == run(2)


def test_without_skip_a_failing_sample_still_raises():
    loader = DataLoader(Samples(8, lasting=[3]), batch_size=4, num_threads=1)
    with loader, pytest.raises(ValueError, match="sample 3 is corrupt"):
        list(loader)


@pytest.mark.parametrize("batch_size", [1, 4, 8])
def test_the_budget_counts_replaced_samples_as_a_fraction_of_samples_whatever_the_batch_size(batch_size):
    def run(max_errors):
        samples = Samples(80, lasting=[37, 61])  # 2.5% of the samples; as whole batches of 8, 20%
        # One thread, one batch queued: a failure is checked against about the calls made up to it.
        loader = DataLoader(samples, batch_size=batch_size, num_threads=1, max_len=1, on_error="skip",
                            max_errors=max_errors, seed=0)  # fmt: skip
        with loader:
            return [len(list(loader)) for _ in range(2)]

    assert run(0.1) == [80 // batch_size] * 2
    with pytest.raises(ErrorBudgetExceeded, match=r"max_errors=1\.00% of (samples|calls)"):
        run(0.01)


def test_an_int_budget_counts_each_bad_item_once():
    samples = Samples(20, lasting=[4])
    with DataLoader(samples, batch_size=4, num_threads=1, on_error="skip", max_errors=1) as loader:
        for _ in range(4):  # drawn every epoch, still one error
            assert len(list(loader)) == 5
    two = DataLoader(Samples(20, lasting=[4, 8]), batch_size=4, num_threads=1, on_error="skip", max_errors=1)
    with two, pytest.raises(ErrorBudgetExceeded):
        list(two)


def test_two_loaders_sharing_a_manifest_keep_their_lines_and_counts(tmp_path):
    manifest = tmp_path / "shared.jsonl"
    first = DataLoader(Samples(12, lasting=[1]), batch_size=3, num_threads=1, on_error="skip", error_log=manifest)
    second = DataLoader(Samples(12, lasting=[2]), batch_size=3, num_threads=1, on_error="skip", error_log=manifest)
    with first, second:
        for _ in range(3):
            list(first)
            list(second)
    records = manifest_records(manifest)
    expected = [(r.context["key"], r.replaced) for r in first.errors + second.errors]
    assert [(r["context"]["key"], r["replaced"]) for r in records] == expected
    assert [key for key, _ in expected] == ["sample 1", "sample 2"] and all(n >= 3 for _, n in expected)


def test_lasting_tells_failures_that_may_pass():
    assert lasting(FileNotFoundError(2, "gone")) and lasting(VideoDecodeError("x.avi", "truncated"))
    assert lasting(ValueError("corrupt"))
    assert not lasting(TimeoutError("slow")) and not lasting(PermissionError("later"))


def test_a_quarantine_memory_keeps_a_bad_file_while_its_size_and_mtime_are_unchanged(tmp_path):
    path = tmp_path / "clip.avi"
    path.write_bytes(b"not a video")
    memory = InProcessMemory()
    Quarantine(memory).add(str(path), "not a video", str(path))
    assert Quarantine(memory).reason(str(path), str(path)) == "not a video"  # a later run knows it
    path.write_bytes(b"replaced by a longer file")
    assert Quarantine(memory).reason(str(path), str(path)) is None
    segment = Quarantine(memory)
    assert segment.add(f"{path} [1, 2) s", "too short", str(path)) and not segment.add(f"{path} [1, 2) s", "again")
    assert Quarantine(memory).reason(f"{path} [1, 2) s", str(path)) is None  # a segment is kept for the run only


def test_a_dataset_whose_quarantine_remembers_a_file_never_opens_it(tmp_path):
    for v in range(4):
        write_video(tmp_path / "a" / f"v{v}.avi", 12, video_id=v)
    known = tmp_path / "a" / "v1.avi"
    memory = InProcessMemory()
    Quarantine(memory).add(str(known), "found broken last run", str(known))
    data = VideoFolder(tmp_path, batch_size=2, clip_len=4, size=(16, 20), dtype="uint8", quarantine=Quarantine(memory))
    with DataLoader(data, num_threads=1, on_error="skip") as loader:
        ids = [video_id(c) for clips, _ in loader for c in clips]
    assert 1 not in ids and len(ids) == 4
    (record,) = loader.errors
    assert record.context == {"path": str(known), "reason": "found broken last run"}


def test_exclude_leaves_listed_files_out_of_readers_and_datasets(forty, tmp_path):
    root, bad = forty
    listed = tmp_path / "broken.jsonl"
    listed.write_text("".join(json.dumps({"path": p, "reason": "r"}) + "\n" for p in bad))
    assert len(folder_samples(root, exclude=listed)) == 38
    rows = [(s.path, s.label) for s in folder_samples(root)]
    assert len(sample_list(rows, exclude=bad)) == 38
    data = VideoFolder(root, batch_size=4, clip_len=CLIP_LEN, size=(16, 20), exclude=listed)
    assert not {p for p, _, _ in data.samples} & set(bad) and len(data.samples) == 38
    with pytest.raises(ValueError, match="every one of the 2 samples"):
        sample_list(rows[:2], exclude=[r[0] for r in rows[:2]])


def test_a_loader_that_raises_still_raises_from_a_video_dataset(forty):
    _, bad = forty
    data = VideoDataset([(p, 0) for p in bad[:1]] * 4, batch_size=4, clip_len=CLIP_LEN, size=(16, 20))
    with DataLoader(data, num_threads=1) as loader, pytest.raises(VideoDecodeError):
        list(loader)
    assert not loader.errors


@pytest.mark.parametrize("seed", range(8))  # the replacement is drawn from the seed: never the failing file again
@pytest.mark.parametrize("train", [True, False])  # evaluation leaves the sample out instead
def test_a_video_failing_for_now_is_replaced_but_tried_again(tmp_path, monkeypatch, seed, train):
    import parallel_loader.video._datasets.reader as dataset_module

    for v in range(4):
        write_video(tmp_path / "a" / f"v{v}.avi", 12, video_id=v)
    slow = str(tmp_path / "a" / "v2.avi")
    real_read, failed = dataset_module.read_frames, []  # every clip of a dataset is read through it

    def read_once_timing_out(path, *args, **kwargs):
        if path == slow and not failed:
            failed.append(path)
            raise TimeoutError(f"{path}: read timed out")
        return real_read(path, *args, **kwargs)

    monkeypatch.setattr(dataset_module, "read_frames", read_once_timing_out)
    data = VideoFolder(tmp_path, batch_size=2, clip_len=4, size=(16, 20), dtype="uint8", train=train, seed=seed)
    with DataLoader(data, num_threads=1, on_error="skip", ordered=True) as loader:
        first = [video_id(c) for clips, _ in loader for c in clips]
        second = [video_id(c) for clips, _ in loader for c in clips]
    assert failed == [slow] and 2 not in first and len(first) == (4 if train else 3)
    assert sorted(second) == [0, 1, 2, 3] and not data.skipped  # not in quarantine: tried again, and delivered
    (record,) = loader.errors
    assert record.type == "TimeoutError" and record.replaced == 1


def test_an_evaluation_pass_leaves_a_bad_video_out_and_counts_every_other_once(forty, tmp_path):
    root, bad = forty
    manifest = tmp_path / "bad.jsonl"
    data = VideoFolder(root, batch_size=4, clip_len=CLIP_LEN, size=(16, 20), dtype="uint8", train=False)
    with DataLoader(data, num_threads=2, on_error="skip", error_log=manifest) as loader:
        batches = list(loader)
    assert len(batches) == 10 and sorted(len(labels) for _, labels in batches) == [3, 3] + [4] * 8
    delivered = [int(x) for clips, labels in batches for x in labels]
    ids = sorted(video_id(c) for clips, _ in batches for c in clips)
    good = [v for v in range(40) if str(root / "ab"[v % 2] / f"v{v:02d}.avi") not in bad]
    assert ids == sorted(v % 19 for v in good)  # each good video once, the bad ones not at all, no stand-in
    assert sorted(delivered) == sorted(v % 2 for v in good)
    assert sorted(r["context"]["path"] for r in manifest_records(manifest)) == sorted(bad)  # reported and counted
    assert all(r["replaced"] >= 1 for r in manifest_records(manifest))  # more from the epoch made ahead


def test_train_passes_skip_on_so_its_batches_come_full(tmp_path):
    sizes: list[int] = []
    manifest = tmp_path / "bad.jsonl"
    trainer = Train(
        lambda batch: sizes.append(len(batch)), Samples(20, lasting=[3]), batch_size=4, num_threads=2, seed=0,
        on_error="skip", error_log=manifest,
    )  # fmt: skip
    trainer.run(3)
    assert sizes == [4] * 15
    (record,) = manifest_records(manifest)
    assert record["context"]["key"] == "sample 3" and record["replaced"] >= 3


def test_a_resumed_run_with_one_bad_file_and_a_fractional_budget_runs_to_the_end(forty):
    """The budget after a resume is of the whole run's samples; the bad file's draws cost one sample each."""
    root, bad = forty
    rows = [(s.path, s.label) for s in folder_samples(root) if str(s.path) != bad[1]]

    def loader():
        data = VideoDataset(rows, batch_size=4, clip_len=CLIP_LEN, size=(16, 20), seed=2, dtype="uint8")
        return DataLoader(data, num_threads=2, max_len=2, ordered=True, on_error="skip", max_errors=0.05)

    with loader() as first:
        for n, _ in enumerate(first, 1):
            if n == 8:
                state = json.loads(json.dumps(first.state_dict()))
                break
    assert state["errors"] == 1 and state["calls"] == 8 and 1 <= state["lost"] <= 2
    assert bad[0] in state["first_errors"][0]
    resumed = loader()
    resumed.load_state_dict(state)
    with resumed:
        epochs = [list(resumed) for _ in range(3)]
    assert [len(e) for e in epochs] == [2, 10, 10]
    assert all(clips.shape[0] == 4 for epoch in epochs for clips, _ in epoch)
    final = resumed.state_dict()
    assert final["calls"] == 8 + 2 + 10 + 10 and final["lost"] <= 5


def run_with_bad(bad, processes: int = 0, num_threads: int = 4, epochs: int = 3) -> list[list[int]]:
    """96 samples in batches of 8, shuffle off, overlap on, skip under max_errors=0.05: each epoch's batch sizes.

    The consumer pauses after the first batch, so that the threads make the rest of
    the epoch and the next epoch's first batches ahead meanwhile.
    """
    loader = DataLoader(BadSamples(96, bad), batch_size=8, num_threads=num_threads, shuffle=False, seed=0,
                        overlap_epochs=True, on_error="skip", max_errors=0.05, processes=processes)  # fmt: skip
    sizes: list[list[int]] = []
    with loader:
        for _ in range(epochs):
            sizes.append([])
            for batch in loader:
                sizes[-1].append(len(batch))
                if len(sizes) == 1 and len(sizes[0]) == 1:
                    time.sleep(0.2)
    return sizes


@pytest.mark.parametrize("bad", range(8))
def test_a_bad_sample_in_the_first_batch_costs_one_sample_of_a_fraction_budget_when_delivered(bad):
    """Its draws count when their batch is delivered, as the calls do: not when made, nor made ahead."""
    assert run_with_bad([bad]) == [[8] * 12] * 3


def test_the_same_in_worker_processes():
    assert run_with_bad([1], processes=2, num_threads=2) == [[8] * 12] * 3


def test_a_budget_really_exceeded_in_the_first_batch_still_raises_at_once_naming_its_first_records():
    delivered = []
    loader = DataLoader(BadSamples(96, [0, 1, 2]), batch_size=8, num_threads=1, shuffle=False, seed=0,
                        overlap_epochs=True, on_error="skip", max_errors=0.05)  # fmt: skip
    with loader, pytest.raises(ErrorBudgetExceeded, match=r"3 samples lost .*\(1 of 8\)") as raised:
        delivered.extend(loader)
    assert delivered == []
    assert "index 0: ValueError: sample 0 is corrupt" in str(raised.value)
    assert [r.context["key"] for r in raised.value.errors] == ["sample 0", "sample 1", "sample 2"]
    many = [0, 1, 2, 3, 8, 9, 10, 11]  # 8% of the samples, in the first two batches
    # Several threads make the first two batches at once: the first record is whichever of them failed first.
    first = r"First: epoch 0 index [01]: ValueError: sample (0|1|2|3|8|9|10|11) is corrupt"
    with pytest.raises(ErrorBudgetExceeded, match=first):
        run_with_bad(many, epochs=1)
