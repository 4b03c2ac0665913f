"""Sample lists and the annotation readers, on small split files and CSVs written next to generated videos."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from parallel_loader.video import (
    AnnotationError,
    VideoDataset,
    VideoDecodeError,
    VideoSample,
    hmdb51_samples,
    kinetics_samples,
    sample_list,
    ucf101_samples,
)

from .video_files import frame_indices, video_id, write_video

UCF_CLASSES = ["ApplyEyeMakeup", "Archery", "Basketball"]


@pytest.fixture(scope="module")
def ucf(tmp_path_factory) -> Path:
    """UCF101's layout: videos/<class>/v_<class>_gNN_cNN.avi and splits/ with CRLF line ends, as shipped."""
    base = tmp_path_factory.mktemp("ucf")
    for c, name in enumerate(UCF_CLASSES):
        for g in (1, 8):
            write_video(base / "videos" / name / f"v_{name}_g{g:02d}_c01.avi", 12, video_id=2 * c + (g == 8))
    splits = base / "splits"
    splits.mkdir()
    write_lines(splits / "classInd.txt", [f"{c + 1} {name}" for c, name in enumerate(UCF_CLASSES)])
    write_lines(splits / "trainlist01.txt", [f"{n}/v_{n}_g08_c01.avi {c + 1}" for c, n in enumerate(UCF_CLASSES)])
    write_lines(splits / "testlist01.txt", [f"{n}/v_{n}_g01_c01.avi" for n in UCF_CLASSES])
    return base


def write_lines(path: Path, lines: list[str], end: str = "\r\n") -> Path:
    path.write_bytes("".join(line + end for line in lines).encode())
    return path


def test_ucf101_lists_load_with_labels_from_class_ind(ucf):
    train = ucf101_samples(ucf / "videos", ucf / "splits", split=1, subset="train")
    test = ucf101_samples(ucf / "videos", ucf / "splits", split=1, subset="test")
    assert train.classes == tuple(UCF_CLASSES) == test.classes
    assert [(Path(s.path).name, s.label) for s in train] == [
        (f"v_{n}_g08_c01.avi", c) for c, n in enumerate(UCF_CLASSES)
    ]
    assert [s.label for s in test] == [0, 1, 2]
    assert all(Path(s.path).is_file() for s in [*train, *test])
    assert test.samples[1].origin == f"{ucf / 'splits' / 'testlist01.txt'}, line 2"
    data = VideoDataset(train, batch_size=3, clip_len=2, size=(16, 20), train=False, dtype="uint8")
    clips, labels = data(0)
    assert [video_id(c) for c in clips] == [1, 3, 5]
    assert labels.tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    ("file", "lines", "error"),
    [
        (
            "trainlist01.txt",
            ["Archery/v_Archery_g08_c01.avi 2", "Rowing/v_Rowing_g01_c01.avi 4"],
            "unknown class 'Rowing'",
        ),
        (
            "trainlist01.txt",
            ["Archery/v_Archery_g08_c01.avi 2", "Archery/v_Archery_g08_c01.avi 3"],
            "class number '3', but the video is in folder 'Archery'",
        ),
        (
            "trainlist01.txt",
            ["Archery/v_Archery_g08_c01.avi 2", "Archery/v_Archery_g08_c01.avi 2 x"],
            "expected '<class>/<video>'",
        ),
        ("testlist01.txt", ["", "v_Archery_g01_c01.avi"], "expected '<class>/<video>'"),
        ("classInd.txt", ["1 ApplyEyeMakeup", "two Archery"], "expected '<number from 1> <class name>'"),
        ("classInd.txt", ["1 ApplyEyeMakeup", "1 Archery"], "class number 1 is given twice"),
    ],
)
def test_ucf101_malformed_lines_name_the_file_and_line(ucf, tmp_path, file, lines, error):
    splits = tmp_path / "splits"
    splits.mkdir()
    for name in ("classInd.txt", "trainlist01.txt", "testlist01.txt"):
        (splits / name).write_bytes((ucf / "splits" / name).read_bytes())
    write_lines(splits / file, lines)
    subset = "test" if file == "testlist01.txt" else "train"
    with pytest.raises(AnnotationError, match=rf"{file}, line 2: {error}") as info:
        ucf101_samples(ucf / "videos", splits, subset=subset)
    assert info.value.origin == f"{splits / file}, line 2"


def test_ucf101_missing_list_or_gap_in_numbers(ucf, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"trainlist02\.txt"):
        ucf101_samples(ucf / "videos", ucf / "splits", split=2)
    write_lines(tmp_path / "classInd.txt", ["1 A", "3 C"])
    with pytest.raises(
        AnnotationError, match=r"classInd\.txt: class numbers must run from 1 without gaps; missing \[2\]"
    ):
        ucf101_samples(ucf / "videos", tmp_path)


def test_a_missing_listed_video_is_reported_with_its_list_and_line(ucf, tmp_path):
    splits = tmp_path / "splits"
    splits.mkdir()
    (splits / "classInd.txt").write_bytes((ucf / "splits" / "classInd.txt").read_bytes())
    write_lines(
        splits / "trainlist01.txt",
        ["Archery/v_Archery_g08_c01.avi 2", "Archery/v_Archery_g09_c01.avi 2", "Basketball/gone.avi 3"],
    )
    samples = ucf101_samples(ucf / "videos", splits)
    with pytest.raises(
        FileNotFoundError,
        match=(
            r"2 of 3 videos are missing: .*v_Archery_g09_c01\.avi \(listed at .*trainlist01\.txt, line 2\); "
            r".*gone\.avi \(listed at .*trainlist01\.txt, line 3\)"
        ),
    ):
        VideoDataset(samples, batch_size=2, clip_len=2)
    skipping = VideoDataset(samples, batch_size=2, clip_len=2, on_error="skip")
    assert [Path(p).name for p, _, _ in skipping.samples] == ["v_Archery_g08_c01.avi"]
    assert set(skipping.skipped) == {
        str(ucf / "videos" / "Archery" / "v_Archery_g09_c01.avi"),
        str(ucf / "videos" / "Basketball" / "gone.avi"),
    }
    assert skipping.skipped[str(ucf / "videos" / "Basketball" / "gone.avi")].endswith("trainlist01.txt, line 3)")


HMDB_CLASSES = ["brush_hair", "cartwheel"]


@pytest.fixture(scope="module")
def hmdb(tmp_path_factory) -> Path:
    """HMDB51's layout: videos/<class>/<video>.avi and splits/<class>_test_split1.txt with 0/1/2 marks."""
    base = tmp_path_factory.mktemp("hmdb")
    (base / "splits").mkdir()
    for c, name in enumerate(HMDB_CLASSES):
        lines = []
        for k, mark in enumerate((1, 2, 0, 1)):
            write_video(base / "videos" / name / f"{name}_u_nm_{k}.avi", 10, video_id=4 * c + k)
            lines.append(f"{name}_u_nm_{k}.avi {mark} ")  # the shipped files end their lines with a space
        write_lines(base / "splits" / f"{name}_test_split1.txt", lines, end="\n")
    return base


def test_hmdb51_splits_keep_the_marked_videos(hmdb):
    train = hmdb51_samples(hmdb / "videos", hmdb / "splits", split=1, subset="train")
    test = hmdb51_samples(hmdb / "videos", hmdb / "splits", split=1, subset="test")
    assert train.classes == tuple(HMDB_CLASSES) == test.classes
    assert [(Path(s.path).name, s.label) for s in train] == [
        ("brush_hair_u_nm_0.avi", 0),
        ("brush_hair_u_nm_3.avi", 0),
        ("cartwheel_u_nm_0.avi", 1),
        ("cartwheel_u_nm_3.avi", 1),
    ]
    assert [Path(s.path).name for s in test] == ["brush_hair_u_nm_1.avi", "cartwheel_u_nm_1.avi"]
    assert all(Path(s.path).is_file() for s in [*train, *test])
    fixed = hmdb51_samples(hmdb / "videos", hmdb / "splits", subset="test", classes=["cartwheel", "brush_hair", "run"])
    assert [s.label for s in fixed] == [1, 0]


def test_hmdb51_errors_name_the_file_and_line(hmdb, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"_test_split2\.txt"):
        hmdb51_samples(hmdb / "videos", hmdb / "splits", split=2)
    with pytest.raises(AnnotationError, match=r"cartwheel_test_split1\.txt: class 'cartwheel' is not one of"):
        hmdb51_samples(hmdb / "videos", hmdb / "splits", classes=["brush_hair"])
    write_lines(tmp_path / "wave_test_split1.txt", ["a.avi 1", "b.avi 3"])
    with pytest.raises(
        AnnotationError, match=r"wave_test_split1\.txt, line 2: expected '<video> <0, 1 or 2>', got 'b\.avi 3'"
    ):
        hmdb51_samples(hmdb / "videos", tmp_path)


@pytest.fixture(scope="module")
def kinetics(tmp_path_factory) -> Path:
    """Trimmed clips under root/<label>/<id>_<start:06d>_<end:06d>.mp4-style names, and a CSV listing them."""
    base = tmp_path_factory.mktemp("kinetics")
    rows = [
        ("abseiling", "aaa", 14, 24, "train"),
        ("air drumming", "bbb", 0, 10, "train"),
        ("abseiling", "ccc", 3, 13, "val"),
    ]
    for v, (label, yid, start, end, _) in enumerate(rows):
        write_video(base / "clips" / label / f"{yid}_{start:06d}_{end:06d}.avi", 10, video_id=v)
    lines = ["label,youtube_id,time_start,time_end,split,is_cc"] + [
        f'"{r[0]}",{r[1]},{r[2]},{r[3]},{r[4]},0' for r in rows
    ]
    write_lines(base / "train.csv", lines, end="\n")
    return base


def test_kinetics_csv_finds_trimmed_clips_by_label_id_and_times(kinetics):
    pattern = "{label}/{youtube_id}_{time_start:06d}_{time_end:06d}.avi"
    everything = kinetics_samples(kinetics / "train.csv", kinetics / "clips", pattern=pattern)
    assert everything.classes == ("abseiling", "air drumming")
    assert [(Path(s.path).name, s.label, s.start, s.end) for s in everything] == [
        ("aaa_000014_000024.avi", 0, None, None),  # the file holds just the segment
        ("bbb_000000_000010.avi", 1, None, None),
        ("ccc_000003_000013.avi", 0, None, None),
    ]
    assert everything.samples[2].origin == f"{kinetics / 'train.csv'}, line 4"
    val = kinetics_samples(
        kinetics / "train.csv", kinetics / "clips", split="val", pattern=pattern, classes=everything.classes
    )
    assert [(Path(s.path).name, s.label) for s in val] == [("ccc_000003_000013.avi", 0)]
    data = VideoDataset(everything, batch_size=3, clip_len=4, size=(16, 20), train=False, dtype="uint8")
    assert [video_id(c) for c in data(0)[0]] == [0, 1, 2]


def test_kinetics_full_videos_give_segments_in_seconds(tmp_path):
    write_video(tmp_path / "full" / "aaa.avi", 60, fps=25)  # 2.4 s
    write_lines(tmp_path / "k.csv", ["label,youtube_id,time_start,time_end,split", "run,aaa,0.8,1.6,train"], end="\n")
    samples = kinetics_samples(tmp_path / "k.csv", tmp_path / "full", pattern="{youtube_id}.avi")
    assert [(s.start, s.end) for s in samples] == [(0.8, 1.6)]
    # Frames 20 to 39 show in [0.8 s, 1.6 s) at 25 fps: the centre clip of 4 at stride 5 starts at 20 + (20 - 16) // 2.
    data = VideoDataset(samples, batch_size=1, clip_len=4, stride=5, size=(16, 20), train=False, dtype="uint8")
    assert data.samples == [(str(tmp_path / "full" / "aaa.avi"), 0, 20)]
    assert frame_indices(data(0)[0][0]) == [22, 27, 32, 37]


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        (["label,youtube_id,time_start", "run,a,1"], r"line 1: the header lacks the column\(s\) \['time_end'\]"),
        (["label,youtube_id,time_start,time_end", "run,a,1,11", "run,b,1"], r"line 3: expected 4 fields"),
        (
            ["label,youtube_id,time_start,time_end", "run,a,x,11"],
            r"line 2: time_start must be a number of seconds, got 'x'",
        ),
        (
            ["label,youtube_id,time_start,time_end", "run,a,1,11", "run,b,5,5"],
            r"line 3: the segment ends at 5.0 s, not after",
        ),
        (["label,youtube_id,time_start,time_end", "run,a,1.5,11"], r"line 2: the pattern .* does not fit this row"),
        (["label,youtube_id,time_start,time_end", "run,a,1,11", "jump,b,1,11"], r"line 3: unknown label 'jump'"),
    ],
)
def test_kinetics_errors_name_the_file_and_line(tmp_path, lines, error):
    write_lines(tmp_path / "k.csv", lines, end="\n")
    with pytest.raises(AnnotationError, match=rf"k\.csv, {error}"):
        kinetics_samples(tmp_path / "k.csv", tmp_path, classes=["run"])


def test_kinetics_pattern_naming_an_absent_column_is_an_error(tmp_path):
    write_lines(tmp_path / "k.csv", ["label,youtube_id,time_start,time_end", "run,a,1,11"], end="\n")
    with pytest.raises(
        AnnotationError, match=r"line 1: the header lacks the column\(s\) \['video'\] that the pattern names"
    ):
        kinetics_samples(tmp_path / "k.csv", tmp_path, pattern="{video}.mp4")
    with pytest.raises(AnnotationError, match=r"lacks the column\(s\) \['split'\]"):
        kinetics_samples(tmp_path / "k.csv", tmp_path, split="train")


def test_kinetics_finds_each_rows_file_whatever_its_extension_and_sums_up_the_rows_without_one(tmp_path, caplog):
    for yid, extension in (("a", ".mp4"), ("b", ".mkv"), ("c", ".webm"), ("d", ".MKV")):
        (tmp_path / "clips" / "run").mkdir(parents=True, exist_ok=True)
        (tmp_path / "clips" / "run" / f"{yid}_000001_000011{extension}").write_bytes(b"")
    (tmp_path / "clips" / "run" / "a_000001_000011.txt").write_bytes(b"")  # not a video: the .mp4 is found
    rows = [f"run,{yid},1,11,train" for yid in "abcdefghij"]
    write_lines(tmp_path / "k.csv", ["label,youtube_id,time_start,time_end,split", *rows], end="\n")
    with caplog.at_level(logging.WARNING, logger="parallel_loader"):
        samples = kinetics_samples(tmp_path / "k.csv", tmp_path / "clips")
    assert [Path(s.path).name for s in samples] == [
        "a_000001_000011.mp4", "b_000001_000011.mkv", "c_000001_000011.webm", "d_000001_000011.MKV"
    ]  # fmt: skip
    (warning,) = caplog.records
    assert "6 of 10 rows have no video file" in warning.message
    assert "line 6 (run/e_000001_000011.mp4)" in warning.message
    assert "line 11" not in warning.message and "and 1 more" in warning.message
    as_named = kinetics_samples(tmp_path / "k.csv", tmp_path / "clips", extensions=None)  # no listing
    assert len(as_named) == 10 and as_named.samples[1].path.endswith("b_000001_000011.mp4")
    with pytest.raises(ValueError, match="10 of 10 rows have no video file"):
        kinetics_samples(tmp_path / "k.csv", tmp_path / "elsewhere", split="train")


@pytest.mark.parametrize("root", ["s3://bucket/videos", "gs://bucket/videos", "https://host/videos", "file:///videos"])
def test_every_reader_keeps_a_url_root_a_url(ucf, hmdb, tmp_path, root):
    write_lines(tmp_path / "k.csv", ["label,youtube_id,time_start,time_end", "run,a,1,11"], end="\n")
    lists = [
        kinetics_samples(tmp_path / "k.csv", root, extensions=None),
        ucf101_samples(root, ucf / "splits"),
        hmdb51_samples(root, hmdb / "splits"),
        sample_list([("run/a.mp4", "run")], root=root),
    ]
    for samples in lists:
        assert all(s.path.startswith(root + "/") and "//" not in s.path[len(root) :] for s in samples)
    assert lists[0].samples[0].path == f"{root}/run/a_000001_000011.mp4"


def test_sample_list_takes_names_or_indices_and_segments(tmp_path):
    by_name = sample_list([("a.avi", "walk"), ("b.avi", "clap", 1, 2.5)], root=tmp_path)
    assert by_name.classes == ("clap", "walk")
    assert by_name.samples == (
        VideoSample(str(tmp_path / "a.avi"), 1, origin="sample 0"),
        VideoSample(str(tmp_path / "b.avi"), 0, 1.0, 2.5, "sample 1"),
    )
    by_index = sample_list([("a.avi", np.int64(2)), ("b.avi", 0)])
    assert by_index.classes == ("0", "1", "2")
    assert [s.label for s in by_index] == [2, 0]
    assert [s.label for s in sample_list([("a.avi", "walk")], classes=["clap", "walk"])] == [1]


@pytest.mark.parametrize(
    ("rows", "error"),
    [
        ([("a.avi", 0), ("b.avi",)], r"sample 1: expected \(path, label\) or"),
        ([("a.avi", 0), ("b.avi", 0, 3, 2)], r"sample 1: the segment ends at 2 s, not after its start at 3 s"),
        ([("a.avi", 0), ("b.avi", 0, -1, 2)], r"sample 1: the segment starts before 0 s"),
        ([("a.avi", 0), ("b.avi", 0, "1", 2)], r"sample 1: the segment's start must be a number"),
        ([("a.avi", 0), ("b.avi", 5)], r"sample 1: unknown class 5"),
        ([("a.avi", "walk"), ("b.avi", "run")], r"sample 1: unknown class 'run'"),
        ([("a.avi", "walk"), ("b.avi", 1)], r"labels must be all ints"),
    ],
)
def test_sample_list_errors_name_the_row(rows, error):
    with pytest.raises(AnnotationError, match=error):
        sample_list(rows, classes=["clap", "walk"])


def test_video_dataset_from_rows_with_classes(tmp_path):
    for v in range(2):
        write_video(tmp_path / f"v{v}.avi", 10, video_id=v)
    data = VideoDataset(
        [(tmp_path / "v1.avi", "walk"), (tmp_path / "v0.avi", "clap")],
        batch_size=2,
        clip_len=2,
        size=(16, 20),
        train=False,
        classes=["walk", "clap"],
    )
    clips, labels = data(0)
    assert [video_id(c) for c in clips] == [1, 0]
    assert labels.tolist() == [0, 1]
    assert repr(data).startswith("<VideoDataset eval videos=2 classes=2")
    with pytest.raises(ValueError, match="pass classes to the reader"):
        VideoDataset(sample_list([(tmp_path / "v0.avi", 0)]), 1, 1, classes=["a"])


def test_segments_too_short_are_skipped_alone_and_bad_files_for_all_their_segments(tmp_path, caplog):
    long = write_video(tmp_path / "long.avi", 60, video_id=1)  # 2.4 s at 25 fps
    fake = tmp_path / "fake.avi"
    fake.write_text("not a video")
    rows = [(long, 0, 0.0, 0.8), (long, 0, 1.0, 1.1), (long, 1, 2.0, None), (long, 1, 3.0, 4.0), (fake, 1, 0, 1)]
    with pytest.raises(
        VideoDecodeError,
        match=(
            r"long\.avi: segment \[1, 1\.1\) s has 3 frames \(of 60 at 25 fps\), "
            r"fewer than a clip of 4 frames at stride 2 needs \(7\) \(listed at sample 1\)"
        ),
    ):
        VideoDataset(rows, batch_size=2, clip_len=4, stride=2, train=False, short_clips="error")(0)  # first read
    with caplog.at_level(logging.WARNING, logger="parallel_loader.video"):
        data = VideoDataset(
            rows, batch_size=2, clip_len=4, stride=2, on_error="skip", train=False, dtype="uint8", short_clips="error"
        )
        clips = [data(i)[0] for i in range(len(data))]
    # The headers' frames: 0-19, 25-27, 50-59, none (the file ends at 2.4 s), none (not a video).
    assert data.samples == [
        (str(long), 0, 20),
        (str(long), 0, 3),
        (str(long), 1, 10),
        (str(long), 1, 0),
        (str(fake), 1, 0),
    ]
    assert set(data.skipped) == {f"{long} [1, 1.1) s", f"{long} [3, 4) s", str(fake)}
    assert "starts" not in data.skipped[f"{long} [3, 4) s"] and "has 0 frames" in data.skipped[f"{long} [3, 4) s"]
    assert data.skipped[str(fake)].endswith("(listed at sample 4)")
    assert [frame_indices(clips[i][0])[0] for i in (0, 1)] == [6, 51]  # centre clips: 0 + 13 // 2 and 50 + 3 // 2
    assert "sample 1" in caplog.text and "fake.avi" in caplog.text
