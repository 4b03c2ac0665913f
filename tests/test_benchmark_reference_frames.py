"""``benchmarks.reference_frames`` on a tiny folder laid out as torchcodec's ``test/resources``.

The video has two video streams. Its reference frames are the project's own
frames, written as ``torch.save`` writes a tensor, so this checks the script's
wiring (names, streams, times, the tensor reader, the verdict), not decoding.
The check against torchcodec's real references is the script's own run (see
docs/video/decoding.md).
"""

from __future__ import annotations

import json
import shutil
import struct
import zipfile
from pathlib import Path

import av
import numpy as np
import pytest

from benchmarks import reference_frames
from parallel_loader.video import read_clip
from tests.video_files import indexed_frame

pytestmark = pytest.mark.timeout(60)

VIDEO = "two.mp4"
SIZES = [(24, 32), (32, 48)]  # (height, width) of streams 0 and 1
FRAMES = 8


def _save_pt(path: Path, array: np.ndarray) -> None:
    """Write ``array`` (uint8) as ``torch.save`` writes a tensor: a zip of a pickle and the bytes."""

    def text(s: str) -> bytes:
        return b"X" + struct.pack("<I", len(s)) + s.encode()

    def ints(values: tuple[int, ...]) -> bytes:
        return b"(" + b"".join(b"J" + struct.pack("<i", v) for v in values) + b"t"

    strides = tuple(s // array.itemsize for s in array.strides)
    pid = b"(" + text("storage") + b"ctorch\nByteStorage\n" + text("0") + text("cpu") + ints((array.size,))[1:] + b"Q"
    pickled = (
        b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n("
        + pid
        + b"J\x00\x00\x00\x00"
        + ints(array.shape)
        + ints(strides)
        + b"\x89ccollections\nOrderedDict\n)RtR."
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{path.stem}/data.pkl", pickled)
        archive.writestr(f"{path.stem}/data/0", np.ascontiguousarray(array).tobytes())


@pytest.fixture(scope="module")
def resources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``test/utils.py`` and ``test/resources`` with one two-stream video and its references."""
    folder = tmp_path_factory.mktemp("torchcodec") / "test" / "resources"
    folder.mkdir(parents=True)
    with av.open(str(folder / VIDEO), "w") as output:
        streams = []
        for height, width in SIZES:
            stream = output.add_stream("mpeg4", rate=25)
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            streams.append(stream)
        for i in range(FRAMES):
            for n, stream in enumerate(streams):
                frame = av.VideoFrame.from_ndarray(indexed_frame(i, n, SIZES[n]), format="rgb24")
                frame.pts = i
                output.mux(stream.encode(frame))
        for stream in streams:
            output.mux(stream.encode())
    with av.open(str(folder / VIDEO)) as container:
        default = container.streams.best("video").index
    (folder.parent / "utils.py").write_text(
        f'NASA = TestVideo(filename="{VIDEO}", default_stream_index={default}, stream_infos={{}}, frames={{}})\n'
        f'AUDIO = TestAudio(filename="{VIDEO}", default_stream_index=7, stream_infos={{}}, frames={{}})\n',
        encoding="utf-8",
    )
    for stream in (0, 1):
        for frame in (0, 5):
            clip = read_clip(folder / VIDEO, frame, 1, stream=stream)
            _save_pt(folder / f"{VIDEO}.stream{stream}.frame{frame:06d}.pt", clip[0])
    frames = [{"pts_time": f"{i / 25:.6f}", "duration_time": "0.040000"} for i in range(FRAMES)]
    (folder / f"{VIDEO}.stream{default}.all_frames_info.json").write_text(json.dumps(frames), encoding="utf-8")
    # ffmpeg -ss 0.1 writes the first frame at 0.1 s or later: frame 3, at 0.12 s.
    _save_pt(folder / f"{VIDEO}.time0.100000.pt", read_clip(folder / VIDEO, 3, 1, stream=default)[0])
    return folder


def test_every_reference_is_read_the_way_its_name_says(resources: Path, tmp_path: Path) -> None:
    report = reference_frames.main(["--torchcodec-resources", str(resources), "--out", str(tmp_path)])
    assert report["passed"]
    default = reference_frames.default_streams(resources.parent / "utils.py")[VIDEO]  # TestAudio's 7 is not taken
    rows = {(r["stream"], r["read_as"]): (r["checked"], r["exact"]) for r in report["rows"]}
    other = 1 - default
    assert rows == {
        (f"{default} (default)", "read_clip()"): (2, 2),
        (str(other), f"read_clip(stream={other})"): (2, 2),
        (f"{default} (default)", "read_frames_at(), frames' mid-times"): (2, 2),  # only it has a frame list
        (f"{default} (default)", "read_frames_at(), -ss times"): (1, 1),
    }
    sizes = {row[1]: row[3] for row in report["headers"] if row[2].startswith("probe")}
    assert sizes == {f"{default} (default)": SIZES[default], str(other): SIZES[other]}
    assert json.loads((tmp_path / "reference_frames.json").read_text())["passed"] is True


def test_a_frame_off_by_some_levels_fails(resources: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "test" / "resources"
    shutil.copytree(resources.parent, broken.parent)
    ref = broken / f"{VIDEO}.stream1.frame000005.pt"
    frame = reference_frames.load_pt(ref).copy()
    frame[2, 3, 1] = frame[2, 3, 1] + 7 if frame[2, 3, 1] < 200 else frame[2, 3, 1] - 7
    _save_pt(ref, frame)
    report = reference_frames.main(["--torchcodec-resources", str(broken), "--out", str(tmp_path)])
    assert report["passed"] is False  # the command then exits 1
    out = capsys.readouterr().out
    assert "frame 5: differs by up to 7 levels (bound 0)" in out and "FAILED" in out
    failed = {r["read_as"]: (r["checked"], r["exact"], r["max_diff"]) for r in report["rows"] if r["failures"]}
    if reference_frames.default_streams(broken.parent / "utils.py")[VIDEO] == 1:  # only it has a frame list
        assert failed == {"read_clip()": (2, 1, 7), "read_frames_at(), frames' mid-times": (2, 1, 7)}
    else:
        assert failed == {"read_clip(stream=1)": (2, 1, 7)}
