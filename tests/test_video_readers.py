"""The Something-Something v2 and EPIC-KITCHENS readers, on small annotation files written next to generated videos."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from parallel_loader.video import AnnotationError, VideoDataset, epic_kitchens_samples, ssv2_samples
from tests.video_files import frame_indices, write_encoded_video

# labels.json as SSv2 ships it: templates without brackets, class numbers as strings.
SSV2_LABELS = {
    "Holding something next to something": "1",
    "Putting something on a surface": "0",
    "Pushing something so that it slightly moves": "2",
    "Putting something similar to other things that are already on the table": "3",
}


@pytest.fixture(scope="module")
def ssv2(tmp_path_factory) -> Path:
    """SSv2's layout: flat VP9 ``<id>.webm`` files, and ``train.json`` and ``labels.json``."""
    base = tmp_path_factory.mktemp("ssv2")
    for video in ("101", "102", "103", "104"):
        write_encoded_video(base / "videos" / f"{video}.webm", 12, "libvpx-vp9", gop=6, size=(24, 32))
    entries = [
        {"id": "101", "label": "putting a cup on a surface", "template": "Putting [something] on a surface",
         "placeholders": ["a cup"]},
        {"id": "102", "label": "holding pen next to mug", "template": "Holding [something] next to [something]",
         "placeholders": ["pen", "mug"]},
        {"id": "103", "label": "pushing a box so that it slightly moves",
         "template": "Pushing [something] so that it slightly moves", "placeholders": ["a box"]},
        {"id": "104", "label": "putting a fork similar to other things that are already on the table",
         "template": "Putting [something similar to other things that are already on the table]",
         "placeholders": ["a fork"]},
    ]  # fmt: skip
    (base / "train.json").write_text(json.dumps(entries, indent=1))
    (base / "labels.json").write_text(json.dumps(SSV2_LABELS, indent=1))
    return base


def test_ssv2_labels_each_video_by_its_template(ssv2):
    samples = ssv2_samples(ssv2 / "train.json", ssv2 / "labels.json", ssv2 / "videos")
    assert samples.classes == (
        "Putting something on a surface",
        "Holding something next to something",
        "Pushing something so that it slightly moves",
        "Putting something similar to other things that are already on the table",
    )
    assert [(Path(s.path).name, s.label) for s in samples] == [("101.webm", 0), ("102.webm", 1), ("103.webm", 2),
                                                                ("104.webm", 3)]  # fmt: skip
    assert samples[1].origin == f"{ssv2 / 'train.json'}, entry 2"
    data = VideoDataset(samples, batch_size=4, clip_len=4, size=(16, 16), train=False, dtype="uint8")
    clips, labels = data(0)
    assert clips.shape == (4, 4, 16, 16, 3) and labels.tolist() == [0, 1, 2, 3]
    # The centre clip of 12 frames; VP9 at this size keeps the frames' numbers within one.
    assert np.abs(np.array([frame_indices(clip) for clip in clips]) - [4, 5, 6, 7]).max() <= 1


def test_ssv2_labels_json_with_brackets_matches_too(ssv2, tmp_path):
    bracketed = {"Putting [something] on a surface": 0, "Holding [something] next to [something]": 1,
                 "Pushing [something] so that it slightly moves": 2,
                 "Putting [something similar to other things that are already on the table]": 3}  # fmt: skip
    (tmp_path / "labels.json").write_text(json.dumps(bracketed))
    samples = ssv2_samples(ssv2 / "train.json", tmp_path / "labels.json", ssv2 / "videos")
    assert [s.label for s in samples] == [0, 1, 2, 3]
    assert samples.classes[1] == "Holding [something] next to [something]"


def test_ssv2_sums_up_entries_without_a_file_and_keeps_a_url_root(ssv2, tmp_path, caplog):
    entries = json.loads((ssv2 / "train.json").read_text())
    entries.insert(1, {**entries[0], "id": "999"})
    (tmp_path / "train.json").write_text(json.dumps(entries))
    with caplog.at_level(logging.WARNING, logger="parallel_loader"):
        samples = ssv2_samples(tmp_path / "train.json", ssv2 / "labels.json", ssv2 / "videos")
    assert len(samples) == 4
    (warning,) = caplog.records
    assert "1 of 5 rows have no video file" in warning.message and "entry 2 (999.webm)" in warning.message
    remote = ssv2_samples(tmp_path / "train.json", ssv2 / "labels.json", "s3://bucket/ssv2")
    assert [s.path for s in remote][:2] == ["s3://bucket/ssv2/101.webm", "s3://bucket/ssv2/999.webm"]
    with pytest.raises(ValueError, match="5 of 5 rows have no video file"):
        ssv2_samples(tmp_path / "train.json", ssv2 / "labels.json", tmp_path)


@pytest.mark.parametrize(
    ("entries", "labels", "error"),
    [
        ([{"id": "1", "template": "Dropping [something]"}], SSV2_LABELS, r"entry 1: template 'Dropping \[something\]'"),
        ([{"id": "1"}], SSV2_LABELS, r"entry 1: expected an object with an 'id' and a 'template' \(test.json"),
        ({"id": "1"}, SSV2_LABELS, "expected a non-empty JSON list"),
        ([{"id": "1", "template": "x"}], {"x": "0", "y": "2"}, r"run from 0 without gaps; missing \[1\]"),
        ([{"id": "1", "template": "x"}], {"x": "0", "y": "0"}, "gives 0 to 'x' too"),
        ([{"id": "1", "template": "x"}], {"x": "zero"}, "is not a class number"),
        ([{"id": "1", "template": "x"}], {"[x]": "0", "x": "1"}, "two classes are the template 'x'"),
    ],
)
def test_ssv2_errors_name_the_file_and_entry(tmp_path, entries, labels, error):
    (tmp_path / "a.json").write_text(json.dumps(entries))
    (tmp_path / "labels.json").write_text(json.dumps(labels))
    with pytest.raises(AnnotationError, match=error):
        ssv2_samples(tmp_path / "a.json", tmp_path / "labels.json", tmp_path)


def test_ssv2_a_file_that_is_not_json_names_its_line(ssv2, tmp_path):
    (tmp_path / "a.json").write_text('[\n{"id": "1",\n')
    with pytest.raises(AnnotationError, match=r"a.json, line 3: not JSON"):
        ssv2_samples(tmp_path / "a.json", ssv2 / "labels.json", tmp_path)


EPIC_HEADER = "narration_id,participant_id,video_id,narration_timestamp,start_timestamp,stop_timestamp,verb,verb_class,noun,noun_class"  # noqa: E501


@pytest.fixture(scope="module")
def epic(tmp_path_factory) -> Path:
    """EPIC's layouts, both: ``P01/videos/P01_01.MP4`` and a flat ``P02_03.mp4``, 25 fps, 60 frames (2.4 s)."""
    base = tmp_path_factory.mktemp("epic")
    for relative in ("P01/videos/P01_01.MP4", "P02_03.mp4"):
        write_encoded_video(base / "videos" / relative, 60, "libx264", container="mp4", gop=5, size=(24, 32))
    rows = [
        "P01_01_0,P01,P01_01,00:00:00.10,00:00:00.40,00:00:01.20,take,0,cup,2",
        "P01_01_1,P01,P01_01,00:00:01.00,00:00:01.60,00:00:02.00,put,1,plate,0",
        "P02_03_0,P02,P02_03,00:00:00.00,00:00:00.00,00:00:00.80,open,2,cup,2",
    ]
    (base / "train.csv").write_text("\n".join([EPIC_HEADER, *rows]) + "\n")
    return base


def test_epic_kitchens_segments_by_time_with_a_verb_and_a_noun_a_sample(epic):
    samples = epic_kitchens_samples(epic / "train.csv", epic / "videos")
    assert [(s.path, s.start, s.end) for s in samples] == [
        (str(epic / "videos/P01/videos/P01_01.MP4"), 0.4, 1.2),
        (str(epic / "videos/P01/videos/P01_01.MP4"), 1.6, 2.0),
        (str(epic / "videos/P02_03.mp4"), 0.0, 0.8),
    ]
    # Three verbs and three nouns (0-2): one label a head, in the columns' order.
    assert samples.heads == 2 and samples.classes == (("0", "1", "2"), ("0", "1", "2"))
    assert [s.label for s in samples] == [(0, 2), (1, 0), (2, 2)]
    options = {"batch_size": 3, "clip_len": 4, "size": (16, 16), "train": False, "dtype": "uint8"}
    clips, (verbs, nouns) = VideoDataset(samples, **options)(0)
    assert verbs.tolist() == [0, 1, 2] and nouns.tolist() == [2, 0, 2]
    # The segments hold frames 10-29, 40-49 and 0-19 (25 fps), as rows in seconds would.
    frames = [frame_indices(clip) for clip in clips]
    bounds = [(10, 30), (40, 50), (0, 20)]
    assert all(low <= f[0] and f[-1] < high for f, (low, high) in zip(frames, bounds, strict=True)), frames
    rows = [(s.path, s.label, s.start, s.end) for s in samples]
    np.testing.assert_array_equal(clips, VideoDataset(rows, **options)(0)[0])


def test_epic_kitchens_one_label_column_and_named_classes(epic):
    verbs = epic_kitchens_samples(epic / "train.csv", epic / "videos", labels="verb_class")
    assert verbs.classes == ("0", "1", "2") and [s.label for s in verbs] == [0, 1, 2]
    named = epic_kitchens_samples(
        epic / "train.csv", epic / "videos", classes=(["take", "put", "open", "wash"], ["plate", "pan", "cup"])
    )
    verb, noun = named[0].label
    assert named.classes[0][verb] == "take" and named.classes[1][noun] == "cup"
    with pytest.raises(AnnotationError, match=r"line 2: noun_class 2 has no name: the classes are 'plate'"):
        epic_kitchens_samples(epic / "train.csv", epic / "videos", classes=(["a", "b", "c"], ["plate"]))
    with pytest.raises(ValueError, match="one list of class names per label column"):
        epic_kitchens_samples(epic / "train.csv", epic / "videos", classes=["take", "put", "open"])


def test_epic_kitchens_sums_up_rows_without_a_file_and_keeps_a_url_root(epic, tmp_path, caplog):
    lines = (epic / "train.csv").read_text().splitlines()
    lines.append("P09_09_0,P09,P09_09,00:00:00.00,00:00:00.00,00:00:00.80,open,2,cup,2")
    (tmp_path / "more.csv").write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING, logger="parallel_loader"):
        samples = epic_kitchens_samples(tmp_path / "more.csv", epic / "videos")
    assert len(samples) == 3
    (warning,) = caplog.records
    assert "1 of 4 rows have no video file" in warning.message and "line 5 (P09/videos/P09_09.MP4)" in warning.message
    remote = epic_kitchens_samples(tmp_path / "more.csv", "gs://bucket/epic")
    assert [s.path for s in remote] == ["gs://bucket/epic/P01/videos/P01_01.MP4"] * 2 + [
        "gs://bucket/epic/P02/videos/P02_03.MP4", "gs://bucket/epic/P09/videos/P09_09.MP4"
    ]  # fmt: skip
    with pytest.raises(ValueError, match="4 of 4 rows have no video file"):
        epic_kitchens_samples(tmp_path / "more.csv", tmp_path)


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ("x,P01,P01_01,0,1.5,00:00:02.00,take,0,cup,2", r"line 2: start_timestamp must be HH:MM:SS.ff"),
        ("x,P01,P01_01,0,00:00:01.50,00:61:02.00,take,0,cup,2", r"line 2: stop_timestamp must be HH:MM:SS.ff"),
        ("x,P01,P01_01,0,00:00:02.00,00:00:01.00,take,0,cup,2", r"line 2: the segment ends at 1.0 s"),
        ("x,P01,P01_01,0,00:00:01.00,00:00:02.00,take,-1,cup,2", r"line 2: verb_class must be a class number"),
        ("x,P01,P01_01,0,00:00:01.00,00:00:02.00,take,0,cup", r"line 2: expected 10 fields"),
    ],
)
def test_epic_kitchens_errors_name_the_file_and_line(tmp_path, row, error):
    (tmp_path / "e.csv").write_text(f"{EPIC_HEADER}\n{row}\n")
    with pytest.raises(AnnotationError, match=error):
        epic_kitchens_samples(tmp_path / "e.csv", tmp_path)
    (tmp_path / "e.csv").write_text("participant_id,video_id,start_timestamp,stop_timestamp,verb_class\n")
    with pytest.raises(AnnotationError, match=r"line 1: the header lacks the column\(s\) \['noun_class'\]"):
        epic_kitchens_samples(tmp_path / "e.csv", tmp_path)
