"""Video data: a clip read exactly, a data set from an explicit list, TSN-style segments, multi-view evaluation."""

import sys
from pathlib import Path

from parallel_loader.video import VideoDataset, VideoFolder, probe, read_clip


def main(root="data/sample"):
    video = sorted(Path(root, "train").rglob("*.avi"))[0]  # as `make demo` writes data/sample
    info = probe(video)  # VideoInfo from the header: frames, fps, width, height
    clip = read_clip(video, start=10, clip_len=16, stride=2, size=(112, 112))  # uint8 (16, 112, 112, 3), RGB

    # An explicit list: (path, label), or (path, label, start_s, end_s) for a segment of a longer video.
    rows = [(video, "down"), (video, "down", 0.5, 2.5)]
    segments = VideoDataset(rows, batch_size=2, clip_len=8, size=(48, 64), sampling="segments", seed=0)
    frames, labels = segments(0)  # float32 (2, 8, 48, 64, 3): a frame from each of 8 equal parts

    # Evaluation: 3 clips spread over each video, each cut at 3 places across the frame: 9 views a video.
    views = VideoFolder(f"{root}/val", 4, 8, stride=2, size=(48, 64), train=False, num_clips=3, num_crops=3)
    clips, labels = views(0)  # float32 (4, 9, 8, 48, 64, 3), int64 (4,); average the views' predictions
    print(f"{video.name}: {info.frames} frames at {info.fps:g} fps, a clip {clip.shape}")
    print(f"views {clips.shape} of labels {labels.tolist()}")
    return info, clip, frames, clips


if __name__ == "__main__":
    main(*sys.argv[1:2])
