"""The pre-flight check: python -m parallel_loader.video.check lists broken videos, and exits 1 when it finds any."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from parallel_loader.video import VideoFolder
from parallel_loader.video.check import find_videos, main

from .test_bad_files import write_forty
from .video_files import write_video


@pytest.fixture(scope="module")
def broken_set(tmp_path_factory) -> tuple[Path, list[str]]:
    """The 40 videos of test_bad_files, two truncated, and a text file named like a video; the three broken."""
    root = tmp_path_factory.mktemp("broken")
    bad = write_forty(root)
    text = root / "a" / "notes.mp4"
    text.write_text("not a video at all\n")
    return root, sorted([*bad, str(text)])


def test_the_check_finds_the_truncated_files_and_the_text_file_and_exits_1(broken_set, tmp_path, capsys):
    root, broken = broken_set
    out = tmp_path / "broken.jsonl"
    assert main([str(root), "--threads", "2", "--out", str(out), "--no-progress"]) == 1
    found = [json.loads(line) for line in out.read_text().splitlines()]
    assert [entry["path"] for entry in found] == broken
    reasons = {Path(entry["path"]).name: entry["reason"] for entry in found}
    assert reasons["notes.mp4"].startswith("cannot be opened as a video")
    assert reasons["v07.avi"].startswith("truncated or damaged: 6 frames decode") and "claims 30" in reasons["v07.avi"]
    printed = capsys.readouterr()
    assert [line.split(": ")[0] for line in printed.out.splitlines()] == broken
    assert "3 of 41 files broken" in printed.err
    # The list it wrote leaves those files out of a dataset.
    data = VideoFolder(root, batch_size=4, clip_len=8, size=(16, 20), exclude=out)
    assert len(data.samples) == 38 and not data.skipped


def test_the_check_exits_0_on_an_intact_set_run_as_a_module(tmp_path):
    for v in range(4):
        write_video(tmp_path / "a" / f"v{v}.avi", 6, video_id=v)
    out = tmp_path / "broken.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "parallel_loader.video.check", str(tmp_path), "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.read_text() == "" and done.stdout == ""
    assert "0 of 4 files broken" in done.stderr  # and, stderr being no terminal, log lines instead of a bar:
    assert "checking videos: 4 of 4 files (100%)" in done.stderr and "4/4" not in done.stderr


def test_lists_and_csvs_name_the_files_to_check(broken_set, tmp_path):
    root, _ = broken_set
    listed = tmp_path / "trainlist.txt"
    listed.write_text("a/v00.avi 1\n\nb/v07.avi 2\nb/gone.avi 2\n")
    assert find_videos(listed, root) == [str(root / "a/v00.avi"), str(root / "b/v07.avi"), str(root / "b/gone.avi")]
    out = tmp_path / "out.jsonl"
    assert main([str(listed), "--root", str(root), "--out", str(out), "--no-progress"]) == 1
    found = {json.loads(line)["path"]: json.loads(line)["reason"] for line in out.read_text().splitlines()}
    assert list(found) == [str(root / "b/gone.avi"), str(root / "b/v07.avi")]
    assert found[str(root / "b/gone.avi")].startswith("missing")
    table = tmp_path / "videos.csv"
    table.write_text("path,label\na/v00.avi,a\na/v26.avi,a\n")
    assert main([str(table), "--root", str(root), "--no-progress"]) == 1
    table.write_text("path,label\na/v00.avi,a\n")
    assert main([str(table), "--root", str(root), "--no-progress"]) == 0
    assert main([str(table), "--root", str(root), "--min-frames", "31", "--no-progress"]) == 1  # it has 30
    with pytest.raises(SystemExit) as usage:
        main([str(tmp_path / "nothing-here"), "--no-progress"])
    assert usage.value.code == 2
