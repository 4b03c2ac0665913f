"""What the docs state of video data sets and of the examples, checked against the code.

A clip's span with ``fps=`` is stated once, and holds; the memory figures are a
real batch's; the examples import public names only.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import parallel_loader
from parallel_loader.video import VideoDataset

from .video_files import frame_indices, write_video

ROOT = Path(__file__).resolve().parent.parent
DATASETS = (ROOT / "docs" / "video" / "datasets.md").read_text(encoding="utf-8")
SPAN = "first and last frames are `(clip_len - 1) / F` seconds apart"
# Other ways the span was once stated, each contradicting it.
CONTRADICTIONS = re.compile(r"clip_len / fps|clip_len / F\b|over 2 s(econds)?\b|spans the same 2 seconds")


def texts() -> dict[str, str]:
    """Every docs page but the changelog (a history), every example, and every module of the package."""
    files = [p for p in (ROOT / "docs").rglob("*.md") if p.name != "changelog.md" and "_build" not in p.parts]
    files += sorted((ROOT / "examples").glob("*.py")) + sorted(Path(parallel_loader.__file__).parent.rglob("*.py"))
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in files}


def test_a_clips_span_at_fps_is_stated_once_and_nothing_contradicts_it():
    assert SPAN in DATASETS
    assert "``(clip_len - 1) / fps`` seconds apart" in (VideoDataset.__doc__ or "")
    found = {name: m.group(0) for name, text in texts().items() if (m := CONTRADICTIONS.search(text))}
    assert found == {}


@pytest.mark.parametrize("train", [False, True])
def test_a_clips_first_and_last_frames_are_clip_len_minus_one_over_fps_apart(tmp_path, train):
    path = str(write_video(tmp_path / "v.avi", 60))  # 25 fps: frame i shows at i / 25 s
    clip_len, fps = 4, 5.0
    data = VideoDataset([(path, 0)], batch_size=1, clip_len=clip_len, fps=fps, classes=["a"], train=train, seed=2)
    for epoch in range(4):
        frames = frame_indices(data.get_batch(0, epoch)[0][0])
        apart = (frames[-1] - frames[0]) / 25
        # The frames played at t0 and t0 + 0.6 s: their display times differ by 0.6 s, to within one frame.
        assert abs(apart - (clip_len - 1) / fps) < 1 / 25, frames


def test_the_memory_figures_are_a_real_batchs(tmp_path):
    stated = re.search(
        r"`batch_size=(\d+), clip_len=(\d+), size=\((\d+), (\d+)\)` in `float32` is ([\d,]+) bytes a batch.*\n"
        r".*In `uint8` it is ([\d,]+) bytes",
        DATASETS,
    )
    assert stated is not None
    batch, clip_len, height, width = (int(g) for g in stated.groups()[:4])
    rows = [(str(write_video(tmp_path / f"v{k}.avi", clip_len, video_id=k)), 0) for k in range(batch)]
    for dtype, figure in (("float32", stated.group(5)), ("uint8", stated.group(6))):
        data = VideoDataset(
            rows, batch_size=batch, clip_len=clip_len, size=(height, width), classes=["a"], dtype=dtype, train=False
        )
        clips, labels = data(0)
        assert clips.nbytes == int(figure.replace(",", ""))
        assert labels.nbytes == 8 * batch


def private_imports(path: Path) -> list[str]:
    """The imports in ``path`` of a private module or name of the package (a part starting with ``_``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules = [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            modules = [(node.module, [alias.name for alias in node.names])]
        else:
            continue
        for module, names in modules:
            parts = module.split(".")
            if parts[0] == "parallel_loader" and any(p.startswith("_") for p in parts + names):
                found.append(f"{path.name}:{node.lineno}: {module} {names}")
    return found


def test_the_examples_import_public_names_only():
    examples = sorted((ROOT / "examples").glob("*.py"))
    assert len(examples) >= 4
    assert [line for path in examples for line in private_imports(path)] == []


def test_the_private_import_check_finds_one(tmp_path):
    example = tmp_path / "example.py"
    example.write_text("from parallel_loader.tensorflow._startup import import_tensorflow\n", encoding="utf-8")
    assert private_imports(example) == ["example.py:1: parallel_loader.tensorflow._startup ['import_tensorflow']"]
