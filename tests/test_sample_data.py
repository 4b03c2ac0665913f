"""The synthetic data set: layout, format, idempotence, and that each class moves as named."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from parallel_loader.sample_data import MOTIONS, _disc, main, make_sample_data
from parallel_loader.video import VideoFolder, frame_count, probe, read_clip

from .video_files import truncate

CLASSES = list(MOTIONS)  # every class the generator knows
# OpenCV's XVID fourcc selects FFmpeg's MPEG-4 part 2 encoder, which tags the stream FMP4;
# XviD and DivX write the same bitstream format under their own tags.
MPEG4_PART2_TAGS = {"XVID", "FMP4", "DIVX", "DX50"}


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("sample")
    return root, make_sample_data(root, classes=len(CLASSES), per_class=2, val_fraction=0.5)


def videos(root: Path) -> list[Path]:
    return sorted(root.rglob("*.avi"))


def test_layout_is_train_and_val_trees_of_class_folders(sample):
    root, summary = sample
    assert summary.written == 2 * len(CLASSES) and summary.kept == 0
    for split in ("train", "val"):
        assert sorted(p.name for p in (root / split).iterdir()) == sorted(CLASSES)
        for name in CLASSES:
            assert len(list((root / split / name).glob("*.avi"))) == 1
    assert not list(root.rglob("*.part.avi"))
    assert VideoFolder(root / "train", 2, 8, train=False).classes == sorted(CLASSES)


def test_videos_are_xvid_320x240_25fps_3_to_6_seconds_and_decode_fully(sample):
    root, _ = sample
    for path in videos(root):
        info = probe(path)
        assert (info.width, info.height) == (320, 240)
        assert info.fps == pytest.approx(25)
        assert 75 <= info.frames <= 150
        assert frame_count(path) == info.frames
        capture = cv2.VideoCapture(str(path))
        fourcc = int(capture.get(cv2.CAP_PROP_FOURCC)).to_bytes(4, "little").decode()
        capture.release()
        assert fourcc.upper() in MPEG4_PART2_TAGS


def test_a_second_run_keeps_complete_videos_and_remakes_missing_ones(sample, tmp_path):
    root, _ = sample
    before = {p: p.stat().st_mtime_ns for p in videos(root)}
    n = 2 * len(CLASSES)
    again = make_sample_data(root, classes=len(CLASSES), per_class=2, val_fraction=0.5)
    assert (again.written, again.kept) == (0, n)
    assert {p: p.stat().st_mtime_ns for p in videos(root)} == before
    victim, cut = videos(root)[:2]
    frames = probe(victim).frames, probe(cut).frames
    victim.write_bytes(victim.read_bytes()[:2000])  # an interrupted copy
    truncate(cut, 0.8)  # cut short, its header intact
    assert probe(cut).frames == frames[1] > frame_count(cut)
    repaired = make_sample_data(root, classes=len(CLASSES), per_class=2, val_fraction=0.5)
    assert (repaired.written, repaired.kept) == (2, n - 2)
    assert (frame_count(victim), frame_count(cut)) == frames


def test_another_split_or_seed_replaces_the_old_videos(tmp_path):
    make_sample_data(tmp_path, classes=1, per_class=3, val_fraction=0.4)
    assert [len(videos(tmp_path / split)) for split in ("train", "val")] == [2, 1]
    (tmp_path / "train" / "notes.txt").write_text("the user's own file")
    resplit = make_sample_data(tmp_path, classes=1, per_class=3, val_fraction=0)
    assert [len(videos(tmp_path / split)) for split in ("train", "val")] == [3, 0]
    assert (resplit.written, resplit.kept) == (1, 2)  # the val video moved to train
    before = probe(videos(tmp_path)[0]).frames
    reseeded = make_sample_data(tmp_path, classes=1, per_class=3, val_fraction=0, seed=5)
    assert (reseeded.written, reseeded.kept) == (3, 0)
    assert len(videos(tmp_path)) == 3
    assert probe(videos(tmp_path)[0]).frames != before  # another seed, another video
    assert (tmp_path / "train" / "notes.txt").exists()


def motion(path: Path) -> tuple[float, float]:
    """The disc's mean displacement per frame (dx, dy), measured on the torus the disc wraps around.

    The background is the per-pixel median over the video; the disc is where a
    frame differs from it. Positions are averaged as angles, so a disc split
    across an edge still has the right centre.
    """
    n = min(probe(path).frames, 60)  # enough for the disc to leave every pixel it covers at the start
    frames = read_clip(path, 0, n).astype(np.int16)
    background = np.median(frames[::3], axis=0)
    centres = []
    for t in (0, 10, 20, 30, 40):
        mask = np.abs(frames[t] - background).sum(axis=-1) > 120
        if mask.sum() < 50:
            return (0.0, 0.0)  # no moving disc: it is part of the background
        ys, xs = np.nonzero(mask)
        centres.append([_circular_mean(xs, 320), _circular_mean(ys, 240)])
    steps = np.diff(np.array(centres), axis=0)
    half = np.array([160, 120])
    steps = (steps + half) % (2 * half) - half  # the shortest way round
    dx, dy = steps.mean(axis=0) / 10
    return float(dx), float(dy)


def _circular_mean(values: np.ndarray, period: int) -> float:
    angles = 2 * np.pi * values / period
    return float(np.angle(np.exp(1j * angles).mean()) % (2 * np.pi) * period / (2 * np.pi))


def test_each_class_moves_as_its_name_says(sample):
    root, _ = sample
    for path in videos(root):
        name = path.parent.name
        dx, dy = motion(path)
        if name == "still":
            assert abs(dx) < 1 and abs(dy) < 1, (path, dx, dy)
        elif name in ("up", "down"):
            assert abs(dx) < 1 and 2 < abs(dy) < 5 and (dy < 0) == (name == "up"), (path, dx, dy)
        elif name == "sideways":
            assert abs(dy) < 1 and 2 < abs(dx) < 5, (path, dx, dy)
        elif name in ("up_fast", "down_fast"):
            assert abs(dx) < 1 and 6 < abs(dy) < 11 and (dy < 0) == (name == "up_fast"), (path, dx, dy)
        elif name == "sideways_fast":
            assert abs(dy) < 1 and 6 < abs(dx) < 11, (path, dx, dy)
        else:
            raise AssertionError(f"no motion check for class {name}")


def test_the_disc_is_anywhere_in_the_frame_whatever_its_class():
    """Where the disc starts (so where it is in any frame) must not hint at the class."""
    for name in MOTIONS:
        discs = [_disc(name, np.random.default_rng([11, i])) for i in range(600)]
        xy = np.array([position for position, _, _ in discs])
        radius = np.array([r for _, _, r in discs])
        for values, size in ((xy[:, 0], 320), (xy[:, 1], 240)):
            quarters = np.bincount((values * 4 // size).astype(int), minlength=4) / len(values)
            assert quarters.min() > 0.18, (name, quarters)  # uniform: 0.25 each
        # A disc within its radius of an edge is drawn split across it: as often in every class.
        split = (np.minimum(xy, [320, 240] - xy) < radius[:, None]).any(axis=1).mean()
        assert 0.17 < split < 0.33, (name, split)


def test_the_command_line_writes_and_reports(tmp_path, capsys):
    assert main([str(tmp_path), "--classes", "1", "--per-class", "1"]) == 0
    assert "1 videos written" in capsys.readouterr().out
    assert len(videos(tmp_path)) == 1
    assert main([str(tmp_path), "--classes", "99"]) == 1
    assert "classes must be between 1 and" in capsys.readouterr().err
