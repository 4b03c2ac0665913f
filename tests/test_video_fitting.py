"""A dataset's frames fitted to the output (``resize``), and samples too short for a clip (``short_clips``)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from parallel_loader import DataLoader
from parallel_loader.video import Augment, VideoDataset, VideoDecodeError, read_clip

from .video_files import crop_window, frame_indices, with_display_matrix, write_encoded_video, write_video

WIDE = (240, 426)  # (height, width): 240p at 16:9, as Something-Something v2's files are


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> str:
    return str(write_video(tmp_path_factory.mktemp("wide") / "wide.avi", 6, size=WIDE))


def centre(clip: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The centre window of ``size`` of a clip's frames."""
    top, left = (clip.shape[1] - size[0]) // 2, (clip.shape[2] - size[1]) // 2
    return clip[:, top : top + size[0], left : left + size[1]]


def one_clip(path: str, **kwargs) -> np.ndarray:
    """The clip of a one-sample dataset's first batch, as uint8."""
    args = dict(batch_size=1, clip_len=2, size=(112, 112), dtype="uint8", classes=["a"]) | kwargs
    return VideoDataset([(path, 0)], **args)(0)[0][0]


def levels(a: np.ndarray, b: np.ndarray) -> float:
    """The mean absolute difference of two uint8 arrays, in levels."""
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).mean())


# resize


def test_evaluation_keeps_the_aspect_and_centre_crops_by_default(wide):
    clip = one_clip(wide, train=False)
    start = 2  # the centre clip of 6 frames: (6 - 2) // 2
    # Short side to 112 / 0.875 = 128: 240x426 becomes 128x227, cut at its centre.
    kept = centre(read_clip(wide, start, 2, size=(128, 227)), (112, 112))
    squashed = centre(read_clip(wide, start, 2, size=(128, 128)), (112, 112))
    assert levels(clip, kept) <= 3
    assert levels(clip[..., 2], squashed[..., 2]) > 10  # blue, the channel that changes across the frame
    assert levels(one_clip(wide, train=False, resize="stretch"), squashed) <= 3


def test_training_crops_a_window_of_the_aspect_kept_frames(wide):
    data = VideoDataset([(wide, 0)], batch_size=1, clip_len=2, size=(112, 112), dtype="uint8", classes=["a"], seed=3)
    for epoch in range(3):
        clip = data.get_batch(0, epoch)[0][0]
        first = frame_indices(clip)[0]
        full = read_clip(wide, first, 2, size=(128, 227))
        top, left, _ = crop_window(clip, full)
        assert 0 <= top <= 16 and 0 <= left <= 115


def test_pad_letterboxes_the_whole_frame_in_black(wide):
    clip = one_clip(wide, train=False, resize="pad")
    # 240x426 fits 128x128 as 72x128, at rows 28-99; the centre crop takes rows 8-119 and columns 8-119.
    frame = read_clip(wide, 2, 2, size=(72, 128))
    assert not clip[:, :20].any() and not clip[:, 92:].any()
    assert levels(clip[:, 20:92], frame[:, :, 8:120]) <= 3


def test_scale_jitter_keeps_the_aspect_whatever_resize_and_refuses_another_resize(wide):
    with pytest.raises(ValueError, match="resize must be one of"):
        VideoDataset([(wide, 0)], batch_size=1, clip_len=2, classes=["a"], resize="crop")
    with pytest.raises(ValueError, match="resize='pad' does not go with scale"):
        VideoDataset([(wide, 0)], batch_size=1, clip_len=2, classes=["a"], resize="pad", scale=(128, 160))
    clip = one_clip(wide, train=False, augment=Augment(scale=(128, 160)))
    assert levels(clip, centre(read_clip(wide, 2, 2, size=(128, 227)), (112, 112))) <= 3


def test_the_fitted_size_comes_from_the_decoded_frames_as_displayed_without_a_header(tmp_path, monkeypatch):
    import parallel_loader.video._datasets.reader as reader

    def no_header(*args, **kwargs):
        raise AssertionError("a header was read")

    monkeypatch.setattr(reader, "probe", no_header)
    stored = write_encoded_video(tmp_path / "stored.mp4", 4, "libx264", size=(48, 64))
    turned = str(with_display_matrix(stored, tmp_path / "turned.mp4", 90))  # shown 48 wide and 64 high
    clip = one_clip(turned, train=False, size=(16, 16), crop_fraction=0.5)
    # The short side, 48, becomes 32: the frame is decoded at 43x32 as shown, and cut at its centre.
    assert levels(clip, centre(read_clip(turned, 1, 2, size=(43, 32)), (16, 16))) <= 3
    with pytest.raises(AssertionError, match="a header was read"):  # scale= reads the header, as before
        one_clip(turned, train=False, size=(16, 16), scale=(32, 40))


# short_clips


@pytest.fixture(scope="module")
def forty(tmp_path_factory) -> str:
    """40 frames at 25 fps (1.6 s): frame i's red is 4 i."""
    return str(write_video(tmp_path_factory.mktemp("short") / "forty.avi", 40))


def short_clip(path: str, **kwargs) -> np.ndarray:
    args = dict(batch_size=1, clip_len=16, stride=4, size=(16, 20), dtype="uint8", classes=["a"], train=False)
    return VideoDataset([(path, 0)], **(args | kwargs))(0)[0][0]


FITTED = list(range(0, 40, 4))  # the frames 16 at stride 4 find in 40: 0, 4, ..., 36


@pytest.mark.parametrize("train", [False, True])
def test_a_short_clip_loops_by_default(forty, train):
    clip = short_clip(forty, train=train)
    assert frame_indices(clip) == FITTED + FITTED[:6]


def test_repeat_last_repeats_the_last_frame_read_and_pad_adds_black_frames(forty):
    assert frame_indices(short_clip(forty, short_clips="repeat_last")) == FITTED + [36] * 6
    padded = short_clip(forty, short_clips="pad")
    assert frame_indices(padded[:10]) == FITTED and not padded[10:].any()


def test_error_makes_a_short_sample_bad_and_skip_records_it_once(forty, tmp_path):
    long = str(write_video(tmp_path / "long.avi", 64, video_id=1))
    rows = [(forty, 0), (long, 0)]
    args = dict(batch_size=2, clip_len=16, stride=4, size=(16, 20), classes=["a"], train=False)
    with pytest.raises(VideoDecodeError, match=r"forty\.avi: has 40 frames, fewer than .* needs \(61\)"):
        VideoDataset(rows, short_clips="error", **args)(0)
    data = VideoDataset(rows, short_clips="error", on_error="skip", **args)
    for _ in range(2):
        clips, _ = data(0)
        assert len(clips) == 1  # evaluation leaves the bad sample out
    assert list(data.skipped) == [forty]
    assert data.stats() == {"skipped": 1, "replaced": 0, "lengthened": 0}
    # In a loader that skips: one error record, in an epoch of whole batches.
    training = VideoDataset(rows, short_clips="error", on_error="skip", **(args | {"train": True}))
    with DataLoader(training, num_threads=2, on_error="skip") as loader:
        batches = list(loader)
    assert len(batches) == 1 and len(batches[0][0]) == 2  # the short sample replaced by the long one
    assert [r.context["path"] for r in loader.errors] == [forty]
    assert "has 40 frames, fewer than" in loader.errors[0].context["reason"]


def test_lengthened_clips_are_counted_and_each_file_logged_once(forty, caplog):
    data = VideoDataset([(forty, 0)], batch_size=1, clip_len=16, stride=4, size=(16, 20), classes=["a"])
    with caplog.at_level(logging.INFO, logger="parallel_loader.video"):
        for epoch in range(3):
            data.get_batch(0, epoch)
    assert data.stats() == {"skipped": 0, "replaced": 0, "lengthened": 3}
    assert caplog.text.count("lengthening clips of") == 1 and "has 40 frames" in caplog.text
    with pytest.raises(ValueError, match="short_clips must be one of"):
        VideoDataset([(forty, 0)], batch_size=1, clip_len=16, classes=["a"], short_clips="wrap")


def test_segments_and_tsn_sampling_are_lengthened_from_their_first_frame(forty):
    # [0.4, 1.2) s at 25 fps holds frames 10-29: 16 frames at stride 4 loop over its 20.
    clip = VideoDataset(
        [(forty, 0, 0.4, 1.2)], batch_size=1, clip_len=16, stride=4, size=(16, 20), dtype="uint8", classes=["a"]
    )(0)[0][0]
    assert frame_indices(clip) == [10 + (4 * k) % 20 for k in range(16)]
    tsn = short_clip(forty, clip_len=48, stride=1, sampling="segments", short_clips="repeat_last")
    assert frame_indices(tsn) == list(range(40)) + [39] * 8


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("loop", [5 * k for k in range(8)] * 2),  # 0.2 s apart: frames 0, 5, ..., 35, then from 0 again
        ("repeat_last", [5 * k for k in range(8)] + [35] * 8),
        ("pad", [5 * k for k in range(8)] + [None] * 8),
    ],
)
def test_clips_at_fps_are_lengthened_by_time(forty, policy, expected):
    clip = short_clip(forty, stride=1, fps=5, short_clips=policy)
    black = [not frame.any() for frame in clip]
    assert [None if b else i for b, i in zip(black, frame_indices(clip), strict=True)] == expected


def test_a_sample_without_frames_stays_bad_whatever_short_clips(forty):
    rows = [(forty, 0, 2.0, 3.0)]  # after the file's end
    with pytest.raises(VideoDecodeError, match="has 0 frames"):
        VideoDataset(rows, batch_size=1, clip_len=16, stride=4, classes=["a"], short_clips="loop")(0)
