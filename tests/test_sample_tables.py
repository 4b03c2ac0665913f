"""Sample tables (``table_samples``) and sample lists shared with other processes through one mapped file.

The tables are small and written here as CSV, JSONL and Parquet. A list crosses
to a fresh Python process by pickle, as it does to a worker process, and must
read the same rows there. No video is opened: the paths need not exist.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parallel_loader.video import AnnotationError, SampleList, VideoDataset, VideoSample, sample_list, table_samples
from parallel_loader.video._samples import sample_list as sample_list_module
from parallel_loader.video._samples import shared_columns
from parallel_loader.video._samples.shared_columns import SharedColumnsGone

ROWS = [
    {"video": "walk/a.mp4", "action": "walk", "begin": "0", "stop": "00:00:01.50"},
    {"video": "run/b.mp4", "action": "run", "begin": "1:02", "stop": "1:03.25"},
    {"video": "/abs/c.mp4", "action": "walk", "begin": "", "stop": ""},
    {"video": "s3://bucket/d.mp4", "action": "jump", "begin": "01:00:00", "stop": "3600.5"},
]
# The same rows as table_samples must give them with root="/data".
EXPECTED = [
    VideoSample("/data/walk/a.mp4", 2, 0.0, 1.5, "{}, row 1"),
    VideoSample("/data/run/b.mp4", 1, 62.0, 63.25, "{}, row 2"),
    VideoSample("/abs/c.mp4", 2, None, None, "{}, row 3"),
    VideoSample("s3://bucket/d.mp4", 0, 3600.0, 3600.5, "{}, row 4"),
]


def write_csv(path: Path, rows: list[dict[str, object]]) -> Path:
    header = list(rows[0])
    lines = [",".join(header)] + [",".join(str(row[c]) for c in header) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def expected(source: Path) -> list[VideoSample]:
    return [VideoSample(s.path, s.label, s.start, s.end, s.origin.format(source)) for s in EXPECTED]


def read(source: Path, **kwargs: object) -> SampleList:
    return table_samples(source, "video", "action", "begin", "stop", root="/data", **kwargs)


def test_a_csv_reads_paths_labels_and_times_in_seconds_or_clock_form(tmp_path):
    source = write_csv(tmp_path / "train.csv", ROWS)
    samples = read(source)
    assert samples.classes == ("jump", "run", "walk")  # sorted, as the other readers do
    assert list(samples) == expected(source)
    assert samples.labels.dtype == np.int32 and samples.heads == 1


def test_jsonl_and_parquet_give_the_same_list_as_csv(tmp_path):
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    parquet = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), parquet)
    for source in (jsonl, parquet):
        assert list(read(source)) == expected(source)


def test_number_columns_of_jsonl_and_parquet_are_seconds_and_int_labels(tmp_path):
    rows = [{"path": "a.mp4", "label": 3, "t0": 1.5, "t1": 4}, {"path": "b.mp4", "label": 0, "t0": None, "t1": 2}]
    parquet = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    for source in (parquet, jsonl):
        samples = table_samples(source, start="t0", end="t1")
        assert samples.classes == ("0", "1", "2", "3")  # int labels kept: "0" up to the largest
        assert [(s.path, s.label, s.start, s.end) for s in samples] == [("a.mp4", 3, 1.5, 4.0), ("b.mp4", 0, None, 2.0)]


def test_classes_give_the_order_and_an_unknown_label_names_its_row(tmp_path):
    source = write_csv(tmp_path / "val.csv", ROWS)
    samples = read(source, classes=["walk", "run", "jump", "swim"])
    assert samples.classes == ("walk", "run", "jump", "swim")
    assert [s.label for s in samples] == [0, 1, 0, 2]
    with pytest.raises(AnnotationError, match=r"val.csv, row 4: unknown label 'jump'.*'walk', 'run'"):
        read(source, classes=["walk", "run"])


def test_int_labels_in_a_csv_are_class_indices_checked_against_classes(tmp_path):
    source = write_csv(tmp_path / "t.csv", [{"path": "a.mp4", "label": 1}, {"path": "b.mp4", "label": 4}])
    assert [s.label for s in table_samples(source)] == [1, 4]
    assert table_samples(source, classes=list("abcde")).classes == tuple("abcde")
    with pytest.raises(AnnotationError, match=r"row 2: label 4 in 'label' is not a class index from 0 to 2"):
        table_samples(source, classes=["x", "y", "z"])


def test_several_label_columns_give_a_tuple_of_labels_a_sample(tmp_path):
    rows = [{"path": "a.mp4", "verb": "open", "noun": "door"}, {"path": "b.mp4", "verb": "cut", "noun": "door"}]
    source = write_csv(tmp_path / "epic.csv", rows)
    samples = table_samples(source, label=("verb", "noun"))
    assert samples.heads == 2 and samples.classes == (("cut", "open"), ("door",))
    assert [s.label for s in samples] == [(1, 0), (0, 0)] and samples.labels.shape == (2, 2)
    again = pickle.loads(pickle.dumps(samples))
    assert again == samples and again.classes == samples.classes
    data = VideoDataset(samples, batch_size=1, clip_len=2, find_missing=False)
    assert data.heads == 2 and data.classes == (["cut", "open"], ["door"])


def test_a_root_url_stays_a_url_and_rooted_paths_keep_their_own(tmp_path):
    source = write_csv(tmp_path / "t.csv", [{"path": "x/a.mp4", "label": "c"}, {"path": "/abs/b.mp4", "label": "c"}])
    assert [s.path for s in table_samples(source, root="s3://bucket/videos")] == [
        "s3://bucket/videos/x/a.mp4",
        "/abs/b.mp4",
    ]
    assert [s.path for s in table_samples(source, root=tmp_path)] == [str(tmp_path / "x/a.mp4"), "/abs/b.mp4"]


def test_a_table_at_a_url_is_read_through_fsspec(tmp_path):
    pytest.importorskip("fsspec")
    source = write_csv(tmp_path / "train.csv", ROWS)
    samples = table_samples(source.as_uri(), "video", "action", "begin", "stop", root="/data")
    assert [(s.path, s.label, s.start, s.end) for s in samples] == [(s.path, s.label, s.start, s.end) for s in EXPECTED]


def test_a_missing_column_is_named_with_the_columns_the_table_has(tmp_path):
    source = write_csv(tmp_path / "t.csv", ROWS)
    for kind in ("csv", "parquet"):
        table = source if kind == "csv" else tmp_path / "t.parquet"
        if kind == "parquet":
            pq.write_table(pa.Table.from_pylist(ROWS), table)
        with pytest.raises(AnnotationError, match=r"no column 'path'; the table's columns are 'video', 'action'"):
            table_samples(table, label="action")


def test_a_missing_table_an_unknown_kind_and_an_empty_table_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="table not found"):
        table_samples(tmp_path / "nothing.csv")
    with pytest.raises(ValueError, match=r"cannot tell the table's kind.*\.csv, \.jsonl, \.ndjson, \.parquet"):
        table_samples(write_csv(tmp_path / "t.tsv", ROWS))
    (tmp_path / "empty.csv").write_text("path,label\n", encoding="utf-8")
    with pytest.raises(ValueError, match="lists no video"):
        table_samples(tmp_path / "empty.csv")


@pytest.mark.parametrize(
    ("begin", "stop", "message"),
    [
        ("1:2:3:4", "5", r"row 2: begin must be seconds or \[HH:\]MM:SS\[.ff\], got '1:2:3:4'"),
        ("0:75", "90", r"row 2: begin must be seconds or .*got '0:75'"),
        ("abc", "5", r"row 2: begin must be seconds or .*got 'abc'"),
        ("4", "00:00:03", r"row 2: the segment ends at 3.0 s, not after its start at 4.0 s"),
        ("-1", "2", r"row 2: the segment starts before 0 s"),
    ],
)
def test_a_bad_time_names_its_row(tmp_path, begin, stop, message):
    rows = [{"path": "a.mp4", "label": "x", "begin": "0", "stop": "1"}, {"path": "b.mp4", "label": "x"}]
    rows[1].update(begin=begin, stop=stop)
    with pytest.raises(AnnotationError, match=message):
        table_samples(write_csv(tmp_path / "t.csv", rows), start="begin", end="stop")


def test_a_row_without_a_path_or_a_label_names_its_row(tmp_path):
    source = write_csv(tmp_path / "t.csv", [{"path": "a.mp4", "label": "x"}, {"path": "", "label": "x"}])
    with pytest.raises(AnnotationError, match=r"t.csv, row 2: the 'path' column is empty: each row needs a video"):
        table_samples(source)
    source = write_csv(tmp_path / "t.csv", [{"path": "a.mp4", "label": "x"}, {"path": "b.mp4", "label": ""}])
    with pytest.raises(AnnotationError, match=r"t.csv, row 2: the 'label' column is empty: each row needs a label"):
        table_samples(source)


def test_a_compressed_csv_is_read_by_its_name(tmp_path):
    import gzip

    source = tmp_path / "train.csv.gz"
    source.write_bytes(gzip.compress(write_csv(tmp_path / "plain.csv", ROWS).read_bytes()))
    assert list(read(source)) == expected(source)


# Sharing with other processes.

_READ_IN_CHILD = (
    "import pickle, sys; samples = pickle.loads(sys.stdin.buffer.read()); "
    "rows = [0, 1, 4321, len(samples) - 1]; print(repr([samples[i] for i in rows])); "
    "print(len(samples), samples.labels[:50].sum(), type(samples._columns.names).__name__)"
)


def big_list(count: int = 30_000) -> SampleList:
    rows = [(f"class_{k % 9}/video_{k:07d}.mp4", k % 9, float(k % 5), float(k % 5 + 2)) for k in range(count)]
    return sample_list(rows, root="/data")


def in_child(code: str, blob: bytes, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], input=blob, capture_output=True, timeout=60, check=False, env=os.environ | env
    )


def test_a_mapped_list_slices_keeps_and_pickles_again_as_the_original():
    samples = big_list()
    mapped = pickle.loads(pickle.dumps(samples))  # in this process too: mapped through the file
    assert isinstance(mapped._columns.names, np.ndarray) and not mapped.labels.flags.writeable
    assert [mapped[i] for i in (0, 5, 777, -1)] == [samples[i] for i in (0, 5, 777, -1)]  # read with pread
    assert [mapped.path(i) for i in range(50)] == list(samples.paths())[:50] == list(mapped.paths())[:50]
    chosen = [7, 0, len(samples) - 1, 7]
    assert mapped.labels_at(chosen).tolist() == samples.labels_at(chosen).tolist() == samples.labels[chosen].tolist()
    assert mapped.labels_at([]).shape == (0,)
    assert mapped == samples and mapped[100:105] == samples[100:105] and mapped[::7] == samples[::7]
    mask = np.arange(len(samples)) % 3 == 0
    assert mapped.keep(mask) == samples.keep(mask)
    assert pickle.loads(pickle.dumps(mapped)) == samples


def test_a_small_list_is_pickled_whole():
    samples = sample_list([("a.mp4", 0), ("b.mp4", 1)])
    again = pickle.loads(pickle.dumps(samples))
    assert again == samples and again._columns.shared is None and samples._columns.shared is None


def test_the_shared_file_closes_with_its_list_and_a_late_pickle_says_so():
    samples = big_list()
    blob = pickle.dumps(samples)
    reference = samples._columns.shared.reference
    assert os.path.exists(reference.path)
    del samples
    gc.collect()
    with pytest.raises(SharedColumnsGone, match="make the list again in this process"):
        pickle.loads(blob)


def test_no_file_is_left_behind_even_when_the_process_is_killed(tmp_path):
    folder = tmp_path / "tmp"
    folder.mkdir()
    code = (
        "import os, pickle, signal, sys; from tests.test_sample_tables import big_list; "
        "blob = pickle.dumps(big_list()); sys.stdout.buffer.write(blob); sys.stdout.flush(); "
        "print(os.listdir(os.environ['TMPDIR']), file=sys.stderr); os.kill(os.getpid(), signal.SIGKILL)"
    )
    done = in_child(code, b"", TMPDIR=str(folder))
    assert done.returncode == -signal.SIGKILL
    assert done.stderr.decode().strip() == "[]"  # never a name in the folder, even while it lived
    assert len(done.stdout) < 2_000 and not list(folder.iterdir())


def test_without_proc_the_file_is_named_and_removed_when_the_list_goes(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_columns, "_proc_fds", lambda: False)
    monkeypatch.setattr(shared_columns.tempfile, "tempdir", str(tmp_path))
    samples = big_list()
    blob = pickle.dumps(samples)
    (named,) = tmp_path.iterdir()
    assert pickle.loads(blob) == samples
    samples._columns.shared.close()
    assert not named.exists()
    del samples
    gc.collect()
    assert not list(tmp_path.iterdir())


def test_a_large_table_list_crosses_to_another_process_as_a_reference_and_reads_the_same_rows(tmp_path):
    rows = [
        {"path": f"c{k % 4}/v{k:06d}.mp4", "label": f"c{k % 4}", "t0": k % 7, "t1": k % 7 + 1} for k in range(40_000)
    ]
    source = tmp_path / "big.parquet"
    pq.write_table(pa.Table.from_pylist(rows), source)
    samples = table_samples(source, start="t0", end="t1", root="/videos")
    assert samples._columns.nbytes() >= sample_list_module.SHARE_BYTES
    blob = pickle.dumps(samples)
    assert len(blob) < 2_000  # the columns stayed behind, in the shared file
    done = in_child(_READ_IN_CHILD, blob)
    assert done.returncode == 0, done.stderr.decode()
    shown, numbers = done.stdout.decode().splitlines()
    assert shown == repr([samples[i] for i in (0, 1, 4321, len(samples) - 1)])
    assert numbers == f"{len(samples)} {samples.labels[:50].sum()} ndarray"  # mapped there, not copied
    assert pickle.dumps(samples) == blob  # written once: later pickles name the same file


def test_a_dataset_over_a_large_table_makes_the_same_batch_in_another_process(tmp_path):
    """What a spawned worker gets: the dataset's pickle, its list a reference to the shared file."""
    from parallel_loader.video import IndexCache

    from .video_files import video_id, write_video

    for k in range(4):
        write_video(tmp_path / "videos" / f"v{k}.avi", 24, video_id=k)
    rows = {"path": [f"v{k % 4}.avi" for k in range(50_000)], "label": [f"c{k % 4}" for k in range(50_000)]}
    pq.write_table(pa.Table.from_pydict(rows), tmp_path / "big.parquet")
    samples = table_samples(tmp_path / "big.parquet", root=tmp_path / "videos")
    data = VideoDataset(samples, batch_size=4, clip_len=4, stride=2, seed=0, index_cache=IndexCache(None))
    clips, labels = data.get_batch(1, 3)
    assert [video_id(clip) for clip in clips] == labels.tolist()  # class c<k> is video v<k>: rows line up
    blob = pickle.dumps(data)
    assert len(blob) < 8_000  # no copy of the 50,000 rows
    script = (
        "import pickle, sys, numpy as np; data = pickle.load(sys.stdin.buffer); "
        "clips, labels = data.get_batch(1, 3); np.save(sys.argv[1], clips); "
        "print(labels.tolist(), type(data._list._columns.rows).__name__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "clips.npy")],
        input=blob, capture_output=True, timeout=120, check=False,
        env=os.environ | {"PARALLEL_LOADER_VIDEO_INDEX": "off"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split("] ") == [str(labels.tolist())[:-1], "ColumnRows\n"]
    np.testing.assert_array_equal(np.load(tmp_path / "clips.npy"), clips)
